"""Shared pieces of the benchmarks (`python -m bench`, bench/registry.py).

Every benchmark module prints one JSON line per figure through `emit`:
  {"name": "replay_storage_random", "value": 1.01, "unit": "x raw obs bytes", ...}
Extra keys hold the details the figure depends on (sizes, repetitions, spread).
The suite adds "benchmark" and "section" (the registry entry that ran it), so
a module need not know which docs section its figures land in.

Timing: `measure` runs warm-up calls, then at least `repeats` timed calls and
more until `min_time_s` has been spent (capped by `max_repeats`), so fast
calls get many samples and slow ones a bounded count; `interleave` does the
same round-robin over several functions, so a slow phase of a shared machine
hits all of them alike. `summarize` gives the median with its spread (IQR,
min, max, n); figures report the median.
"""
import datetime
import importlib.metadata
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

from planet_tfa import hardware

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCMALLOC = '/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4'
GIN_DEFAULT = ('dmc_cartpole_swingup.gin',)
# Quick mode: the project's tiny sizes (smoke tests of the suite itself).
GIN_QUICK = ('dmc_cartpole_swingup.gin', 'tiny.gin')
FRAME_SHAPE = (64, 64, 3)
RAW_FRAME_BYTES = int(np.prod(FRAME_SHAPE))  # uint8


def emit(name, value, unit, **details):
  """Prints (and returns) one figure as a JSON line, naming the CPU path it ran on
  (model, AVX-512/bf16/AMX flags, oneDNN, allocator): figures differ 2x between CPUs."""
  line = {'name': name, 'value': value, 'unit': unit, **details,
          'machine': hardware.describe()}
  print(json.dumps(line), flush=True)
  return line


def machine():
  """Machine and stack, without importing TensorFlow (the suite's own process)."""
  info = {'cpu': 'unknown', 'cores': len(os.sched_getaffinity(0))}
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          info['cpu'] = line.split(':', 1)[1].strip()
          break
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemTotal'):
          info['ram_gib'] = round(int(line.split()[1]) / 2**20, 1)
          break
  except OSError:
    pass
  for package in ('tensorflow', 'dm-reverb', 'tf-agents', 'tensorflow-probability',
                  'dm-control', 'mujoco', 'numpy'):
    try:
      info[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      info[package] = None
  info['tcmalloc'] = TCMALLOC if os.path.exists(TCMALLOC) else None
  info['cpu_flags'] = hardware.cpu_info()['flags']
  info['onednn_env'] = os.environ.get(hardware.ONEDNN_ENV)
  info['isa_caps'] = hardware.isa_caps()
  info['date'] = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
  return info


def machine_info():
  """CPU model, usable cores, TF version, date (UTC)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cpu = 'unknown'
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          cpu = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  return {
      'cpu': cpu, 'cores': cores, 'tf': tf.__version__,
      'gpus': [d.name for d in tf.config.list_physical_devices('GPU')],
      'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
  }


def peak_rss_mb():
  """Peak resident memory of this process (ru_maxrss is in KiB on Linux)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _quantile(ordered, q):
  """Linear-interpolated quantile of a sorted list."""
  position = q * (len(ordered) - 1)
  low = int(position)
  high = min(low + 1, len(ordered) - 1)
  return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mean_std(values):
  """Mean and spread (ddof = 0) of `values`, as the docs' tables print them."""
  return statistics.fmean(values), statistics.pstdev(values)


def summarize(times, digits=4, unit='s', scale=1.0):
  """Median and spread of a list of durations (seconds, times `scale`).

  Keys are suffixed with `unit` ('s' or 'ms'): median_s, iqr_s (75th - 25th
  percentile), min_s, max_s, and n.
  """
  if not times:
    raise ValueError('summarize needs at least one time')
  ordered = sorted(t * scale for t in times)
  return {
      f'median_{unit}': round(statistics.median(ordered), digits),
      f'iqr_{unit}': round(_quantile(ordered, 0.75) - _quantile(ordered, 0.25), digits),
      f'min_{unit}': round(ordered[0], digits),
      f'max_{unit}': round(ordered[-1], digits),
      'n': len(ordered),
  }


def summarize_ms(times, digits=3):
  """`summarize` of seconds, reported in milliseconds."""
  return summarize(times, digits=digits, unit='ms', scale=1e3)


def measure(fn, repeats, warmup=0, min_time_s=0.0, max_repeats=None):
  """Wall seconds of each timed call of `fn(i)` (i counts every call, warm-up
  included, so callers can cycle inputs).

  `warmup` untimed calls first (tracing, caches, allocator pools), then at
  least `repeats` timed calls, continuing until `min_time_s` of timed calls
  (at most `max_repeats`, default 10 x repeats): a median of a few slow calls
  moves with the machine, many fast calls are cheap.
  """
  max_repeats = max(repeats, max_repeats or 10 * repeats)
  for i in range(warmup):
    fn(i)
  times = []
  while len(times) < repeats or (sum(times) < min_time_s and len(times) < max_repeats):
    start = time.perf_counter()
    fn(warmup + len(times))
    times.append(time.perf_counter() - start)
  return times


def timed(fn, repeats, warmup=0, min_time_s=0.0, max_repeats=None):
  """Per-call wall seconds of `fn()` (no argument); see `measure`."""
  return measure(lambda _: fn(), repeats, warmup, min_time_s, max_repeats)


def interleave(fns, rounds, warmup=0):
  """Times `fns` ({name: fn(i)}) round-robin: `warmup` untimed rounds, then
  `rounds` timed ones. Returns {name: [seconds per round]}.

  Interleaving puts every function in every slow phase of the machine
  alike, so their medians (and differences) are comparable.
  """
  for i in range(warmup):
    for fn in fns.values():
      fn(i)
  times = {name: [] for name in fns}
  for i in range(warmup, warmup + rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      fn(i)
      times[name].append(time.perf_counter() - start)
  return times


def dir_bytes(path):
  """Apparent size of every file under `path` (what `du -sb` reports)."""
  total = 0
  for root, _, files in os.walk(path):
    for name in files:
      total += os.path.getsize(os.path.join(root, name))
  return total


def tmpdir(prefix):
  return tempfile.mkdtemp(prefix=f'planet_bench_{prefix}_')


def parse_gin(quick, extra_params=()):
  """The default task's gin config (tiny sizes in quick mode)."""
  import gin  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  gin_files.parse(list(GIN_QUICK if quick else GIN_DEFAULT), list(extra_params))


def configured_eval_env(gin_paths, gin_params, seed=None):
  """(PyEnvironment, seed) of the task these gin files configure, as train_eval's eval env.

  `seed` None: the run's eval seed (Experiment.seed + 1). Leaves gin parsed.
  """
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
  gin_files.parse(list(gin_paths), list(gin_params))
  run_experiment = experiment_lib.Experiment()
  if seed is None:
    seed = run_experiment.seed + 1
  return run_experiment.env_loader(seed=seed), seed


def gin_value(name):
  import gin  # pylint: disable=g-import-not-at-top
  return gin.query_parameter(name)


def env_specs_and_frames(num_frames, seed=0):
  """Specs of the configured dm_control task and `num_frames` real frames of it.

  Steps the real environment (in this thread) with uniform random actions.
  Parse gin first: the task, action repeat and time limit come from it.
  """
  from tf_agents.specs import tensor_spec  # pylint: disable=g-import-not-at-top
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  env = suites.load_environment(seed=seed)
  try:
    time_step_spec = tensor_spec.from_spec(env.time_step_spec())
    action_spec = tensor_spec.from_spec(env.action_spec())
    rng = np.random.default_rng(seed)
    spec = env.action_spec()
    frames = []
    time_step = env.reset()
    while len(frames) < num_frames:
      frames.append(np.array(time_step.observation['pixels'], copy=True))
      time_step = env.step(rng.uniform(spec.minimum, spec.maximum, spec.shape)
                           .astype(spec.dtype))
  finally:
    env.close()
  return time_step_spec, action_spec, np.stack(frames) if frames else None


def episode_trajectories(data_spec, frames, rng):
  """One episode as the unbatched trajectories a driver hands its observers.

  len(frames) trajectories: FIRST->MID, MID->MID ..., MID->LAST, then the
  boundary LAST->FIRST (the driver's step into the next episode's reset).
  """
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import trajectory  # pylint: disable=g-import-not-at-top
  n = len(frames)
  if n < 3:
    raise ValueError('an episode needs at least 3 trajectories')
  action_spec = data_spec.action
  out = []
  for t in range(n):
    if t == 0:
      step_type, next_step_type = ts.StepType.FIRST, ts.StepType.MID
    elif t == n - 1:
      step_type, next_step_type = ts.StepType.LAST, ts.StepType.FIRST
    elif t == n - 2:
      step_type, next_step_type = ts.StepType.MID, ts.StepType.LAST
    else:
      step_type, next_step_type = ts.StepType.MID, ts.StepType.MID
    boundary = t == n - 1
    action = rng.uniform(-1.0, 1.0, action_spec.shape).astype(action_spec.dtype.as_numpy_dtype)
    out.append(trajectory.Trajectory(
        step_type=np.asarray(step_type, data_spec.step_type.dtype.as_numpy_dtype),
        observation={'pixels': frames[t]},
        action=action,
        policy_info=(),
        next_step_type=np.asarray(next_step_type,
                                  data_spec.next_step_type.dtype.as_numpy_dtype),
        reward=np.asarray(0.0 if boundary else rng.uniform(0.0, 8.0),
                          data_spec.reward.dtype.as_numpy_dtype),
        discount=np.asarray(1.0, data_spec.discount.dtype.as_numpy_dtype)))
  return out


def cycled(pool):
  """Episode frames taken in turn from `pool` ([N, 64, 64, 3] uint8)."""
  state = {'offset': 0}
  def frames(episode_length):
    index = (np.arange(episode_length) + state['offset']) % len(pool)
    state['offset'] += episode_length
    return pool[index]
  return frames


def fresh_noise(seed=0):
  """New incompressible frames for every episode: no two steps share content
  (a reused frame could be deduplicated by the checkpoint's ZLIB stream)."""
  rng = np.random.default_rng(seed)
  return lambda episode_length: rng.integers(
      0, 256, (episode_length,) + FRAME_SHAPE, dtype=np.uint8)


def write_episodes(observer, data_spec, frames_fn, episode_length, num_steps, seed=0):
  """Writes whole episodes of `episode_length` trajectories through a
  `ReverbEpisodeObserver` until at least `num_steps` steps are stored.

  `frames_fn(episode_length)` gives each episode's frames (`cycled`,
  `fresh_noise`). Returns (steps written, seconds).
  """
  rng = np.random.default_rng(seed)
  start = time.perf_counter()
  written_before = observer.steps_written
  while observer.steps_written - written_before < num_steps:
    for step in episode_trajectories(data_spec, frames_fn(episode_length), rng):
      observer(step)
  return observer.steps_written - written_before, time.perf_counter() - start


def chunk_steps_per_step(checkpoint_path, steps):
  """Diagnostic: steps of pixel data held in the checkpoint's chunks per step
  written (1.0 = every step stored once). Reads Reverb's checkpoint format
  (ZLIB TFRecords of ChunkData); None if that format is not readable."""
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from reverb.cc import schema_pb2  # pylint: disable=g-import-not-at-top
    covered = 0
    duplicated_ranges = 0
    seen = set()
    path = os.path.join(checkpoint_path, 'chunks.tfrecord')
    for record in tf.data.TFRecordDataset(path, compression_type='ZLIB'):
      chunk = schema_pb2.ChunkData()
      chunk.ParseFromString(record.numpy())
      ranks = [len(t.tensor_shape.dim) for t in chunk.data.tensors]
      if 4 not in ranks:  # [steps, 64, 64, 3]: the pixel column
        continue
      r = chunk.sequence_range
      covered += r.end - r.start + 1
      key = (r.episode_id, r.start, r.end)
      duplicated_ranges += key in seen
      seen.add(key)
    return {'chunk_steps_per_step': round(covered / steps, 4),
            'duplicated_pixel_chunks': duplicated_ranges}
  except Exception as error:  # pylint: disable=broad-except
    return {'chunk_steps_per_step': None, 'chunk_inspect_error': repr(error)[:120]}


def hard_exit(code=0):
  """Exit without interpreter teardown: Reverb servers, EGL contexts and the
  env thread pool can hang or abort at shutdown, after the figures are out."""
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


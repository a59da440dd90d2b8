"""The world model's image precision: fp32 or bf16 convs, chosen by measuring them.

`WorldModel.image_precision = 'auto'` runs bf16 convolutions only where they
were measured faster. A CPU flag is not enough: on an Intel Xeon with
AVX512_BF16 (no AMX) TensorFlow's bf16 convs were 2x *slower* than fp32, on an
AMD EPYC with the same flag 1.5x faster (docs/performance.md). So the first
run on a machine times the model's own conv encoder + decoder training step at
the run's batch in both precisions (a few seconds), keeps the timings in a
cache keyed by everything that changes them (CPU model, flags, ISA caps,
TensorFlow version, oneDNN setting, conv depth, frames per batch) and picks
with `choose`: bf16 only when it is faster by `BF16_MARGIN`. A GPU keeps bf16
without a probe. 'float32' and 'mixed_bfloat16' are used as given.

Cache: $PLANET_TFA_CACHE_DIR, else $XDG_CACHE_HOME/planet_tfa, else
~/.cache/planet_tfa; the file is `precision_probe.json`. Deleting it re-probes.
"""
import dataclasses
import json
import os
import statistics
import time

import tensorflow as tf

from planet_tfa import hardware
from planet_tfa.networks import decoders
from planet_tfa.networks import encoders

AUTO = 'auto'
FLOAT32, BFLOAT16 = encoders.PRECISIONS
CHOICES = encoders.PRECISIONS + (AUTO,)
# bf16 must be at least this much faster: a tie keeps fp32's numerics.
BF16_MARGIN = 0.10
# The probe's batch when a program does not know the run's (collectors, export):
# SLAC's and the default model batch, 32 windows x 9 steps.
DEFAULT_FRAMES = 32 * 9
# Features the image decoder reads: the RSSM's deter + stoch at the defaults.
_FEATURE_SIZE = 230
CACHE_FILE = 'precision_probe.json'
CACHE_DIR_ENV = 'PLANET_TFA_CACHE_DIR'


@dataclasses.dataclass(frozen=True)
class Decision:
  """What the run computes its images in, and why.

  source: 'set' (the setting named a precision), 'gpu', 'probe' (measured
  now) or 'cache' (measured earlier on this machine); timings: seconds per
  encoder + decoder step by precision (probe and cache only).
  """
  precision: str
  source: str
  timings: dict = None

  def describe(self):
    """The clause of the run's 'CPU path' line."""
    if self.source == 'set':
      return f'image precision {self.precision} (set)'
    if self.source == 'gpu':
      return f'image precision {self.precision} (auto: a GPU)'
    fp32, bf16 = self.timings[FLOAT32], self.timings[BFLOAT16]
    return (f'image precision {self.precision} (auto, {self.source}: conv step fp32 '
            f'{fp32 * 1e3:.0f} ms, bf16 {bf16 * 1e3:.0f} ms, bf16/fp32 {bf16 / fp32:.2f})')


def choose(requested, timings=None, gpu=False, margin=BF16_MARGIN):
  """The precision for `requested`: a pure function of the setting and the timings.

  'auto' gives bf16 on a GPU, or where `timings[BFLOAT16]` is at most
  (1 - margin) x `timings[FLOAT32]`; otherwise fp32.
  """
  if requested != AUTO:
    return encoders.check_precision(requested)
  if gpu:
    return BFLOAT16
  if not timings:
    raise ValueError("image_precision='auto' on a CPU needs the probe's timings")
  return BFLOAT16 if timings[BFLOAT16] <= (1.0 - margin) * timings[FLOAT32] else FLOAT32


def cache_key(depth, frames, machine=None, tf_version=None):
  """Everything that changes the timings: another CPU, cap or TensorFlow re-probes."""
  machine = machine or hardware.describe()
  tf_version = tf_version or tf.__version__
  caps = ','.join(f'{k}={v}' for k, v in sorted((machine.get('isa_caps') or {}).items()))
  return '|'.join([machine['cpu'], ','.join(machine['cpu_flags']), f'caps {caps or "none"}',
                   f'onednn {machine.get("onednn_env")}', f'tensorflow {tf_version}',
                   f'depth {depth}', f'frames {frames}'])


def cache_dir(environ=None):
  environ = os.environ if environ is None else environ
  if environ.get(CACHE_DIR_ENV):
    return environ[CACHE_DIR_ENV]
  base = environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'planet_tfa')


def read_cache(directory):
  """{key: record}; an unreadable or corrupt file counts as empty (it is re-probed)."""
  try:
    with open(os.path.join(directory, CACHE_FILE)) as f:
      records = json.load(f)
  except (OSError, ValueError):
    return {}
  return records if isinstance(records, dict) else {}


def write_cache(directory, key, record):
  """Adds one record; never fails a run (a read-only home only costs a re-probe)."""
  records = read_cache(directory)
  records[key] = record
  path = os.path.join(directory, CACHE_FILE)
  try:
    os.makedirs(directory, exist_ok=True)
    scratch = f'{path}.{os.getpid()}.tmp'
    with open(scratch, 'w') as f:
      json.dump(records, f, indent=1, sort_keys=True)
    os.replace(scratch, path)  # atomic: a concurrent run reads the old or the new file
  except OSError:
    return False
  return True


def _valid_timings(record):
  timings = (record or {}).get('timings') if isinstance(record, dict) else None
  return (isinstance(timings, dict) and all(
      isinstance(timings.get(p), (int, float)) and timings[p] > 0 for p in encoders.PRECISIONS))


def probe_timings(depth, frames, rounds=3, image_shape=(64, 64, 3), clear_ratio=2.0):
  """Seconds per training step of a conv encoder + image decoder, by precision.

  The model's own layers at `depth` on `frames` images, forward and backward.
  Rounds alternate the precisions (a slow phase of a shared machine hits
  both); each precision's median is kept. After the first timed round, a
  ratio beyond `clear_ratio` either way ends the probe: more rounds would not
  change the choice.
  """
  rng = tf.random.Generator.from_seed(0)
  images = tf.cast(rng.uniform((frames,) + tuple(image_shape), 0, 256, tf.int32), tf.uint8)
  features = rng.normal((frames, _FEATURE_SIZE))
  steps = {}
  for precision in encoders.PRECISIONS:
    encoder = encoders.ConvEncoder(depth=depth, precision=precision, name='probe_encoder')
    decoder = decoders.ImageDecoder(channels=image_shape[-1], depth=depth, precision=precision,
                                    name='probe_decoder')

    def step(encoder=encoder, decoder=decoder):
      with tf.GradientTape() as tape:
        embedding = encoder(images)
        reconstruction = decoder(features)
        loss = (tf.reduce_mean(tf.square(reconstruction - encoders.image_to_float(images)))
                + 1e-3 * tf.reduce_mean(embedding))
      variables = encoder.trainable_variables + decoder.trainable_variables
      return tape.gradient(loss, variables) if variables else []

    steps[precision] = tf.function(step)

  def timed(precision):
    start = time.perf_counter()
    gradients = steps[precision]()
    _ = [g.numpy() for g in gradients[:1]]  # wait for the step to finish
    return time.perf_counter() - start

  for precision in encoders.PRECISIONS:  # trace and build: not timed
    timed(precision)
  seconds = {precision: [] for precision in encoders.PRECISIONS}
  for round_index in range(rounds):
    for precision in encoders.PRECISIONS:
      seconds[precision].append(timed(precision))
    ratio = seconds[BFLOAT16][0] / seconds[FLOAT32][0]
    if round_index == 0 and not 1 / clear_ratio < ratio < clear_ratio:
      break
  return {precision: statistics.median(values) for precision, values in seconds.items()}


def _print(line):
  print(line, flush=True)


def decide(requested, depth, frames, gpu=None, directory=None, probe=probe_timings,
           machine=None, tf_version=None, printer=None):
  """The run's `Decision` for WorldModel.image_precision = `requested`.

  'auto' on a CPU reads this machine's cached timings, or probes (and caches)
  them; `probe(depth, frames)` and `machine` are injectable for tests.
  """
  if requested != AUTO:
    return Decision(choose(requested), 'set')
  gpu = hardware.gpu_available() if gpu is None else gpu
  if gpu:
    return Decision(choose(AUTO, gpu=True), 'gpu')
  directory = cache_dir() if directory is None else directory
  key = cache_key(depth, frames, machine=machine, tf_version=tf_version)
  record = read_cache(directory).get(key)
  if _valid_timings(record):
    timings, source = {p: record['timings'][p] for p in encoders.PRECISIONS}, 'cache'
  else:
    (printer or _print)(f"image_precision='auto': timing fp32 and bf16 convs on this CPU once "
                        f'(depth {depth}, {frames} frames; cached in {directory})')
    start = time.perf_counter()
    timings, source = probe(depth, frames), 'probe'
    write_cache(directory, key, {'timings': timings, 'probe_s': round(
        time.perf_counter() - start, 1), 'probed': time.strftime('%Y-%m-%d %H:%M UTC',
                                                                   time.gmtime())})
  return Decision(choose(AUTO, timings), source, timings)

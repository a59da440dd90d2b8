"""Policy and replay-persistence figures (issue 5).

  python -m bench.policy_bench [--quick] [--calls 100] [--fill_steps 100000]

  policy_step_function_inprocess_ms  greedy `agent.policy` through
                                `acting.StepFunction` (the step traced once at
                                batch 1, called as a concrete function), one
                                64x64x3 frame per call, state carried over: the
                                per-step call a driving stack makes
  policy_step_function_savedmodel_ms  the same on `saved_policies.export_policies`
                                -> `tf.saved_model.load(...)`
  policy_latency_inprocess_ms   the same policy through its polymorphic
                                `common.function(agent.policy.action)` (as the
                                drivers run it), which binds the nested inputs
                                against its signatures on every call
  policy_latency_savedmodel_ms  the SavedModel's restored `action`, called the same way
  All policy figures run on `--intra_op_threads` (default 1: a batch-1 step is
  faster on one thread than split over two; each record names the count).
  policy_latency_tflite_ms      the same export's `policy_batch1.tflite` through
                                `lite_policy.TFLitePolicy.action` (numpy in
                                and out, one thread): what a driving stack
                                acting at 10-20 Hz would call
  What bounds it against the 1 ms goal, same inputs and state:
  policy_call_floor_ms          a tf.function taking the same (time_step, state)
                                and doing nothing: Python dispatch and argument
                                handling, the floor of any per-step call
  policy_step_in_graph_ms       100 policy steps inside one tf.function
                                (tf.while_loop, state carried, a new frame each
                                step), per step: the graph's own work without
                                any per-call dispatch
  policy_latency_xla_ms         `tf.function(policy.action, jit_compile=True)`:
                                XLA fuses the step's ~100 small ops into few
  policy_call_conv_ms           TensorFlow's profiler over in-process calls: the
                                image encoder's convolutions per call, beside
                                the matmuls, the other ops and the whole
                                function's execution (a profile of the call,
                                not a guess; the profiler adds its own cost)
  replay_checkpoint_{dmc,noise}_s  `ReplayServer.checkpoint()` of the experience
                                table filled to `--fill_steps` env steps (default:
                                the default capacity, 100k) of 126-step episodes
  replay_restore_{dmc,noise}_s  a new `ReplayServer` on that root loading it, until
                                the table answers with its full size
Default model sizes (gin/defaults.gin via dmc_cartpole_swingup.gin). The fill
writes through `observers.ReverbEpisodeObserver` in Python (no env); its frames
are real cartpole frames (`dmc`, cycled; Reverb compresses them as in a real
run) and incompressible noise (`noise`, the worst case). A fill below
the capacity is extrapolated linearly to it and says so.
"""
import argparse
import os
import shutil
import statistics
import time

import numpy as np

from bench import common

CAPACITY_ENV_STEPS = 100_000


def _batched_time_step(time_step_spec, frame, step_type):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.specs import tensor_spec  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  zeros = tensor_spec.zero_spec_nest(time_step_spec, outer_dims=(1,))
  return ts.TimeStep(
      step_type=tf.fill([1], tf.constant(step_type, zeros.step_type.dtype)),
      reward=zeros.reward, discount=tf.ones_like(zeros.discount),
      observation={'pixels': tf.constant(frame[None])})


def latency(action_fn, initial_state, time_step_spec, frames, calls, warmup):
  """Per-call ms of `action_fn(time_step, state)`, carrying the state along."""
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  steps = [_batched_time_step(time_step_spec, frames[i % len(frames)],
                              ts.StepType.FIRST if i == 0 else ts.StepType.MID)
           for i in range(min(len(frames), 64))]
  state = initial_state
  times = []
  for i in range(warmup + calls):
    start = time.perf_counter()
    out = action_fn(steps[i % len(steps)], state)
    action = out.action if hasattr(out, 'action') else out[0]
    np.asarray(action)  # waits for the result
    elapsed = time.perf_counter() - start
    state = out.state if hasattr(out, 'state') else out[1]
    if i >= warmup:
      times.append(elapsed * 1e3)
  return times


def _ms_stats(times):
  """Spread of per-call ms, plus the 90th percentile (latency tails matter)."""
  ordered = sorted(times)
  return {**common.summarize(times, digits=3, unit='ms'),
          'p90_ms': round(ordered[int(0.9 * (len(ordered) - 1))], 3)}


def policy_figures(args, agent, time_step_spec, frames):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  from planet_tfa import saved_policies  # pylint: disable=g-import-not-at-top
  from planet_tfa import acting  # pylint: disable=g-import-not-at-top
  lines = []
  threads = {'intra_op_threads': tf.config.threading.get_intra_op_parallelism_threads()}
  policy = agent.policy
  step = acting.StepFunction(policy)
  times = latency(step, step.get_initial_state(), time_step_spec, frames, args.calls,
                  args.warmup)
  lines.append(common.emit(
      'policy_step_function_inprocess_ms', round(statistics.median(times), 3), 'ms',
      batch=1, policy='greedy', how='acting.StepFunction(agent.policy)', goal_ms=1.0,
      **threads, **_ms_stats(times)))
  action_fn = tfa_common.function(policy.action)
  start = time.perf_counter()
  times = latency(action_fn, policy.get_initial_state(1), time_step_spec, frames, 1, 0)
  first_s = time.perf_counter() - start
  times = latency(action_fn, policy.get_initial_state(1), time_step_spec, frames,
                  args.calls, args.warmup)
  lines.append(common.emit(
      'policy_latency_inprocess_ms', round(statistics.median(times), 3), 'ms',
      batch=1, policy='greedy', how='common.function(agent.policy.action)',
      first_call_with_tracing_s=round(first_s, 2), **threads, **_ms_stats(times)))
  lines += latency_bounds(args, policy, time_step_spec, frames)
  lines += op_profile(args, policy, action_fn, time_step_spec, frames)

  out_dir = common.tmpdir('export')
  try:
    start = time.perf_counter()
    paths = saved_policies.export_policies(agent, out_dir, agent.train_step_counter, tflite=True)
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    loaded = tf.saved_model.load(paths['greedy_policy'])
    load_s = time.perf_counter() - start
    times = latency(loaded.action, loaded.get_initial_state(1), time_step_spec, frames,
                    args.calls, args.warmup)
    lines.append(common.emit(
        'policy_latency_savedmodel_ms', round(statistics.median(times), 3), 'ms',
        batch=1, policy='greedy', how='tf.saved_model.load(greedy_policy).action',
        export_both_policies_s=round(export_s, 2), load_s=round(load_s, 2),
        **threads, **_ms_stats(times)))
    saved_step = acting.StepFunction(loaded)
    times = latency(saved_step, saved_step.get_initial_state(), time_step_spec, frames,
                    args.calls, args.warmup)
    lines.append(common.emit(
        'policy_step_function_savedmodel_ms', round(statistics.median(times), 3), 'ms',
        batch=1, policy='greedy', how='acting.StepFunction(tf.saved_model.load(greedy_policy))',
        goal_ms=1.0, **threads, **_ms_stats(times)))
    lines.append(tflite_figure(args, paths['greedy_policy'], frames))
  finally:
    shutil.rmtree(out_dir, ignore_errors=True)
  return lines


def tflite_figure(args, policy_dir, frames):
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  from planet_tfa import lite_policy  # pylint: disable=g-import-not-at-top
  policy = lite_policy.TFLitePolicy.load(policy_dir)
  steps = [ts.TimeStep(step_type=np.int32(ts.StepType.FIRST if i == 0 else ts.StepType.MID),
                       reward=np.float32(0), discount=np.float32(1),
                       observation={'pixels': frames[i % len(frames)]})
           for i in range(min(len(frames), 64))]
  state, times = policy.get_initial_state(1), []
  for i in range(args.warmup + args.calls):
    start = time.perf_counter()
    out = policy.action(steps[i % len(steps)], state)
    elapsed = time.perf_counter() - start
    state = out.state
    if i >= args.warmup:
      times.append(elapsed * 1e3)
  return common.emit('policy_latency_tflite_ms', round(statistics.median(times), 3), 'ms',
                     batch=1, policy='greedy', threads=1, kernels=policy.kernels,
                     how='lite_policy.TFLitePolicy.load(greedy_policy).action', goal_ms=1.0,
                     **_ms_stats(times))


def latency_bounds(args, policy, time_step_spec, frames, loop_steps=100):
  """What a policy step's latency is made of (module doc): dispatch floor, graph work, XLA."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  lines = []
  action_shape = [1] + policy.action_spec.shape.as_list()
  floor_fn = tf.function(lambda time_step, state: (tf.zeros(action_shape), state))
  times = latency(floor_fn, policy.get_initial_state(1), time_step_spec, frames, args.calls,
                  args.warmup)
  threads = tf.config.threading.get_intra_op_parallelism_threads()
  lines.append(common.emit('policy_call_floor_ms', round(statistics.median(times), 3), 'ms',
                           batch=1, how='tf.function returning a constant action and the state',
                           intra_op_threads=threads, **_ms_stats(times)))

  # A different frame each step: with one constant frame, Grappler would hoist
  # the encoder out of the loop and the figure would leave its convolutions out.
  time_steps = [_batched_time_step(time_step_spec, frames[i % len(frames)], ts.StepType.MID)
                for i in range(min(len(frames), 16))]
  stacked = tf.nest.map_structure(lambda *xs: tf.stack(xs), *time_steps)

  @tf.function
  def steps_in_graph(state):
    def body(i, state):
      time_step = tf.nest.map_structure(lambda x: x[i % len(time_steps)], stacked)
      return i + 1, policy.action(time_step, state).state
    return tf.while_loop(lambda i, _: i < loop_steps, body, (tf.constant(0), state))[1]

  tf.nest.map_structure(np.asarray, steps_in_graph(policy.get_initial_state(1)))
  per_step = []
  for _ in range(max(args.warmup // 2, 3)):
    start = time.perf_counter()
    tf.nest.map_structure(np.asarray, steps_in_graph(policy.get_initial_state(1)))
    per_step.append((time.perf_counter() - start) * 1e3 / loop_steps)
  lines.append(common.emit('policy_step_in_graph_ms', round(statistics.median(per_step), 3),
                           'ms', batch=1, steps_per_call=loop_steps,
                           how='policy.action in a tf.while_loop, one call',
                           intra_op_threads=threads, **_ms_stats(per_step)))

  xla_fn = tf.function(policy.action, jit_compile=True)
  start = time.perf_counter()
  latency(xla_fn, policy.get_initial_state(1), time_step_spec, frames, 1, 0)
  compile_s = time.perf_counter() - start
  times = latency(xla_fn, policy.get_initial_state(1), time_step_spec, frames, args.calls,
                  args.warmup)
  lines.append(common.emit('policy_latency_xla_ms', round(statistics.median(times), 3), 'ms',
                           batch=1, how='tf.function(policy.action, jit_compile=True)',
                           first_call_with_compile_s=round(compile_s, 2),
                           intra_op_threads=threads, **_ms_stats(times)))
  return lines


# Executor bookkeeping spans that contain the op spans, so not ops themselves.
_EXECUTOR_SPANS = ('ExecutorState::Process', 'ExecutorDoneCallback')


def op_profile(args, policy, action_fn, time_step_spec, frames):
  """Per call of the traced, warmed-up `action_fn`: ms in convolutions, matmuls,
  other ops, and the function's run."""
  import json  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:  # Turns the profiler's trace into JSON; private, so it may move.
    from tensorflow.python.profiler.internal import _pywrap_profiler  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    print(f'policy_call_conv_ms skipped: no trace converter in this TensorFlow ({error})')
    return []
  log_dir = common.tmpdir('policy_profile')
  try:
    tf.profiler.experimental.start(log_dir)
    latency(action_fn, policy.get_initial_state(1), time_step_spec, frames, args.calls, 0)
    tf.profiler.experimental.stop()
    traces = [os.path.join(d, f) for d, _, files in os.walk(log_dir)
              for f in files if f.endswith('.xplane.pb')]
    data, ok = _pywrap_profiler.xspace_to_tools_data(traces, 'trace_viewer@', {})
    if not ok:
      print('policy_call_conv_ms skipped: the profiler trace did not convert')
      return []
    events = json.loads(data)['traceEvents']
  finally:
    shutil.rmtree(log_dir, ignore_errors=True)
  threads = {(e['pid'], e['tid']): e['args']['name'] for e in events
             if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
  us = {'conv': 0.0, 'matmul': 0.0, 'other_ops': 0.0, 'function_run': 0.0}
  for event in events:
    if event.get('ph') != 'X':
      continue
    name, thread = event['name'], threads.get((event['pid'], event['tid']), '')
    if name == 'KernelAndDeviceFunc::Run':
      us['function_run'] += event['dur']
    elif thread.startswith('tf_Compute') and name not in _EXECUTOR_SPANS:
      kind = 'conv' if 'Conv2D' in name else 'matmul' if 'MatMul' in name else 'other_ops'
      us[kind] += event['dur']
  per_call = {k: round(v / args.calls / 1e3, 3) for k, v in us.items()}
  share = round(per_call['conv'] / per_call['function_run'], 2) if per_call['function_run'] else None
  return [common.emit(
      'policy_call_conv_ms', per_call['conv'], 'ms', batch=1, calls=args.calls,
      matmul_ms=per_call['matmul'], other_ops_ms=per_call['other_ops'],
      function_run_ms=per_call['function_run'], conv_share_of_function_run=share,
      intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
      how='tf.profiler trace of common.function(agent.policy.action) calls')]


def replay_persistence(args, data_spec, frames, kind):
  from planet_tfa.replay import observers  # pylint: disable=g-import-not-at-top
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  lines = []
  root = common.tmpdir('replay_ckpt')
  try:
    server = tables.ReplayServer([tables.make_experience_table(data_spec)], root_dir=root)
    observer = observers.ReverbEpisodeObserver(server.client, args.seq)
    frames_fn = common.cycled(frames) if kind == 'dmc' else common.fresh_noise()
    steps, fill_s = common.write_episodes(observer, data_spec, frames_fn,
                                          args.episode_length, args.fill_steps)
    windows = server.table_size()
    times, sizes = [], []
    for _ in range(args.repeats):
      start = time.perf_counter()
      path = server.checkpoint(keep=1)
      times.append(time.perf_counter() - start)
      sizes.append(common.dir_bytes(path))
    observer.close()
    server.stop()
    del server

    restore_times = []
    for _ in range(args.repeats):
      start = time.perf_counter()
      restored = tables.ReplayServer([tables.make_experience_table(data_spec)], root_dir=root)
      size = restored.table_size()
      restore_times.append(time.perf_counter() - start)
      restored.stop()
      if size != windows:
        raise RuntimeError(f'restored table holds {size} windows, expected {windows}')
  finally:
    shutil.rmtree(root, ignore_errors=True)
  scale = CAPACITY_ENV_STEPS / steps
  extrapolated = steps < CAPACITY_ENV_STEPS
  detail = dict(fill_steps=steps, capacity_env_steps=CAPACITY_ENV_STEPS, windows=windows,
                extrapolated=extrapolated,
                frames=(f'{len(frames)} real cartpole frames, cycled' if kind == 'dmc'
                        else 'uniform random uint8 (incompressible)'),
                episode_length=args.episode_length,
                python_fill_s=round(fill_s, 1))
  ckpt = statistics.median(times)
  restore = statistics.median(restore_times)
  lines.append(common.emit(
      f'replay_checkpoint_{kind}_s', round(ckpt * scale, 3), 's',
      measured_s=round(ckpt, 3), checkpoint_bytes=int(statistics.median(sizes)),
      checkpoint_mb_at_capacity=round(statistics.median(sizes) * scale / 2**20, 1),
      repeats=args.repeats, all_s=[round(t, 3) for t in times], **detail))
  lines.append(common.emit(
      f'replay_restore_{kind}_s', round(restore * scale, 3), 's',
      measured_s=round(restore, 3), repeats=args.repeats,
      all_s=[round(t, 3) for t in restore_times], **detail))
  return lines


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true', help='tiny sizes (smoke test)')
  parser.add_argument('--calls', type=int, default=100)
  parser.add_argument('--warmup', type=int, default=10)
  parser.add_argument('--seq', type=int, default=9)
  parser.add_argument('--fill_steps', type=int, default=CAPACITY_ENV_STEPS)
  parser.add_argument('--fill_frames', default='dmc,noise',
                      help='comma list of dmc (real frames) and noise (incompressible)')
  parser.add_argument('--episode_length', type=int, default=126,
                      help='trajectories per episode (cartpole: 125 steps + boundary)')
  # Checkpoint and restore repeats: 3 (a median, not the mean of 2); the
  # incompressible checkpoint takes ~40 s each.
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--skip', default='', help='comma list: policy,replay')
  parser.add_argument('--intra_op_threads', type=int, default=1,
                      help="TensorFlow's intra-op threads for the policy figures (0: its "
                      'default, one per core); a batch-1 step runs faster on one')
  args = parser.parse_args(argv)
  if args.quick:
    args.calls, args.warmup, args.fill_steps = 10, 2, min(args.fill_steps, 2000)
  return args


def main():
  args = parse_args()
  skip = set(filter(None, args.skip.split(',')))
  from planet_tfa import acting  # pylint: disable=g-import-not-at-top
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  if 'policy' not in skip and args.intra_op_threads:
    acting.use_intra_op_threads(args.intra_op_threads)  # before TensorFlow's first op
  common.parse_gin(args.quick)
  # Real frames: 4 episodes' worth, cycled by the dmc fill.
  time_step_spec, action_spec, frames = common.env_specs_and_frames(4 * args.episode_length)
  agent = experiment_lib.make_agent(time_step_spec, action_spec)
  if 'policy' not in skip:
    policy_figures(args, agent, time_step_spec, frames)
  if 'replay' not in skip:
    for kind in args.fill_frames.split(','):
      replay_persistence(args, agent.collect_data_spec, frames, kind)
  common.hard_exit()


if __name__ == '__main__':
  main()

"""Where the SLAC-shaped train iteration spends its time, op type by op type (issue 61).

  python -m bench.train_profile [--iterations 5] [--top 12] [--quick]

Builds the iteration `bench.peer_slac` times for ours (depth 32, fp32, model
batch 32 x 9 plus a separate SAC batch 256 x 9), warms it up, then traces
`--iterations` calls with TensorFlow's profiler and sums the op spans of the
compute threads by op type (Conv2D, Conv2DBackpropFilter, MatMul, ...).
Prints one JSON line per op type among the `--top` (ms per iteration, share
of the summed op time) and `train_profile_total` (summed op ms and the
iteration's wall ms per call). Shares stay meaningful on a busy machine;
absolute times do not.
"""
import argparse
import collections
import json
import os
import shutil
import time

from bench import common
from bench import peer_slac
from planet_tfa import hardware

# Executor bookkeeping spans that contain the op spans, so not ops themselves.
_EXECUTOR_SPANS = ('ExecutorState::Process', 'ExecutorDoneCallback')


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--iterations', type=int, default=5, help='traced iterations')
  parser.add_argument('--top', type=int, default=12, help='op types reported')
  parser.add_argument('--quick', action='store_true', help='one traced iteration')
  args = parser.parse_args(argv)
  if args.quick:
    args.iterations = 1
  return args


def op_type(name):
  """'Conv2DBackpropFilter' of a span named like 'model/conv/Conv2DBackpropFilter:...'."""
  return name.split(':')[0].split('/')[-1]


def summed_op_us(events):
  """{op type: microseconds} over the compute threads' op spans of a trace."""
  threads = {(e['pid'], e['tid']): e['args']['name'] for e in events
             if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
  totals = collections.Counter()
  for event in events:
    if event.get('ph') != 'X' or event['name'] in _EXECUTOR_SPANS:
      continue
    if threads.get((event['pid'], event['tid']), '').startswith('tf_Compute'):
      totals[op_type(event['name'])] += event['dur']
  return totals


def main():
  args = parse_args()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.python.profiler.internal import _pywrap_profiler  # pylint: disable=g-import-not-at-top
  iteration = peer_slac.ours_iteration()
  for i in range(3):
    iteration(i)  # trace and warm up
  log_dir = common.tmpdir('train_profile')
  try:
    tf.profiler.experimental.start(log_dir)
    start = time.perf_counter()
    for i in range(args.iterations):
      iteration(i)
    wall_s = time.perf_counter() - start
    tf.profiler.experimental.stop()
    traces = [os.path.join(d, f) for d, _, files in os.walk(log_dir)
              for f in files if f.endswith('.xplane.pb')]
    data, ok = _pywrap_profiler.xspace_to_tools_data(traces, 'trace_viewer@', {})
    if not ok:
      raise RuntimeError('the profiler trace did not convert')
    totals = summed_op_us(json.loads(data)['traceEvents'])
  finally:
    shutil.rmtree(log_dir, ignore_errors=True)
  summed = sum(totals.values())
  for name, us in totals.most_common(args.top):
    common.emit(f'train_profile_{name}', round(us / args.iterations / 1e3, 2), 'ms',
                share=round(us / summed, 3), iterations=args.iterations)
  common.emit('train_profile_total', round(summed / args.iterations / 1e3, 1), 'ms',
              wall_ms_per_iteration=round(wall_s / args.iterations * 1e3, 1),
              threads=hardware.thread_counts()['intra_op'],
              iterations=args.iterations,
              how='tf.profiler trace of the SLAC-shaped iteration, op spans by type')
  common.hard_exit(0)


if __name__ == '__main__':
  main()

"""TensorFlow's thread counts for a training run: which layout trains fastest here (issue 61).

  python -m bench.threads_bench [--depth 16] [--steps 12] [--quick]

Each layout runs `bench.train_bench` (the full train step: world model + SAC,
fp32, the run's batch 32 x 9) in its own process with TF_NUM_INTRAOP_THREADS
and TF_NUM_INTEROP_THREADS set, one after the other:

  intra<N>_inter<N>  TensorFlow's default (both pools as wide as the cores)
  intra<N>_inter1    what planet_tfa chooses (`hardware.thread_counts`)
  intra1_inter1      one thread: what each of two runs side by side gets
  side_by_side       two one-thread processes at once, each pinned to its own
                     core (`taskset`): the two-runs-on-two-cores layout

Prints one line per layout with its median train step (s) and its train steps
per second (summed over both processes side by side), and `threads_choice`
naming the fastest single-run layout. Run it on an idle machine.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

from bench import common


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--depth', type=int, default=16, help='conv depth (16: the CPU configs)')
  parser.add_argument('--steps', type=int, default=12, help="each child's timed train steps")
  parser.add_argument('--quick', action='store_true', help='tiny sizes, 2 steps (smoke test)')
  return parser.parse_args(argv)


def child(depth, steps, quick, intra, inter, core=None):
  """A started `bench.train_bench` process with these thread counts (pinned to `core`)."""
  env = dict(os.environ, TF_NUM_INTRAOP_THREADS=str(intra), TF_NUM_INTEROP_THREADS=str(inter),
             TF_CPP_MIN_LOG_LEVEL='2')
  cmd = [sys.executable, '-m', 'bench.train_bench', '--depth', str(depth), '--steps', str(steps)]
  if quick:
    cmd.append('--quick')
  if core is not None and shutil.which('taskset'):
    cmd = ['taskset', '-c', str(core)] + cmd
  return subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)


def step_seconds(process):
  """The child's median full train step (s), from its JSON lines."""
  out, _ = process.communicate()
  for raw in out.splitlines():
    if raw.startswith('{'):
      line = json.loads(raw)
      if line['name'].startswith('train_step_s'):
        return line['value']
  raise RuntimeError(f'train_bench exited {process.returncode} without a train step figure')


def main():
  args = parse_args()
  cores = len(os.sched_getaffinity(0))
  layouts = [(f'intra{cores}_inter{cores}', cores, cores), (f'intra{cores}_inter1', cores, 1),
             ('intra1_inter1', 1, 1)]
  results = {}
  for name, intra, inter in layouts:
    seconds = step_seconds(child(args.depth, args.steps, args.quick, intra, inter))
    results[name] = 1.0 / seconds
    common.emit(f'threads_train_step_s_{name}', seconds, 's', intra_op=intra, inter_op=inter,
                processes=1, train_steps_per_s=round(1.0 / seconds, 3), depth=args.depth)
  if cores >= 2:
    pair = [child(args.depth, args.steps, args.quick, 1, 1, core=k) for k in range(2)]
    seconds = [step_seconds(p) for p in pair]
    results['side_by_side'] = sum(1.0 / s for s in seconds)
    common.emit('threads_train_step_s_side_by_side', max(seconds), 's', intra_op=1, inter_op=1,
                processes=2, per_process_s=seconds,
                train_steps_per_s=round(results['side_by_side'], 3), depth=args.depth)
  single = {name: rate for name, rate in results.items() if name != 'side_by_side'}
  best = max(single, key=single.get)
  common.emit('threads_choice', best, None, cores=cores,
              train_steps_per_s={k: round(v, 3) for k, v in results.items()})
  common.hard_exit(0)


if __name__ == '__main__':
  main()

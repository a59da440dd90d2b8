"""Interleaved A/B of glibc malloc against tcmalloc on the SLAC-shaped iteration.

  python -m bench.allocator_ab [--rounds 3] [--steps 7]

Alternates `bench.slac_shape_bench` processes without and with
LD_PRELOAD=libtcmalloc_minimal.so.4, so slow phases of a shared VM hit both
sides alike, and prints one JSON line per layout: the median over rounds of
each side's per-process median, and glibc / tcmalloc (> 1: tcmalloc faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from bench import common


def _run(steps, preload):
  env = dict(os.environ)
  if preload:
    env['LD_PRELOAD'] = preload
  out = subprocess.run([sys.executable, '-m', 'bench.slac_shape_bench', '--steps', str(steps)],
                       env=env, check=True, capture_output=True, text=True).stdout
  return {line['name']: line['value'] for line in map(json.loads, out.splitlines())
          if line.get('name', '').startswith('train_iteration_s_')}


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=7, help="slac_shape_bench's timed rounds")
  return parser.parse_args(argv)


def main():
  args = parse_args()
  if not os.path.exists(common.TCMALLOC):
    sys.exit(f'{common.TCMALLOC} not found: apt-get install libtcmalloc-minimal4')
  results = {'glibc': [], 'tcmalloc': []}
  for _ in range(args.rounds):
    results['glibc'].append(_run(args.steps, None))
    results['tcmalloc'].append(_run(args.steps, common.TCMALLOC))
  for name in results['glibc'][0]:
    glibc = [r[name] for r in results['glibc']]
    tcmalloc = [r[name] for r in results['tcmalloc']]
    common.emit(f'allocator_ab_{name[len("train_iteration_s_"):]}',
                round(statistics.median(glibc) / statistics.median(tcmalloc), 3),
                'x (glibc s / tcmalloc s)', glibc_s=glibc, tcmalloc_s=tcmalloc,
                rounds=args.rounds)


if __name__ == '__main__':
  main()

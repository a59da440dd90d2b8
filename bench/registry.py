"""Every benchmark of the project, in one table.

An entry says which module runs (`python -m MODULE ARGS`), with which
arguments for a full run and for `--quick` (the project's tiny sizes, a smoke
test), which docs section (a topic) its figures report into, and whether the
suite (`python -m bench`, bench/suite.py) runs it or it is a standalone,
long-running tool run by hand (training runs, evaluations of a finished run).
The suite and the report (bench/report.py) read this table; adding a
benchmark is adding an entry here.

  python -m bench.registry            # the table, one line per entry
  python -m bench.registry --check M  # parse every entry's arguments of module M
"""
import argparse
import dataclasses
import importlib
import shlex
import sys

from bench import common

# Docs sections of docs/benchmarks.md, in document order: topic -> what it holds.
SECTIONS = {
    'Replay': 'storage per env step, sampling, warm-up, checkpoint and restore',
    'Policy latency': 'one greedy action at batch 1, in-process and from the SavedModel',
    'Planner': "PlaNet's CEM planner against the SAC actor: the cost of one action",
    'Training step': 'step time, its parts, FLOP floors, memory, allocator, retracing',
    'CARLA observations': 'building one observation without a CARLA server',
    # Standalone tools only (their results live in their own docs pages).
    'Learning': 'returns of whole training runs',
    'Driving': 'driving metrics of trained policies',
    'Distributed collection': 'env steps per second through collector processes',
}
FAILURES = 'Failures'  # where the report puts lines of benchmarks that failed


@dataclasses.dataclass(frozen=True)
class Benchmark:
  """One benchmark: a module run in its own process."""
  name: str
  module: str
  section: str
  about: str
  args: tuple = ()
  quick_args: tuple = ('--quick',)  # None: no smoke-size run
  in_suite: bool = True
  group: str = None  # `python -m bench --only GROUP` (suite entries)
  env: tuple = ()  # (variable, value) pairs set for the child process
  requires: str = None  # a file without which the suite skips the entry, saying so
  # (flag, figure name): pass the value of a figure an earlier entry printed
  # (the train benchmarks take the measured matmul throughput from `flops`).
  figure_args: tuple = ()
  # Detail keys that describe the run's configuration rather than the figure:
  # kept in the raw JSON, left out of the report's details column.
  context: tuple = ()
  docs: str = 'docs/benchmarks.md'  # where its results are written up (None: JSON only)

  def argv(self, quick=False):
    """Arguments after `python -m MODULE`."""
    if quick and self.quick_args is None:
      raise ValueError(f'{self.name} has no --quick arguments')
    return list(self.quick_args if quick else self.args)

  def command(self, quick=False):
    return ' '.join(['python', '-m', self.module] + [shlex.quote(a) for a in self.argv(quick)])


def _train(name, depth, quick_depth, suffix='', group='train', env=(), requires=None,
           about=None):
  """One process of bench.train_bench (one process per configuration: its peak RSS)."""
  extra = ('--suffix', suffix) if suffix else ()
  return Benchmark(
      name=name, module='bench.train_bench', section='Training step', group=group,
      about=about or f'train step, its world-model and SAC parts, peak RSS at depth {depth}',
      args=('--depth', str(depth)) + extra,
      quick_args=('--depth', str(quick_depth)) + extra + ('--quick',),
      env=env, requires=requires, context=('rssm', 'matmul_gflops', 'depth', 'batch', 'seq'),
      figure_args=(('--matmul_gflops', 'matmul_fp32_gflops'),))


BENCHMARKS = (
    # ---- the suite, in running order ----
    Benchmark('flops', 'bench.flops', 'Training step', group='flops',
              about='fp32 matmul throughput: the denominator of every FLOP floor',
              quick_args=('--repeats', '3', '--warmup', '1', '--min_time_s', '0'),
              context=('cores',)),
    Benchmark('replay', 'bench.replay_bench', 'Replay', group='replay',
              about='warm-up env steps/s, checkpoint bytes per env step, sampling rate',
              context=('raw_obs_bytes', 'sequence_length', 'stride', 'batch', 'seq')),
    Benchmark('replay_persistence', 'bench.policy_bench', 'Replay', group='replay',
              about='checkpoint and restore of the table filled to capacity',
              args=('--skip', 'policy'), quick_args=('--skip', 'policy', '--quick'),
              context=('capacity_env_steps', 'episode_length')),
    Benchmark('policy', 'bench.policy_bench', 'Policy latency', group='policy',
              about='greedy policy latency at batch 1, in-process and SavedModel',
              args=('--skip', 'replay'), quick_args=('--skip', 'replay', '--quick'),
              context=('batch', 'policy')),
    Benchmark('planner', 'bench.planner_bench', 'Planner', group='planner',
              about='CEM planner and SAC actor: ms and FLOPs per action',
              context=('deter', 'stoch', 'depth')),
    _train('train_d32', 32, 8),
    _train('train_d32_tcmalloc', 32, 8, suffix='_tcmalloc', group='tcmalloc',
           env=(('LD_PRELOAD', common.TCMALLOC),), requires=common.TCMALLOC,
           about='the depth-32 train benchmark in a process with LD_PRELOAD=tcmalloc'),
    _train('train_d16', 16, 4),
    Benchmark('slac_shape', 'bench.slac_shape_bench', 'Training step', group='train',
              about='SLAC-shaped iteration (model batch 32 x 9 + SAC batch 256 x 9), fp32 and bf16',
              args=('--precisions', 'float32,mixed_bfloat16'),
              quick_args=('--precisions', 'float32,mixed_bfloat16', '--quick'),
              context=('matmul_gflops', 'seq', 'depth')),
    Benchmark('carla_obs', 'bench.carla_obs_bench', 'CARLA observations', group='carla',
              about="bird's-eye mask (vertex cull against polygon index) and lidar image of one step",
              context=('cpu', 'cores', 'tf', 'gpus', 'date', 'road_quads')),
    # ---- standalone tools: long runs, or they need a finished training run ----
    Benchmark('allocator_ab', 'bench.allocator_ab', 'Training step', in_suite=False,
              about='glibc against tcmalloc processes of slac_shape, interleaved over rounds',
              args=('--rounds', '3', '--steps', '7'), quick_args=('--rounds', '1', '--steps', '2'),
              docs='README.md'),
    Benchmark('threads', 'bench.threads_bench', 'Training step', in_suite=False,
              about="the train step under TensorFlow's default thread pools, the chosen "
                    'ones, one thread, and two one-thread runs side by side',
              quick_args=('--quick',), docs='docs/performance.md',
              context=('depth', 'per_process_s')),
    Benchmark('train_profile', 'bench.train_profile', 'Training step', in_suite=False,
              about="the SLAC-shaped iteration's op time by op type (TensorFlow's profiler)",
              docs='docs/performance.md', context=('iterations',)),
    Benchmark('peer_slac', 'bench.peer_slac', 'Training step', in_suite=False,
              about='our SLAC-shaped iteration against the PyTorch SLAC peer, interleaved '
                    '(skipped, saying how to install it, when the peer is not installed)',
              context=('rounds', 'warmup_rounds', 'peer_commit', 'model_batch', 'sac_batch',
                       'seq', 'depth', 'image_precision', 'per_round_s', 'ratio_per_round')),
    Benchmark('world_model', 'bench.world_model_bench', 'Training step', in_suite=False,
              about='world-model update on synthetic frames, with and without XLA',
              args=('--depths', '32,16', '--jit', '0,1'),
              quick_args=('--depths', '8', '--jit', '0', '--steps', '2', '--warmup', '1'),
              docs=None),
    Benchmark('collectors', 'bench.collectors_bench', 'Distributed collection', in_suite=False,
              about='env steps/s into a standalone Reverb server from 1, 2 and 4 collectors',
              args=('--collectors', '1,2,4', '--measure_s', '60'),
              quick_args=('--collectors', '1', '--measure_s', '12', '--model', 'tiny'),
              docs='docs/distributed.md'),
    Benchmark('planner_eval', 'bench.planner_eval', 'Planner', in_suite=False,
              about='returns of the SAC actor, the CEM planner and the guided planner on one run',
              args=('--root_dir', 'runs/cem_base', '--episodes', '5', '--seed', '100'),
              quick_args=None, docs='docs/planner.md'),
    Benchmark('learning_curve', 'bench.learning_curve', 'Learning', in_suite=False,
              about='eval return over wall time of one training run, against a random policy',
              args=('--root_dir=runs/lc_cartpole', '--budget_s=3300',
                    '--gin_file=cartpole_fast.gin'),
              quick_args=None, docs='docs/learning.md'),
    Benchmark('compare_curves', 'bench.compare_curves', 'Learning', in_suite=False,
              about='eval-return curves of finished runs overlaid at equal wall time',
              args=('--out=docs/sac_layouts_cartpole', 'feature reuse=runs/lc_reuse',
                    'separate SAC batch=runs/lc_separate'),
              quick_args=None, docs='docs/learning.md'),
    Benchmark('dmc_table', 'bench.dmc_table', 'Learning', in_suite=False,
              about='DeepMind Control tasks x seeds at an env-step budget, next to the papers',
              args=('--tasks=cartpole-swingup,cheetah-run,walker-walk', '--seeds=0,1',
                    '--env_steps=100000', '--gin_file=dmc_cpu.gin', '--runs_dir=runs/dmc_table'),
              quick_args=('--tasks=cartpole-swingup', '--seeds=0', '--env_steps=320',
                          '--gin_file=tiny.gin', '--runs_dir=/tmp/planet_dmc_table_quick',
                          '--out=/tmp/planet_dmc_table_quick/table', '--eval_episodes=2',
                          '--random_episodes=2'),
              docs='docs/dmc_table.md'),
    Benchmark('cheetah_levers', 'bench.cheetah_levers', 'Learning', in_suite=False,
              about="cheetah's published 100k runs grouped by lever: means, spreads, strip plot",
              args=('--out=docs/cheetah_levers',), quick_args=None, docs='docs/learning.md'),
    Benchmark('eval_filter', 'bench.eval_filter', 'Learning', in_suite=False,
              about="greedy policy's filter: posterior mean against posterior sample",
              args=('--root_dir=runs/dmc_table/cheetah-run/seed_0', '--episodes=10'),
              quick_args=None, docs='docs/learning.md'),
    Benchmark('diagnose_run', 'bench.diagnose_run', 'Learning', in_suite=False,
              about="why a run scores what it does: open-loop model error, critic bias, entropy",
              args=('--root_dir=runs/dmc_table/cheetah-run/seed_0', '--episodes=2'),
              quick_args=None, docs='docs/learning.md'),
    Benchmark('belief_gap', 'bench.belief_gap', 'Learning', in_suite=False,
              about='whole-episode belief vs the zero-state window belief SAC trains on',
              args=('--root_dir=runs/dmc_table/walker-walk/seed_0', '--episodes=1'),
              quick_args=None, docs='docs/learning.md'),
    Benchmark('driving_eval', 'bench.driving_eval', 'Driving', in_suite=False,
              about='per-episode return, crash rate and distance of a driving policy',
              args=('--gin_file=highway_fast.gin', '--episodes=20', '--policy=random'),
              quick_args=('--gin_file=highway_fast.gin', '--episodes=1', '--policy=random'),
              docs='docs/driving.md'),
)


def by_name():
  return {b.name: b for b in BENCHMARKS}


def suite():
  """Entries the suite runs, in order."""
  return [b for b in BENCHMARKS if b.in_suite]


def groups():
  """`--only` groups, in running order."""
  return list(dict.fromkeys(b.group for b in suite()))


def derived(lines):
  """Figures computed from other entries' figures after the suite ran.

  tcmalloc_speedup{tag}: glibc s / tcmalloc s per train step, for every
  train_step_s{tag} that has a _tcmalloc twin.
  """
  found = {l['name']: l for l in lines}
  out = []
  for name, tc in found.items():
    if not (name.startswith('train_step_s') and name.endswith('_tcmalloc')):
      continue
    tag = name[len('train_step_s'):-len('_tcmalloc')]
    glibc = found.get(f'train_step_s{tag}')
    if not (glibc and glibc.get('value') and tc.get('value')):
      continue
    out.append({
        'name': f'tcmalloc_speedup{tag}', 'value': round(glibc['value'] / tc['value'], 3),
        'unit': 'x (glibc s / tcmalloc s)', 'section': 'Training step',
        'benchmark': 'train_d32_tcmalloc', 'glibc_s': glibc['value'], 'tcmalloc_s': tc['value'],
        'glibc_min_max_s': [glibc.get('min_s'), glibc.get('max_s')],
        'tcmalloc_min_max_s': [tc.get('min_s'), tc.get('max_s')],
        'glibc_peak_rss_mb': found.get(f'peak_rss_mb{tag}', {}).get('value'),
        'tcmalloc_peak_rss_mb': found.get(f'peak_rss_mb{tag}_tcmalloc', {}).get('value')})
  return out


def check_args(module_name):
  """Parses every entry's full and quick arguments with MODULE's own parser.

  Each module exposes `parse_args(argv)` (argparse or absl flags) that parses
  without running anything; run one module per process (absl flags are global).
  """
  entries = [b for b in BENCHMARKS if b.module == module_name]
  if not entries:
    raise KeyError(f'no registry entry runs {module_name}')
  module = importlib.import_module(module_name)
  for entry in entries:
    for quick in (False, True):
      if quick and entry.quick_args is None:
        continue
      module.parse_args(entry.argv(quick))
  return [e.name for e in entries]


def main(argv=None):
  parser = argparse.ArgumentParser(description='the benchmark registry')
  parser.add_argument('--check', metavar='MODULE',
                      help="parse the registry's arguments of MODULE's entries, then exit")
  args = parser.parse_args(argv)
  if args.check:
    print(' '.join(check_args(args.check)))
    return 0
  for b in BENCHMARKS:
    where = f'suite, --only {b.group}' if b.in_suite else f'standalone, {b.docs or "JSON lines"}'
    print(f'{b.name:20} {b.section:22} {where}\n    {b.command()}')
  return 0


if __name__ == '__main__':
  sys.path.insert(0, common.REPO)
  sys.exit(main())

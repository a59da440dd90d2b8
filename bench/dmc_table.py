"""DeepMind Control at a fixed environment-step budget, next to the papers.

  python -m bench.dmc_table [--tasks=cartpole-swingup,cheetah-run,walker-walk] [--seeds=0,1] \
      [--env_steps=100000] [--gin_file=dmc_cpu.gin] [--runs_dir=runs/dmc_table] [--out=docs/dmc_table]

Every task x seed is one train_eval run in RUNS_DIR/TASK/seed_N, trained to
`--env_steps` environment steps (physics steps = agent steps x action repeat,
the papers' unit; `train_eval.env_step_budget`), with the task's gin file and
then `--gin_file`s (default: the 2-core CPU sizing, gin/dmc_cpu.gin). Its
final score is the mean return of `--eval_episodes` (10) greedy episodes of
the final checkpoint (`bench.eval_filter`), and beside it the stochastic
policy's over the same episodes' seeds (what SLAC's curves report), written to
the run's final_score.json. Writes OUT.md (published figures, ours greedy and
stochastic as mean +- std over seeds, a random policy, wall time and train
steps per run), OUT.csv (one row per run) and OUT.png (eval curves over
environment steps, one panel per task).

Resumable: re-running the same command skips runs with a final score for this
budget (adding the stochastic score to one written before it was recorded),
resumes unfinished ones from their checkpoints (train_eval's own resume) and
only evaluates those whose training is done. `--report_only` rewrites the
table from what is finished (and the random policy's scores).
"""
import csv
import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from bench import common
from bench import compare_curves
from planet_tfa import setting_values

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# CURL paper (Laskin et al. 2020), Table 1, 100k environment steps: mean, std
# over seeds; None where the paper gives none.
PUBLISHED = {
    'cartpole-swingup': {'PlaNet': (297, 39), 'Dreamer': (326, 27), 'SLAC (v1)': None,
                         'CURL': (582, 146)},
    'cheetah-run': {'PlaNet': (138, 88), 'Dreamer': (235, 137), 'SLAC (v1)': (319, 56),
                    'CURL': (299, 48)},
    'walker-walk': {'PlaNet': (224, 48), 'Dreamer': (277, 12), 'SLAC (v1)': (361, 73),
                    'CURL': (403, 24)},
    'ball_in_cup-catch': {'PlaNet': (0, 0), 'Dreamer': (246, 174), 'SLAC (v1)': (512, 110),
                          'CURL': (769, 43)},
}
METHODS = ('PlaNet', 'Dreamer', 'SLAC (v1)', 'CURL')
TASK_GIN = {
    'cartpole-swingup': 'dmc_cartpole_swingup.gin',
    'cheetah-run': 'dmc_cheetah_run.gin',
    'walker-walk': 'dmc_walker_walk.gin',
    'ball_in_cup-catch': 'dmc_ball_in_cup_catch.gin',
}
FINAL_SCORE = 'final_score.json'
BENCH_STATE = 'dmc_table_state.json'  # wall time of this run's train_eval processes
RANDOM_SCORE = 'random_score.json'

flags.DEFINE_list('tasks', ['cartpole-swingup', 'cheetah-run', 'walker-walk'],
                  f'DeepMind Control tasks (domain-task); with gin files: {sorted(TASK_GIN)}.')
flags.DEFINE_list('seeds', ['0', '1'], 'Seeds (Experiment.seed) per task.')
flags.DEFINE_integer('env_steps', 100_000, 'Environment (physics) steps per run.')
flags.DEFINE_multi_string('gin_file', ['dmc_cpu.gin'], 'Gin files after the task file.')
flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings for every run.')
flags.DEFINE_string('runs_dir', 'runs/dmc_table', 'One run root per task and seed under it.')
flags.DEFINE_string('out', os.path.join(REPO, 'docs', 'dmc_table'),
                    'Path prefix of the .md, .csv and .png written.')
flags.DEFINE_integer('eval_episodes', 10, 'Greedy episodes of the final score.')
flags.DEFINE_integer('random_episodes', 10, "Episodes of the random policy's score.")
flags.DEFINE_bool('report_only', False, 'Write the table from finished runs; train nothing.')
FLAGS = flags.FLAGS


def parse_args(argv):
  """Parses `argv` (without the program name) into FLAGS, running nothing
  (bench.registry --check)."""
  return FLAGS(['bench.dmc_table'] + list(argv))


def _read_json(path):
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _write_json(path, value):
  staging = path + '.tmp'
  with open(staging, 'w') as f:
    json.dump(value, f, indent=2)
  os.replace(staging, path)  # a killed bench never leaves half a file


def task_gin_files(task, extra_gin_files):
  if task not in TASK_GIN:
    raise app.UsageError(f'--tasks: no gin file for {task!r}; known: {sorted(TASK_GIN)}')
  return [TASK_GIN[task], *extra_gin_files]


def run_root(runs_dir, task, seed):
  return os.path.join(os.path.abspath(runs_dir), task, f'seed_{seed}')


def is_finished(root, env_steps):
  score = _read_json(os.path.join(root, FINAL_SCORE))
  return score is not None and score.get('env_step_budget') == env_steps


def training_done(root, env_steps):
  summary = _read_json(os.path.join(root, 'run_summary.json'))
  return (summary is not None and summary.get('stopped_by') == 'env_step_budget'
          and summary.get('physics_steps', 0) >= env_steps)


def train(task, seed, root, env_steps, gin_files, gin_params):
  """train_eval.py to the budget in `root` (resumes what is there)."""
  cmd = [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root}']
  cmd += [f'--gin_file={f}' for f in task_gin_files(task, gin_files)]
  cmd += [f'--gin_param={p}' for p in gin_params]
  cmd += [f'--gin_param=train_eval.env_step_budget={env_steps}',
          '--gin_param=train_eval.num_iterations=1000000000',  # the budget ends it
          f'--gin_param=Experiment.seed={seed}']
  print(' '.join(map(setting_values.shell_word, cmd)), file=sys.stderr, flush=True)
  start = time.time()
  result = subprocess.run(cmd, cwd=REPO, check=False)
  state_path = os.path.join(root, BENCH_STATE)
  state = _read_json(state_path) or {'wall_time_s': 0.0, 'processes': 0}
  state['wall_time_s'] = round(state['wall_time_s'] + time.time() - start, 1)
  state['processes'] += 1
  if os.path.isdir(root):
    _write_json(state_path, state)
  if result.returncode != 0:
    raise RuntimeError(f'train_eval.py exited with {result.returncode} for {task} seed {seed} '
                       f'({root}); fix the cause and re-run: the run resumes.')
  if not training_done(root, env_steps):
    summary = _read_json(os.path.join(root, 'run_summary.json')) or {}
    raise RuntimeError(f'{root} stopped by {summary.get("stopped_by")} before '
                       f'{env_steps} environment steps; re-run to resume it.')


def final_score(task, seed, root, env_steps, episodes):
  """Greedy and stochastic returns of the final checkpoint -> ROOT/final_score.json."""
  from bench import eval_filter  # pylint: disable=g-import-not-at-top
  evaluation = eval_filter.evaluate_root(root, episodes, stochastic=True)
  scores = evaluation['filters'][evaluation['configured_filter']]
  stochastic = evaluation['stochastic']
  summary = _read_json(os.path.join(root, 'run_summary.json'))
  state = _read_json(os.path.join(root, BENCH_STATE)) or {}
  score = {
      'task': task, 'seed': seed, 'env_step_budget': env_steps,
      'score_mean': scores['mean'], 'score_std': scores['std'], 'returns': scores['returns'],
      'episodes': episodes, 'greedy_filter': evaluation['configured_filter'],
      'stochastic_mean': stochastic['mean'], 'stochastic_std': stochastic['std'],
      'stochastic_returns': stochastic['returns'],
      'physics_steps': summary['physics_steps'], 'agent_steps': summary['env_steps'],
      'action_repeat': summary['action_repeat'], 'train_steps': summary['train_steps'],
      'wall_time_s': state.get('wall_time_s', summary['wall_time_s']),
  }
  _write_json(os.path.join(root, FINAL_SCORE), score)
  return score


def add_stochastic_score(root):
  """The stochastic policy's returns added to a final score written before
  they were recorded (same checkpoint, same env seed); the greedy ones stay."""
  from bench import eval_filter  # pylint: disable=g-import-not-at-top
  path = os.path.join(root, FINAL_SCORE)
  score = _read_json(path)
  # The greedy returns are already in the score: evaluate no greedy policy again.
  stochastic = eval_filter.evaluate_root(root, score['episodes'], filters=(),
                                        stochastic=True)['stochastic']
  score.update(stochastic_mean=stochastic['mean'], stochastic_std=stochastic['std'],
               stochastic_returns=stochastic['returns'])
  _write_json(path, score)
  return score


def random_score(task, runs_dir, gin_files, gin_params, episodes):
  """Uniform random actions on the task's eval env, cached per task."""
  path = os.path.join(os.path.abspath(runs_dir), task, RANDOM_SCORE)
  cached = _read_json(path)
  if cached and cached['episodes'] == episodes:
    return cached
  from bench import eval_filter  # pylint: disable=g-import-not-at-top
  mean, std = eval_filter.random_policy_return(
      task_gin_files(task, gin_files), gin_params, episodes)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  cached = {'task': task, 'mean': round(mean, 1), 'std': round(std, 1), 'episodes': episodes}
  _write_json(path, cached)
  return cached


def _pm(pair):
  return '–' if pair is None else f'{pair[0]:.0f} ± {pair[1]:.0f}'


def _over_seeds(values):
  """Mean ± std over seeds; one seed has no spread to show."""
  if not values:
    return 'not run'
  return f'{values[0]:.0f}' if len(values) == 1 else _pm(common.mean_std(values))


def write_report(out, tasks, seeds, env_steps, scores, randoms, runs_dir, command,
                 eval_episodes):
  """OUT.md, OUT.csv and OUT.png from the finished runs' scores."""
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out + '.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['task', 'seed', 'env_step_budget', 'score_mean', 'score_std',
                     'stochastic_mean', 'stochastic_std', 'episodes', 'physics_steps',
                     'train_steps', 'wall_time_s', 'random_mean'])
    for (task, seed), s in sorted(scores.items()):
      writer.writerow([task, seed, env_steps, s['score_mean'], s['score_std'],
                       s.get('stochastic_mean'), s.get('stochastic_std'), s['episodes'],
                       s['physics_steps'], s['train_steps'], s['wall_time_s'],
                       randoms.get(task, {}).get('mean')])

  missing = [(t, s) for t in tasks for s in seeds if (t, s) not in scores]
  lines = [
      f'# DeepMind Control at {env_steps:,} environment steps',
      '',
      'Written by `python -m bench.dmc_table`; this exact command reproduces it (resumable: '
      're-running skips finished runs and resumes the others):',
      '',
      '```sh', command, '```', '',
      'Environment steps are physics steps (agent steps x action repeat), as in the papers. '
      'Our score: the mean return of the final checkpoint\'s greedy policy over '
      f'{eval_episodes} episodes per run, then mean ± std over seeds (no spread with one '
      'seed); beside it the stochastic policy\'s, the same way (SLAC\'s published curves are '
      'of the stochastic policy); the random policy: '
      'uniform actions, mean of its episodes. Published figures: CURL paper (Laskin et al. '
      '2020), Table 1, 100k environment steps. Configuration, cost and what the numbers '
      'say: [learning.md](learning.md#deepmind-control-at-100k-environment-steps-issue-14).',
      '']
  if missing or env_steps != 100_000:
    lines += [f'**Not the full table yet**: budget {env_steps:,} environment steps'
              f'{" (the papers use 100,000)" if env_steps != 100_000 else ""}; runs without a '
              f'final score: {", ".join(f"{t} seed {s}" for t, s in missing) or "none"}.', '']
  lines += ['| task | ' + ' | '.join(METHODS) + ' | ours | ours, stochastic | seeds | '
            'random policy |', '|---|' + '---:|' * (len(METHODS) + 4)]
  for task in tasks:
    finished = [scores[(task, s)] for s in seeds if (task, s) in scores]
    greedy = [s['score_mean'] for s in finished]
    stochastic = [s['stochastic_mean'] for s in finished if 'stochastic_mean' in s]
    published = PUBLISHED.get(task, {})
    random_mean = randoms.get(task)
    lines.append(f'| {task} | ' + ' | '.join(_pm(published.get(m)) for m in METHODS)
                 + f' | {_over_seeds(greedy)} | '
                 + (_over_seeds(stochastic) if len(stochastic) == len(greedy) else '–')
                 + f' | {len(greedy)} | '
                 + (f'{random_mean["mean"]:.0f}' if random_mean else '–') + ' |')
  lines += ['', '## Runs', '',
            '| task | seed | greedy score (mean ± std over episodes) | stochastic score | '
            'env steps | train steps | wall time |', '|---|---:|---:|---:|---:|---:|---:|']
  if not scores:
    lines.append('| (none finished yet) | | | | | | |')
  for (task, seed), s in sorted(scores.items()):
    stochastic = (f'{s["stochastic_mean"]:.1f} ± {s["stochastic_std"]:.1f}'
                  if 'stochastic_mean' in s else '–')
    lines.append(f'| {task} | {seed} | {s["score_mean"]:.1f} ± {s["score_std"]:.1f} | '
                 f'{stochastic} | {s["physics_steps"]:,} | {s["train_steps"]:,} | '
                 f'{s["wall_time_s"] / 60:.0f} min |')
  lines += ['', f'Run roots: `{runs_dir}/TASK/seed_N` (`final_score.json`, `run_summary.json`, '
            '`eval_returns.csv`, TensorBoard events).', '',
            f'![eval return over environment steps]({os.path.basename(out)}.png)', '']
  with open(out + '.md', 'w') as f:
    f.write('\n'.join(lines))
  _plot(out + '.png', tasks, seeds, scores, randoms, runs_dir)


def _plot(path, tasks, seeds, scores, randoms, runs_dir):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
  for ax, task in zip(axes[0], tasks):
    runs = {}
    repeat = 1
    for seed in seeds:
      root = run_root(runs_dir, task, seed)
      if (task, seed) in scores and os.path.exists(os.path.join(root, 'eval_returns.csv')):
        runs[f'seed {seed}'] = compare_curves.load(root)
        repeat = scores[(task, seed)]['action_repeat']
    compare_curves.draw(
        ax, runs, randoms.get(task, {}).get('mean'),
        x=(lambda r, k=repeat: r['env_steps'] * k / 1000, 'environment steps (thousands)'))
    ax.set_title(task)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def main(argv):
  del argv
  if FLAGS.env_steps < 1:
    raise app.UsageError(f'--env_steps={FLAGS.env_steps}: must be >= 1')
  for task in FLAGS.tasks:
    task_gin_files(task, [])  # unknown tasks fail before any run starts
  seeds = [int(s) for s in FLAGS.seeds]
  command = ' '.join(setting_values.shell_word(word) for word in [
      'python', '-m', 'bench.dmc_table', f'--tasks={",".join(FLAGS.tasks)}',
      f'--seeds={",".join(FLAGS.seeds)}', f'--env_steps={FLAGS.env_steps}',
      *[f'--gin_file={f}' for f in FLAGS.gin_file],
      *[f'--gin_param={p}' for p in FLAGS.gin_param],
      f'--runs_dir={FLAGS.runs_dir}',
      *([f'--out={FLAGS.out}'] if FLAGS.out != flags.FLAGS['out'].default else []),
      *([f'--eval_episodes={FLAGS.eval_episodes}'] if FLAGS.eval_episodes != 10 else []),
      *([f'--random_episodes={FLAGS.random_episodes}'] if FLAGS.random_episodes != 10
        else [])])
  scores, randoms = {}, {}
  for task in FLAGS.tasks:
    for seed in seeds:
      root = run_root(FLAGS.runs_dir, task, seed)
      if is_finished(root, FLAGS.env_steps):
        print(f'{task} seed {seed}: finished, skipped ({root})', flush=True)
        if not FLAGS.report_only and 'stochastic_mean' not in _read_json(
            os.path.join(root, FINAL_SCORE)):
          add_stochastic_score(root)
      elif FLAGS.report_only:
        continue
      else:
        if not training_done(root, FLAGS.env_steps):
          train(task, seed, root, FLAGS.env_steps, FLAGS.gin_file, FLAGS.gin_param)
        final_score(task, seed, root, FLAGS.env_steps, FLAGS.eval_episodes)
      scores[(task, seed)] = _read_json(os.path.join(root, FINAL_SCORE))
      print(json.dumps({'name': 'dmc_table_run', **scores[(task, seed)]}), flush=True)
    # Cheap (no model), so --report_only computes it too.
    randoms[task] = random_score(task, FLAGS.runs_dir, FLAGS.gin_file, FLAGS.gin_param,
                                 FLAGS.random_episodes)
  write_report(FLAGS.out, FLAGS.tasks, seeds, FLAGS.env_steps, scores, randoms,
               FLAGS.runs_dir, command, FLAGS.eval_episodes)
  print(json.dumps({'name': 'dmc_table', 'md': FLAGS.out + '.md', 'csv': FLAGS.out + '.csv',
                    'png': FLAGS.out + '.png', 'runs': len(scores)}), flush=True)


if __name__ == '__main__':
  app.run(main)

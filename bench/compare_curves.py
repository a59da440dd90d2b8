"""Overlays the eval-return curves of finished runs at equal wall time (or env steps).

  python -m bench.compare_curves --out=docs/sac_layouts \
      "feature reuse=runs/lc_reuse" "separate SAC batch=runs/lc_separate"
  python -m bench.compare_curves --x=agent_steps --at=12500,25000 --out=OUT "a=ROOT_A" "b=ROOT_B"
  python -m bench.compare_curves --x=train_steps --at=5000,9500 --out=OUT "a=ROOT_A" "b=ROOT_B"

Each argument is LABEL=RUN_ROOT; the run's `eval_returns.csv` (written by
train_eval) gives the points. Prints one JSON line with, per run, the eval
return at each comparison point (mean of the evaluations in the window before
it: 5 minutes, or a fifth of the point in agent steps, so one lucky episode
does not decide), the best and the final return, and the train and env steps
done; writes OUT.png and OUT.csv. `--x=train_steps` puts the score against the
world-model updates after pre-training (each with `sac_updates_per_train_step`
SAC updates), so a run resumed across processes (whose wall clock restarts)
still draws one line; the stochastic policy's evaluations are drawn dashed
where the run recorded them.
"""
import argparse
import csv
import json
import os

WINDOW_S = 300.0


def load(root):
  with open(os.path.join(root, 'eval_returns.csv')) as f:
    # Columns a run added later (the stochastic return) are empty in its older rows.
    return [{k: float(v) for k, v in row.items() if v not in ('', None)}
            for row in csv.DictReader(f)]


def return_near(records, point, key='wall_time_s', window=WINDOW_S):
  """Mean eval return over (point - window, point] of `key`; None before the first."""
  near = [r['eval_return'] for r in records if point - window < r[key] <= point]
  return round(sum(near) / len(near), 1) if near else None


def summarize(records, points, x='wall'):
  last = records[-1]
  processes = 1 + sum(b['wall_time_s'] < a['wall_time_s'] for a, b in zip(records, records[1:]))
  if x == 'wall':
    at = {'return_at_minute': {m: return_near(records, 60.0 * m) for m in points}}
  elif x == 'agent_steps':  # eval_returns.csv's env_steps column counts agent steps
    at = {'return_at_agent_steps': {s: return_near(records, s, 'env_steps', s / 5)
                                    for s in points}}
  else:
    at = {'return_at_train_steps': {s: return_near(records, s, 'train_step', s / 5)
                                    for s in points}}
  return {
      **at,
      'best_eval_return': round(max(r['eval_return'] for r in records), 1),
      'final_eval_return': round(last['eval_return'], 1),
      'wall_time_s': last['wall_time_s'],
      'train_steps': int(last['train_step']),
      'env_steps': int(last['env_steps']),
      # A resumed run's wall clock restarts with each process: no overall rate then.
      'processes': processes,
      'train_steps_per_minute': (round(60.0 * last['train_step'] / last['wall_time_s'], 1)
                                 if processes == 1 else None),
  }


WALL_MINUTES = (lambda r: r['wall_time_s'] / 60, 'wall time (minutes, 2-core CPU)')
AGENT_STEPS = (lambda r: r['env_steps'], 'agent steps (environment steps / action repeat)')
TRAIN_STEPS = (lambda r: r['train_step'],
               'train steps (world-model updates after pre-training)')
X_AXES = {'wall': WALL_MINUTES, 'agent_steps': AGENT_STEPS, 'train_steps': TRAIN_STEPS}


def draw(ax, runs, random_mean=None, x=WALL_MINUTES):
  """One line per run (LABEL -> records) on `ax`; x = (record -> value, axis label)."""
  x_of, x_label = x
  for label, records in runs.items():
    line, = ax.plot([x_of(r) for r in records], [r['eval_return'] for r in records],
                    marker='o', markersize=3, label=label)
    stochastic = [r for r in records if 'eval_return_stochastic' in r]
    if stochastic:
      ax.plot([x_of(r) for r in stochastic], [r['eval_return_stochastic'] for r in stochastic],
              linestyle='--', color=line.get_color(), alpha=0.6, label=f'{label} (stochastic)')
  if random_mean is not None:
    ax.axhline(random_mean, color='gray', linestyle='--', label='random policy')
  ax.set_xlabel(x_label)
  ax.set_ylabel('eval return (greedy policy; dashed: stochastic)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small')


def plot(runs, path, random_mean=None, x=WALL_MINUTES):
  """Eval return over wall minutes (or `x`), one line per run (LABEL -> records)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4))
  draw(ax, runs, random_mean, x)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _parser():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('runs', nargs='+', help='LABEL=RUN_ROOT')
  parser.add_argument('--out', required=True, help='Path prefix of the PNG and CSV.')
  parser.add_argument('--x', choices=tuple(X_AXES), default='wall',
                      help='Compare at equal wall time, agent steps or train steps.')
  parser.add_argument('--minutes', default='10,20,30,40', help='Comparison points (--x=wall).')
  parser.add_argument('--at', default='', help='Comparison points in agent steps '
                      '(--x=agent_steps) or train steps (--x=train_steps), e.g. 6250,12500.')
  return parser


def parse_args(argv=None):
  parser = _parser()
  args = parser.parse_args(argv)
  for spec in args.runs:
    if '=' not in spec:
      parser.error(f'"{spec}" is not LABEL=RUN_ROOT')
  return args


def main():
  args = parse_args()
  runs = {}
  for spec in args.runs:
    label, _, root = spec.partition('=')
    runs[label] = load(root)
    if not runs[label]:
      _parser().error(f'{root}/eval_returns.csv has no evaluations yet')
  points = [int(p) for p in (args.minutes if args.x == 'wall' else args.at).split(',') if p]
  plot(runs, args.out + '.png', x=X_AXES[args.x])
  with open(args.out + '.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['run', 'iteration', 'train_step', 'env_steps', 'wall_time_s', 'eval_return'])
    for label, records in runs.items():
      for r in records:
        writer.writerow([label, int(r['iteration']), int(r['train_step']),
                         int(r['env_steps']), r['wall_time_s'], round(r['eval_return'], 2)])
  print(json.dumps({'name': 'compare_curves', 'window_s': WINDOW_S,
                    'runs': {label: summarize(records, points, args.x)
                             for label, records in runs.items()},
                    'png': args.out + '.png', 'csv': args.out + '.csv'}))


if __name__ == '__main__':
  main()

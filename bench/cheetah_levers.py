"""Every published cheetah-run run of SLAC's recipe, grouped by the lever it tested.

  python -m bench.cheetah_levers --out=docs/cheetah_levers

Reads the final scores that `bench.dmc_table` wrote and that were committed to
docs/ (`slac_recipe_cheetah_s{SEED}_{TAG}_final_score.json`: 10 greedy and 10
stochastic episodes of the final checkpoint), prints one JSON line per lever
with its runs and their mean and spread, and draws OUT.png: each run as a dot
against the documented setting's band and SLAC's 319. The levers table in
docs/learning.md cites these figures; tests/test_cheetah_levers.py checks that
the two agree and that every published run belongs to exactly one lever.
Spreads are over runs with ddof = 0, as `bench.dmc_table` reports them; the
standard error is that spread over sqrt(runs).
"""
import argparse
import json
import math
import os

from bench import common

SLAC_SCORE = 319.0  # SLAC's cheetah run at 100k environment steps (Lee et al. 2020)
DOCUMENTED = 'documented setting: 10k pre-training'

# (label, what the runs added to the documented setting -- gin/dmc_cpu.gin
# with train_eval.model_pretrain_steps=10000 --, the final-score files' TAGs by
# seed), in the order of the levers table. A seed listed twice ran twice.
# Every run pinned WorldModel.image_precision='float32'.
LEVERS = (
    ('recipe: 500 pre-training', 'train_eval.model_pretrain_steps=500 (the gin file alone)',
     ((0, '100k'), (1, '100k'), (2, '100k'))),
    (DOCUMENTED, 'nothing',
     ((0, 'pt10k_100k'), (1, 'pt10k_100k'), (2, 'pt10k_100k'), (3, 'pt10k_100k'),
      (4, 'pt10k_100k'), (5, 'pt10k_100k'), (1, 'pt10k_rerun_100k'), (2, 'doc2_100k'),
      (3, 'doc2_100k'))),
    ('2x updates per env step, 500 pre-training',
     'train_eval.model_pretrain_steps=500 train_eval.train_steps_per_env_step=0.2',
     ((0, 'x2_100k'),)),
    ("SLAC's image std", 'WorldModel.image_std=0.316', ((1, 'pt10k_imagestd_100k'),)),
    ('20k pre-training', 'train_eval.model_pretrain_steps=20000',
     ((1, 'pt20k_100k'), (2, 'pt20k_100k'), (5, 'pt20k_100k'))),
    ('17-step windows', 'Experiment.sequence_length=17 LatentSacAgent.sac_burn_in=8 '
     'LatentSacAgent.acting_window=16',
     ((0, 'seq17_100k'), (1, 'seq17_100k'), (2, 'seq17_100k'), (3, 'seq17_100k'))),
    ('150k environment steps', '--env_steps=150000: two runs trained on from 100k (seed 2 '
     'with train_eval.model_pretrain_steps=20000)',
     ((1, 'pt10k_rerun_150k'), (2, 'pt20k_150k'))),
    ('3-step critic targets', 'LatentSacAgent.td_steps=3', ((1, 'td3_100k'), (2, 'td3_100k'))),
    ('SAC on 64 fresh windows', 'train_eval.sac_batch_size=64',
     ((1, 'sacb64_100k'), (2, 'sacb64_100k'))),
    ('pessimistic target, beta = 1', 'LatentSacAgent.target_pessimism=1.0',
     ((1, 'pess1_100k'), (2, 'pess1_100k'), (3, 'pess1_100k'))),
    ('pessimistic target, beta = 0.5', 'LatentSacAgent.target_pessimism=0.5',
     ((2, 'pess05_100k'), (3, 'pess05_100k'))),
    ('1 SAC update per model update', 'train_eval.sac_updates_per_train_step=1',
     ((2, 'sac1_100k'), (3, 'sac1_100k'))),
    ('6 SAC updates per model update', 'train_eval.sac_updates_per_train_step=6',
     ((2, 'sac6_100k'), (3, 'sac6_100k'))),
    ("critic loss weighed by TD error, a = 0.6", 'LatentSacAgent.critic_priority_exponent=0.6',
     ((2, 'prio_100k'), (3, 'prio_100k'))),
    ('conv depth 32', 'WorldModel.image_depth=32', ((2, 'd32_100k'),)),
)


def score_path(docs_dir, seed, tag):
  return os.path.join(docs_dir, f'slac_recipe_cheetah_s{seed}_{tag}_final_score.json')


def spread(values):
  """Mean, spread (ddof = 0, `common.mean_std`) and standard error of `values`."""
  mean, std = common.mean_std(values)
  return mean, std, std / math.sqrt(len(values))


def lever_scores(docs_dir):
  """One dict per lever: its runs' seeds, greedy and stochastic scores, and
  their mean / spread / standard error, rounded as the docs print them."""
  out = []
  for label, change, runs in LEVERS:
    scores = []
    for seed, tag in runs:
      path = score_path(docs_dir, seed, tag)
      if not os.path.exists(path):
        raise FileNotFoundError(f'{path}: lever {label!r} lists seed {seed} tag {tag!r}, but '
                                'no such final score was published; fix LEVERS in '
                                'bench/cheetah_levers.py or publish the run')
      with open(path) as f:
        scores.append(json.load(f))
    line = {'name': 'cheetah_lever', 'lever': label, 'change': change, 'runs': len(runs),
            'seeds': [seed for seed, _ in runs]}
    for kind, key in (('greedy', 'score_mean'), ('stochastic', 'stochastic_mean')):
      values = [s[key] for s in scores]
      mean, std, se = spread(values)
      line.update({kind: values, f'{kind}_mean': round(mean, 1), f'{kind}_std': round(std, 1),
                   f'{kind}_se': round(se, 1)})
    out.append(line)
  return out


def plot(lines, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 0.42 * len(lines) + 2.0))
  base = next(l for l in lines if l['lever'] == DOCUMENTED)
  low, high = base['greedy_mean'] - base['greedy_std'], base['greedy_mean'] + base['greedy_std']
  ax.axvspan(low, high, color='tab:blue', alpha=0.12,
             label=f'documented setting, greedy mean ± spread ({base["runs"]} runs)')
  ax.axvline(base['greedy_mean'], color='tab:blue', lw=1)
  ax.axvline(SLAC_SCORE, color='tab:red', ls='--', lw=1, label="SLAC's 319")
  for row, line in enumerate(lines):
    y = len(lines) - 1 - row
    ax.scatter(line['greedy'], [y] * line['runs'], color='black', s=18, zorder=3)
    ax.scatter(line['stochastic'], [y - 0.22] * line['runs'], facecolors='none',
               edgecolors='gray', s=18, zorder=3)
    ax.plot([line['greedy_mean']] * 2, [y - 0.3, y + 0.3], color='black', lw=2)
  ax.scatter([], [], color='black', s=18, label='greedy, one run (bar: mean)')
  ax.scatter([], [], facecolors='none', edgecolors='gray', s=18, label='stochastic, one run')
  ax.set_yticks(range(len(lines)))
  ax.set_yticklabels([f'{l["lever"]} ({l["runs"]})' for l in reversed(lines)], fontsize=8)
  ax.set_xlabel('cheetah run, final score at 100k environment steps (10 episodes)')
  ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.4, -0.09), ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('--docs_dir', default=os.path.join(os.path.dirname(__file__), '..', 'docs'),
                      help='where the final-score files are')
  parser.add_argument('--out', default=None, help='write OUT.png (default: print only)')
  return parser.parse_args(argv)


def main():
  args = parse_args()
  lines = lever_scores(args.docs_dir)
  for line in lines:
    print(json.dumps(line))
  if args.out:
    plot(lines, args.out + '.png')


if __name__ == '__main__':
  main()

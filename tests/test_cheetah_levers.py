"""The cheetah levers table in docs/learning.md against the published final scores.

bench/cheetah_levers.py groups every published cheetah run by the lever it
tested; these tests hold the table's means to what those files give, and make
a newly published run belong to exactly one lever.
"""
import collections
import glob
import json
import os
import re

import pytest

from bench import cheetah_levers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, 'docs')

# Lever -> a phrase of its row's first cell in the levers table.
TABLE_ROWS = {
    '2x updates per env step, 500 pre-training': 'train_eval.train_steps_per_env_step=0.2',
    "SLAC's image std": 'WorldModel.image_std=0.316',
    '20k pre-training': '20k pre-training instead of 10k',
    '17-step windows': '17-step training windows',
    '150k environment steps': '150k environment steps instead of 100k',
    '3-step critic targets': 'LatentSacAgent.td_steps=3',
    'SAC on 64 fresh windows': 'train_eval.sac_batch_size=64',
    'pessimistic target, beta = 1': 'LatentSacAgent.target_pessimism=1.0',
    'pessimistic target, beta = 0.5': 'LatentSacAgent.target_pessimism=0.5',
    '1 SAC update per model update': 'train_eval.sac_updates_per_train_step=1',
    '6 SAC updates per model update': 'train_eval.sac_updates_per_train_step=6',
    'critic loss weighed by TD error, a = 0.6': 'LatentSacAgent.critic_priority_exponent=0.6',
    'conv depth 32': 'WorldModel.image_depth=32',
}


def levers_table():
  """The levers table's rows, each a list of its cells."""
  with open(os.path.join(DOCS, 'learning.md')) as f:
    text = f.read()
  start = text.index('| change (gin setting) |')
  rows = []
  for line in text[start:].splitlines()[2:]:
    if not line.startswith('|'):
      break
    rows.append([cell.strip() for cell in line.strip('|').split('|')])
  return rows


def after_arrow(cell):
  """The figure after the arrow of a 'without → with' cell, bold or not."""
  return float(re.search(r'→\s*\**([\d.]+)', cell).group(1))


def test_every_published_cheetah_run_belongs_to_exactly_one_lever():
  published = set()
  for path in glob.glob(os.path.join(DOCS, 'slac_recipe_cheetah_s*_final_score.json')):
    with open(path) as f:
      if json.load(f)['env_step_budget'] < 100000:
        continue  # the 50k runs of the recipe's first day
    seed, tag = re.fullmatch(r'slac_recipe_cheetah_s(\d+)_(.+)_final_score\.json',
                             os.path.basename(path)).groups()
    published.add((int(seed), tag))
  listed = collections.Counter(run for _, _, runs in cheetah_levers.LEVERS for run in runs)
  assert [run for run, n in listed.items() if n > 1] == []
  assert set(listed) == published


def test_the_documented_setting_scores_what_the_docs_say():
  lines = {l['lever']: l for l in cheetah_levers.lever_scores(DOCS)}
  setting = lines[cheetah_levers.DOCUMENTED]
  assert setting['runs'] == 9 and sorted(setting['seeds']) == [0, 1, 1, 2, 2, 3, 3, 4, 5]
  greedy = (setting['greedy_mean'], setting['greedy_std'], setting['greedy_se'])
  assert greedy == (271.1, 45.0, 15.0)
  assert (setting['stochastic_mean'], setting['stochastic_std']) == (252.4, 48.3)
  with open(os.path.join(DOCS, 'learning.md')) as f:
    text = f.read()
  assert '**271.1 ± 45.0** (SE ±15.0)' in text and '**252.4 ± 48.3** (SE ±16.1)' in text


@pytest.mark.parametrize('lever', sorted(TABLE_ROWS))
def test_each_levers_table_row_cites_the_mean_of_its_runs(lever):
  line = {l['lever']: l for l in cheetah_levers.lever_scores(DOCS)}[lever]
  rows = [r for r in levers_table() if TABLE_ROWS[lever] in r[0]]
  assert len(rows) == 1, (lever, len(rows))
  row = rows[0]
  seeds_cell = [int(s) for s in re.findall(r'\b\d+\b', row[1])]  # '1 (second run, 10k)' -> 1
  assert seeds_cell == sorted(set(line['seeds'])), row[1]
  # The table prints whole points; a mean of per-seed scores rounded first may sit at .5.
  for kind, cell in (('greedy', row[3]), ('stochastic', row[4])):
    assert after_arrow(cell) == pytest.approx(line[f'{kind}_mean'], abs=0.6), (kind, cell)


def test_a_lever_naming_an_unpublished_run_says_how_to_fix_it(monkeypatch):
  monkeypatch.setattr(cheetah_levers, 'LEVERS', (('typo', '', ((2, 'prio_10k'),)),))
  with pytest.raises(FileNotFoundError, match=r's2_prio_10k_final_score\.json.*fix LEVERS'):
    cheetah_levers.lever_scores(DOCS)


def test_the_spread_is_over_runs_with_ddof_0():
  assert cheetah_levers.spread([100.0, 200.0]) == (150.0, 50.0, pytest.approx(50.0 / 2 ** 0.5))

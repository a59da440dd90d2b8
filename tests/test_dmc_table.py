"""bench.dmc_table end to end with a tiny budget: table, CSV, curves, resume."""
import csv
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow  # bench.dmc_table trains cartpole in other processes


def run_table(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'bench.dmc_table', '--tasks=cartpole-swingup', '--seeds=3',
       '--env_steps=320', '--gin_file=tiny.gin',
       "--gin_param=train_eval.initial_collect_episodes=1",
       f'--runs_dir={tmp_path / "runs"}', f'--out={tmp_path / "table"}',
       '--eval_episodes=2', '--random_episodes=2'],
      capture_output=True, text=True, timeout=600, cwd=REPO,
      env=dict(os.environ, PYTHONUNBUFFERED='1'))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return result


def test_dmc_table_writes_table_csv_curves_and_skips_finished_runs(tmp_path):
  first = run_table(tmp_path)
  assert 'train_eval.env_step_budget=320' in first.stderr  # it trained
  root = tmp_path / 'runs' / 'cartpole-swingup' / 'seed_3'
  score = json.loads((root / 'final_score.json').read_text())
  # tiny.gin: 20 agent steps x repeat 8 = 160 environment steps per episode;
  # one warm-up episode, then one iteration reaches 320 and earns 2 train steps.
  assert score['physics_steps'] == 320 and score['agent_steps'] == 40
  assert score['train_steps'] == 2 and len(score['returns']) == 2
  assert len(score['stochastic_returns']) == 2  # the stochastic policy's, beside the greedy
  assert score['stochastic_mean'] == pytest.approx(sum(score['stochastic_returns']) / 2, abs=0.01)
  assert json.loads((root / 'run_summary.json').read_text())['stopped_by'] == 'env_step_budget'

  with open(tmp_path / 'table.csv') as f:
    rows = list(csv.DictReader(f))
  assert [(r['task'], r['seed'], r['physics_steps'], r['train_steps']) for r in rows] == [
      ('cartpole-swingup', '3', '320', '2')]
  assert float(rows[0]['score_mean']) == score['score_mean']
  assert float(rows[0]['stochastic_mean']) == score['stochastic_mean']
  assert rows[0]['random_mean'] not in ('', 'None')
  table = (tmp_path / 'table.md').read_text()
  # One seed: its score without a spread over seeds, greedy then stochastic.
  assert (f'| cartpole-swingup | 297 ± 39 | 326 ± 27 | – | 582 ± 146 | '
          f'{score["score_mean"]:.0f} | {score["stochastic_mean"]:.0f} | 1 |') in table
  assert 'python -m bench.dmc_table --tasks=cartpole-swingup --seeds=3 --env_steps=320' in table
  assert f'--out={tmp_path / "table"}' in table  # the command writes this table again
  assert 'Not the full table yet' in table
  assert (tmp_path / 'table.png').stat().st_size > 1000

  mtime = (root / 'final_score.json').stat().st_mtime
  second = run_table(tmp_path)
  assert 'cartpole-swingup seed 3: finished, skipped' in second.stdout
  assert 'train_eval.py' not in second.stderr  # no training process started
  assert (root / 'final_score.json').stat().st_mtime == mtime
  assert (tmp_path / 'table.csv').read_text().count('cartpole-swingup') == 1

  # A score written before the stochastic one was recorded gets it added; the
  # greedy returns stay and nothing trains.
  old = {k: v for k, v in score.items() if not k.startswith('stochastic')}
  (root / 'final_score.json').write_text(json.dumps(old))
  third = run_table(tmp_path)
  assert 'train_eval.py' not in third.stderr
  again = json.loads((root / 'final_score.json').read_text())
  assert again['returns'] == score['returns'] and len(again['stochastic_returns']) == 2
  assert f'| {again["stochastic_mean"]:.0f} | 1 |' in (tmp_path / 'table.md').read_text()

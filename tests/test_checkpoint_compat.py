"""Runs written before the rebuild (issue 15) still resume and export.

tests/data/run_b54ce4d is a tiny cartpole run (tiny.gin, 2 iterations)
written by main at commit b54ce4d, before the composition root existed: its
run checkpoint, world-model checkpoint, replay, specs and operative config.
Its checkpoints are the object graph users' runs have on disk.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.checkpoint import graph_view  # TF's own object-path naming

from planet_tfa.programs import export

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_RUN = os.path.join(REPO, 'tests', 'data', 'run_b54ce4d')


def _copy_old_run(tmp_path):
  root = os.path.join(str(tmp_path), 'old_run')
  shutil.copytree(OLD_RUN, root)
  return root


def test_old_run_resumes_with_its_counters_and_replay(tmp_path):
  root = _copy_old_run(tmp_path)
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root}',
       '--gin_file=dmc_cartpole_swingup.gin', '--gin_file=tiny.gin',
       '--gin_param=train_eval.num_iterations=3',
       '--gin_param=train_eval.policy_export_interval=0'],
      capture_output=True, text=True, timeout=300, cwd=REPO,
      env=dict(os.environ, PYTHONUNBUFFERED='1'))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert 'iteration 2, train step 4' in result.stdout, result.stdout[-2000:]
  # The replay restored from the old Reverb checkpoint: no second warm-up.
  assert 'Replay holds 52 windows: warm-up skipped.' in result.stdout, result.stdout[-2000:]
  with open(os.path.join(root, 'run_summary.json')) as f:
    summary = json.load(f)
  assert summary['iterations'] == 3
  assert summary['train_steps'] > 4
  assert summary['episodes'] == 5  # 4 before the rebuild + 1 in this iteration


def test_old_run_exports_the_checkpointed_weights(tmp_path):
  root = _copy_old_run(tmp_path)
  agent, _ = export.load_agent_from_root(root)
  assert int(agent.train_step_counter.numpy()) == 4
  reader = tf.train.load_checkpoint(os.path.join(root, 'train', 'checkpoints', 'ckpt-4'))
  # Every variable of the rebuilt agent holds the old checkpoint's value.
  restored = tf.train.Checkpoint(agent=agent)
  keys = [k for k in reader.get_variable_to_shape_map() if k.startswith('agent/')
          and k.endswith('.ATTRIBUTES/VARIABLE_VALUE') and 'OPTIMIZER_SLOT' not in k]
  assert len(keys) > 20
  by_path = {}
  for path, value in _variables_by_path(restored):
    by_path[path] = value
  checked = 0
  for key in keys:
    path = key[:-len('/.ATTRIBUTES/VARIABLE_VALUE')]
    if path in by_path:
      np.testing.assert_array_equal(by_path[path], reader.get_tensor(key))
      checked += 1
  assert checked > 20
  paths, step = export.export_from_root(root, os.path.join(str(tmp_path), 'policies'))
  assert step == 4 and set(paths) == {'greedy_policy', 'collect_policy'}
  greedy = tf.saved_model.load(paths['greedy_policy'])
  assert int(greedy.get_train_step().numpy()) == 4


def _variables_by_path(checkpoint):
  """(object-graph path, value) of every variable reachable from `checkpoint`."""
  view = graph_view.ObjectGraphView(checkpoint)
  objects, paths = view.breadth_first_traversal()
  del objects
  for obj, path in paths.items():
    if isinstance(obj, tf.Variable):
      yield '/'.join(ref.name for ref in path), obj.numpy()

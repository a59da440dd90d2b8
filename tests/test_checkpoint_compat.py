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
import pytest
import tensorflow as tf

from planet_tfa import checkpoints
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
  keys = sorted(k for k in reader.get_variable_to_shape_map() if k.startswith('agent/'))
  assert len(keys) == 180  # weights, counters and optimizer state (slots, steps, settings)
  # The optimizers create their state at their first update and restore it
  # then (what a resumed run does): create it now, as that update would.
  sac = agent.sac
  for optimizer, variables in (
      (agent._model_optimizer, agent.world_model_variables()),  # pylint: disable=protected-access
      (sac._actor_optimizer, agent.actor_network.trainable_variables),
      (sac._critic_optimizer, sac._critic_network_1.trainable_variables
       + sac._critic_network_2.trainable_variables),
      (sac._alpha_optimizer, [agent.log_alpha])):
    optimizer._create_all_weights(variables)  # pylint: disable=protected-access
  # Every variable of the old agent is in the rebuilt one, at the path the old
  # checkpoint names it by, holding the checkpoint's value.
  root_object = tf.train.Checkpoint(agent=agent)
  for key in keys:
    np.testing.assert_array_equal(_value_at(root_object, key), reader.get_tensor(key),
                                  err_msg=key)
  paths, step = export.export_from_root(root, os.path.join(str(tmp_path), 'policies'))
  assert step == 4 and set(paths) == {'greedy_policy', 'collect_policy'}
  greedy = tf.saved_model.load(paths['greedy_policy'])
  assert int(greedy.get_train_step().numpy()) == 4


def test_a_config_that_builds_another_agent_fails_the_export_naming_what_it_lacks(tmp_path):
  # One reward layer fewer: every layer the model still has fits the
  # checkpoint's shapes, so only the check of what was left over notices.
  root = _copy_old_run(tmp_path)
  config = os.path.join(root, 'operative_config.gin')
  with open(config) as f:
    text = f.read()
  assert text.count('reward_decoder.units = (200, 200)') == 1
  with open(config, 'w') as f:
    f.write(text.replace('reward_decoder.units = (200, 200)', 'reward_decoder.units = (200,)'))
  with pytest.raises(checkpoints.CheckpointError) as raised:
    export.load_agent_from_root(root)
  message = str(raised.value)
  layer = 'agent/_world_model/reward_decoder/_layers/1'
  for name in ('kernel', 'bias'):
    assert f'\n  {layer}/{name}\n' in message + '\n', message
    for slot in ('m', 'v'):  # its Adam slots go with it
      assert f'\n  {layer}/{name}/.OPTIMIZER_SLOT/agent/_model_optimizer/{slot}\n' in (
          message + '\n'), message
  assert 'holds 6 variables of agent' in message, message


def _object_at(root, path):
  """The object at `path` (checkpoint names joined by '/') below `root`."""
  obj = root
  for name in path.split('/'):
    children = tf.train.TrackableView.children(obj)
    assert name in children, f'{path}: {type(obj).__name__} has no {name!r}: {sorted(children)}'
    obj = children[name]
  return obj


def _value_at(root, key):
  """The value of the variable a checkpoint key names, found by walking `root`."""
  path = key[:-len('/.ATTRIBUTES/VARIABLE_VALUE')]
  assert key.endswith('/.ATTRIBUTES/VARIABLE_VALUE'), key
  if '/.OPTIMIZER_SLOT/' in path:
    variable_path, slot_path = path.split('/.OPTIMIZER_SLOT/')
    optimizer_path, slot = slot_path.rsplit('/', 1)
    slot_variable = _object_at(root, optimizer_path).get_slot(
        _object_at(root, variable_path), slot)
    return slot_variable.numpy()
  return _object_at(root, path).numpy()

"""SLAC's recipe (issue 21): the acting window, pre-training, extra SAC updates, initial alpha.

The acting window must build the belief exactly as a training window does
(zero state at the window's first step, resets at FIRST), in process and in
the exported SavedModel; pre-training and extra SAC updates must happen the
configured number of times, also across a resume.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from planet_tfa import errors
from planet_tfa import saved_policies
from planet_tfa.agents import world_model as world_model_lib
from planet_tfa.networks import rssm_network
import test_latent_sac_agent as agent_tests
import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = 4  # acting window


def _episode(length=11, seed=0):
  """One row of time steps: FIRST at 0, then MID; random frames."""
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 255, [length, 1, 64, 64, 3]).astype(np.uint8)
  step_types = [ts.StepType.FIRST] + [ts.StepType.MID] * (length - 1)
  return [ts.TimeStep(step_type=tf.constant([st], tf.int32), reward=tf.zeros([1]),
                      discount=tf.ones([1]),
                      observation={'pixels': tf.constant(pixels[t]),
                                   'mask': tf.zeros([1, 64, 64, 1], tf.uint8)})
          for t, st in enumerate(step_types)]


def _act(policy, steps):
  """Steps `policy` through `steps`; returns the actions and the beliefs after each."""
  state = policy.get_initial_state(1)
  actions, beliefs = [], []
  for time_step in steps:
    out = policy.action(time_step, state)
    state = out.state
    actions.append(out.action.numpy()[0])
    beliefs.append(np.concatenate([state['deter'].numpy()[0], state['stoch'].numpy()[0]]))
  return np.array(actions, np.float32), np.array(beliefs)


def _training_window_belief(model, steps, actions, end):
  """The belief at step `end` as WorldModel.observe builds it for the replay
  window of the K steps ending there (or the episode's start, if later)."""
  start = max(0, end - K + 1)
  window = range(start, end + 1)
  observation = {'pixels': tf.stack([steps[t].observation['pixels'][0] for t in window])[None]}
  step_type = tf.constant([[int(steps[t].step_type[0]) for t in window]])
  action = tf.constant(actions[start:end + 1][None])
  post, _ = model.observe(observation, action, step_type, sample=False)
  return np.concatenate([post['deter'][0, -1].numpy(), post['stoch'][0, -1].numpy()])


def test_acting_window_belief_is_the_training_windows_belief():
  agent = agent_tests.make_agent(acting_window=K)
  steps = _episode()
  actions, beliefs = _act(agent.policy, steps)  # greedy: posterior means, deterministic
  for t in range(len(steps)):
    expected = _training_window_belief(agent.world_model, steps, actions, t)
    np.testing.assert_allclose(beliefs[t], expected, atol=1e-5, err_msg=f'step {t}')
  # The whole-episode filter is a different belief once the episode is longer than K.
  whole = agent_tests.make_agent(acting_window=None)
  _, whole_beliefs = _act(whole.make_policy('sac', True), steps)
  np.testing.assert_allclose(whole_beliefs[:K], beliefs[:K], atol=1e-5)
  assert not np.allclose(whole_beliefs[K + 2:], beliefs[K + 2:], atol=1e-3)


def test_acting_window_restarts_at_first_mid_window():
  agent = agent_tests.make_agent(acting_window=K)
  steps = _episode(length=8)
  steps[5] = steps[5]._replace(step_type=tf.constant([ts.StepType.FIRST], tf.int32))
  _, beliefs = _act(agent.policy, steps)
  fresh_actions, fresh = _act(agent.policy, steps[5:])
  np.testing.assert_allclose(beliefs[5:], fresh, atol=1e-5)


def test_exported_policy_keeps_the_acting_window(tmp_path):
  agent = agent_tests.make_agent(acting_window=K)
  paths = saved_policies.export_policies(agent, str(tmp_path), agent.train_step_counter)
  loaded = tf.saved_model.load(paths['greedy_policy'])
  steps = _episode()
  sensor_only = lambda t: t._replace(observation={'pixels': t.observation['pixels']})  # pylint: disable=unnecessary-lambda-assignment
  state, loaded_state = agent.policy.get_initial_state(1), loaded.get_initial_state(1)
  assert loaded_state['embed_history'].shape[1] == K - 1
  for time_step in steps:
    out = agent.policy.action(time_step, state)
    loaded_out = loaded.action(sensor_only(time_step), loaded_state)
    np.testing.assert_allclose(loaded_out.action.numpy(), out.action.numpy(), atol=1e-5)
    state, loaded_state = out.state, loaded_out.state


def test_initial_alpha_sets_the_starting_temperature():
  agent = agent_tests.make_agent(initial_alpha=0.1)
  assert math.isclose(float(tf.exp(agent.log_alpha)), 0.1, rel_tol=1e-6)


@pytest.mark.parametrize('setting, value', [
    ('initial_alpha', 0.0), ('initial_alpha', -1), ('initial_alpha', True),
    ('acting_window', 1), ('acting_window', 2.5), ('acting_window', True)])
def test_bad_recipe_settings_are_named(setting, value):
  with pytest.raises(errors.ConfigError, match=f'LatentSacAgent.{setting}'):
    agent_tests.make_agent(**{setting: value})


def test_extra_sac_update_trains_sac_not_the_model_and_keeps_the_train_step():
  agent = agent_tests.make_agent()
  windows = agent_tests.fixed_windows()
  model_before = agent_tests.snapshot(agent.world_model_variables())
  sac_before = agent_tests.snapshot(agent.sac_variables())
  agent.train_sac_only(windows)
  assert int(agent.train_step_counter.numpy()) == 0
  assert not any(agent_tests.changed(model_before, agent.world_model_variables()))
  assert all(agent_tests.changed(sac_before, agent.sac_variables()))


def test_pretraining_trains_the_model_not_sac():
  agent = agent_tests.make_agent()
  windows = agent_tests.fixed_windows()
  model_before = agent_tests.snapshot(agent.world_model_variables())
  sac_before = agent_tests.snapshot(agent.sac_variables())
  agent.pretrain_world_model(windows)
  assert int(agent.train_step_counter.numpy()) == 0
  assert any(agent_tests.changed(model_before, agent.world_model_variables()))
  assert not any(agent_tests.changed(sac_before, agent.sac_variables()))


def _run(root, iterations):
  args = [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root}',
          *tiny_model.DMC_FLAGS,
          f'--gin_param=train_eval.num_iterations={iterations}',
          '--gin_param=train_eval.model_pretrain_steps=3',
          '--gin_param=train_eval.sac_updates_per_train_step=3',
          '--gin_param=train_eval.initial_collect_env_steps=200',
          '--gin_param=LatentSacAgent.acting_window=4',
          '--gin_param=train_eval.eval_interval=0']
  result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=REPO)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  with open(os.path.join(root, 'run_summary.json')) as f:
    return json.load(f), result.stdout


@pytest.mark.slow
def test_pretraining_and_extra_sac_updates_count_right_across_a_resume(tmp_path):
  root = tmp_path / 'run'
  first, stdout = _run(root, 2)
  # Warm-up by environment steps: whole 160-step (20 agent steps x 8) episodes up to >= 200.
  assert 'Warm-up done: 320 environment steps' in stdout
  assert first['model_pretrain_steps'] == 3
  assert first['model_updates'] == 3 + first['train_steps']
  assert first['sac_updates'] == 3 * first['train_steps'] > 0
  second, stdout = _run(root, 4)
  assert 'Pre-training' not in stdout  # done once, not again on resume
  assert second['model_pretrain_steps'] == 3
  assert second['train_steps'] > first['train_steps']
  assert second['model_updates'] == 3 + second['train_steps']
  assert second['sac_updates'] == 3 * second['train_steps']

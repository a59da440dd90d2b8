"""The batch-1 TFLite export of the greedy policy acts as its SavedModel does."""
import os

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa import lite_policy
from planet_tfa import saved_policies
from planet_tfa.networks import rssm as rssm_lib
import tiny_model

# Two sensors and a vector, as the driving model's inputs are; a decode-only mask.
OBS_SPEC = {'camera': tf.TensorSpec([64, 64, 3], tf.uint8, 'camera'),
            'state': tf.TensorSpec([4], tf.float32, 'state'),
            'mask': tf.TensorSpec([64, 64, 1], tf.uint8, 'mask')}
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, 'action')
# An episode, a reset in the middle, another episode: the state must restart.
STEP_TYPES = [0, 1, 1, 1, 2, 0, 1, 1, 1, 1, 1, 1]


def _agent(**agent_kwargs):
  tf.keras.utils.set_random_seed(0)
  model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, encoder_keys=['camera', 'state'],
                                 decoder_keys=['camera', 'mask'])
  return tiny_model.agent(OBS_SPEC, ACTION_SPEC, model, **agent_kwargs)


def _sensor_steps(seed=0):
  """Unbatched numpy time steps of the exported policy's inputs (no mask)."""
  rng = np.random.default_rng(seed)
  return [ts.TimeStep(step_type=np.int32(step_type), reward=np.float32(rng.normal()),
                      discount=np.float32(1.0),
                      observation={'camera': rng.integers(0, 255, [64, 64, 3], np.uint8),
                                   'state': rng.normal(size=[4]).astype(np.float32)})
          for step_type in STEP_TYPES]


def _saved_model_actions(policy_dir, steps):
  loaded = tf.saved_model.load(policy_dir)
  state, actions = loaded.get_initial_state(1), []
  for step in steps:
    out = loaded.action(tf.nest.map_structure(lambda x: tf.constant(x)[None], step), state)
    actions.append(out.action.numpy()[0])
    state = out.state
  return np.stack(actions), state


@pytest.mark.parametrize('acting_window', [None, 4])
def test_tflite_policy_acts_as_the_saved_model(tmp_path, acting_window):
  agent = _agent(acting_window=acting_window)
  paths = saved_policies.export_policies(agent, str(tmp_path), agent.train_step_counter)
  policy_dir = paths['greedy_policy']
  assert os.path.exists(os.path.join(policy_dir, lite_policy.TFLITE_NAME))
  assert not os.path.exists(os.path.join(paths['collect_policy'], lite_policy.TFLITE_NAME))

  steps = _sensor_steps()
  expected_actions, expected_state = _saved_model_actions(policy_dir, steps)
  for kernels in lite_policy.KERNELS:
    _assert_acts_as(lite_policy.TFLitePolicy.load(policy_dir, kernels=kernels), steps,
                    expected_actions, expected_state)
  assert lite_policy.TFLitePolicy.load(policy_dir).kernels in lite_policy.KERNELS


def _assert_acts_as(policy, steps, expected_actions, expected_state):
  assert policy.action_spec == tensor_spec.to_array_spec(ACTION_SPEC)
  state, actions = policy.get_initial_state(1), []
  for step in steps:
    out = policy.action(step, state)
    assert out.action.shape == (2,)  # unbatched in, unbatched out
    actions.append(out.action)
    state = out.state
  # XNNPACK's kernels sum in another order than TensorFlow's: float32 rounding.
  np.testing.assert_allclose(np.stack(actions), expected_actions, atol=1e-4)
  for key, value in expected_state.items():
    np.testing.assert_allclose(state[key], value.numpy(), atol=1e-4, err_msg=key)
  # The episode after the reset acts as a fresh policy on the same steps does.
  fresh_state, fresh_actions = policy.get_initial_state(1), []
  for step in steps[5:]:
    out = policy.action(step, fresh_state)
    fresh_actions.append(out.action)
    fresh_state = out.state
  np.testing.assert_allclose(np.stack(fresh_actions), np.stack(actions)[5:], atol=1e-5)
  # Batched time steps give batched actions.
  batched = tf.nest.map_structure(lambda x: np.asarray(x)[None], steps[0])
  assert policy.action(batched, policy.get_initial_state(1)).action.shape == (1, 2)


def test_tflite_policy_refuses_batches_and_names_a_missing_model(tmp_path):
  agent = _agent()
  paths = saved_policies.export_policies(agent, str(tmp_path), agent.train_step_counter)
  policy = lite_policy.TFLitePolicy.load(paths['greedy_policy'])
  with pytest.raises(ValueError, match='batch 1'):
    policy.get_initial_state(4)
  with pytest.raises(ValueError, match="kernels='gpu'"):
    lite_policy.TFLitePolicy.load(paths['greedy_policy'], kernels='gpu')
  os.remove(os.path.join(paths['greedy_policy'], lite_policy.TFLITE_NAME))
  with pytest.raises(FileNotFoundError, match='programs.export'):
    lite_policy.TFLitePolicy.load(paths['greedy_policy'])
  with pytest.raises(FileNotFoundError, match='not an exported policy'):
    lite_policy.TFLitePolicy.load(str(tmp_path))


def test_a_bf16_model_gets_a_tflite_policy_that_computes_its_images_in_fp32(tmp_path):
  """TFLite has no bf16: a mixed_bfloat16 model's TFLite policy is an fp32 trace of
  the same variables, so it acts as the same model built in float32 does, and the
  model itself keeps computing in bf16 after the export."""
  def agent_in(precision):
    tf.keras.utils.set_random_seed(0)
    model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, encoder_keys=['camera', 'state'],
                                   decoder_keys=['camera'], image_precision=precision)
    return tiny_model.agent(OBS_SPEC, ACTION_SPEC, model)

  bf16_agent, fp32_agent = agent_in('mixed_bfloat16'), agent_in('float32')
  bf16_paths = saved_policies.export_policies(bf16_agent, str(tmp_path / 'bf16'),
                                              bf16_agent.train_step_counter)
  fp32_paths = saved_policies.export_policies(fp32_agent, str(tmp_path / 'fp32'),
                                              fp32_agent.train_step_counter)
  steps = _sensor_steps()
  fp32_actions, fp32_state = _saved_model_actions(fp32_paths['greedy_policy'], steps)
  bf16_actions, _ = _saved_model_actions(bf16_paths['greedy_policy'], steps)
  lite = lite_policy.TFLitePolicy.load(bf16_paths['greedy_policy'])
  state, lite_actions = lite.get_initial_state(1), []
  for step in steps:
    out = lite.action(step, state)
    lite_actions.append(out.action)
    state = out.state
  # The bf16 SavedModel is off the fp32 model by bf16 rounding; the TFLite
  # policy by fp32 rounding only, far less.
  bf16_error = np.abs(bf16_actions - fp32_actions).max()
  lite_error = np.abs(np.stack(lite_actions) - fp32_actions).max()
  assert bf16_error > 1e-5 and lite_error < 0.1 * bf16_error, (bf16_error, lite_error)
  _assert_acts_as(lite, steps, fp32_actions, fp32_state)
  bf16_layers = [layer for layer in bf16_agent.world_model.submodules
                 if isinstance(layer, tf.keras.layers.Conv2D)]
  assert bf16_layers and all(layer.dtype_policy.compute_dtype == 'bfloat16'
                             for layer in bf16_layers)
  assert not [name for name in os.listdir(tmp_path / 'bf16') if name.startswith('.')]


def test_unrolled_filter_equals_the_scanned_one():
  rssm = tiny_model.rssm()
  rng = np.random.default_rng(1)
  embed = tf.constant(rng.normal(size=[3, 5, 16]), tf.float32)
  actions = tf.constant(rng.normal(size=[3, 5, 2]), tf.float32)
  firsts = tf.constant([[1, 0, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 1, 0, 0]]) > 0
  seed = tf.constant([4, 2], tf.int32)
  scanned, scanned_prior = rssm.observe(embed, actions, firsts, seed=seed)
  unrolled, unrolled_prior = rssm.observe(embed, actions, firsts, seed=seed, unroll=True)
  for key in scanned:
    np.testing.assert_allclose(unrolled[key].numpy(), scanned[key].numpy(), atol=1e-6,
                               err_msg=key)
    np.testing.assert_allclose(unrolled_prior[key].numpy(), scanned_prior[key].numpy(),
                               atol=1e-6, err_msg=key)
  with pytest.raises(ValueError, match='static sequence length'):
    rssm_lib._unrolled_scan(lambda c, x: c, (), {}, None)  # pylint: disable=protected-access

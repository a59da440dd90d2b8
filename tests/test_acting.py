"""`acting.StepFunction` acts as the policy's own `action` does, in-process and from a SavedModel."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common as tfa_common

from planet_tfa import acting
from planet_tfa import saved_policies
import tiny_model

OBS_SPEC = {'camera': tf.TensorSpec([64, 64, 3], tf.uint8, 'camera'),
            'state': tf.TensorSpec([4], tf.float32, 'state')}
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, 'action')
# An episode, a reset in the middle, another episode: the state must restart.
STEP_TYPES = [0, 1, 1, 1, 2, 0, 1, 1, 1, 1]


def _agent(acting_window):
  tf.keras.utils.set_random_seed(0)
  model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, encoder_keys=['camera', 'state'],
                                 decoder_keys=['camera'])
  return tiny_model.agent(OBS_SPEC, ACTION_SPEC, model, acting_window=acting_window)


def _batched_steps(batch_size=1, seed=0):
  rng = np.random.default_rng(seed)
  return [ts.TimeStep(
      step_type=tf.fill([batch_size], tf.constant(step_type, tf.int32)),
      reward=tf.constant(rng.normal(size=[batch_size]), tf.float32),
      discount=tf.ones([batch_size]),
      observation={'camera': tf.constant(rng.integers(0, 255, [batch_size, 64, 64, 3],
                                                      np.uint8)),
                   'state': tf.constant(rng.normal(size=[batch_size, 4]), tf.float32)})
          for step_type in STEP_TYPES]


def _act(action_fn, state, steps):
  actions = []
  for step in steps:
    out = action_fn(step, state)
    actions.append(out.action.numpy())
    state = out.state
  return np.stack(actions), state


def _assert_same(got, expected):
  (got_actions, got_state), (expected_actions, expected_state) = got, expected
  np.testing.assert_array_equal(got_actions, expected_actions)
  for key, value in expected_state.items():
    np.testing.assert_array_equal(got_state[key].numpy(), value.numpy(), err_msg=key)


@pytest.mark.parametrize('acting_window', [None, 4])
@pytest.mark.parametrize('batch_size', [1, 3])
def test_step_function_acts_as_the_policy_does(tmp_path, acting_window, batch_size):
  agent = _agent(acting_window)
  steps = _batched_steps(batch_size)
  policy = agent.policy
  step = acting.StepFunction(policy, batch_size=batch_size)
  expected = _act(tfa_common.function(policy.action), policy.get_initial_state(batch_size), steps)
  assert np.abs(expected[0]).max() > 0  # the actions carry something to compare
  _assert_same(_act(step, step.get_initial_state(), steps), expected)

  paths = saved_policies.export_policies(agent, str(tmp_path), agent.train_step_counter,
                                         tflite=False)
  loaded = tf.saved_model.load(paths['greedy_policy'])
  saved_step = acting.StepFunction(loaded, batch_size=batch_size)
  saved_expected = _act(loaded.action, loaded.get_initial_state(batch_size), steps)
  _assert_same(_act(saved_step, saved_step.get_initial_state(), steps), saved_expected)
  np.testing.assert_allclose(saved_expected[0], expected[0], atol=1e-5)


def test_step_function_names_the_specs_it_expects(tmp_path):
  agent = _agent(None)
  step = acting.StepFunction(agent.policy)
  state = step.get_initial_state()
  with pytest.raises(ValueError, match='batch 1'):
    step(_batched_steps(batch_size=2)[0], state)
  wrong_image = _batched_steps()[0]._replace(
      observation={'camera': tf.zeros([1, 32, 32, 3], tf.uint8), 'state': tf.zeros([1, 4])})
  with pytest.raises(ValueError, match='do not match'):
    step(wrong_image, state)
  with pytest.raises(TypeError, match='tf.saved_model.load'):
    acting.StepFunction(object())


def test_intra_op_threads_refused_after_tensorflow_started():
  tf.constant(1.0) + 1.0  # TensorFlow has run an op in this process
  other = tf.config.threading.get_intra_op_parallelism_threads() + 3
  with pytest.raises(RuntimeError, match=f'TF_NUM_INTRAOP_THREADS={other}'):
    acting.use_intra_op_threads(other)

"""LatentSacAgent training and the latent policy, with tiny models."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from planet_tfa.agents import latent_sac_agent
import tiny_model

B, T = 6, 9
OBS_SPEC = {'pixels': tf.TensorSpec([64, 64, 3], tf.uint8, 'pixels'),
            'mask': tf.TensorSpec([64, 64, 1], tf.uint8, 'mask')}
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, 'action')


def make_agent(seed=0, image_precision='float32', **kwargs):
  tf.keras.utils.set_random_seed(seed)  # TF ops and Keras initialisers
  model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, encoder_keys=['pixels'],
                                 decoder_keys=['pixels', 'mask'], image_precision=image_precision)
  return tiny_model.agent(OBS_SPEC, ACTION_SPEC, model, model_learning_rate=3e-3,
                          critic_learning_rate=3e-3, **kwargs)


def fixed_windows(seed=0):
  """Smooth, learnable windows: frames brighten with time, reward = action sum."""
  rng = np.random.default_rng(seed)
  step_type = np.ones([B, T], np.int32)
  step_type[::2, 0] = ts.StepType.FIRST
  step_type[1, 5] = ts.StepType.LAST  # a padded window
  step_type[1, 6:] = ts.StepType.LAST
  level = (np.arange(T)[None, :, None, None, None] * 20 + rng.integers(0, 40, [B, 1, 1, 1, 1]))
  pixels = np.broadcast_to(level, [B, T, 64, 64, 3]).astype(np.uint8)
  action = rng.uniform(-1, 1, [B, T, 2]).astype(np.float32)
  return trajectory.Trajectory(
      step_type=tf.constant(step_type),
      observation={'pixels': tf.constant(pixels),
                   'mask': tf.constant(pixels[..., :1] // 128 * 255)},
      action=tf.constant(action), policy_info=(),
      next_step_type=tf.constant(np.ones([B, T], np.int32)),
      reward=tf.constant(action.sum(-1)), discount=tf.ones([B, T]))


def snapshot(variables):
  return [v.numpy().copy() for v in variables]


def changed(before, variables):
  return [not np.allclose(b, v.numpy()) for b, v in zip(before, variables)]


def test_one_train_step_changes_model_critic_actor_and_alpha():
  agent = make_agent()
  experience = fixed_windows()
  groups = {
      'world model': agent.world_model_variables(),
      'critic': agent.sac._critic_network_1.trainable_variables,
      'actor': agent.sac._actor_network.trainable_variables,
      'alpha': [agent.log_alpha],
  }
  before = {name: snapshot(v) for name, v in groups.items()}
  agent.train(experience)
  for name, variables in groups.items():
    assert any(changed(before[name], variables)), f'{name} variables did not change'
  assert int(agent.train_step_counter.numpy()) == 1


@pytest.mark.parametrize('image_precision', ['float32', 'mixed_bfloat16'])
@pytest.mark.slow  # many train steps: ~25 s with float32
def test_repeated_steps_lower_model_and_critic_losses(image_precision):
  # gamma 0 makes the critic's target the reward itself, a fixed regression.
  agent = make_agent(gamma=0.0, image_precision=image_precision)
  experience = fixed_windows()
  train = common.function(agent.train)
  # The unit-variance Gaussian's normaliser is a constant floor of the loss;
  # what training can lower is the part above it (squared errors and KL).
  floor = 0.5 * np.log(2 * np.pi) * (64 * 64 * 3 + 64 * 64 * 1 + 10.0)
  model_losses, critic_losses = [], []
  for _ in range(150):
    info = train(experience)
    model_losses.append(float(info.extra['model_loss']) - floor)
    critic_losses.append(float(info.extra['critic_loss']))
  assert np.mean(model_losses[-10:]) < 0.5 * np.mean(model_losses[:3])
  assert np.mean(critic_losses[-10:]) < 0.5 * np.mean(critic_losses[:10])
  assert int(agent.train_step_counter.numpy()) == 150  # SAC counts once per step


def test_sac_transitions_pair_consecutive_steps_and_skip_padding_and_burn_in():
  agent = make_agent(sac_burn_in=3)
  experience = fixed_windows()
  features = tf.reshape(tf.range(B * T, dtype=tf.float32), [B, T, 1])
  transition, weights = agent.sac_transitions(experience, features)
  obs = transition.time_step.observation.numpy().reshape(B, T - 1)
  next_obs = transition.next_time_step.observation.numpy().reshape(B, T - 1)
  np.testing.assert_array_equal(next_obs, obs + 1)  # feat_{t+1} of the same window
  np.testing.assert_array_equal(
      transition.next_time_step.reward.numpy().reshape(B, T - 1),
      experience.reward.numpy()[:, :-1])
  used = weights.numpy().reshape(B, T - 1) > 0
  # Row 0 starts at FIRST: every pair is used. Row 3 starts mid-episode:
  # burn-in skips pairs 0..2. Row 1 (mid-episode too) ends at t=5: pairs into
  # the padding after it are skipped as well.
  assert used[0].all()
  np.testing.assert_array_equal(used[3], [False] * 3 + [True] * 5)
  np.testing.assert_array_equal(used[1], [False] * 3 + [True] * 2 + [False] * 3)
  assert weights.numpy()[used.reshape(-1)].mean() == pytest.approx(
      weights.numpy().mean() * used.size / used.sum())


def test_world_model_only_mode_leaves_sac_untouched_and_counts_steps():
  agent = make_agent(train_sac=False)
  actor_before = snapshot(agent.sac._actor_network.trainable_variables)
  model_before = snapshot(agent.world_model_variables())
  agent.train(fixed_windows())
  assert not any(changed(actor_before, agent.sac._actor_network.trainable_variables))
  assert any(changed(model_before, agent.world_model_variables()))
  assert int(agent.train_step_counter.numpy()) == 1


def test_frozen_world_model_is_not_updated():
  agent = make_agent(train_world_model=False)
  before = snapshot(agent.world_model_variables())
  agent.train(fixed_windows())
  assert not any(changed(before, agent.world_model_variables()))


def test_nan_loss_raises_and_changes_nothing():
  agent = make_agent()
  experience = fixed_windows()
  experience = experience._replace(reward=experience.reward * np.nan)
  before = snapshot(agent.world_model_variables())
  with pytest.raises(tf.errors.InvalidArgumentError, match='NaN'):
    agent.train(experience)
  assert not any(changed(before, agent.world_model_variables()))


def _policy_inputs(step_types, seed=0):
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 255, [len(step_types), 2, 64, 64, 3]).astype(np.uint8)
  return [ts.TimeStep(step_type=tf.constant(st, tf.int32), reward=tf.zeros([2]),
                      discount=tf.ones([2]),
                      observation={'pixels': tf.constant(pixels[i]),
                                   'mask': tf.zeros([2, 64, 64, 1], tf.uint8)})
          for i, st in enumerate(step_types)]


def test_policy_state_evolves_and_resets_at_first():
  agent = make_agent()
  policy = agent.collect_policy
  steps = _policy_inputs([[0, 0], [1, 1], [1, 0], [1, 1]])
  state = policy.get_initial_state(2)
  for key, value in state.items():
    np.testing.assert_array_equal(value.numpy(), 0, err_msg=key)
  states = []
  for time_step in steps:
    out = policy.action(time_step, state)
    assert out.action.shape == (2, 2)
    np.testing.assert_array_equal(out.state['prev_action'].numpy(), out.action.numpy())
    state = out.state
    states.append(state)
  deter = lambda i: states[i]['deter'].numpy()
  assert not np.allclose(deter(0), deter(1))  # the belief evolves
  # Row 1 restarts at step 2: its belief is what a fresh filter gives there.
  greedy = agent.policy
  fresh = greedy.action(steps[2], greedy.get_initial_state(2))
  carried = greedy.action(steps[2], states[1])
  np.testing.assert_allclose(carried.state['deter'].numpy()[1],
                             fresh.state['deter'].numpy()[1], atol=1e-6)
  assert not np.allclose(carried.state['deter'].numpy()[0], fresh.state['deter'].numpy()[0])


def test_greedy_policy_is_deterministic_and_collect_policy_samples():
  agent = make_agent()
  time_step = _policy_inputs([[0, 0]])[0]
  state = agent.policy.get_initial_state(2)
  first = agent.policy.action(time_step, state)
  second = agent.policy.action(time_step, state)
  np.testing.assert_array_equal(first.action.numpy(), second.action.numpy())
  np.testing.assert_array_equal(first.state['stoch'].numpy(), second.state['stoch'].numpy())
  a = agent.collect_policy.action(time_step, state).action.numpy()
  b = agent.collect_policy.action(time_step, state).action.numpy()
  assert not np.allclose(a, b)
  assert np.all(np.abs(a) <= 1.0)


def test_export_policy_needs_only_encoder_keys():
  agent = make_agent()
  policy = agent.export_policy()
  assert list(policy.time_step_spec.observation) == ['pixels']
  time_step = _policy_inputs([[0, 0]])[0]
  sensor_only = time_step._replace(observation={'pixels': time_step.observation['pixels']})
  out = policy.action(sensor_only, policy.get_initial_state(2))
  expected = agent.policy.action(time_step, agent.policy.get_initial_state(2))
  np.testing.assert_allclose(out.action.numpy(), expected.action.numpy(), atol=1e-6)
  # The policy's variables include the filter (for syncing remote collectors).
  names = {v.name for v in policy.variables()}
  assert any('gru' in n for n in names) and any('encoder' in n for n in names)
  assert not any('decoder' in n for n in names)


def test_separate_sac_batch_trains_sac_on_it_and_leaves_the_model_update_alone():
  model_batch = fixed_windows(seed=0)
  sac_a, sac_b = fixed_windows(seed=1), fixed_windows(seed=2)
  sac_b = sac_b._replace(reward=sac_b.reward + 5.0)
  first, second = make_agent(seed=3), make_agent(seed=3)
  tf.random.set_seed(11)  # the same posterior samples in both model updates
  first.train(model_batch, sac_experience=sac_a)
  tf.random.set_seed(11)
  second.train(model_batch, sac_experience=sac_b)
  for a, b in zip(first.world_model_variables(), second.world_model_variables()):
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
  critic = lambda agent: agent.sac._critic_network_1.trainable_variables
  assert any(not np.allclose(a.numpy(), b.numpy()) for a, b in zip(critic(first), critic(second)))
  assert int(first.train_step_counter.numpy()) == 1


@pytest.mark.parametrize('separate_sac_batch', [False, True])
def test_train_function_is_not_retraced_by_new_batches(separate_sac_batch):
  # Speed relies on one trace: a retrace per call would rebuild the graph
  # every train step. run.py wraps agent.train the same way.
  agent = make_agent()
  train_fn = common.function(agent.train)

  def step(seed):
    kwargs = {'sac_experience': fixed_windows(seed + 100)} if separate_sac_batch else {}
    return train_fn(fixed_windows(seed), **kwargs)

  step(0)
  traces = train_fn.experimental_get_tracing_count()
  for seed in range(1, 4):
    step(seed)
  assert train_fn.experimental_get_tracing_count() == traces
  assert int(agent.train_step_counter.numpy()) == 4


def test_bfloat16_policy_exports_and_acts_like_the_in_memory_policy(tmp_path):
  from planet_tfa import saved_policies  # pylint: disable=g-import-not-at-top
  agent = make_agent(image_precision='mixed_bfloat16')
  paths = saved_policies.export_policies(agent, str(tmp_path), agent.train_step_counter)
  loaded = tf.saved_model.load(paths['greedy_policy'])
  steps = _policy_inputs([[0, 0], [1, 1], [1, 1]])
  sensor_only = lambda t: t._replace(observation={'pixels': t.observation['pixels']})
  state, loaded_state = agent.policy.get_initial_state(2), loaded.get_initial_state(2)
  for time_step in steps:
    out = agent.policy.action(time_step, state)
    loaded_out = loaded.action(sensor_only(time_step), loaded_state)
    # bf16 rounds differently in the saved graph (fused ops): ~0.1%.
    np.testing.assert_allclose(loaded_out.action.numpy(), out.action.numpy(), rtol=1e-2)
    state, loaded_state = out.state, loaded_out.state
  assert loaded_out.action.dtype == tf.float32


def _same_inputs_twice(policy, time_step):
  state = policy.get_initial_state(2)
  first, second = policy.action(time_step, state), policy.action(time_step, state)
  return first.state['stoch'].numpy(), second.state['stoch'].numpy()


@pytest.mark.parametrize('greedy_filter', ['mean', 'sample'])
def test_greedy_filter_switch_sets_the_eval_and_exported_filter(greedy_filter, tmp_path):
  from planet_tfa import saved_policies  # pylint: disable=g-import-not-at-top
  agent = make_agent(greedy_filter=greedy_filter)
  time_step = _policy_inputs([[0, 0]])[0]
  sensor_only = time_step._replace(observation={'pixels': time_step.observation['pixels']})
  paths = saved_policies.export_policies(agent, str(tmp_path), agent.train_step_counter)
  loaded = tf.saved_model.load(paths['greedy_policy'])
  for policy, inputs in ((agent.policy, time_step), (agent.export_policy(), sensor_only),
                         (loaded, sensor_only)):
    first, second = _same_inputs_twice(policy, inputs)
    if greedy_filter == 'sample':  # a posterior sample each call
      assert not np.allclose(first, second)
    else:  # the posterior mean: a function of the inputs
      np.testing.assert_array_equal(first, second)
  # The policy acts on the features of the filter it reports.
  assert agent.policy.greedy


def test_greedy_filter_is_a_gin_setting_and_bad_values_name_it():
  import gin  # pylint: disable=g-import-not-at-top
  gin.bind_parameter('LatentSacAgent.greedy_filter', 'sample')
  try:
    agent = latent_sac_agent.LatentSacAgent(
        ts.time_step_spec(OBS_SPEC), ACTION_SPEC, world_model=make_agent().world_model)
  finally:
    gin.clear_config()
  first, second = _same_inputs_twice(agent.policy, _policy_inputs([[0, 0]])[0])
  assert not np.allclose(first, second)
  with pytest.raises(ValueError, match="LatentSacAgent.greedy_filter='mode'"):
    make_agent(greedy_filter='mode')

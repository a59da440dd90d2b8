"""LatentSacAgent training and the latent policy, with tiny models."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from planet_tfa import checkpoints
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


@pytest.mark.parametrize('sac_settings', [{'td_steps': 1}, {'td_steps': 3},
                                          {'target_pessimism': 1.0},
                                          {'critic_priority_exponent': 0.6}])
def test_one_train_step_changes_model_critic_actor_and_alpha(sac_settings):
  agent = make_agent(**sac_settings)
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
  # Rows 0, 2, 4 start at FIRST: every pair is used. Rows 3, 5 start
  # mid-episode: burn-in skips pairs 0..2. Row 1 (mid-episode too) ends at
  # t=5: the pairs into the padding after it are skipped as well.
  used = np.ones([B, T - 1], bool)
  used[1::2, :3] = False
  used[1, 5:] = False
  assert used.sum() == 36
  # Normalised to mean 1 over the flat batch, so that SAC's losses (weighted
  # sums over the batch / its size) are means over the used pairs: zero on
  # padding and burn-in, 48 / 36 on every used pair.
  assert weights.shape == (B * (T - 1),)
  assert weights.numpy().mean() == pytest.approx(1.0, rel=1e-6)
  w = weights.numpy().reshape(B, T - 1)
  np.testing.assert_array_equal(w[~used], 0.0)
  np.testing.assert_allclose(w[used], B * (T - 1) / 36, rtol=1e-6)


def n_step_reference(reward, discount, valid, gamma, n):
  """Per pair t: (n-step return, discount field, index of the bootstrap step),
  looping the definition: sum rewards while the arrivals stay in the episode."""
  rows, pairs = reward.shape
  out = np.zeros([rows, pairs]), np.zeros([rows, pairs]), np.zeros([rows, pairs], int)
  for b in range(rows):
    for t in range(pairs):
      ret, field, boot, coef = reward[b, t], discount[b, t], t + 1, gamma * discount[b, t]
      for k in range(1, n):
        if t + k >= pairs or not valid[b, t + k]:
          break
        ret += coef * reward[b, t + k]
        field, boot = coef * discount[b, t + k], t + k + 1
        coef *= gamma * discount[b, t + k]
      out[0][b, t], out[1][b, t], out[2][b, t] = ret, field, boot
  return out


@pytest.mark.parametrize('td_steps', [1, 3, 8])
def test_n_step_targets_sum_discounted_rewards_up_to_the_episode_and_window_end(td_steps):
  gamma = 0.9
  agent = make_agent(gamma=gamma, td_steps=td_steps)
  windows = fixed_windows()
  step_type, discount = windows.step_type.numpy(), windows.discount.numpy().copy()
  step_type[3, 5:] = ts.StepType.LAST  # row 3 ends at a terminal: step 5, discount 0
  discount[3, 4] = 0.0
  discount[4, 2] = 0.5  # an arrival worth half (the product must carry it)
  experience = windows._replace(step_type=tf.constant(step_type), discount=tf.constant(discount))
  features = tf.reshape(tf.range(B * T, dtype=tf.float32), [B, T, 1])
  transition, _ = agent.sac_transitions(experience, features)
  target = transition.next_time_step
  mask = np.cumsum(step_type == ts.StepType.LAST, axis=1) - (step_type == ts.StepType.LAST) == 0
  ret, field, boot = n_step_reference(windows.reward.numpy()[:, :-1], discount[:, :-1],
                                      mask[:, 1:], gamma, td_steps)
  np.testing.assert_allclose(target.reward.numpy().reshape(B, T - 1), ret, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(target.discount.numpy().reshape(B, T - 1), field, rtol=1e-5)
  np.testing.assert_array_equal(target.observation.numpy().reshape(B, T - 1),
                                np.arange(B)[:, None] * T + boot)
  if td_steps == 3:  # spelled out for one pair: row 4 from t=1, through the half arrival
    r = windows.reward.numpy()[4]
    assert ret[4, 1] == pytest.approx(r[1] + gamma * r[2] + gamma ** 2 * 0.5 * r[3], rel=1e-5)
    assert field[4, 1] == pytest.approx(gamma ** 2 * 0.5) and boot[4, 1] == 4
    assert boot[3, 3] == 5 and field[3, 3] == 0.0  # the terminal ends it: no bootstrap
    assert boot[1, 3] == 5 and boot[0, 6] == 8     # the episode's and the window's end


def test_td_steps_past_the_window_pairs_or_below_one_is_refused():
  with pytest.raises(ValueError, match='td_steps=9 > the 8 pairs'):
    make_agent(td_steps=9).sac_transitions(fixed_windows(), tf.zeros([B, T, 4]))
  with pytest.raises(Exception, match='td_steps=0'):
    make_agent(td_steps=0)


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
  # Each policy acts on the features of the filter state it reports.
  steps = _policy_inputs([[0, 0], [1, 1], [1, 1]], seed=3)
  sensor_steps = [t._replace(observation={'pixels': t.observation['pixels']}) for t in steps]
  for policy, inputs in ((agent.policy, steps), (agent.export_policy(), sensor_steps),
                         (loaded, sensor_steps)):
    _assert_acts_on_its_reported_features(agent, policy, inputs)


def _assert_acts_on_its_reported_features(agent, policy, steps):
  """Each action is the actor's mode at deter||stoch of the state returned with it."""
  state = policy.get_initial_state(2)
  previous = None
  for time_step in steps:
    out = policy.action(time_step, state)
    features = tf.concat([out.state['deter'], out.state['stoch']], -1)
    mode = agent.actor_network(features, step_type=time_step.step_type,
                               network_state=())[0].mode().numpy()
    np.testing.assert_allclose(out.action.numpy(), mode, atol=1e-5)
    if previous is not None:  # the check would notice acting on the previous features
      assert not np.allclose(mode, previous, atol=1e-4)
    previous, state = mode, out.state


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


def test_critic_target_bootstraps_with_gamma_the_discount_and_the_reward_scale():
  """SAC's critic loss on a window's pairs, rebuilt by hand:
  y = s r + gamma d (min(Q1', Q2')(f', a') - alpha log pi(a' | f')), a' ~ pi(f'),
  loss = 0.5 * mean over the used pairs of (y - Q1(f, a))^2 + (y - Q2(f, a))^2
  (SacAgent's critic_loss_weight 0.5), with a terminal (d = 0 into LAST), a
  time-limit end (d = 1 into LAST) and a mid-episode window (burn-in 1)."""
  gamma, scale = 0.9, 2.5
  agent = make_agent(gamma=gamma, reward_scale_factor=scale, initial_alpha=0.5, sac_burn_in=1)
  first, mid, last = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST
  step_type = np.array([[first, mid, mid, last, last],   # terminates at t=3, then padding
                        [first, mid, mid, last, last],   # ends at the time limit at t=3
                        [mid, mid, mid, mid, mid]], np.int32)
  discount = np.ones(step_type.shape, np.float32)
  discount[0, 2] = 0.0  # the transition into the terminal LAST step
  rng = np.random.default_rng(4)
  rows, steps = step_type.shape
  size = agent.filter_network.feature_spec.shape[-1]
  features = rng.normal(size=[rows, steps, size]).astype(np.float32)
  action = rng.uniform(-1, 1, [rows, steps, 2]).astype(np.float32)
  reward = rng.normal(size=[rows, steps]).astype(np.float32)
  experience = trajectory.Trajectory(
      step_type=tf.constant(step_type), observation=(), action=tf.constant(action),
      policy_info=(), next_step_type=tf.constant(step_type),
      reward=tf.constant(reward), discount=tf.constant(discount))
  used = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [0, 1, 1, 1]], bool).reshape(-1)

  flat = lambda x: x.reshape([rows * (steps - 1)] + list(x.shape[2:]))
  feat, next_feat = flat(features[:, :-1]), flat(features[:, 1:])
  act, rew, disc = flat(action[:, :-1]), flat(reward[:, :-1]), flat(discount[:, :-1])

  def q(critic, observation, a):
    return critic((tf.constant(observation), a), step_type=(), training=False)[0].numpy()

  # The next action as SAC draws it: one sample of the actor at f' (seeded).
  tf.random.set_seed(21)
  policy = agent.actor_network(tf.constant(next_feat), step_type=(), network_state=(),
                               training=False)[0]
  next_action = policy.sample()
  log_pi = common.log_probability(policy, next_action, ACTION_SPEC).numpy()
  sac = agent.sac
  target_q = np.minimum(q(sac._target_critic_network_1, next_feat, next_action),
                        q(sac._target_critic_network_2, next_feat, next_action))
  alpha = float(tf.exp(agent.log_alpha))
  assert alpha == pytest.approx(0.5)
  y = scale * rew + gamma * disc * (target_q - alpha * log_pi)
  errors = (np.square(y - q(sac._critic_network_1, feat, act))
            + np.square(y - q(sac._critic_network_2, feat, act)))
  expected = 0.5 * errors[used].mean()
  # The bootstrapped part matters here: without it the loss would differ.
  bootstrap_free = 0.5 * (np.square(scale * rew - q(sac._critic_network_1, feat, act))
                          + np.square(scale * rew - q(sac._critic_network_2, feat, act)))
  assert abs(bootstrap_free[used].mean() - expected) > 0.01 * expected

  tf.random.set_seed(21)
  _, extra = agent._sac_update(experience, tf.constant(features))  # pylint: disable=protected-access
  assert float(extra['critic_loss']) == pytest.approx(expected, rel=1e-5)


def _agent_state(agent, prefix):
  """Everything a train step reads and writes: every variable a checkpoint of
  the agent (written to `prefix`) holds, by key; the four optimizers' step
  counts and slots; the target critics and log alpha."""
  state = {}
  reader = tf.train.load_checkpoint(tf.train.Checkpoint(agent=agent).write(prefix))
  for key in reader.get_variable_to_shape_map():
    if key != '_CHECKPOINTABLE_OBJECT_GRAPH':
      state[key] = reader.get_tensor(key)
  sac = agent.sac
  trained = {
      'model': (agent._model_optimizer, agent.world_model_variables()),
      'actor': (sac._actor_optimizer, agent.actor_network.trainable_variables),
      'critic': (sac._critic_optimizer, sac._critic_network_1.trainable_variables
                 + sac._critic_network_2.trainable_variables),
      'alpha': (sac._alpha_optimizer, [agent.log_alpha])}
  for name, (optimizer, variables) in trained.items():
    state[f'{name} optimizer iterations'] = optimizer.iterations.numpy()
    slots = optimizer.get_slot_names()
    assert sorted(slots) == ['m', 'v'], slots
    for i, variable in enumerate(variables):
      for slot in slots:
        state[f'{name} optimizer {slot} of variable {i}'] = (
            optimizer.get_slot(variable, slot).numpy())
  for i, network in enumerate((sac._target_critic_network_1, sac._target_critic_network_2)):
    for variable in network.variables:
      state[f'target critic {i + 1} {variable.name}'] = variable.numpy()
  state['log_alpha'] = agent.log_alpha.numpy()
  state['train_step'] = agent.train_step_counter.numpy()
  return state


def test_a_resumed_agent_continues_like_the_uninterrupted_one(tmp_path):
  """A run checkpoint (RunCheckpoints(agent=...), as learner.py writes it) holds
  every piece of training state: an agent built from another seed, restored
  from it, takes the next train step exactly as the agent that wrote it."""
  batches = [fixed_windows(seed) for seed in range(3)]
  uninterrupted = make_agent(seed=0)
  for i in range(2):
    tf.random.set_seed(100 + i)
    uninterrupted.train(batches[i])
  directory = str(tmp_path / 'checkpoints')
  checkpoints.RunCheckpoints(directory, agent=uninterrupted).save(2)
  # Another seed: whatever the checkpoint lacks keeps another initial value.
  resumed = make_agent(seed=1)
  assert checkpoints.RunCheckpoints(directory, agent=resumed).restore()
  for agent in (uninterrupted, resumed):
    # The learner reseeds a resumed run; the same seed here, so the step's
    # random draws are the same in both.
    tf.random.set_seed(102)
    agent.train(batches[2])
  expected = _agent_state(uninterrupted, str(tmp_path / 'uninterrupted'))
  actual = _agent_state(resumed, str(tmp_path / 'resumed'))
  assert sorted(actual) == sorted(expected)
  assert any('OPTIMIZER_SLOT' in key for key in expected)
  assert int(actual['train_step']) == 3
  different = [key for key, value in expected.items()
               if not np.allclose(actual[key], value, rtol=1e-5, atol=1e-7)]
  assert not different, f'{len(different)} of {len(expected)} differ: {different}'


def test_partial_restore_takes_every_variable_of_the_agent_or_names_the_rest(tmp_path):
  """What export does: the agent alone out of a run checkpoint that holds more."""
  trained = make_agent(seed=0)
  trained.train(fixed_windows())
  directory = str(tmp_path / 'checkpoints')
  iteration = tf.Variable(1, dtype=tf.int64)
  checkpoints.RunCheckpoints(directory, agent=trained, iteration=iteration).save(1)
  rebuilt = make_agent(seed=1)
  path = checkpoints.RunCheckpoints(directory, agent=rebuilt).restore(partial=True)
  assert checkpoints.unrestored_variables(path, agent=rebuilt) == []
  assert len(trained.variables) == len(rebuilt.variables)
  for a, b in zip(trained.variables, rebuilt.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
  # An agent built without the 'mask' decoder: what it cannot take is named.
  model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, encoder_keys=['pixels'],
                                 decoder_keys=['pixels'])
  other = tiny_model.agent(OBS_SPEC, ACTION_SPEC, model)
  with pytest.raises(checkpoints.CheckpointError) as raised:
    checkpoints.RunCheckpoints(directory, agent=other).restore(partial=True)
  dropped = checkpoints.unrestored_variables(path, agent=other)
  assert all('/decoders/mask/' in key for key in dropped), dropped
  values = [k for k in dropped if 'OPTIMIZER_SLOT' not in k]
  assert len(values) == 10 and len(dropped) == 30  # 5 layers' kernels and biases, 2 slots each
  for key in values:
    assert key.replace('/.ATTRIBUTES/VARIABLE_VALUE', '') in str(raised.value)

"""The world model's loss arithmetic, padding, learnability and open-loop predictions.

KL, masks and action shifts are checked against hand computation; the
learnability test trains a small model on real dm_control cartpole frames,
so a loss that is wired wrongly (e.g. gradients not reaching the encoder or
targets misaligned) fails to fall.
"""
import os

os.environ.setdefault('MUJOCO_GL', 'egl')  # Before dm_control is imported.

import time

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from planet_tfa import errors
from planet_tfa.agents import world_model as wm_lib
from planet_tfa.networks import rssm as rssm_lib
import tiny_model

F, M, L = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST


def _gaussian_kl(mq, sq, mp, sp):
  """Closed-form KL(N(mq, sq) || N(mp, sp)) for diagonal Gaussians, summed over dims."""
  return np.sum(np.log(sp / sq) + (sq**2 + (mq - mp)**2) / (2 * sp**2) - 0.5, -1)


def _experience(observation, action, step_type, reward):
  step_type = tf.constant(step_type, tf.int32)
  return trajectory.Trajectory(
      step_type=step_type, observation=observation, action=tf.constant(action, tf.float32),
      policy_info=(), next_step_type=step_type, reward=tf.constant(reward, tf.float32),
      discount=tf.ones_like(step_type, tf.float32))


# --- KL and free nats ---------------------------------------------------------


def test_kl_loss_matches_closed_form_with_free_nats():
  rng = np.random.default_rng(0)
  shape = [2, 3, 4]
  mq, mp = rng.normal(size=shape), rng.normal(size=shape)
  mq[0] *= 0.1  # Row 0 below the free nats, row 1 above.
  mp[0] *= 0.1
  mq[1] *= 3.0
  sq, sp = rng.uniform(0.5, 1.5, shape), rng.uniform(0.5, 1.5, shape)
  expected = _gaussian_kl(mq, sq, mp, sp)
  free_nats = 1.0
  assert (expected < free_nats).any() and (expected > free_nats).any()
  post = {'mean': tf.constant(mq, tf.float32), 'std': tf.constant(sq, tf.float32)}
  prior = {'mean': tf.constant(mp, tf.float32), 'std': tf.constant(sp, tf.float32)}
  loss, kl = wm_lib.kl_loss(post, prior, free_nats)
  assert loss.shape == (2, 3) and kl.shape == (2, 3)
  np.testing.assert_allclose(kl.numpy(), expected, rtol=1e-4)
  np.testing.assert_allclose(loss.numpy(), np.maximum(expected, free_nats), rtol=1e-4)
  # KL is KL(post || prior), not the reverse.
  assert not np.allclose(_gaussian_kl(mp, sp, mq, sq), expected, rtol=1e-2)


def test_kl_balance_keeps_value_and_splits_gradients():
  """alpha=0.8: the prior moves with weight 0.8, the posterior with 0.2."""
  rng = np.random.default_rng(1)
  shape = [2, 3, 4]
  mq = tf.Variable(rng.normal(size=shape) * 3.0, dtype=tf.float32)
  mp = tf.Variable(rng.normal(size=shape), dtype=tf.float32)
  sq = tf.constant(rng.uniform(0.5, 1.5, shape), tf.float32)
  sp = tf.constant(rng.uniform(0.5, 1.5, shape), tf.float32)
  free_nats = 0.5

  def grads(balance):
    with tf.GradientTape() as tape:
      loss, kl = wm_lib.kl_loss({'mean': mq, 'std': sq}, {'mean': mp, 'std': sp},
                                free_nats, balance)
      total = tf.reduce_sum(loss)
    return loss, kl, tape.gradient(total, [mq, mp])

  loss, kl, (g_post, g_prior) = grads(None)
  assert (kl.numpy() > free_nats).all()  # Every step carries gradient.
  loss_b, kl_b, (g_post_b, g_prior_b) = grads(0.8)
  np.testing.assert_allclose(loss_b.numpy(), loss.numpy(), rtol=1e-5)
  np.testing.assert_allclose(kl_b.numpy(), kl.numpy(), rtol=1e-5)
  np.testing.assert_allclose(g_prior_b.numpy(), 0.8 * g_prior.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(g_post_b.numpy(), 0.2 * g_post.numpy(), rtol=1e-4, atol=1e-6)


# --- masks and action shifts ------------------------------------------------


def test_valid_mask_stops_after_last():
  step_type = tf.constant([[F, M, L, L, L], [F, M, M, M, M], [M, L, F, M, L]], tf.int32)
  np.testing.assert_array_equal(wm_lib.valid_mask(step_type).numpy(),
                                [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])


def test_masked_mean():
  values = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  mask = tf.constant([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  assert wm_lib.masked_mean(values, mask).numpy() == pytest.approx(7.0 / 3.0)
  # An all-padding batch gives 0, not NaN.
  assert wm_lib.masked_mean(values, tf.zeros_like(mask)).numpy() == 0.0


def test_previous_actions_shift_and_zero_at_first():
  action = tf.constant([[[1.0], [2.0], [3.0], [4.0]], [[5.0], [6.0], [7.0], [8.0]]])
  step_type = tf.constant([[F, M, M, M], [M, L, F, M]], tf.int32)
  np.testing.assert_array_equal(wm_lib.previous_actions(action, step_type).numpy()[..., 0],
                                [[0, 1, 2, 3], [0, 5, 0, 7]])


# --- a small multi-modal model for the loss tests ---------------------------

ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, name='action')
OBS_SPEC = {
    'pixels': tensor_spec.BoundedTensorSpec([64, 64, 3], tf.uint8, 0, 255, name='pixels'),
    'ego': tf.TensorSpec([5], tf.float32, name='ego'),
    'bev': tensor_spec.BoundedTensorSpec([64, 64, 1], tf.uint8, 0, 255, name='bev'),
}


def _tiny_model(**kwargs):
  # tiny.gin's RSSM; image depth 8 rather than its 4, the depth these loss tests were written at.
  return tiny_model.world_model(
      OBS_SPEC, ACTION_SPEC, encoder_keys=['ego', 'pixels'],
      decoder_keys=['pixels', 'ego', 'bev'], image_depth=8, **kwargs)


def _random_observation(rng, outer):
  return {
      'pixels': rng.integers(0, 256, outer + [64, 64, 3]).astype(np.uint8),
      'ego': rng.normal(size=outer + [5]).astype(np.float32),
      'bev': rng.integers(0, 256, outer + [64, 64, 1]).astype(np.uint8),
  }


def test_padding_after_last_does_not_change_the_loss():
  """Garbage written after LAST (observations, actions, rewards) is masked out."""
  tf.random.set_seed(0)
  rng = np.random.default_rng(0)
  # Without free nats the KL of every step reaches the loss, so masking shows.
  model = _tiny_model(kl_balance=0.8, free_nats=0.0)
  step_type = np.array([[F, M, M, L, L, L], [F, M, M, M, M, M]], np.int32)
  last = 3
  obs = _random_observation(rng, [2, 6])
  action = rng.uniform(-1, 1, [2, 6, 2]).astype(np.float32)
  reward = rng.normal(size=[2, 6]).astype(np.float32)
  clean_obs = {k: v.copy() for k, v in obs.items()}
  for v in clean_obs.values():
    v[0, last + 1:] = 0
  clean_action, clean_reward = action.copy(), reward.copy()
  # a_LAST and r_LAST only concern the step after LAST.
  clean_action[0, last:] = 0
  clean_reward[0, last:] = 0

  def loss(o, a, r):
    tf.random.set_seed(1)  # Same posterior samples for both windows.
    total, terms, _ = model.loss(
        _experience({k: tf.constant(v) for k, v in o.items()}, a, step_type, r))
    return total.numpy(), {k: v.numpy() for k, v in terms.items()}

  garbage_total, garbage_terms = loss(obs, action, reward)
  clean_total, clean_terms = loss(clean_obs, clean_action, clean_reward)
  assert np.isfinite(garbage_total)
  assert garbage_total == pytest.approx(clean_total, rel=1e-5)
  for key in clean_terms:
    assert garbage_terms[key] == pytest.approx(clean_terms[key], rel=1e-5, abs=1e-5), key
  # Sanity: a change before LAST does change it.
  changed = {k: v.copy() for k, v in clean_obs.items()}
  changed['pixels'][0, last] = 0
  assert abs(loss(changed, clean_action, clean_reward)[0] - clean_total) > 10.0


@pytest.mark.parametrize('image_std', [1.0, 0.3])
def test_loss_terms_match_hand_computation(image_std):
  """Targets in [-0.5, 0.5], reward t-1 predicted at t, masks and scales as
  documented; the images' likelihood has `image_std`, the vector's a unit std."""
  tf.random.set_seed(0)
  rng = np.random.default_rng(2)
  model = _tiny_model(reward_scale=7.0, free_nats=0.0, kl_scale=0.5, image_std=image_std)
  step_type = np.array([[F, M, L, L], [F, M, M, M]], np.int32)
  mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
  obs = _random_observation(rng, [2, 4])
  action = rng.uniform(-1, 1, [2, 4, 2]).astype(np.float32)
  reward = rng.normal(size=[2, 4]).astype(np.float32)
  total, terms, post = model.loss(_experience(
      {k: tf.constant(v) for k, v in obs.items()}, action, step_type, reward))
  feat = rssm_lib.features(post)

  def normal_log_prob(pred, target, event_axes, std=1.0):
    return np.sum(-0.5 * np.square((pred - target) / std) - np.log(std)
                  - 0.5 * np.log(2 * np.pi), event_axes)

  def mean(values, m):
    return (values * m).sum() / m.sum()

  expected = 0.0
  for key, axes in (('pixels', (2, 3, 4)), ('bev', (2, 3, 4)), ('ego', 2)):
    target = obs[key] / 255.0 - 0.5 if obs[key].dtype == np.uint8 else obs[key]
    pred = model.decoders[key](feat).numpy()
    std = 1.0 if key == 'ego' else image_std
    value = mean(normal_log_prob(pred, target, axes, std), mask)
    assert terms[f'{key}_log_prob'].numpy() == pytest.approx(value, rel=1e-4), key
    expected -= value
    if key != 'ego':  # images only: their squared error per pixel channel, masked like the NLL
      error = np.square(pred - target).mean(axis=axes)
      assert terms[f'{key}_image_mse'].numpy() == pytest.approx(mean(error, mask), rel=1e-4), key
  assert 'ego_image_mse' not in terms
  reward_pred = model.reward_decoder(feat).numpy()[:, 1:]
  reward_value = mean(normal_log_prob(reward_pred, reward[:, :-1], ()), mask[:, 1:])
  assert terms['reward_log_prob'].numpy() == pytest.approx(reward_value, rel=1e-4)
  expected -= 7.0 * reward_value
  # The KL itself is checked in the kl_loss tests; here only its weighting.
  assert terms['kl_loss'].numpy() == pytest.approx(terms['kl'].numpy(), rel=1e-5)
  expected += 0.5 * terms['kl'].numpy()
  assert total.numpy() == pytest.approx(expected, rel=1e-5)
  assert terms['model_loss'].numpy() == pytest.approx(total.numpy())


@pytest.mark.parametrize('image_std', [0.0, -0.3, float('nan'), float('inf'), '0.3', True])
def test_a_bad_image_std_is_refused_with_its_setting_named(image_std):
  with pytest.raises(errors.ConfigError, match='WorldModel.image_std=.*must be a finite number > 0'):
    _tiny_model(image_std=image_std)


def test_the_continuation_head_is_fit_to_the_arrival_that_ends_the_episode():
  """Arriving at step t ends the episode when discount[t-1] is 0 (a terminal
  LAST); a time-limit LAST (discount 1) goes on; padding after LAST is masked."""
  tf.random.set_seed(0)
  rng = np.random.default_rng(3)
  model = _tiny_model(continuation_scale=2.0, free_nats=0.0)
  assert _tiny_model().continuation_decoder is None  # off: no head, no variables
  step_type = np.array([[F, M, L, L], [F, M, M, L]], np.int32)
  mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
  discount = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], np.float32)  # row 0 crashes into step 2
  obs = _random_observation(rng, [2, 4])
  experience = _experience({k: tf.constant(v) for k, v in obs.items()},
                           rng.uniform(-1, 1, [2, 4, 2]), step_type,
                           rng.normal(size=[2, 4])).replace(discount=tf.constant(discount))
  total, terms, post = model.loss(experience)
  goes_on = np.array([[1, 0, 1], [1, 1, 1]], np.float32)  # arrivals at t = 1, 2, 3

  def bernoulli_log_prob(model, belief):
    logit = model.continuation_decoder(rssm_lib.features(belief)).numpy()[:, 1:]
    return np.where(goes_on > 0, -np.logaddexp(0, -logit), -np.logaddexp(0, logit))
  log_prob = bernoulli_log_prob(model, post)
  expected = (log_prob * mask[:, 1:]).sum() / mask[:, 1:].sum()
  assert terms['continuation_log_prob'].numpy() == pytest.approx(expected, rel=1e-4)
  without = total.numpy() + 2.0 * terms['continuation_log_prob'].numpy()
  assert without == pytest.approx(
      sum(-terms[f'{k}_log_prob'].numpy() for k in ('pixels', 'bev', 'ego'))
      - 10.0 * terms['reward_log_prob'].numpy() + terms['kl_loss'].numpy(), rel=1e-5)
  with pytest.raises(errors.ConfigError, match='continuation_scale=-1'):
    _tiny_model(continuation_scale=-1.0)

  # The terminal weight multiplies the terminal arrival's term only (row 0, t = 2).
  tf.random.set_seed(0)
  weighted = _tiny_model(continuation_scale=2.0, continuation_terminal_weight=30.0,
                         free_nats=0.0)
  _, weighted_terms, weighted_post = weighted.loss(experience)
  log_prob = bernoulli_log_prob(weighted, weighted_post)
  weights = np.where(goes_on > 0, 1.0, 30.0)
  expected = (weights * log_prob * mask[:, 1:]).sum() / mask[:, 1:].sum()
  assert weighted_terms['continuation_log_prob'].numpy() == pytest.approx(expected, rel=1e-4)
  with pytest.raises(errors.ConfigError, match='continuation_terminal_weight=0'):
    _tiny_model(continuation_scale=1.0, continuation_terminal_weight=0.0)
  with pytest.raises(errors.ConfigError, match='no effect with WorldModel.continuation_scale = 0'):
    _tiny_model(continuation_terminal_weight=30.0)

  # The reward's terminal weight multiplies the crash arrival's reward term only, with or
  # without a continuation head.
  for scale in (0.0, 2.0):
    tf.random.set_seed(0)
    model = _tiny_model(reward_terminal_weight=30.0, continuation_scale=scale, free_nats=0.0)
    _, reward_terms, reward_post = model.loss(experience)
    reward_pred = model.reward_decoder(rssm_lib.features(reward_post)).numpy()[:, 1:]
    reward_log_prob = (-0.5 * np.square(reward_pred - experience.reward.numpy()[:, :-1])
                       - 0.5 * np.log(2 * np.pi))
    expected = (weights * reward_log_prob * mask[:, 1:]).sum() / mask[:, 1:].sum()
    assert reward_terms['reward_log_prob'].numpy() == pytest.approx(expected, rel=1e-4)
  with pytest.raises(errors.ConfigError, match='reward_terminal_weight=-1'):
    _tiny_model(reward_terminal_weight=-1.0)

  # Fit on the one-step prior (what imagination gives the head), or on both beliefs.
  for features in ('prior', 'both'):
    model = _tiny_model(continuation_scale=1.0, continuation_features=features, free_nats=0.0)
    tf.random.set_seed(7)  # the same draws in observe() here and inside loss()
    post, prior = model.observe(experience.observation, experience.action,
                                experience.step_type)
    tf.random.set_seed(7)
    _, terms, loss_post = model.loss(experience)
    np.testing.assert_allclose(loss_post['stoch'].numpy(), post['stoch'].numpy(), rtol=1e-6)
    log_prob = bernoulli_log_prob(model, prior)
    if features == 'both':
      log_prob = 0.5 * (log_prob + bernoulli_log_prob(model, post))
    expected = (log_prob * mask[:, 1:]).sum() / mask[:, 1:].sum()
    assert terms['continuation_log_prob'].numpy() == pytest.approx(expected, rel=1e-4), features
  with pytest.raises(errors.ConfigError, match="continuation_features='filtered'"):
    _tiny_model(continuation_scale=1.0, continuation_features='filtered')
  with pytest.raises(errors.ConfigError, match='no effect with WorldModel.continuation_scale = 0'):
    _tiny_model(continuation_features='prior')


# --- learnability on real frames --------------------------------------------

SEQUENCES, STEPS, ACTION_REPEAT = 8, 9, 4


@pytest.fixture(scope='module')
def cartpole_data():
  """8 x 9 steps of 64x64 cartpole swingup frames under random actions."""
  from dm_control import suite  # pylint: disable=g-import-not-at-top
  env = suite.load('cartpole', 'swingup', task_kwargs={'random': 0})
  rng = np.random.default_rng(0)
  frames = np.zeros([SEQUENCES, STEPS, 64, 64, 3], np.uint8)
  actions = rng.uniform(-1, 1, [SEQUENCES, STEPS, 1]).astype(np.float32)
  rewards = np.zeros([SEQUENCES, STEPS], np.float32)
  for i in range(SEQUENCES):
    env.reset()
    for t in range(STEPS):
      frames[i, t] = env.physics.render(64, 64, camera_id=0)
      for _ in range(ACTION_REPEAT):
        rewards[i, t] += env.step(actions[i, t]).reward or 0.0
  step_type = np.full([SEQUENCES, STEPS], M, np.int32)
  step_type[:, 0] = F
  return frames, actions, rewards, step_type


@pytest.mark.slow  # ~200 updates on real cartpole frames: ~25 s
def test_world_model_learns_cartpole(cartpole_data):
  """~200 Adam updates must cut the reconstruction error and the loss clearly."""
  frames, actions, rewards, step_type = cartpole_data
  tf.random.set_seed(0)
  obs_spec = {'pixels': tensor_spec.BoundedTensorSpec([64, 64, 3], tf.uint8, 0, 255)}
  action_spec = tensor_spec.BoundedTensorSpec([1], tf.float32, -1.0, 1.0)
  model = wm_lib.WorldModel(obs_spec, action_spec,
                            rssm=rssm_lib.RSSM(deter_size=32, stoch_size=8, hidden_size=32),
                            image_depth=16)
  experience = _experience({'pixels': tf.constant(frames)}, actions, step_type, rewards)
  optimizer = tf.keras.optimizers.legacy.Adam(1e-3)

  @tf.function
  def train_step():
    with tf.GradientTape() as tape:
      loss, terms, _ = model.loss(experience)
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss, terms['pixels_log_prob']

  # Gaussian log-likelihoods have a constant floor (and the KL is at least the
  # free nats), so 'falls clearly' is measured above that floor.
  pixel_floor = 64 * 64 * 3 * 0.5 * np.log(2 * np.pi)
  loss_floor = pixel_floor + model.reward_scale * 0.5 * np.log(2 * np.pi) + model.free_nats
  start = time.time()
  history = np.array([[v.numpy() for v in train_step()] for _ in range(200)])
  losses, sq_err = history[:, 0], -2 * (history[:, 1] + pixel_floor)
  assert np.isfinite(losses).all()
  excess = losses - loss_floor
  initial_err, final_err = sq_err[0], sq_err[-10:].mean()
  images = frames.astype(np.float32) / 255.0 - 0.5
  mean_frame_err = np.square(images - images.mean((0, 1))).sum((2, 3, 4)).mean()
  print(f'200 updates in {time.time() - start:.1f}s; loss above floor {excess[0]:.1f} -> '
        f'{excess[-10:].mean():.1f}; image squared error {initial_err:.1f} -> '
        f'{final_err:.1f} (average frame: {mean_frame_err:.1f})')
  # Measured over seeds 0-2: excess ratio ~0.025, error ratio 0.020-0.031.
  assert excess[-10:].mean() < 0.2 * excess[0]
  assert final_err < 0.1 * initial_err


# --- open-loop prediction ---------------------------------------------------


def test_open_loop_prediction_ignores_the_future_frames():
  tf.random.set_seed(0)
  rng = np.random.default_rng(0)
  model = _tiny_model()
  batch, steps, context = 2, 6, 3
  obs = {k: tf.constant(v) for k, v in _random_observation(rng, [batch, steps]).items()}
  action = tf.constant(rng.uniform(-1, 1, [batch, steps, 2]).astype(np.float32))
  step_type = tf.constant([[F] + [M] * (steps - 1)] * batch, tf.int32)
  truth, pred = model.open_loop_prediction(obs, action, step_type, context)
  assert truth.shape == pred.shape == (batch, steps, 64, 64, 3)
  assert truth.dtype == pred.dtype == tf.uint8
  np.testing.assert_array_equal(truth.numpy(), obs['pixels'].numpy())
  # Future observations must not leak into the open-loop frames.
  future_changed = dict(obs, pixels=tf.concat(
      [obs['pixels'][:, :context], 255 - obs['pixels'][:, context:]], 1))
  _, pred2 = model.open_loop_prediction(future_changed, action, step_type, context)
  np.testing.assert_array_equal(pred2.numpy(), pred.numpy())
  # The decode-only key works as the predicted key too.
  truth_bev, pred_bev = model.open_loop_prediction(obs, action, step_type, context, key='bev')
  assert truth_bev.shape == pred_bev.shape == (batch, steps, 64, 64, 1)


class _FeatureImage(tf.Module):
  """A known image decoder: every pixel is (deter[0], deter[2], stoch[0]) - 0.5 units."""

  def __init__(self, deter_size):
    super().__init__(name='feature_image')
    self._channels = [0, 2, deter_size]

  def __call__(self, features):
    channels = tf.gather(features, self._channels, axis=-1)
    shape = tf.concat([tf.shape(channels)[:-1], [64, 64, 3]], 0)
    return tf.broadcast_to(channels[..., None, None, :], shape)


def test_open_loop_prediction_of_a_known_model():
  """Context frames decode the posterior means, the rest the prior means
  imagined under the actions taken from the last posterior, on a model where
  all are known: each step remembers the action before it (deter[:2] =
  tanh(0.5 a), a = 0 at FIRST) and the previous state's stoch[0] (deter[2] =
  tanh(stoch[0])); posterior and prior means are constants; the decoder shows
  (deter[0], deter[2], stoch[0])."""
  gain, batch, steps, context = 0.5, 2, 6, 3
  rng = np.random.default_rng(0)
  model = _tiny_model()
  rssm = model.rssm
  obs = {k: tf.constant(v) for k, v in _random_observation(rng, [batch, steps]).items()}
  action = rng.uniform(-1, 1, [batch, steps, 2]).astype(np.float32)
  step_type = tf.constant([[F] + [M] * (steps - 1)] * batch, tf.int32)
  model.open_loop_prediction(obs, tf.constant(action), step_type, context)  # builds the RSSM
  tiny_model.remember_last_action(rssm, 2, gain)
  stoch, deter = rssm.stoch_size, rssm.deter_size
  # pylint: disable=protected-access
  for variable, index, value in ((rssm._img_in.kernel, (0, 2), 1.0),   # unit 2: stoch[0] + 2
                                 (rssm._img_in.bias, (2,), 2.0),
                                 (rssm._cell.kernel, (2, 2 * deter + 2), 1.0),
                                 (rssm._cell.bias, (0, 2 * deter + 2), -2.0)):
    variable.assign(tf.tensor_scatter_nd_update(variable, [index], [value]))
  post_mean = np.linspace(-0.4, 0.3, stoch).astype(np.float32)
  prior_mean = np.linspace(0.35, -0.1, stoch).astype(np.float32)
  for layer, mean in ((rssm._post_stats, post_mean), (rssm._prior_stats, prior_mean)):
    layer.kernel.assign(tf.zeros_like(layer.kernel))
    layer.bias.assign(np.concatenate([mean, np.zeros(stoch, np.float32)]))
  model.decoders['pixels'] = _FeatureImage(deter)

  _, pred = model.open_loop_prediction(obs, tf.constant(action), step_type, context)
  previous_action = np.concatenate([np.zeros([batch, 1, 2], np.float32), action[:, :-1]], 1)
  t = np.arange(steps)
  stoch_0 = np.where(t < context, post_mean[0], prior_mean[0])
  previous_stoch_0 = np.where(t == 0, 0.0, np.where(t <= context, post_mean[0], prior_mean[0]))
  per_step = np.stack([previous_stoch_0, stoch_0], -1)                       # [T, 2]
  value = np.concatenate([np.tanh(gain * previous_action[..., :1]),
                          np.broadcast_to(np.tanh(per_step[:, :1]), [batch, steps, 1]),
                          np.broadcast_to(per_step[:, 1:], [batch, steps, 1])], -1)
  expected = np.clip((value + 0.5) * 255.0, 0, 255).astype(np.uint8)       # [B, T, 3]
  assert pred.shape == (batch, steps, 64, 64, 3)
  difference = pred.numpy().astype(int) - expected[:, :, None, None, :].astype(int)
  assert np.abs(difference).max() <= 1  # float32 rounding at the uint8 cast


def test_bfloat16_images_share_checkpoints_and_approximate_the_fp32_loss(tmp_path):
  """image_precision='mixed_bfloat16': bf16 convs on fp32 variables, fp32 loss."""
  tf.keras.utils.set_random_seed(0)  # the weights, so the result does not depend on test order
  rng = np.random.default_rng(5)
  fp32 = _tiny_model()
  bf16 = _tiny_model(image_precision='mixed_bfloat16')
  path = tf.train.Checkpoint(model=fp32).write(str(tmp_path / 'fp32'))
  tf.train.Checkpoint(model=bf16).read(path).assert_consumed()
  assert all(v.dtype == tf.float32 for v in bf16.trainable_variables)
  convs = bf16.encoder._encoders['pixels']._convs + bf16.decoders['pixels']._deconvs
  assert all(layer.compute_dtype == 'bfloat16' for layer in convs)
  assert all(layer.compute_dtype == 'float32'
             for layer in fp32.encoder._encoders['pixels']._convs)

  step_type = np.array([[F, M, M, M]] * 2, np.int32)
  experience = _experience(
      {k: tf.constant(v) for k, v in _random_observation(rng, [2, 4]).items()},
      rng.uniform(-1, 1, [2, 4, 2]).astype(np.float32), step_type,
      rng.normal(size=[2, 4]).astype(np.float32))

  def loss_and_grads(model):
    tf.random.set_seed(3)  # same posterior samples
    with tf.GradientTape() as tape:
      total, terms, _ = model.loss(experience)
    return total, terms, tape.gradient(total, model.trainable_variables)

  fp32_total, fp32_terms, fp32_grads = loss_and_grads(fp32)
  bf16_total, bf16_terms, bf16_grads = loss_and_grads(bf16)
  assert bf16_total.dtype == tf.float32
  # bf16 keeps 8 mantissa bits: ~0.4% per value, far less after the sums.
  assert float(bf16_terms['pixels_log_prob']) == pytest.approx(
      float(fp32_terms['pixels_log_prob']), rel=2e-3)
  assert float(bf16_total) == pytest.approx(float(fp32_total), rel=2e-3)
  for a, b, var in zip(fp32_grads, bf16_grads, fp32.trainable_variables):
    assert b.dtype == tf.float32 and np.all(np.isfinite(b)), var.name
    if np.linalg.norm(a) < 1e-9:  # prior-only layers: no gradient under free nats
      assert np.linalg.norm(b) < 1e-6, var.name
      continue
    cosine = np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b))
    assert cosine > 0.95, (var.name, cosine)


def test_unknown_image_precision_is_named():
  with pytest.raises(ValueError, match="image precision 'float16'.*image_precision"):
    _tiny_model(image_precision='float16')


def test_vector_scales_put_vector_inputs_and_their_likelihood_in_scaled_units():
  """With vector_scales the model sees, and scores, the vector divided by them: every loss
  term equals that of the same weights without scales given the divided vector."""
  scales = np.array([1.0, 0.25, 10.0, 25.0, 5.0], np.float32)
  rng = np.random.default_rng(0)
  observation = _random_observation(rng, [2, 4])
  observation['ego'] = observation['ego'] * scales  # metres, m/s, ... of these sizes
  divided = dict(observation, ego=observation['ego'] / scales)
  action = rng.uniform(-1, 1, [2, 4, 2]).astype(np.float32)
  step_type = np.array([[F, M, M, M]] * 2, np.int32)
  reward = rng.normal(size=[2, 4]).astype(np.float32)
  scaled_model = _tiny_model(vector_scales={'ego': scales.tolist()}, free_nats=0.0)
  plain_model = _tiny_model(free_nats=0.0)

  def terms(model, obs):
    tf.random.set_seed(1)  # the same posterior samples
    _, loss_terms, _ = model.loss(_experience({k: tf.constant(v) for k, v in obs.items()},
                                              action, step_type, reward))
    return {k: float(v) for k, v in loss_terms.items()}

  scaled = terms(scaled_model, observation)
  terms(plain_model, divided)  # builds the variables
  for plain_variable, scaled_variable in zip(plain_model.variables, scaled_model.variables):
    plain_variable.assign(scaled_variable)
  plain = terms(plain_model, divided)
  for key, value in scaled.items():
    assert value == pytest.approx(plain[key], rel=1e-4, abs=1e-4), key
  # Raw metres score far worse under the unit-std likelihood: what the scales remove.
  assert terms(plain_model, observation)['ego_log_prob'] < scaled['ego_log_prob'] - 50.0


@pytest.mark.parametrize('scales, match', [
    ({'ego': [1.0, 2.0]}, r"vector_scales\['ego'\].*needs 5"),
    ({'ego': [1.0, 1.0, 0.0, 1.0, 1.0]}, 'finite numbers > 0'),
    ({'pixels': [1.0]}, "names 'pixels', which is not a vector observation"),
])
def test_vector_scales_that_do_not_fit_the_spec_are_named(scales, match):
  with pytest.raises(errors.ConfigError, match=match):
    _tiny_model(vector_scales=scales)

"""Shapes, specs, episode resets and input checks of the encoders, decoders and RSSM.

Tiny sizes (depth 8, deter 16, stoch 4, hidden 16) keep the file fast on CPU;
every assertion compares against an independent computation, so a wrong
implementation fails rather than merely running.
"""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa.agents import world_model as wm_lib
from planet_tfa.networks import decoders
from planet_tfa.networks import encoders
from planet_tfa.networks import rssm as rssm_lib
from planet_tfa.networks import rssm_network

DEPTH, DETER, STOCH, HIDDEN = 8, 16, 4, 16
EGO = 5
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, name='action')
PIXELS_SPEC = tensor_spec.BoundedTensorSpec([64, 64, 3], tf.uint8, 0, 255, name='pixels')
EGO_SPEC = tf.TensorSpec([EGO], tf.float32, name='ego')
BEV_SPEC = tensor_spec.BoundedTensorSpec([64, 64, 1], tf.uint8, 0, 255, name='bev')
# 'bev' is a decode-only target: the encoders (and so the policy) never see it.
OBS_SPEC = {'pixels': PIXELS_SPEC, 'ego': EGO_SPEC, 'bev': BEV_SPEC}
ENCODER_KEYS = ['ego', 'pixels']
EMBED = 2 * 2 * 8 * DEPTH + HIDDEN


def _image_encoder(name):
  return encoders.ConvEncoder(depth=DEPTH, name=name)


def _vector_encoder(name):
  return encoders.MlpEncoder(units=(HIDDEN,), name=name)


def _encoder():
  return encoders.MultiModalEncoder(OBS_SPEC, ENCODER_KEYS, image_encoder=_image_encoder,
                                    vector_encoder=_vector_encoder)


def _rssm():
  return rssm_lib.RSSM(deter_size=DETER, stoch_size=STOCH, hidden_size=HIDDEN)


def _observation(rng, outer, keys=('pixels', 'ego', 'bev')):
  """Random observation nest with outer dims `outer`."""
  obs = {
      'pixels': rng.integers(0, 256, outer + [64, 64, 3]).astype(np.uint8),
      'ego': rng.normal(size=outer + [EGO]).astype(np.float32),
      'bev': rng.integers(0, 256, outer + [64, 64, 1]).astype(np.uint8),
  }
  return {k: tf.constant(obs[k]) for k in keys}


@pytest.fixture
def rng():
  tf.random.set_seed(0)
  return np.random.default_rng(0)


# --- shapes and specs -------------------------------------------------------


def test_image_to_float_range():
  """Encoder input and decoder target must share the [-0.5, 0.5] range."""
  x = encoders.image_to_float(tf.constant([0, 255], tf.uint8))
  np.testing.assert_allclose(x.numpy(), [-0.5, 0.5], atol=1e-6)


def test_conv_encoder_shapes_batch_and_time(rng):
  """[B] and [B, T] frames give 2*2*8*depth embeddings, consistent per frame."""
  enc = encoders.ConvEncoder(depth=DEPTH)
  frames = tf.constant(rng.integers(0, 256, [2, 3, 64, 64, 3]).astype(np.uint8))
  flat = enc(tf.reshape(frames, [6, 64, 64, 3]))
  seq = enc(frames)
  assert flat.shape == (6, 2 * 2 * 8 * DEPTH)
  assert seq.shape == (2, 3, 2 * 2 * 8 * DEPTH)
  assert flat.dtype == tf.float32
  # Folding time into batch must not mix frames.
  np.testing.assert_allclose(tf.reshape(seq, flat.shape).numpy(), flat.numpy(), atol=1e-5)
  # uint8 input is rescaled, i.e. equals the float [-0.5, 0.5] image.
  np.testing.assert_allclose(enc(encoders.image_to_float(frames)).numpy(), seq.numpy(),
                             atol=1e-5)


def test_mlp_encoder_shapes(rng):
  enc = encoders.MlpEncoder(units=(HIDDEN, 2 * HIDDEN))
  assert enc(tf.zeros([4, EGO])).shape == (4, 2 * HIDDEN)
  assert enc(tf.zeros([4, 3, EGO])).shape == (4, 3, 2 * HIDDEN)


def test_multimodal_encoder_ignores_decode_only_key(rng):
  """Embedding = concat in key order; 'bev' is not an input, so a policy can omit it."""
  enc = _encoder()
  assert enc.keys == ENCODER_KEYS
  assert sorted(enc.input_spec_dict) == ['ego', 'pixels']
  full = _observation(rng, [2, 3])
  out = enc(full)
  assert out.shape == (2, 3, EMBED)
  policy_obs = {k: full[k] for k in ENCODER_KEYS}
  np.testing.assert_allclose(enc(policy_obs).numpy(), out.numpy(), atol=1e-6)
  changed_bev = dict(full, bev=tf.zeros_like(full['bev']))
  np.testing.assert_allclose(enc(changed_bev).numpy(), out.numpy(), atol=1e-6)
  expected = tf.concat([enc._encoders['ego'](full['ego']),
                        enc._encoders['pixels'](full['pixels'])], -1)
  np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-6)
  # [B] policy observations work too.
  assert enc({k: v[:, 0] for k, v in policy_obs.items()}).shape == (2, EMBED)


def test_image_decoder_shapes():
  dec = decoders.ImageDecoder(channels=1, depth=DEPTH)
  assert dec(tf.zeros([2, 3, DETER + STOCH])).shape == (2, 3, 64, 64, 1)
  assert dec(tf.zeros([5, DETER + STOCH])).shape == (5, 64, 64, 1)
  assert decoders.ImageDecoder(channels=3, depth=DEPTH)(
      tf.zeros([2, 3, DETER + STOCH])).shape == (2, 3, 64, 64, 3)


def test_vector_and_reward_decoder_shapes():
  vec = decoders.VectorDecoder(EGO, units=(HIDDEN,))
  assert vec(tf.zeros([2, 3, DETER + STOCH])).shape == (2, 3, EGO)
  reward = decoders.reward_decoder(units=(HIDDEN,))
  assert reward(tf.zeros([2, 3, DETER + STOCH])).shape == (2, 3)
  assert reward(tf.zeros([4, DETER + STOCH])).shape == (4,)


def test_rssm_network_specs_and_output(rng):
  net = rssm_network.RssmEncodingNetwork(_encoder(), _rssm(), ACTION_SPEC)
  spec = net.state_spec
  assert sorted(spec) == ['deter', 'prev_action', 'stoch']
  assert spec['deter'].shape == (DETER,) and spec['deter'].dtype == tf.float32
  assert spec['stoch'].shape == (STOCH,) and spec['stoch'].dtype == tf.float32
  assert spec['prev_action'].shape == ACTION_SPEC.shape
  assert spec['prev_action'].dtype == tf.float32
  assert net.input_tensor_spec == {'ego': EGO_SPEC, 'pixels': PIXELS_SPEC}
  assert net.feature_spec.shape == (DETER + STOCH,)
  obs = _observation(rng, [3], keys=ENCODER_KEYS)
  out, state = net(obs, step_type=tf.fill([3], ts.StepType.FIRST))
  assert out.shape == (3, DETER + STOCH)
  assert sorted(state) == sorted(spec)
  for key, key_spec in spec.items():
    assert (state[key].shape[1:], state[key].dtype) == (key_spec.shape, key_spec.dtype), key
  # The features are deter || stoch of the new state.
  np.testing.assert_allclose(out.numpy(), tf.concat([state['deter'], state['stoch']], -1))


# --- episode resets ---------------------------------------------------------

F, M, L = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST
# Row 0 starts at t=0, row 1 at t=2 (after a LAST), row 2 at t=4.
STEP_TYPES = np.array([[F, M, M, M, M, M],
                       [M, L, F, M, M, M],
                       [M, M, M, L, F, M]], np.int32)


def test_network_resets_rows_at_first(rng):
  """At a row's FIRST step the history (state and prev action) is forgotten.

  The carried state starts non-zero and prev_action is set non-zero before
  every step (as a policy does), so only a real reset can match a fresh call.
  Then RSSM.observe over [B, T] must reproduce the step-by-step features.
  """
  encoder, rssm = _encoder(), _rssm()
  net = rssm_network.RssmEncodingNetwork(encoder, rssm, ACTION_SPEC)
  batch, steps = STEP_TYPES.shape
  obs = _observation(rng, [batch, steps], keys=ENCODER_KEYS)
  actions = rng.uniform(0.3, 1.0, [batch, steps, 2]).astype(np.float32)
  state = {
      'deter': tf.constant(rng.normal(size=[batch, DETER]).astype(np.float32)),
      'stoch': tf.constant(rng.normal(size=[batch, STOCH]).astype(np.float32)),
      'prev_action': tf.constant(rng.uniform(0.3, 1.0, [batch, 2]).astype(np.float32)),
  }
  initial = {'deter': state['deter'], 'stoch': state['stoch']}
  prev_actions, outputs = [], []
  for t in range(steps):
    obs_t = {k: v[:, t] for k, v in obs.items()}
    step_type = tf.constant(STEP_TYPES[:, t])
    prev_actions.append(state['prev_action'])
    out, state = net(obs_t, step_type=step_type, network_state=state, sample=False)
    fresh, _ = net(obs_t, sample=False)
    for row in range(batch):
      if STEP_TYPES[row, t] == F:
        np.testing.assert_allclose(out[row].numpy(), fresh[row].numpy(), atol=1e-5,
                                   err_msg=f'row {row} t {t}: FIRST did not reset')
      else:
        assert np.abs(out[row].numpy() - fresh[row].numpy()).max() > 1e-3, (
            f'row {row} t {t}: non-FIRST step forgot its history')
    outputs.append(out)
    state = dict(state, prev_action=tf.constant(actions[:, t]))

  stepwise = tf.stack(outputs, 1)
  post, _ = rssm.observe(encoder(obs), tf.stack(prev_actions, 1),
                         tf.constant(STEP_TYPES == F), initial_state=initial,
                         sample=False)
  np.testing.assert_allclose(rssm_lib.features(post).numpy(), stepwise.numpy(), atol=1e-5)


def test_imagine_equals_repeated_prior_steps(rng):
  """Open-loop imagination is the prior applied step after step."""
  encoder, rssm = _encoder(), _rssm()
  obs = _observation(rng, [2, 3], keys=ENCODER_KEYS)
  post, _ = rssm.observe(encoder(obs), tf.zeros([2, 3, 2]), tf.zeros([2, 3], tf.bool),
                         sample=False)
  start = {'deter': post['deter'][:, -1], 'stoch': post['stoch'][:, -1]}
  actions = tf.constant(rng.uniform(-1, 1, [2, 5, 2]).astype(np.float32))
  imagined = rssm.imagine(actions, start, sample=False)
  state = start
  for t in range(5):
    state = rssm.prior_step(state, actions[:, t], sample=False)
    for key in ('deter', 'stoch', 'mean', 'std'):
      np.testing.assert_allclose(imagined[key][:, t].numpy(), state[key].numpy(), atol=1e-5,
                                 err_msg=f'{key} at t={t}')
  # And it really depends on the actions.
  other = rssm.imagine(-actions, start, sample=False)
  assert np.abs(other['deter'].numpy() - imagined['deter'].numpy()).max() > 1e-4


def test_seeded_samples_are_a_function_of_the_seed(rng):
  """A stateless seed fixes observe's and imagine's samples; without one they
  come from the global random state, as in training."""
  encoder, rssm = _encoder(), _rssm()
  embed = encoder(_observation(rng, [2, 3], keys=ENCODER_KEYS))
  actions = tf.constant(rng.uniform(-1, 1, [2, 3, 2]).astype(np.float32))
  firsts = tf.constant([[True, False, False]] * 2)

  def samples(seed):
    post, prior = rssm.observe(embed, actions, firsts, seed=seed)
    start = {'deter': post['deter'][:, -1], 'stoch': post['stoch'][:, -1]}
    imagined = rssm.imagine(actions, start, seed=seed)
    return np.concatenate([post['stoch'].numpy(), prior['stoch'].numpy(),
                           imagined['stoch'].numpy()], 1)

  seed = tf.constant([3, 1])
  first = samples(seed)
  np.testing.assert_array_equal(samples(seed), first)
  assert np.abs(samples(tf.constant([4, 1])) - first).min() > 1e-6
  assert np.abs(samples(None) - samples(None)).min() > 1e-6


# --- bad input --------------------------------------------------------------


def _spec_error(fn):
  with pytest.raises(encoders.ObservationSpecError) as info:
    fn()
  return str(info.value)


def test_wrong_image_size_is_reported(rng):
  enc = _encoder()
  obs = _observation(rng, [2], keys=ENCODER_KEYS)
  obs['pixels'] = tf.zeros([2, 32, 32, 3], tf.uint8)
  msg = _spec_error(lambda: enc(obs))
  assert "'pixels'" in msg
  assert '(2, 32, 32, 3)' in msg  # what was given
  assert '64, 64, 3' in msg and str(PIXELS_SPEC) in msg  # what was expected


def test_wrong_dtype_is_reported(rng):
  enc = _encoder()
  obs = _observation(rng, [2], keys=ENCODER_KEYS)
  obs['pixels'] = tf.cast(obs['pixels'], tf.float32)
  msg = _spec_error(lambda: enc(obs))
  assert "'pixels'" in msg and 'float32' in msg and 'uint8' in msg
  assert str(PIXELS_SPEC) in msg


def test_missing_key_is_reported(rng):
  enc = _encoder()
  obs = _observation(rng, [2], keys=['pixels'])
  msg = _spec_error(lambda: enc(obs))
  assert "'ego'" in msg and str(EGO_SPEC) in msg and "['pixels']" in msg


def test_world_model_rejects_bad_keys_and_inputs(rng):
  msg = _spec_error(lambda: wm_lib.WorldModel(
      OBS_SPEC, ACTION_SPEC, encoder_keys=ENCODER_KEYS, decoder_keys=['pixels', 'lidar'],
      rssm=_rssm(), image_depth=DEPTH))
  assert 'lidar' in msg
  msg = _spec_error(lambda: encoders.MultiModalEncoder(OBS_SPEC, ['pixels', 'radar']))
  assert 'radar' in msg
  model = wm_lib.WorldModel(OBS_SPEC, ACTION_SPEC, encoder_keys=ENCODER_KEYS,
                            decoder_keys=['pixels', 'bev'], rssm=_rssm(), image_depth=DEPTH)
  step_type = tf.zeros([2, 3], tf.int32)
  # [B] instead of [B, T] observations.
  msg = _spec_error(lambda: model.observe(_observation(rng, [2]), tf.zeros([2, 3, 2]),
                                          step_type))
  assert 'outer dims' in msg

"""The world model: encoders + RSSM + decoders, its ELBO and open-loop predictions.

Time alignment inside a `[B, T]` window of TF-Agents trajectory steps:
  step t holds observation o_t, the action a_t taken at o_t, and the reward r_t
  received after a_t. The filter at step t conditions on a_{t-1} (zero at the
  window start and at FIRST steps), and the reward head at step t predicts the
  reward of *arriving* at o_t, i.e. trajectory.reward[t-1] (PlaNet's convention).
Padding steps (written after an episode's LAST step when the episode is shorter
than the window) are masked out of every term.
"""

import gin
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.trajectories import time_step as ts

from planet_tfa import errors
from planet_tfa import precision
from planet_tfa import setting_values
from planet_tfa.networks import decoders
from planet_tfa.networks import encoders
from planet_tfa.networks import rssm as rssm_lib

tfd = tfp.distributions


def valid_mask(step_type):
  """[B, T] float: 1 up to and including the first LAST step, 0 after (padding)."""
  is_last = tf.cast(tf.equal(step_type, ts.StepType.LAST), tf.float32)
  seen_last_before = tf.cumsum(is_last, axis=1, exclusive=True)
  return tf.cast(tf.equal(seen_last_before, 0.0), tf.float32)


def masked_mean(values, mask):
  mask = tf.cast(mask, values.dtype)
  return tf.reduce_sum(values * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def kl_loss(post, prior, free_nats, balance=None):
  """Per-step KL(post || prior) with free nats applied to each step.

  Returns (loss [B, T], raw kl [B, T]). With `balance` = alpha, the prior is
  trained towards the posterior with weight alpha and the posterior towards
  the prior with 1 - alpha (DreamerV2's KL balancing); the value is unchanged.
  """
  kl = tfd.kl_divergence(rssm_lib.gaussian(post), rssm_lib.gaussian(prior))
  if balance is None:
    return tf.maximum(kl, free_nats), kl
  sg = lambda s: tf.nest.map_structure(tf.stop_gradient, s)
  kl_prior = tfd.kl_divergence(rssm_lib.gaussian(sg(post)), rssm_lib.gaussian(prior))
  kl_post = tfd.kl_divergence(rssm_lib.gaussian(post), rssm_lib.gaussian(sg(prior)))
  loss = (balance * tf.maximum(kl_prior, free_nats)
          + (1.0 - balance) * tf.maximum(kl_post, free_nats))
  return loss, kl


def image_to_uint8(image):
  """Decoder output (pixel values - 0.5) -> uint8, clipped."""
  return tf.cast(tf.clip_by_value((image + 0.5) * 255.0, 0.0, 255.0), tf.uint8)


def previous_actions(action, step_type):
  """[B, T, A] action taken before each step: a_{t-1}, zero at t=0 and FIRST."""
  action = tf.cast(action, tf.float32)
  shifted = tf.concat([tf.zeros_like(action[:, :1]), action[:, :-1]], 1)
  not_first = tf.cast(tf.not_equal(step_type, ts.StepType.FIRST), tf.float32)
  return shifted * not_first[..., None]


# Which belief the continuation head is fit on (WorldModel.continuation_features).
CONTINUATION_FEATURES = ('posterior', 'prior', 'both')


@gin.configurable
class WorldModel(tf.Module):
  """Encoders, RSSM, per-key decoders and a reward head, with PlaNet's ELBO.

  Args:
    observation_spec: dict of TensorSpecs (the environment's observation).
    action_spec: BoundedTensorSpec of the continuous action.
    encoder_keys: observation keys fed to the encoders (and needed by the
      policy); None means every key.
    decoder_keys: observation keys reconstructed; None means the encoder keys.
      Keys here but not in `encoder_keys` are decode-only targets (e.g. a
      bird's-eye mask): used in the loss, never by the policy.
    rssm: the RSSM layer (gin-configurable sizes).
    reward_scale: weight of the reward log-likelihood (PlaNet: 10).
    reward_terminal_weight: weight of the rewards of arrivals that end an
      episode (a crash's penalty) in the reward log-likelihood, relative to
      the others (1: PlaNet's plain likelihood). A crash's reward sits on one
      transition per crash episode, so a mean over all steps is nearly
      minimised by ignoring it. Adds no variables; may change on resume.
    continuation_scale: weight of the continuation head's log-likelihood
      (Dreamer's discount head): 0 (the default, for tasks that never
      terminate) builds no head; > 0 trains one on the replay's discounts
      (0 on arriving at a terminal step), which the planner uses to stop
      counting reward past a predicted end. Turning it on adds variables.
    continuation_terminal_weight: weight of the arrivals that end an episode in
      the continuation log-likelihood, relative to the ones that go on (1:
      Dreamer's plain likelihood). Terminals are rare (~1-2% of driving
      steps), so at 1 the head can score well by predicting "goes on"
      everywhere; the balanced weight is about (1 - p) / p for a terminal
      fraction p. Adds no variables; may change on resume.
    continuation_features: which belief the continuation head is fit on:
      'posterior' (Dreamer's: the filter's belief after seeing the frame),
      'prior' (the one-step prior, from the previous belief and action only:
      what the planner's imagination gives the head), or 'both' (the mean of
      the two log-likelihoods). A head fit on posteriors can learn an end
      from the frame that shows it and still never predict it in
      imagination; 'prior' also trains the dynamics to carry it.
    free_nats: per-step KL below this is not penalised (PlaNet: 3).
    kl_scale: weight of the KL term.
    kl_balance: None, or DreamerV2's balance alpha (e.g. 0.8).
    image_depth: conv depth of encoders and image decoders.
    image_std: standard deviation of the images' Gaussian likelihood (PlaNet
      and Dreamer: 1; SLAC: sqrt(0.1) ~ 0.316). Below 1 it weighs the images
      1 / image_std**2 times more against the KL and the reward, so the
      latent keeps more of the frame's detail. Adds no variables; may change
      on resume. Vector observations keep a unit std.
    vector_scales: {key: one scale per element} for vector observations
      (metres, m/s, ...): the encoders see, and the decoders' unit-std
      likelihoods score, the observation divided by them, so a gap ahead
      that drops from 50 m to 10 m moves its input by 1.6, not 40 (which
      cost ~800 nats at unit std). None: as they are. Part of the model
      (the SavedModel policy divides by them too); gin/driving.gin sets them.
    image_precision: 'float32', or 'mixed_bfloat16' to run the image encoders
      and decoders (96% of the FLOPs) in bf16 with fp32 variables: faster on
      GPUs and some bf16 CPUs, 2-6x slower on others; 'auto' picks bf16 on a
      GPU, and on a CPU only where a probe measured it faster
      (`precision.decide`). Checkpoints are the same either way.
  """

  def __init__(self, observation_spec, action_spec, encoder_keys=None,
               decoder_keys=None, rssm=None, reward_scale=10.0, reward_terminal_weight=1.0,
               continuation_scale=0.0,
               continuation_terminal_weight=1.0, continuation_features='posterior',
               free_nats=3.0,
               kl_scale=1.0, kl_balance=None, image_depth=32, image_precision='float32',
               image_std=1.0, vector_scales=None, name='world_model'):
    super().__init__(name=name)
    if not isinstance(observation_spec, dict):
      raise TypeError('WorldModel expects a dict observation spec, e.g. '
                      f"{{'pixels': ...}}; got {observation_spec}")
    # The learner binds the run's measured choice; other programs resolve 'auto' here.
    image_precision = precision.decide(image_precision, depth=image_depth,
                                       frames=precision.DEFAULT_FRAMES).precision
    self.image_precision = image_precision
    encoder_keys = sorted(observation_spec) if encoder_keys is None else list(encoder_keys)
    decoder_keys = list(encoder_keys) if decoder_keys is None else list(decoder_keys)
    unknown = [k for k in decoder_keys if k not in observation_spec]
    if unknown:
      raise encoders.ObservationSpecError(
          f'decoder keys {unknown} are not in the observation spec (keys: '
          f'{sorted(observation_spec)}); fix WorldModel.decoder_keys in gin.')
    self.observation_spec = observation_spec
    self.action_spec = action_spec
    self.encoder_keys = encoder_keys
    self.decoder_keys = decoder_keys
    self.reward_scale = reward_scale
    if reward_terminal_weight <= 0:
      raise errors.ConfigError(
          f'WorldModel.reward_terminal_weight={reward_terminal_weight}: must be > 0 '
          '(1: terminal rewards weigh as much as the others).')
    self.reward_terminal_weight = float(reward_terminal_weight)
    if continuation_scale < 0:
      raise errors.ConfigError(
          f'WorldModel.continuation_scale={continuation_scale}: must be >= 0 (0: no head).')
    self.continuation_scale = float(continuation_scale)
    if not setting_values.is_finite_number(image_std) or image_std <= 0:
      raise errors.ConfigError(
          f'WorldModel.image_std={image_std}: must be a finite number > 0 '
          '(1: PlaNet and Dreamer; SLAC: 0.316).')
    self.image_std = float(image_std)
    if continuation_terminal_weight <= 0:
      raise errors.ConfigError(
          f'WorldModel.continuation_terminal_weight={continuation_terminal_weight}: must be > 0 '
          '(1: terminals weigh as much as other steps).')
    self.continuation_terminal_weight = float(continuation_terminal_weight)
    if continuation_features not in CONTINUATION_FEATURES:
      raise errors.ConfigError(
          f'WorldModel.continuation_features={continuation_features!r}: use one of '
          f'{", ".join(repr(v) for v in CONTINUATION_FEATURES)}.')
    # The head's settings, set away from their defaults without a head, would be silently unused.
    head_settings = (('continuation_terminal_weight', continuation_terminal_weight, 1.0),
                     ('continuation_features', continuation_features, 'posterior'))
    for name, value, default in head_settings:
      if value != default and continuation_scale == 0:
        raise errors.ConfigError(
            f'WorldModel.{name}={value!r} has no effect with WorldModel.continuation_scale = 0 '
            '(no continuation head): set a continuation_scale > 0, or drop the setting.')
    self.continuation_features = continuation_features
    self.free_nats = free_nats
    self.kl_scale = kl_scale
    self.kl_balance = kl_balance
    # Vector observations in metres, m/s, ... enter the encoders and the decoders'
    # unit-variance likelihoods divided by their scales.
    self.vector_scales = encoders.check_vector_scales(vector_scales, observation_spec)
    self.encoder = encoders.MultiModalEncoder(
        observation_spec, encoder_keys,
        image_encoder=lambda name: encoders.ConvEncoder(
            depth=image_depth, precision=image_precision, name=name),
        vector_scales=vector_scales)
    self.rssm = rssm if rssm is not None else rssm_lib.RSSM()
    self.decoders = {}
    for key in decoder_keys:
      spec = observation_spec[key]
      if encoders.is_image_spec(spec):
        if tuple(spec.shape[:2]) != (64, 64):
          raise encoders.ObservationSpecError(
              f"image '{key}' is {tuple(spec.shape)}; the image decoder produces "
              '64x64 frames: resize the observation to 64x64.')
        self.decoders[key] = decoders.ImageDecoder(
            channels=spec.shape[-1], depth=image_depth, precision=image_precision,
            name=f'{key}_decoder')
      else:
        self.decoders[key] = decoders.VectorDecoder(spec.shape[-1], name=f'{key}_decoder')
    self.reward_decoder = decoders.reward_decoder()
    self.continuation_decoder = (decoders.continuation_decoder() if continuation_scale > 0
                                 else None)
    self._build()

  @property
  def policy_observation_spec(self):
    """What the acting policy needs: encoder inputs only."""
    return {k: self.observation_spec[k] for k in self.encoder_keys}

  @property
  def feature_size(self):
    return self.rssm.feature_size

  def _build(self):
    """Creates every variable now, so checkpoints and optimizers see them all."""
    dummy = {k: tf.zeros([1, 1] + list(s.shape), s.dtype)
             for k, s in self.observation_spec.items()}
    embed = self.encoder(dummy)
    action_size = self.action_spec.shape.num_elements()
    self.rssm.build_variables(embed.shape[-1], action_size)
    feats = tf.zeros([1, 1, self.feature_size])
    for decoder in self.decoders.values():
      decoder(feats)
    self.reward_decoder(feats)
    if self.continuation_decoder is not None:
      self.continuation_decoder(feats)

  def observe(self, observation, action, step_type, sample=True):
    """Filters [B, T] windows: returns (posterior, prior) dicts of [B, T, ...]."""
    encoders.check_observation(observation, self.encoder.input_spec_dict, outer_rank=2)
    embed = self.encoder(observation)
    is_first = tf.equal(step_type, ts.StepType.FIRST)
    # Each window starts from the zero state, as an episode does.
    is_first = tf.concat([tf.ones_like(is_first[:, :1]), is_first[:, 1:]], 1)
    return self.rssm.observe(embed, previous_actions(action, step_type), is_first,
                             sample=sample)

  def _image_target(self, value):
    return encoders.image_to_float(value)

  def loss(self, experience):
    """The negative ELBO of a [B, T] trajectory window.

    Returns:
      (loss scalar, dict of scalar terms for logging, posterior dict [B, T]).
    """
    observation = experience.observation
    encoders.check_observation(
        observation, {k: self.observation_spec[k] for k in self.decoder_keys},
        outer_rank=2)
    post, prior = self.observe(observation, experience.action, experience.step_type)
    feat = rssm_lib.features(post)
    mask = valid_mask(experience.step_type)

    terms = {}
    total = 0.0
    for key, decoder in self.decoders.items():
      pred = decoder(feat)
      target = observation[key]
      if encoders.is_image_spec(self.observation_spec[key]):
        target = self._image_target(target)
        event_dims = 3
        std = self.image_std
        # The image log-prob is ~0.92 nats per pixel channel of constant; its
        # squared error per pixel channel is what shows reconstruction improve.
        pixel_error = tf.reduce_mean(tf.square(pred - target), [-3, -2, -1])
        terms[f'{key}_image_mse'] = masked_mean(pixel_error, mask)
      else:
        target = encoders.scale_vector(target, self.vector_scales.get(key))
        event_dims = 1
        std = 1.0
      log_prob = tfd.Independent(tfd.Normal(pred, std), event_dims).log_prob(target)
      terms[f'{key}_log_prob'] = masked_mean(log_prob, mask)
      total -= terms[f'{key}_log_prob']

    # Reward of arriving at step t (t >= 1) is trajectory.reward[t-1].
    reward_pred = self.reward_decoder(feat)[:, 1:]
    reward_target = tf.cast(experience.reward[:, :-1], tf.float32)
    reward_mask = mask[:, 1:]
    # Arriving at step t ends the episode when trajectory.discount[t-1] is 0.
    continues = tf.cast(experience.discount[:, :-1] > 0, tf.float32)

    def terminal_weighted(weight):
      # Up-weights the rare terminals; the mean stays over steps, so 1 is the plain ELBO.
      return 1.0 + (weight - 1.0) * (1.0 - continues)

    reward_log_prob = tfd.Normal(reward_pred, 1.0).log_prob(reward_target)
    terms['reward_log_prob'] = masked_mean(
        terminal_weighted(self.reward_terminal_weight) * reward_log_prob, reward_mask)
    total -= self.reward_scale * terms['reward_log_prob']

    if self.continuation_decoder is not None:
      weight = terminal_weighted(self.continuation_terminal_weight)
      beliefs = []
      if self.continuation_features in ('posterior', 'both'):
        beliefs.append(feat)
      if self.continuation_features in ('prior', 'both'):
        beliefs.append(rssm_lib.features(prior))
      continuation_log_prob = tf.add_n([
          tfd.Bernoulli(logits=self.continuation_decoder(belief)[:, 1:]).log_prob(continues)
          for belief in beliefs]) / len(beliefs)
      terms['continuation_log_prob'] = masked_mean(weight * continuation_log_prob, reward_mask)
      total -= self.continuation_scale * terms['continuation_log_prob']

    kl_per_step, kl = kl_loss(post, prior, self.free_nats, self.kl_balance)
    terms['kl'] = masked_mean(kl, mask)
    terms['kl_loss'] = masked_mean(kl_per_step, mask)
    total += self.kl_scale * terms['kl_loss']
    terms['reward_mse'] = masked_mean(tf.square(reward_pred - reward_target), reward_mask)
    terms['model_loss'] = total
    return total, terms, post

  def open_loop_prediction(self, observation, action, step_type, num_context, key=None):
    """Observes the first `num_context` steps, imagines the rest under the real actions.

    Returns (truth, prediction) images [B, T, H, W, C] as uint8 for key `key`
    (the first image decoder key by default): the first `num_context` predicted
    frames are reconstructions, the rest are open-loop.
    """
    if key is None:
      key = next(k for k in self.decoder_keys
                 if encoders.is_image_spec(self.observation_spec[k]))
    context = tf.nest.map_structure(lambda x: x[:, :num_context], observation)
    post, _ = self.observe(context, action[:, :num_context], step_type[:, :num_context],
                           sample=False)
    last = {'deter': post['deter'][:, -1], 'stoch': post['stoch'][:, -1]}
    future_actions = tf.cast(action[:, num_context - 1:-1], tf.float32)
    prior = self.rssm.imagine(future_actions, last, sample=False)
    feat = tf.concat([rssm_lib.features(post), rssm_lib.features(prior)], 1)
    pred = self.decoders[key](feat)
    truth = observation[key]
    if truth.dtype != tf.uint8:
      truth = image_to_uint8(truth)
    return truth, image_to_uint8(pred)

  @property
  def image_decoder_keys(self):
    return [k for k in self.decoder_keys if encoders.is_image_spec(self.observation_spec[k])]

  def reconstruct(self, observation, action, step_type, keys=None):
    """Posterior reconstructions of [B, T] steps: {key: uint8 [B, T, H, W, C]}.

    Each frame is decoded from the filter's belief after seeing that frame
    (posterior means), so it shows what the latent state holds of the input;
    `keys` default to every image decoder key.
    """
    keys = self.image_decoder_keys if keys is None else list(keys)
    post, _ = self.observe(observation, action, step_type, sample=False)
    feat = rssm_lib.features(post)
    return {key: image_to_uint8(self.decoders[key](feat)) for key in keys}

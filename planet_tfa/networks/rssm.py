"""PlaNet's recurrent state-space model (RSSM).

A latent state is a dict of tensors:
  deter  [B, deter_size]  GRU state (the deterministic path)
  stoch  [B, stoch_size]  sample (or mean) of the diagonal Gaussian
  mean, std               that Gaussian's parameters (present in step outputs)

prior:     h_t = GRU(h_{t-1}, [z_{t-1}, a_{t-1}]),  z_t ~ p(z_t | h_t)
posterior: z_t ~ q(z_t | h_t, embed_t)

Sampling draws from the global random state unless a step is given a
stateless `seed` ([2] int32), which makes its samples a function of that seed
(the planner's reproducible rollouts); a sequence folds the step index into it.
"""
import gin
import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions


def features(state):
  """Latent features fed to decoders and SAC: deter || stoch."""
  return tf.concat([state['deter'], state['stoch']], -1)


def _step_indices(seed, length):
  """The step indices a seeded scan also scans over; none when unseeded, so an
  unseeded sequence builds the graph (and op seeds) it always did."""
  return () if seed is None else (tf.range(length),)


def _step_seed(seed, t):
  """The stateless seed of the step whose `_step_indices` entry is t (a 0- or
  1-tuple); None when unseeded."""
  return None if seed is None else tf.random.experimental.stateless_fold_in(seed, t[0])


def _unrolled_scan(step, time_major_inputs, initial, length):
  """`tf.scan(step, time_major_inputs, initializer=initial)` as `length` copies of `step`."""
  if length is None:
    raise ValueError('an unrolled filter needs a static sequence length')
  carry, outputs = initial, []
  for t in range(length):
    carry = step(carry, tf.nest.map_structure(lambda x, t=t: x[t], time_major_inputs))
    outputs.append(carry)
  return tf.nest.map_structure(lambda *xs: tf.stack(xs), *outputs)


def gaussian(state):
  return tfd.MultivariateNormalDiag(state['mean'], state['std'])


@gin.configurable
class RSSM(tf.keras.layers.Layer):
  """Prior/posterior steps, `observe` over [B, T] and open-loop `imagine`."""

  def __init__(self, deter_size=200, stoch_size=30, hidden_size=200,
               min_std=0.1, activation='elu', name='rssm'):
    super().__init__(name=name)
    self.deter_size = deter_size
    self.stoch_size = stoch_size
    self.min_std = min_std
    self._img_in = tf.keras.layers.Dense(hidden_size, activation=activation, name='img_in')
    self._cell = tf.keras.layers.GRUCell(deter_size, name='gru')
    self._img_out = tf.keras.layers.Dense(hidden_size, activation=activation, name='img_out')
    self._prior_stats = tf.keras.layers.Dense(2 * stoch_size, name='prior_stats')
    self._obs_out = tf.keras.layers.Dense(hidden_size, activation=activation, name='obs_out')
    self._post_stats = tf.keras.layers.Dense(2 * stoch_size, name='post_stats')

  @property
  def feature_size(self):
    return self.deter_size + self.stoch_size

  def zero_state(self, batch_size):
    """Deterministic zeros: the state every episode starts from."""
    return {
        'deter': tf.zeros(tf.stack([batch_size, self.deter_size])),
        'stoch': tf.zeros(tf.stack([batch_size, self.stoch_size])),
    }

  def _stats(self, layer, hidden, sample, seed=None):
    mean, raw_std = tf.split(layer(hidden), 2, -1)
    std = tf.nn.softplus(raw_std) + self.min_std
    if not sample:
      return {'mean': mean, 'std': std, 'stoch': mean}
    noise = (tf.random.normal(tf.shape(mean)) if seed is None
             else tf.random.stateless_normal(tf.shape(mean), seed))
    return {'mean': mean, 'std': std, 'stoch': mean + std * noise}

  def prior_step(self, state, prev_action, sample=True, seed=None):
    """One transition: previous latent + previous action -> prior at this step."""
    x = self._img_in(tf.concat([state['stoch'], tf.cast(prev_action, tf.float32)], -1))
    deter, _ = self._cell(x, [state['deter']])
    prior = self._stats(self._prior_stats, self._img_out(deter), sample, seed)
    prior['deter'] = deter
    return prior

  def posterior_step(self, state, prev_action, embed, sample=True, seed=None):
    """One filtering step; returns (posterior, prior) at this step."""
    prior_seed = post_seed = None
    if seed is not None:
      prior_seed, post_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    prior = self.prior_step(state, prev_action, sample, prior_seed)
    hidden = self._obs_out(tf.concat([prior['deter'], embed], -1))
    post = self._stats(self._post_stats, hidden, sample, post_seed)
    post['deter'] = prior['deter']
    return post, prior

  def reset(self, state, is_first):
    """Zeros `state` (a dict of [B, ...]) in the rows where `is_first`."""
    keep = tf.cast(tf.logical_not(is_first), tf.float32)[:, None]
    return {k: v * tf.cast(keep, v.dtype) for k, v in state.items()}

  def build_variables(self, embed_size, action_size):
    """Creates all variables with one step on zeros (tf.scan cannot create them)."""
    if self._post_stats.built:
      return
    state = self.zero_state(1)
    self.posterior_step(state, tf.zeros([1, action_size]), tf.zeros([1, embed_size]))
    self.built = True

  def observe(self, embed, prev_action, is_first, initial_state=None, sample=True,
              seed=None, unroll=False):
    """Filters a sequence.

    Args:
      embed: [B, T, E] encoder outputs.
      prev_action: [B, T, A]; entry t is the action taken before step t.
      is_first: [B, T] bool; the state is reset to zeros before those steps.
      initial_state: state before step 0 (zeros if None).
      sample: sample the stochastic state (True) or use the mean.
      seed: optional stateless seed of the samples (step t uses it folded with t).
      unroll: build one copy of the step per time step (T must be static)
        instead of a `tf.scan`: the same ops and results, without the loop's
        tensor lists, which TFLite's builtin ops cannot run (the policy's
        acting window is short and static).

    Returns:
      (posterior, prior): dicts of [B, T, ...] tensors.
    """
    self.build_variables(embed.shape[-1], prev_action.shape[-1])
    batch_size = tf.shape(embed)[0]
    if initial_state is None:
      initial_state = self.zero_state(batch_size)
    time_major = lambda x: tf.transpose(x, [1, 0] + list(range(2, x.shape.rank)))
    inputs = (time_major(embed), time_major(tf.cast(prev_action, tf.float32)),
              time_major(is_first)) + _step_indices(seed, tf.shape(embed)[1])

    def step(carry, inputs):
      post_prev, _ = carry
      embed_t, action_t, first_t, *t = inputs
      state = self.reset({'deter': post_prev['deter'], 'stoch': post_prev['stoch']}, first_t)
      action_t = action_t * tf.cast(tf.logical_not(first_t), tf.float32)[:, None]
      return self.posterior_step(state, action_t, embed_t, sample, _step_seed(seed, t))

    zeros = tf.zeros([batch_size, self.stoch_size])
    init = dict(initial_state, mean=zeros, std=zeros)
    if unroll:
      post, prior = _unrolled_scan(step, inputs, (init, init), embed.shape[1])
    else:
      post, prior = tf.scan(step, inputs, initializer=(init, init))
    batch_major = lambda x: tf.transpose(x, [1, 0] + list(range(2, x.shape.rank)))
    return tf.nest.map_structure(batch_major, post), tf.nest.map_structure(batch_major, prior)

  def imagine(self, prev_action, initial_state, sample=True, seed=None):
    """Open-loop rollout of the prior from `initial_state` under [B, T, A] actions
    (`seed`: optional stateless seed of the samples, folded with the step)."""
    batch_size = tf.shape(prev_action)[0]
    zeros = tf.zeros([batch_size, self.stoch_size])
    init = dict(deter=initial_state['deter'], stoch=initial_state['stoch'], mean=zeros, std=zeros)
    actions = tf.transpose(tf.cast(prev_action, tf.float32),
                           [1, 0] + list(range(2, prev_action.shape.rank)))
    prior = tf.scan(
        lambda state, inputs: self.prior_step(state, inputs[0], sample,
                                              _step_seed(seed, inputs[1:])),
        (actions,) + _step_indices(seed, tf.shape(actions)[0]), initializer=init)
    return tf.nest.map_structure(
        lambda x: tf.transpose(x, [1, 0] + list(range(2, x.shape.rank))), prior)

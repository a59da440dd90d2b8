"""The RSSM filter as a TF-Agents `Network`: one posterior step per call.

Its `state_spec` is the latent belief plus the previous action, so a TF-Agents
policy carries it as `policy_state`. Rows whose `step_type` is FIRST are reset
to the deterministic zero state before the step, exactly as `RSSM.observe`
does during training.

Two ways to build the belief the policy acts on:
  window=None  the filter carries its state through the whole episode (one
               posterior step per call);
  window=K     SLAC's way: every call filters the last K steps (embeddings,
               previous actions, FIRST flags kept in the state) from the zero
               state, exactly as a training window does. The belief then has
               at most K-1 steps of history, as the beliefs SAC trains on
               (a replay window of T+1 steps starts from zeros), so acting
               and training see the same belief construction.
"""
import gin
import tensorflow as tf
from tf_agents.networks import network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa import setting_values


def state_spec(rssm, action_spec, window=None, embed_size=None):
  spec = {
      'deter': tf.TensorSpec([rssm.deter_size], tf.float32, name='deter'),
      'stoch': tf.TensorSpec([rssm.stoch_size], tf.float32, name='stoch'),
      'prev_action': tf.TensorSpec(action_spec.shape, tf.float32, name='prev_action'),
  }
  if window is not None:
    # The K-1 steps before the current one, oldest first.
    history = window - 1
    spec.update(
        embed_history=tf.TensorSpec([history, embed_size], tf.float32, name='embed_history'),
        action_history=tf.TensorSpec([history] + list(action_spec.shape), tf.float32,
                                     name='action_history'),
        first_history=tf.TensorSpec([history], tf.float32, name='first_history'))
  return spec


def _embed_size(encoder):
  dummy = {k: tf.zeros([1] + list(spec.shape), spec.dtype)
           for k, spec in encoder.input_spec_dict.items()}
  return int(encoder(dummy).shape[-1])


@gin.configurable
class RssmEncodingNetwork(network.Network):
  """observation (encoder keys only) -> latent features deter || stoch.

  `call(observation, step_type, network_state, sample=True, seed=None)`: with
  `sample=False` the posterior mean is used, which makes the filter (and a
  greedy policy on top of it) deterministic; a stateless `seed` makes the
  posterior samples a function of it. `window`: None (whole-episode
  filter) or K >= 2 (the last K steps from zeros; see the module doc).
  """

  def __init__(self, encoder, rssm, action_spec, window=None, name='RssmEncodingNetwork'):
    if window is not None and (not setting_values.is_whole(window) or window < 2):
      raise ValueError(f'filter window={window!r}: use None (whole-episode filter) or a '
                       'whole number >= 2 (steps filtered from zeros at every step).')
    embed_size = _embed_size(encoder) if window is not None else None
    super().__init__(
        input_tensor_spec=dict(encoder.input_spec_dict),
        state_spec=state_spec(rssm, action_spec, window, embed_size),
        name=name)
    self._encoder = encoder
    self._rssm = rssm
    self._action_spec = action_spec
    self._window = window

  @property
  def window(self):
    return self._window

  @property
  def rssm(self):
    """The RSSM the filter steps (a planner imagines with the same one)."""
    return self._rssm

  @property
  def feature_spec(self):
    return tf.TensorSpec([self._rssm.feature_size], tf.float32, name='latent_features')

  def call(self, observation, step_type=None, network_state=(), training=False,
           sample=True, seed=None):
    del training
    embed = self._encoder(observation)
    batch_size = tf.shape(embed)[0]
    if not network_state:
      network_state = tensor_spec.zero_spec_nest(self.state_spec, outer_dims=[batch_size])
    is_first = (tf.equal(step_type, ts.StepType.FIRST) if step_type is not None
                else tf.zeros([batch_size], tf.bool))
    if self._window is not None:
      return self._window_step(embed, is_first, network_state, sample, seed)
    state = self._rssm.reset(network_state, is_first)
    post, _ = self._rssm.posterior_step(
        {'deter': state['deter'], 'stoch': state['stoch']}, state['prev_action'],
        embed, sample=sample, seed=seed)
    new_state = {'deter': post['deter'], 'stoch': post['stoch'],
                 # The policy overwrites this with the action it takes.
                 'prev_action': state['prev_action']}
    return tf.concat([post['deter'], post['stoch']], -1), new_state

  def _window_step(self, embed, is_first, network_state, sample, seed):
    """Filters the last `window` steps from zeros, as `WorldModel.observe` filters a window."""
    embeds = tf.concat([network_state['embed_history'], embed[:, None]], 1)        # [B, K, E]
    prev_actions = tf.concat([network_state['action_history'],
                              network_state['prev_action'][:, None]], 1)           # [B, K, A]
    firsts = tf.concat([network_state['first_history'],
                        tf.cast(is_first, tf.float32)[:, None]], 1)                # [B, K]
    # A training window starts from zeros at its first step (FIRST or not),
    # and resets at any FIRST inside it: steps before an episode's start
    # (the zero history of a fresh state) never reach the belief.
    window_firsts = tf.concat([tf.ones_like(firsts[:, :1]), firsts[:, 1:]], 1) > 0.5
    # Unrolled: the window is short and static, and an unrolled filter exports
    # to TFLite's builtin ops (lite_policy).
    post, _ = self._rssm.observe(embeds, prev_actions, window_firsts, sample=sample,
                                 seed=seed, unroll=True)
    last = {'deter': post['deter'][:, -1], 'stoch': post['stoch'][:, -1]}
    # Previous actions of FIRST steps are zeroed by the filter; keep them zero here too.
    prev_action = network_state['prev_action'] * (1.0 - tf.cast(is_first, tf.float32))[:, None]
    new_state = dict(last, prev_action=prev_action,
                     embed_history=embeds[:, 1:],
                     action_history=tf.concat([network_state['action_history'][:, 1:],
                                               prev_action[:, None]], 1),
                     first_history=firsts[:, 1:])
    return tf.concat([last['deter'], last['stoch']], -1), new_state

"""The RSSM filter as a TF-Agents `Network`: one posterior step per call.

Its `state_spec` is the latent belief plus the previous action, so a TF-Agents
policy carries it as `policy_state`. Rows whose `step_type` is FIRST are reset
to the deterministic zero state before the step, exactly as `RSSM.observe`
does during training, so acting and training see the same filter.
"""
import gin
import tensorflow as tf
from tf_agents.networks import network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts


def state_spec(rssm, action_spec):
  return {
      'deter': tf.TensorSpec([rssm.deter_size], tf.float32, name='deter'),
      'stoch': tf.TensorSpec([rssm.stoch_size], tf.float32, name='stoch'),
      'prev_action': tf.TensorSpec(action_spec.shape, tf.float32, name='prev_action'),
  }


@gin.configurable
class RssmEncodingNetwork(network.Network):
  """observation (encoder keys only) -> latent features deter || stoch.

  `call(observation, step_type, network_state, sample=True)`: with
  `sample=False` the posterior mean is used, which makes the filter (and a
  greedy policy on top of it) deterministic.
  """

  def __init__(self, encoder, rssm, action_spec, name='RssmEncodingNetwork'):
    super().__init__(
        input_tensor_spec=dict(encoder.input_spec_dict),
        state_spec=state_spec(rssm, action_spec),
        name=name)
    self._encoder = encoder
    self._rssm = rssm
    self._action_spec = action_spec

  @property
  def rssm(self):
    """The RSSM the filter steps (a planner imagines with the same one)."""
    return self._rssm

  @property
  def feature_spec(self):
    return tf.TensorSpec([self._rssm.feature_size], tf.float32, name='latent_features')

  def call(self, observation, step_type=None, network_state=(), training=False,
           sample=True):
    del training
    embed = self._encoder(observation)
    batch_size = tf.shape(embed)[0]
    if not network_state:
      network_state = tensor_spec.zero_spec_nest(self.state_spec, outer_dims=[batch_size])
    is_first = (tf.equal(step_type, ts.StepType.FIRST) if step_type is not None
                else tf.zeros([batch_size], tf.bool))
    state = self._rssm.reset(network_state, is_first)
    post, _ = self._rssm.posterior_step(
        {'deter': state['deter'], 'stoch': state['stoch']}, state['prev_action'],
        embed, sample=sample)
    new_state = {'deter': post['deter'], 'stoch': post['stoch'],
                 # The policy overwrites this with the action it takes.
                 'prev_action': state['prev_action']}
    return tf.concat([post['deter'], post['stoch']], -1), new_state

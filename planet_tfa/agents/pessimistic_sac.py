"""TF-Agents' SacAgent with the two critic-loss changes tried against cheetah's falls.

A pessimistic target: SAC bootstraps from min(Q1', Q2') of the target critics.
`target_pessimism` beta subtracts beta * |Q1' - Q2'| more (beta = 0: SAC's
target; min itself is mean - |Q1' - Q2'| / 2). The twin critics disagree most
on what they saw least (on cheetah, 1.7-3.5x more in the second before a
turn-over than upright: docs/learning.md), so the penalty lands on rarely seen
states more than on common ones, as REDQ's min over a random pair of a larger
ensemble does.

TD-error priorities: `critic_priority_exponent` a > 0 weighs each pair's
squared TD errors by (max(|d1|, |d2|) + eps)^a, held constant and normalised to
the batch's mean weight. In expectation that is the gradient of prioritized
replay with priorities |d|^a and no importance weights (Fujimoto et al. 2020,
"An Equivalence between Loss Functions and Non-Uniform Sampling in Experience
Replay"), from priorities that are never stale and with no change to the
replay table: the rare pairs the critic gets most wrong (on cheetah, the
lead-in to a fall, priced up to twice its worth) weigh more. a = 0: SAC's loss.

Everything else, the actor and temperature losses included, is SacAgent's.
"""
import tensorflow as tf
from tf_agents.agents.sac import sac_agent
from tf_agents.utils import common
from tf_agents.utils import nest_utils


# Keeps a pair with no TD error in the batch (a priority of 0 never samples it).
PRIORITY_EPSILON = 1e-3


class PessimisticSacAgent(sac_agent.SacAgent):
  """SacAgent whose critic target is min(Q1', Q2') - beta * |Q1' - Q2'| - alpha log pi,
  and whose critic loss weighs each pair by its TD error to the power a."""

  def __init__(self, *args, target_pessimism=0.0, critic_priority_exponent=0.0, **kwargs):
    super().__init__(*args, **kwargs)
    self._target_pessimism = float(target_pessimism)
    self._critic_priority_exponent = float(critic_priority_exponent)

  def soft_target_values(self, next_time_steps):
    """The soft value the critic bootstraps from at each next time step."""
    next_actions, next_log_pis = self._actions_and_log_probs(next_time_steps, training=False)
    target_input = (next_time_steps.observation, next_actions)
    q1, _ = self._target_critic_network_1(
        target_input, step_type=next_time_steps.step_type, training=False)
    q2, _ = self._target_critic_network_2(
        target_input, step_type=next_time_steps.step_type, training=False)
    pessimistic = tf.minimum(q1, q2) - self._target_pessimism * tf.abs(q1 - q2)
    return pessimistic - tf.exp(self._log_alpha) * next_log_pis

  def critic_loss(self, time_steps, actions, next_time_steps, td_errors_loss_fn, gamma=1.0,
                  reward_scale_factor=1.0, weights=None, training=False):
    """SacAgent.critic_loss with `soft_target_values` as the bootstrap, and
    with a > 0 each pair's weight times its normalised TD-error priority."""
    with tf.name_scope('critic_loss'):
      nest_utils.assert_same_structure(actions, self.action_spec)
      nest_utils.assert_same_structure(time_steps, self.time_step_spec)
      nest_utils.assert_same_structure(next_time_steps, self.time_step_spec)
      td_targets = tf.stop_gradient(
          reward_scale_factor * next_time_steps.reward
          + gamma * next_time_steps.discount * self.soft_target_values(next_time_steps))
      pred_input = (time_steps.observation, actions)
      pred1, _ = self._critic_network_1(pred_input, step_type=time_steps.step_type,
                                        training=training)
      pred2, _ = self._critic_network_2(pred_input, step_type=time_steps.step_type,
                                        training=training)
      per_example = td_errors_loss_fn(td_targets, pred1) + td_errors_loss_fn(td_targets, pred2)
      if per_example.shape.rank > 1:  # sum over time, as SacAgent does
        per_example = tf.reduce_sum(per_example, axis=range(1, per_example.shape.rank))
      if self._critic_priority_exponent:
        weights = self._prioritized(weights, td_targets, pred1, pred2)
      loss = common.aggregate_losses(
          per_example_loss=per_example, sample_weight=weights,
          regularization_loss=self._critic_network_1.losses + self._critic_network_2.losses)
      self._critic_loss_debug_summaries(td_targets, pred1, pred2)
      return loss.total_loss

  def _prioritized(self, weights, td_targets, pred1, pred2):
    """`weights` (None: all 1) times (max(|d1|, |d2|) + eps)^a, rescaled so
    their weighted mean is the mean of `weights`: the loss keeps its scale and
    pairs weighted 0 (burn-in, past an episode's end) stay 0."""
    error = tf.stop_gradient(tf.maximum(tf.abs(td_targets - pred1), tf.abs(td_targets - pred2)))
    if error.shape.rank > 1:  # a sequence per example: its largest error
      error = tf.reduce_max(error, axis=range(1, error.shape.rank))
    priority = (error + PRIORITY_EPSILON) ** self._critic_priority_exponent
    weights = tf.ones_like(priority) if weights is None else tf.cast(weights, priority.dtype)
    mean_priority = tf.reduce_sum(weights * priority) / tf.maximum(tf.reduce_sum(weights), 1e-12)
    return weights * priority / mean_priority

"""TF-Agents' SacAgent with a critic target that is pessimistic where its twin critics disagree.

SAC bootstraps from min(Q1', Q2') of the target critics. `target_pessimism`
beta subtracts beta * |Q1' - Q2'| more (beta = 0: SAC's target; min itself is
mean - |Q1' - Q2'| / 2). The twin critics disagree most on what they saw
least (on cheetah, 1.7-3.5x more in the second before a turn-over than upright:
docs/learning.md), so the penalty lands on rarely seen states more than on
common ones, as REDQ's min over a random pair of a larger ensemble does.
Everything else, the actor and temperature losses included, is SacAgent's.
"""
import tensorflow as tf
from tf_agents.agents.sac import sac_agent
from tf_agents.utils import common
from tf_agents.utils import nest_utils


class PessimisticSacAgent(sac_agent.SacAgent):
  """SacAgent whose critic target is min(Q1', Q2') - beta * |Q1' - Q2'| - alpha log pi."""

  def __init__(self, *args, target_pessimism=0.0, **kwargs):
    super().__init__(*args, **kwargs)
    self._target_pessimism = float(target_pessimism)

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
    """SacAgent.critic_loss with `soft_target_values` as the bootstrap."""
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
      loss = common.aggregate_losses(
          per_example_loss=per_example, sample_weight=weights,
          regularization_loss=self._critic_network_1.losses + self._critic_network_2.losses)
      self._critic_loss_debug_summaries(td_targets, pred1, pred2)
      return loss.total_loss

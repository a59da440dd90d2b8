"""PessimisticSacAgent: SAC's critic loss with a target lowered where the twin critics disagree."""
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.ddpg import critic_network
from tf_agents.agents.sac import sac_agent
from tf_agents.agents.sac import tanh_normal_projection_network
from tf_agents.networks import actor_distribution_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa.agents import pessimistic_sac

FEATURE_SPEC = tf.TensorSpec([5], tf.float32)
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0)
TIME_STEP_SPEC = ts.time_step_spec(FEATURE_SPEC)
BATCH, GAMMA, ALPHA = 16, 0.9, 0.3


def make_sac(sac_class, **kwargs):
  """A SAC agent on fresh networks from a fixed seed (the same weights for every class)."""
  tf.keras.utils.set_random_seed(0)
  actor = actor_distribution_network.ActorDistributionNetwork(
      FEATURE_SPEC, ACTION_SPEC, fc_layer_params=(16,),
      continuous_projection_net=tanh_normal_projection_network.TanhNormalProjectionNetwork)
  critic = critic_network.CriticNetwork((FEATURE_SPEC, ACTION_SPEC), joint_fc_layer_params=(16,),
                                        kernel_initializer='glorot_uniform',
                                        last_kernel_initializer='glorot_uniform')
  agent = sac_class(TIME_STEP_SPEC, ACTION_SPEC, critic_network=critic, actor_network=actor,
                    actor_optimizer=None, critic_optimizer=None, alpha_optimizer=None,
                    gamma=GAMMA, initial_log_alpha=np.log(ALPHA), **kwargs)
  agent.initialize()
  return agent


def batch():
  rng = np.random.default_rng(1)
  step = lambda reward, discount: ts.TimeStep(  # pylint: disable=unnecessary-lambda-assignment
      tf.ones([BATCH], tf.int32), tf.constant(reward, tf.float32),
      tf.constant(discount, tf.float32),
      tf.constant(rng.normal(size=[BATCH, 5]), tf.float32))
  time_steps = step(np.zeros(BATCH), np.ones(BATCH))
  next_time_steps = step(rng.normal(size=BATCH), (np.arange(BATCH) % 4 > 0) * 1.0)
  actions = tf.constant(rng.uniform(-1, 1, [BATCH, 2]), tf.float32)
  return time_steps, actions, next_time_steps


def seeded_critic_loss(agent, *transitions):
  tf.random.set_seed(7)  # the same next-action samples in every call
  return float(agent.critic_loss(*transitions, td_errors_loss_fn=tf.math.squared_difference,
                                 gamma=GAMMA))


def reference_td_errors(agent, time_steps, actions, next_time_steps, beta=0.0):
  """(d1, d2): each critic's TD error against the target with pessimism beta,
  computed from the networks themselves with the seeded next-action samples."""
  tf.random.set_seed(7)
  next_actions, next_log_pis = agent._actions_and_log_probs(next_time_steps, training=False)  # pylint: disable=protected-access
  q1, q2 = [net((next_time_steps.observation, next_actions), training=False)[0].numpy()
            for net in (agent._target_critic_network_1, agent._target_critic_network_2)]  # pylint: disable=protected-access
  assert np.abs(q1 - q2).min() > 0  # the twin critics start from different weights
  soft_value = np.minimum(q1, q2) - beta * np.abs(q1 - q2) - ALPHA * next_log_pis.numpy()
  target = next_time_steps.reward.numpy() + GAMMA * next_time_steps.discount.numpy() * soft_value
  return [target - net((time_steps.observation, actions), training=False)[0].numpy()
          for net in (agent._critic_network_1, agent._critic_network_2)]  # pylint: disable=protected-access


def test_zero_pessimism_is_tf_agents_own_critic_loss():
  transitions = batch()
  stock = seeded_critic_loss(make_sac(sac_agent.SacAgent), *transitions)
  ported = seeded_critic_loss(make_sac(pessimistic_sac.PessimisticSacAgent), *transitions)
  np.testing.assert_allclose(ported, stock, rtol=1e-6)


@pytest.mark.parametrize('beta', [0.0, 2.0])
def test_the_target_takes_beta_times_the_target_critics_disagreement_off_their_min(beta):
  agent = make_sac(pessimistic_sac.PessimisticSacAgent, target_pessimism=beta)
  time_steps, actions, next_time_steps = batch()
  d1, d2 = reference_td_errors(agent, time_steps, actions, next_time_steps, beta)
  expected = np.mean(d1 ** 2 + d2 ** 2)
  np.testing.assert_allclose(seeded_critic_loss(agent, time_steps, actions, next_time_steps),
                             expected, rtol=1e-5)


def test_more_pessimism_lowers_every_target_where_the_critics_disagree():
  _, _, next_time_steps = batch()
  values = {}
  for beta in (0.0, 1.0):
    agent = make_sac(pessimistic_sac.PessimisticSacAgent, target_pessimism=beta)
    tf.random.set_seed(7)
    values[beta] = agent.soft_target_values(next_time_steps).numpy()
  assert (values[1.0] < values[0.0]).all()


@pytest.mark.parametrize('setting', [{'target_pessimism': 0.5}, {'critic_priority_exponent': 0.6}])
def test_latent_agent_uses_tf_agents_sac_at_zero_and_the_pessimistic_one_above(tmp_path, setting):
  from test_latent_sac_agent import make_agent  # pylint: disable=g-import-not-at-top
  plain, pessimistic = make_agent(), make_agent(seed=1, **setting)
  assert type(plain.sac) is sac_agent.SacAgent  # pylint: disable=unidiomatic-typecheck
  assert isinstance(pessimistic.sac, pessimistic_sac.PessimisticSacAgent)
  # The same variables either way: a run's checkpoint loads across the setting.
  path = tf.train.Checkpoint(sac=plain.sac).write(str(tmp_path / 'sac'))
  tf.train.Checkpoint(sac=pessimistic.sac).read(path).assert_existing_objects_matched()
  for a, b in zip(plain.sac.variables, pessimistic.sac.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  with pytest.raises(Exception, match='target_pessimism=-1'):
    make_agent(target_pessimism=-1)
  with pytest.raises(Exception, match='critic_priority_exponent=-0.5'):
    make_agent(critic_priority_exponent=-0.5)


@pytest.mark.parametrize('weights', [None, np.where(np.arange(BATCH) % 5 == 0, 0.0, 1.5)])
def test_priorities_weigh_each_pair_by_its_larger_td_error_to_the_power_a(weights):
  """With a > 0 the loss is mean_i w_i p_i / (sum w p / sum w) (d1_i^2 + d2_i^2),
  p_i = (max(|d1_i|, |d2_i|) + eps)^a: prioritized replay's expected gradient;
  pairs weighted 0 stay out, and the weights' mean is kept."""
  a = 0.6
  agent = make_sac(pessimistic_sac.PessimisticSacAgent, critic_priority_exponent=a)
  time_steps, actions, next_time_steps = batch()
  d1, d2 = reference_td_errors(agent, time_steps, actions, next_time_steps)
  priority = (np.maximum(np.abs(d1), np.abs(d2)) + pessimistic_sac.PRIORITY_EPSILON) ** a
  w = np.ones(BATCH) if weights is None else weights
  scaled = w * priority / ((w * priority).sum() / w.sum())
  assert scaled.std() > 0.1  # the priorities differ enough to matter here
  expected = np.mean(scaled * (d1 ** 2 + d2 ** 2))
  tf.random.set_seed(7)
  loss = agent.critic_loss(time_steps, actions, next_time_steps,
                           td_errors_loss_fn=tf.math.squared_difference, gamma=GAMMA,
                           weights=None if weights is None else tf.constant(weights, tf.float32))
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  uniform = make_sac(pessimistic_sac.PessimisticSacAgent)
  tf.random.set_seed(7)
  plain = uniform.critic_loss(time_steps, actions, next_time_steps,
                              td_errors_loss_fn=tf.math.squared_difference, gamma=GAMMA,
                              weights=None if weights is None else tf.constant(weights, tf.float32))
  assert abs(float(plain) - float(loss)) > 1e-3 * float(plain)


"""PlaNet's CEM planner (`CemPlanningPolicy`) on tiny world models.

The search is checked on a world model whose RSSM weights are set so that the
imagined state after an action remembers that action (deter_i = tanh(g a_i)),
with a reward head r = -|a - target|^2 read from it: the optimum is known, and
so is the return of every plan. That model forgets the state it starts from;
a second one (`flip_memory`) carries one more deter unit through every step,
negated, and its reward's target follows that unit's sign, so the best plan
depends on the belief the filter hands the planner.
"""
import inspect
import os
import subprocess
import sys
import textwrap

import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common

from planet_tfa.programs import export
from planet_tfa.programs import gin_files
from planet_tfa import checkpoints
from planet_tfa import experiment as experiment_lib
from planet_tfa import layout
from planet_tfa import saved_policies
from planet_tfa.agents import cem_policy
import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBS_SPEC = {'pixels': tf.TensorSpec([64, 64, 3], tf.uint8, 'pixels')}
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, 'action')
GAIN = 0.5
TARGET = np.array([0.6, -0.3], np.float32)
# Another action box: its middle is 2, its half-width 2.
BOX_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, 0.0, 4.0, 'action')


pytestmark = pytest.mark.usefixtures('clean_gin')


def make_agent(seed=0, action_spec=ACTION_SPEC, **kwargs):
  tf.keras.utils.set_random_seed(seed)
  return tiny_model.agent(OBS_SPEC, action_spec, **kwargs)


def planner(agent, reward_head=None, **kwargs):
  """A planner on the agent's networks; `reward_head` replaces the model's."""
  critics = {'critic': (agent.sac._critic_network_1, agent.sac._critic_network_2),
             'target_critic': (agent.sac._target_critic_network_1,
                               agent.sac._target_critic_network_2)}
  kwargs.setdefault('greedy', True)
  return cem_policy.CemPlanningPolicy(
      agent.time_step_spec, agent.action_spec, agent.filter_network,
      reward_head or agent.world_model.reward_decoder, actor_network=agent.actor_network,
      critics=critics, **kwargs)


def remember_last_action(rssm, gain=GAIN):
  """Sets the RSSM's prior so that deter[:A] = tanh(gain * a) after any step."""
  tiny_model.remember_last_action(rssm, ACTION_SPEC.shape[0], gain)


MEMORY = ACTION_SPEC.shape[0]  # the deter unit flip_memory carries


def flip_memory(rssm, weight=-3.0):
  """On top of remember_last_action: deter[MEMORY] <- tanh(weight / 2 * deter[MEMORY])
  at every step (the reset gate is sigmoid(0) = 1/2), so the unit keeps its
  size and flips its sign; the filter's prior step flips it too."""
  # pylint: disable=protected-access
  cell, deter = rssm._cell, rssm.deter_size
  recurrent = np.zeros(cell.recurrent_kernel.shape, np.float32)
  recurrent[MEMORY, 2 * deter + MEMORY] = weight
  cell.recurrent_kernel.assign(recurrent)


class MemoryReward(tf.Module):
  """r = -|a - sign(m) target|^2: the action that led to the state, scored
  against the target signed by the memory unit m there."""

  def __init__(self, target, gain=GAIN):
    super().__init__(name='memory_reward')
    self._target = tf.constant(target, tf.float32)
    self._gain = gain

  def __call__(self, features):
    size = self._target.shape[0]
    action = tf.atanh(tf.clip_by_value(features[..., :size], -0.999, 0.999)) / self._gain
    target = tf.tanh(10.0 * features[..., MEMORY:MEMORY + 1]) * self._target
    return -tf.reduce_sum(tf.square(action - target), -1)


class ActionReward(tf.Module):
  """r = -|a - target|^2 of the action that led to the state (read from deter)."""

  def __init__(self, target, gain=GAIN):
    super().__init__(name='action_reward')
    self._target = tf.constant(target, tf.float32)
    self._gain = gain

  def __call__(self, features):
    size = self._target.shape[0]
    action = tf.atanh(tf.clip_by_value(features[..., :size], -0.999, 0.999)) / self._gain
    return -tf.reduce_sum(tf.square(action - self._target), -1)


def belief(agent, batch_size=2, seed=0):
  """A filtered belief {'deter', 'stoch'} [B, ...] from a random frame."""
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 255, [batch_size, 64, 64, 3]).astype(np.uint8)
  features, state = agent.filter_network(
      {'pixels': tf.constant(pixels)}, step_type=tf.zeros([batch_size], tf.int32),
      network_state=(), sample=False)
  del features
  return {'deter': state['deter'], 'stoch': state['stoch']}


def time_steps(step_types, batch_size=2, seed=0):
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 255, [len(step_types), batch_size, 64, 64, 3]).astype(np.uint8)
  return [ts.TimeStep(step_type=tf.constant(st, tf.int32), reward=tf.zeros([batch_size]),
                      discount=tf.ones([batch_size]),
                      observation={'pixels': tf.constant(pixels[i])})
          for i, st in enumerate(step_types)]


# ---- configuration -----------------------------------------------------------

@pytest.mark.parametrize('kwargs, message', [
    (dict(num_candidates=100, top_k=200),
     'CemPlanningPolicy.top_k=200 > CemPlanningPolicy.num_candidates=100'),
    (dict(horizon=0), 'CemPlanningPolicy.horizon=0'),
    (dict(iterations=0), 'CemPlanningPolicy.iterations=0'),
    (dict(num_candidates=0, top_k=1), 'CemPlanningPolicy.num_candidates=0'),
    (dict(actor_share=1.5), 'CemPlanningPolicy.actor_share=1.5'),
    (dict(terminal_value='value'), "CemPlanningPolicy.terminal_value='value'"),
])
def test_a_planner_that_cannot_work_fails_naming_the_binding(kwargs, message):
  agent = make_agent()
  with pytest.raises(gin_files.ConfigError, match=message.replace('.', r'\.')):
    planner(agent, **kwargs)


def test_planner_settings_default_to_the_planners_own_defaults():
  defaults = inspect.signature(cem_policy.CemPlanningPolicy.__init__).parameters
  settings = cem_policy.planner_settings()
  assert settings == {name: defaults[name].default for name in settings}


def test_gin_bindings_reach_the_planner_and_bad_ones_fail_at_agent_construction():
  gin.bind_parameter('CemPlanningPolicy.num_candidates', 100)
  gin.bind_parameter('CemPlanningPolicy.top_k', 200)
  with pytest.raises(gin_files.ConfigError,
                     match=r'CemPlanningPolicy\.top_k=200 > CemPlanningPolicy\.num_candidates=100'):
    make_agent(eval_with='cem')
  gin.bind_parameter('CemPlanningPolicy.top_k', 10)
  agent = make_agent(eval_with='cem')
  assert isinstance(agent.policy, cem_policy.CemPlanningPolicy) and agent.policy.greedy
  assert agent.policy.num_candidates == 100
  assert type(agent.collect_policy).__name__ == 'LatentActorPolicy'
  with pytest.raises(gin_files.ConfigError, match=r"LatentSacAgent\.collect_with='planet'"):
    make_agent(collect_with='planet')
  # The greedy planner filters as LatentSacAgent.greedy_filter says; collection samples.
  agent = make_agent(eval_with='cem', collect_with='cem', greedy_filter='sample')
  assert agent.policy.sample_posterior and agent.collect_policy.sample_posterior
  assert not make_agent(eval_with='cem').policy.sample_posterior


PLANNER_SETTINGS = dict(horizon=3, num_candidates=20, top_k=4, iterations=2,
                        exploration_noise_std=0.1, actor_share=0.2, terminal_value='critic')


def write_run_root(root, gin_params):
  """What train_eval leaves in a run root for export: specs, the operative
  config and a checkpoint of the agent gin built; gin is cleared after."""
  gin_files.parse(tiny_model.DMC_GIN_FILES, gin_params)
  try:
    time_step_spec = ts.time_step_spec(OBS_SPEC)
    agent = experiment_lib.make_agent(time_step_spec, ACTION_SPEC)
    experiment_lib.save_specs(root, time_step_spec, ACTION_SPEC)
    with open(os.path.join(root, layout.OPERATIVE_CONFIG), 'w') as f:
      f.write(gin.operative_config_str())
  finally:
    gin.clear_config()
  checkpoints.RunCheckpoints(os.path.join(root, layout.CHECKPOINT_DIR), agent=agent).save(1)


@pytest.mark.parametrize('acted_with', ['sac', 'cem'])
def test_a_run_rebuilt_from_its_root_plans_with_its_own_settings(tmp_path, acted_with):
  root = str(tmp_path / 'run')
  write_run_root(root, [f'CemPlanningPolicy.{k} = {v!r}' for k, v in PLANNER_SETTINGS.items()]
                 + [f"LatentSacAgent.{role} = '{acted_with}'"
                    for role in ('collect_with', 'eval_with')])
  # Whatever gin holds while the run is loaded and after: here another planner.
  gin.bind_parameter('CemPlanningPolicy.horizon', 7)
  gin.bind_parameter('CemPlanningPolicy.num_candidates', 50)
  agent, _ = export.load_agent_from_root(root)
  gin.bind_parameter('CemPlanningPolicy.horizon', 7)
  gin.bind_parameter('CemPlanningPolicy.top_k', 5)
  # What export --policy=cem builds, the greedy and collect planners of the run.
  planners = [agent.export_policy(greedy=greedy, kind='cem') for greedy in (True, False)]
  gin.clear_config()
  planners.append(agent.make_policy('cem', False))
  for policy in planners:
    assert (policy.horizon, policy.num_candidates, policy.top_k, policy.iterations) == (
        3, 20, 4, 2)
    assert policy.exploration_noise_std == 0.1 and policy.terminal_value == 'critic'
    assert policy.num_actor_candidates == 4  # 0.2 of 20
  # Explicit arguments still override the run's settings.
  assert agent.make_policy('cem', True, horizon=5).horizon == 5


# ---- the search --------------------------------------------------------------

@pytest.mark.parametrize('discount', [1.0, 0.5])
def test_plan_returns_sum_the_reward_of_arriving_after_each_action(discount):
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  policy = planner(agent, ActionReward(TARGET), horizon=3, discount=discount)
  rng = np.random.default_rng(1)
  actions = rng.uniform(-1, 1, [2, 5, 3, 2]).astype(np.float32)  # [B, N, H, A]
  returns = policy.plan_returns(belief(agent), tf.constant(actions)).numpy()
  per_step = -np.square(actions - TARGET).sum(-1)                # [B, N, H]
  expected = (per_step * discount ** np.arange(3)).sum(-1)
  np.testing.assert_allclose(returns, expected, atol=1e-3)


class ContinuationLogit(tf.Module):
  """A continuation head: a constant logit, plus `per_a0` x tanh(gain a_0) of the
  action that led to the state (read from deter, as ActionReward does)."""

  def __init__(self, constant=0.0, per_a0=0.0):
    super().__init__(name='continuation_logit')
    self._constant, self._per_a0 = constant, per_a0

  def __call__(self, features):
    return self._constant + self._per_a0 * features[..., 0]


class AliveBonus(tf.Module):
  """r = 1 + 0.5 tanh(gain a_0): every step pays, a positive a_0 pays more."""

  def __call__(self, features):
    return 1.0 + 0.5 * features[..., 0]


@pytest.mark.parametrize('discount', [1.0, 0.5])
def test_plan_returns_count_each_reward_while_the_episode_is_predicted_to_go_on(discount):
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  go_on = 0.7  # the head's probability at every step
  policy = planner(agent, ActionReward(TARGET), horizon=3, discount=discount,
                   continuation_head=ContinuationLogit(np.log(go_on / (1 - go_on))))
  actions = np.random.default_rng(1).uniform(-1, 1, [2, 5, 3, 2]).astype(np.float32)
  returns = policy.plan_returns(belief(agent), tf.constant(actions)).numpy()
  per_step = -np.square(actions - TARGET).sum(-1)
  # The reward of arriving after action t counts if no earlier arrival ended it.
  expected = (per_step * (discount * go_on) ** np.arange(3)).sum(-1)
  np.testing.assert_allclose(returns, expected, rtol=1e-4, atol=1e-4)
  # Still going after all three arrivals: go_on^3, whatever the actions.
  np.testing.assert_allclose(policy.plan_survival(belief(agent), tf.constant(actions)).numpy(),
                             np.full([2, 5], go_on**3), rtol=1e-5)


def test_plans_steer_away_from_an_end_the_model_predicts():
  # A positive a_0 pays more per step but ends the episode on arrival (the
  # continuation head's logit -40 tanh(gain a_0)): a crash that pays.
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  settings = dict(horizon=4, num_candidates=300, top_k=30, iterations=6)
  blind = planner(agent, AliveBonus(), **settings)
  seeing = planner(agent, AliveBonus(), continuation_head=ContinuationLogit(per_a0=-40.0),
                   **settings)
  blind_plan, _ = blind.plan(belief(agent), tf.constant([0, 1]))
  seeing_plan, _ = seeing.plan(belief(agent), tf.constant([0, 1]))
  # Without the head every step crashes for the bonus; with it, every step but
  # the last keeps going (ending on the last arrival costs that plan nothing).
  assert (blind_plan.numpy()[..., 0] > 0.5).all(), blind_plan.numpy()[..., 0]
  assert (seeing_plan.numpy()[:, :-1, 0] < 0).all(), seeing_plan.numpy()[..., 0]
  actions = tf.stack([blind_plan, seeing_plan], 1)  # [B, 2, H, A]
  blind_return, seeing_return = np.moveaxis(
      seeing.plan_returns(belief(agent), actions).numpy(), 1, 0)
  assert (seeing_return > 2 * blind_return).all(), (seeing_return, blind_return)
  # By the head, the blind plan ends (it crashes for the bonus on the first arrival).
  blind_survival, _ = np.moveaxis(seeing.plan_survival(belief(agent), actions).numpy(), 1, 0)
  assert (blind_survival < 1e-3).all(), blind_survival


def test_cem_finds_the_known_optimum_of_every_plan_step():
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  policy = planner(agent, ActionReward(TARGET), horizon=3, num_candidates=200, top_k=20,
                   iterations=6)
  mean, std = policy.plan(belief(agent), tf.constant([3, 4]))
  np.testing.assert_allclose(mean.numpy(), np.broadcast_to(TARGET, [2, 3, 2]), atol=0.05)
  assert std.numpy().max() < 0.1  # refit to a narrowing elite set
  out = policy.action(time_steps([[0, 0]])[0], policy.get_initial_state(2))
  np.testing.assert_allclose(out.action.numpy(), np.broadcast_to(TARGET, [2, 2]), atol=0.05)


def test_an_optimum_outside_the_action_box_is_planned_at_its_edge():
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  target = np.array([1.6, -0.3], np.float32)
  policy = planner(agent, ActionReward(target), horizon=2, num_candidates=200, top_k=20,
                   iterations=6)
  mean, _ = policy.plan(belief(agent), tf.constant([0, 1]))
  assert mean.numpy().max() <= 1.0
  np.testing.assert_allclose(mean.numpy()[..., 0], 1.0, atol=0.03)
  np.testing.assert_allclose(mean.numpy()[..., 1], -0.3, atol=0.05)


def test_the_plan_starts_from_the_filtered_belief():
  # Two rows mid-episode whose carried beliefs differ in the memory unit alone.
  # The filter flips it (pre-filter +0.9 -> -0.87 in row 0), so does every
  # imagined step: row 0's plan is (+, -, +) x TARGET, row 1's the opposite.
  # From zeros the sign is 0 (best plan 0); from the pre-filter belief, or with
  # the actions shifted a step against the states, each row gets the other's plan.
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  flip_memory(agent.world_model.rssm)
  policy = planner(agent, MemoryReward(TARGET), horizon=3, num_candidates=200, top_k=20,
                   iterations=6)
  state = policy.get_initial_state(2)
  deter = np.zeros(state['deter'].shape, np.float32)
  deter[:, MEMORY] = [0.9, -0.9]
  state = dict(state, deter=tf.constant(deter))
  out = policy.action(time_steps([[1, 1]])[0], state)
  filtered = out.state['deter'].numpy()[:, MEMORY]
  np.testing.assert_allclose(filtered, np.tanh(-1.5 * deter[:, MEMORY]), atol=1e-5)
  signs = np.array([[1.0], [-1.0]], np.float32)                   # [B, 1]
  np.testing.assert_allclose(out.action.numpy(), signs * TARGET, atol=0.05)
  mean, _ = policy.plan({'deter': out.state['deter'], 'stoch': out.state['stoch']},
                        tf.constant([1, 2]))
  expected = signs[:, :, None] * np.array([1, -1, 1], np.float32)[:, None] * TARGET
  np.testing.assert_allclose(mean.numpy(), expected, atol=0.05)


def test_cem_beats_random_shooting_with_the_same_candidate_budget():
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  # 500 sequences of 6 two-dimensional actions either way.
  cem = planner(agent, ActionReward(TARGET), horizon=6, num_candidates=100, top_k=10,
                iterations=5)
  shooting = planner(agent, ActionReward(TARGET), horizon=6, num_candidates=500, top_k=1,
                     iterations=1)  # one draw, the mean refit to the best sequence
  start = belief(agent)
  returns = {}
  for name, policy in (('cem', cem), ('shooting', shooting)):
    mean, _ = policy.plan(start, tf.constant([5, 6]))
    returns[name] = cem.plan_returns(start, mean[:, None]).numpy()[:, 0]  # [B]; optimum 0
  assert (returns['shooting'] < -1.0).all(), returns
  assert (returns['cem'] > -0.15).all(), returns
  assert (returns['cem'] > returns['shooting'] + 1.0).all(), returns


def test_a_planner_on_another_action_box_searches_it_and_scales_its_noise():
  agent = make_agent(action_spec=BOX_SPEC)
  remember_last_action(agent.world_model.rssm)
  # The first coordinate's optimum lies above the box, the second inside it.
  target = np.array([4.5, 0.5], np.float32)
  kwargs = dict(horizon=2, num_candidates=200, top_k=20, iterations=6)
  greedy = planner(agent, ActionReward(target), **kwargs)
  mean, std = greedy.plan(belief(agent), tf.constant([0, 1]))
  assert mean.numpy().min() >= 0.0 and mean.numpy().max() <= 4.0
  np.testing.assert_allclose(mean.numpy()[..., 0], 4.0, atol=0.03)
  np.testing.assert_allclose(mean.numpy()[..., 1], 0.5, atol=0.05)
  # Exploration noise in half-widths of the box: 0.3 -> std 0.6 here.
  collect = planner(agent, ActionReward(np.array([2.0, 2.0], np.float32)), greedy=False,
                    exploration_noise_std=0.3, **kwargs)
  batch_size = 48
  time_step = time_steps([[0] * batch_size], batch_size=batch_size)[0]
  state = collect.get_initial_state(batch_size)
  distribution = collect.distribution(time_step, state).action
  np.testing.assert_allclose(distribution.stddev().numpy(), 0.6, rtol=1e-5)
  actions = collect.action(time_step, state, seed=3).action.numpy()   # [B, 2] around 2
  assert actions.min() >= 0.0 and actions.max() <= 4.0
  assert 0.42 < actions.std() < 0.8, actions.std()  # unscaled: ~0.3


def test_greedy_planner_is_deterministic_and_collect_planner_explores():
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  kwargs = dict(horizon=2, num_candidates=50, top_k=5, iterations=3)
  greedy = planner(agent, ActionReward(TARGET), **kwargs)
  collect = planner(agent, ActionReward(TARGET), greedy=False, exploration_noise_std=0.3,
                    **kwargs)
  time_step = time_steps([[0, 0]])[0]
  state = greedy.get_initial_state(2)
  a = greedy.action(time_step, state).action.numpy()
  b = greedy.action(time_step, state).action.numpy()
  np.testing.assert_array_equal(a, b)
  samples = np.stack([collect.action(time_step, state).action.numpy() for _ in range(8)])
  assert samples.std(0).min() > 0.1  # ~ the 0.3 exploration noise
  assert np.abs(samples).max() <= 1.0
  np.testing.assert_allclose(samples.mean(0), np.broadcast_to(TARGET, [2, 2]), atol=0.35)


def test_the_collect_planner_is_reproducible_from_its_seed():
  # Random weights: the posterior sample, the candidates, the imagined samples
  # (reward and critics read stoch), the actor's candidates and the exploration
  # noise all move the action.
  agent = make_agent()
  collect = planner(agent, greedy=False, horizon=3, num_candidates=20, top_k=4, iterations=2,
                    actor_share=0.2, terminal_value='critic')
  steps = time_steps([[0, 0], [1, 1]])

  def episode(seed, action_fn=collect.action):
    state, actions = collect.get_initial_state(2), []
    for time_step in steps:
      out = action_fn(time_step, state, seed=seed)
      state = out.state
      actions.append(out.action.numpy())
    return np.stack(actions)

  first = episode(7)
  np.testing.assert_array_equal(episode(7), first)
  assert np.abs(episode(8) - first).min() > 1e-4
  np.testing.assert_array_equal(episode(tf.constant([7, 1])), episode(tf.constant([7, 1])))
  # In a graph too, with the seed a tensor argument (what a driver passes).
  graph_fn = common.function(collect.action)
  seed = tf.constant([4, 2])
  np.testing.assert_array_equal(episode(seed, graph_fn), episode(seed, graph_fn))
  assert np.abs(episode(tf.constant([5, 2]), graph_fn) - episode(seed, graph_fn)).min() > 1e-4


# ---- actor guidance and terminal value ----------------------------------------

def actor_mode_at(agent, action):
  """Sets the actor's last layer so its mode is `action` whatever the features."""
  dense = [l for l in agent.actor_network.submodules
           if isinstance(l, tf.keras.layers.Dense)][-1]
  bias = np.zeros(dense.bias.shape, np.float32)
  bias[:len(action)] = np.arctanh(action)  # action spec [-1, 1]: mode = tanh(mean)
  dense.kernel.assign(tf.zeros_like(dense.kernel))
  dense.bias.assign(bias)


def test_actor_guided_candidates_put_the_actors_plan_into_the_search():
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  actor_mode_at(agent, TARGET)
  kwargs = dict(horizon=3, num_candidates=10, top_k=1, iterations=1)
  guided = planner(agent, ActionReward(TARGET), actor_share=0.3, **kwargs)
  plain = planner(agent, ActionReward(TARGET), **kwargs)
  assert guided.num_actor_candidates == 3 and plain.num_actor_candidates == 0
  start = belief(agent)
  candidates = guided.actor_candidates(start, 3, tf.constant([5, 6])).numpy()
  assert candidates.shape == (2, 3, 3, 2)
  np.testing.assert_allclose(candidates[:, 0], np.broadcast_to(TARGET, [2, 3, 2]), atol=1e-5)
  assert not np.allclose(candidates[:, 1], candidates[:, 0], atol=1e-2)  # sampled ones
  assert np.abs(candidates).max() <= 1.0
  # One iteration with top-1: the plan is the best candidate. Only the guided
  # search holds the actor's plan, which is the optimum here.
  seed = tf.constant([7, 8])
  guided_mean, _ = guided.plan(start, seed)
  plain_mean, _ = plain.plan(start, seed)
  np.testing.assert_allclose(guided_mean.numpy(), np.broadcast_to(TARGET, [2, 3, 2]),
                             atol=1e-5)
  assert np.abs(plain_mean.numpy() - TARGET).max() > 0.1


def critic_reads(critic, deter_weights, action_weights, bias):
  """Sets a critic to Q(f, a) = deter_weights . (f[:A] + 1) + action_weights . (a + 1)
  + bias, exact while |f[:A]|, |a| < 1 (ReLU units that pass x + 1)."""
  hidden, out = [l for l in critic.submodules if isinstance(l, tf.keras.layers.Dense)]
  size = ACTION_SPEC.shape[0]
  feature_size = hidden.kernel.shape[0] - size  # the joint input is features || action
  kernel = np.zeros(hidden.kernel.shape, np.float32)
  for i in range(size):
    kernel[i, i] = 1.0                        # unit i: deter[i] + 1
    kernel[feature_size + i, size + i] = 1.0  # unit A + i: action[i] + 1
  hidden_bias = np.zeros(hidden.bias.shape, np.float32)
  hidden_bias[:2 * size] = 1.0
  out_kernel = np.zeros(out.kernel.shape, np.float32)
  out_kernel[:size, 0] = deter_weights
  out_kernel[size:2 * size, 0] = action_weights
  hidden.kernel.assign(kernel)
  hidden.bias.assign(hidden_bias)
  out.kernel.assign(out_kernel)
  out.bias.assign([bias])


@pytest.mark.parametrize('terminal_value', ['critic', 'target_critic'])
def test_terminal_value_adds_the_discounted_min_critic_at_the_last_imagined_state(
    terminal_value):
  """A known model: each imagined state remembers the action that led to it
  (deter[:A] = tanh(GAIN a)), the actor's mode is TARGET everywhere and the
  critics are linear in what they read, so every plan's return is known:
  sum_t 0.9^t r_t + 0.9^H min(Q1, Q2)(s_H, TARGET) / critic_reward_scale."""
  agent = make_agent()
  remember_last_action(agent.world_model.rssm)
  actor_mode_at(agent, TARGET)
  q1_weights = (np.array([2.0, 0.0]), np.array([0.5, 0.0]), -1.0)
  q2_weights = (np.array([-1.0, 1.0]), np.array([0.0, 1.0]), 1.0)
  chosen = '_target' if terminal_value == 'target_critic' else ''
  other = '' if chosen else '_target'
  for prefix, offset in ((chosen, 0.0), (other, 5.0)):  # the other pair reads 5 more
    for i, (deter_weights, action_weights, bias) in enumerate((q1_weights, q2_weights)):
      critic_reads(getattr(agent.sac, f'{prefix}_critic_network_{i + 1}'),
                   deter_weights, action_weights, bias + offset)
  policy = planner(agent, ActionReward(TARGET), horizon=3, terminal_value=terminal_value,
                   critic_gamma=0.9, critic_reward_scale=2.0)
  rng = np.random.default_rng(2)
  actions = rng.uniform(-1, 1, [2, 4, 3, 2]).astype(np.float32)  # [B, N, H, A]
  returns = policy.plan_returns(belief(agent), tf.constant(actions)).numpy()

  rewards = -np.square(actions - TARGET).sum(-1)                   # [B, N, H]
  remembered = np.tanh(GAIN * actions[:, :, -1])                   # deter[:A] of s_H

  def q(weights):
    deter_weights, action_weights, bias = weights
    return (remembered + 1) @ deter_weights + (TARGET + 1) @ action_weights + bias

  q1, q2 = q(q1_weights), q(q2_weights)
  assert (q1 < q2).any() and (q2 < q1).any()  # the min picks either critic
  expected = (rewards * 0.9 ** np.arange(3)).sum(-1) + 0.9 ** 3 * np.minimum(q1, q2) / 2.0
  np.testing.assert_allclose(returns, expected, atol=1e-3)


# ---- the filter: the same belief as the actor policy ---------------------------

def test_policy_state_evolves_like_the_actor_policys_filter():
  agent = make_agent()
  cem = planner(agent, horizon=2, num_candidates=20, top_k=4, iterations=2)
  sac = agent.policy  # greedy: posterior mean, like the greedy planner
  assert cem.policy_state_spec == sac.policy_state_spec
  steps = time_steps([[0, 0], [1, 1], [1, 0], [1, 1]])
  cem_state, sac_state = cem.get_initial_state(2), sac.get_initial_state(2)
  deters = []
  for time_step in steps:
    cem_out = cem.action(time_step, cem_state)
    np.testing.assert_array_equal(cem_out.state['prev_action'].numpy(),
                                  cem_out.action.numpy())
    # The actor policy's filter, conditioned on the planner's actions.
    sac_out = sac.action(time_step, sac_state)
    for key in ('deter', 'stoch'):
      np.testing.assert_allclose(cem_out.state[key].numpy(), sac_out.state[key].numpy(),
                                 atol=1e-5, err_msg=key)
    cem_state = cem_out.state
    sac_state = dict(sac_out.state, prev_action=cem_out.action)
    deters.append(cem_out.state['deter'].numpy())
  assert not np.allclose(deters[0], deters[1])
  # Row 1 restarts at step 2: the planner's belief is a fresh filter's there.
  fresh = cem.action(steps[2], cem.get_initial_state(2)).state['deter'].numpy()
  np.testing.assert_allclose(deters[2][1], fresh[1], atol=1e-6)
  assert not np.allclose(deters[2][0], fresh[0])


# ---- export ---------------------------------------------------------------------

STANDALONE = textwrap.dedent('''
    import collections
    import sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability  # registers the distribution types
    # The saved functions match a namedtuple by its name and fields.
    TimeStep = collections.namedtuple('TimeStep', 'step_type reward discount observation')
    policy_dir, data_path, out_path = sys.argv[1:]
    data = np.load(data_path)
    policy = tf.saved_model.load(policy_dir)
    state = policy.get_initial_state(2)
    actions, deters = [], []
    for t in range(data['pixels'].shape[0]):
      time_step = TimeStep(tf.constant(data['step_type'][t]), tf.zeros([2]), tf.ones([2]),
                           {'pixels': tf.constant(data['pixels'][t])})
      out = policy.action(time_step, state)
      state = out.state
      actions.append(out.action.numpy())
      deters.append(state['deter'].numpy())
    np.savez(out_path, actions=np.stack(actions), deters=np.stack(deters))
    assert 'planet_tfa' not in sys.modules and 'tf_agents' not in sys.modules
''')


@pytest.mark.slow  # export, then a bare-TensorFlow process: ~40 s
def test_exported_planner_runs_with_bare_tensorflow_and_matches_in_memory(tmp_path):
  gin.bind_parameter('CemPlanningPolicy.horizon', 3)
  gin.bind_parameter('CemPlanningPolicy.num_candidates', 20)
  gin.bind_parameter('CemPlanningPolicy.top_k', 4)
  gin.bind_parameter('CemPlanningPolicy.iterations', 3)
  gin.bind_parameter('CemPlanningPolicy.actor_share', 0.2)
  gin.bind_parameter('CemPlanningPolicy.terminal_value', 'critic')
  agent = make_agent(eval_with='cem', collect_with='cem')
  paths = saved_policies.export_policies(agent, str(tmp_path / 'policies'), agent.train_step_counter)
  step_types = np.array([[0, 0], [1, 1], [1, 0], [1, 1]], np.int32)
  steps = time_steps(step_types)
  data_path, out_path = tmp_path / 'data.npz', tmp_path / 'out.npz'
  np.savez(data_path, step_type=step_types,
           pixels=np.stack([s.observation['pixels'].numpy() for s in steps]))
  result = subprocess.run(
      [sys.executable, '-c', STANDALONE, paths['greedy_policy'], str(data_path),
       str(out_path)], capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  exported = np.load(out_path)

  policy = agent.export_policy(greedy=True)
  assert isinstance(policy, cem_policy.CemPlanningPolicy)
  action_fn = common.function(policy.action)  # a graph, as in the SavedModel
  state = policy.get_initial_state(2)
  for t, time_step in enumerate(steps):
    out = action_fn(time_step, state)
    state = out.state
    np.testing.assert_allclose(exported['actions'][t], out.action.numpy(), atol=1e-4)
    np.testing.assert_allclose(exported['deters'][t], state['deter'].numpy(), atol=1e-5)

  # The collect planner explores: in bounds, its belief filtered like the greedy one's.
  loaded = tf.saved_model.load(paths['collect_policy'])
  state = loaded.get_initial_state(2)
  assert set(state) == {'deter', 'stoch', 'prev_action'}
  for time_step in steps:
    out = loaded.action(time_step, state)
    assert out.action.shape == (2, 2) and np.abs(out.action.numpy()).max() <= 1.0
    np.testing.assert_array_equal(out.state['prev_action'].numpy(), out.action.numpy())
    state = out.state
  names = {v.name for v in loaded.model_variables}
  assert any('reward_decoder' in n for n in names) and any('gru' in n for n in names)


# ---- end to end -------------------------------------------------------------------

TINY_PLANNER = ['--gin_param=CemPlanningPolicy.horizon=3',
                '--gin_param=CemPlanningPolicy.num_candidates=20',
                '--gin_param=CemPlanningPolicy.top_k=4',
                '--gin_param=CemPlanningPolicy.iterations=2']


def run_train_eval(root_dir, *args, timeout=420):
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  return subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root_dir}',
       *tiny_model.DMC_FLAGS, *args],
      capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


@pytest.mark.slow  # train_eval in another process
def test_train_eval_collects_and_evaluates_with_the_planner(tmp_path):
  root = tmp_path / 'cem'
  result = run_train_eval(root, '--gin_param=train_eval.num_iterations=2',
                          "--gin_param=LatentSacAgent.collect_with='cem'",
                          "--gin_param=LatentSacAgent.eval_with='cem'", *TINY_PLANNER)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  config_text = (root / 'operative_config.gin').read_text()
  assert "LatentSacAgent.collect_with = 'cem'" in config_text
  assert 'CemPlanningPolicy.num_candidates = 20' in config_text
  with open(root / 'eval_returns.csv') as f:
    rows = f.read().splitlines()
  assert len(rows) == 2 and rows[1].startswith('2,')
  # 2 warm-up + 2 planner episodes of 20 steps, and SAC trained alongside.
  assert 'iter 2/2' in result.stdout
  loaded = tf.saved_model.load(str(root / 'policies' / 'greedy_policy'))
  assert any('reward_decoder' in v.name for v in loaded.model_variables)


@pytest.mark.slow  # train_eval in another process
def test_train_eval_with_an_impossible_planner_fails_at_start_naming_it(tmp_path):
  root = tmp_path / 'bad'
  result = run_train_eval(root, "--gin_param=LatentSacAgent.eval_with='cem'",
                          '--gin_param=CemPlanningPolicy.num_candidates=20',
                          '--gin_param=CemPlanningPolicy.top_k=50', timeout=180)
  assert result.returncode != 0
  assert 'CemPlanningPolicy.top_k=50 > CemPlanningPolicy.num_candidates=20' in result.stderr
  assert not (root / 'train').exists()

"""bench.diagnose_run's and bench.planner_eval's checks on a real (tiny) world
model: which belief each check imagines from, which returns the critic is
compared with, and which plans the crash-approach check scores."""
import os

os.environ.setdefault('MUJOCO_GL', 'egl')  # Before dm_control is imported.

import types

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from bench import diagnose_run
from bench import planner_eval
from planet_tfa.networks import rssm as rssm_lib
import tiny_model

pytestmark = pytest.mark.usefixtures('clean_gin')

OBS_SPEC = {'pixels': tensor_spec.TensorSpec([64, 64, 3], tf.uint8, 'pixels'),
            'ego': tensor_spec.TensorSpec([3], tf.float32, 'ego')}
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0, 'action')


def _agent_and_episode(steps=5):
  """A tiny world model with a continuation head, and a recorded episode of
  random beliefs that ended with discount 0 (as diagnose_run records one)."""
  tf.random.set_seed(1)
  rng = np.random.default_rng(5)
  model = tiny_model.world_model(
      OBS_SPEC, ACTION_SPEC, image_depth=8, continuation_scale=1.0)
  deter_size, stoch_size = model.rssm.deter_size, model.rssm.stoch_size
  episode = dict(deter=rng.normal(size=[steps, deter_size]).astype(np.float32),
                 stoch=rng.normal(size=[steps, stoch_size]).astype(np.float32),
                 actions=rng.uniform(-1, 1, [steps, 2]).astype(np.float32),
                 rewards=rng.normal(size=[steps]).astype(np.float32), final_discount=0.0,
                 final_deter=rng.normal(size=[deter_size]).astype(np.float32),
                 final_stoch=rng.normal(size=[stoch_size]).astype(np.float32))
  return types.SimpleNamespace(world_model=model), episode


def test_continuation_foresight_imagines_each_arrival_from_k_steps_before_it():
  """bench.diagnose_run's check: the arrival at t is imagined from belief t - k
  under actions a_{t-k}..a_{t-1}; only the last arrival of an episode that
  ended with discount 0 counts as a terminal."""
  agent, episode = _agent_and_episode()
  model = agent.world_model
  p_end, ended = diagnose_run.continuation_foresight(agent, episode, 2)
  assert p_end.shape == (4,) and ended.tolist() == [False, False, False, True]
  # The last arrival (t = 5) by hand: two prior steps from b_3 under a_3, a_4.
  state = {k: tf.constant(episode[k][3:4]) for k in ('deter', 'stoch')}
  for t in (3, 4):
    state = model.rssm.prior_step(state, tf.constant(episode['actions'][t:t + 1]), sample=False)
  logit = model.continuation_decoder(rssm_lib.features(state)).numpy()[0]
  assert p_end[-1] == pytest.approx(1.0 / (1.0 + np.exp(logit)), rel=1e-5)
  assert len(set(np.round(p_end, 6))) == 4  # each arrival from its own belief
  # k = 0: the filtered beliefs b_1..b_4, then the one after the last frame.
  p_end, ended = diagnose_run.continuation_foresight(agent, episode, 0)
  assert ended.tolist() == [False, False, False, False, True]
  final = {'deter': episode['final_deter'][None], 'stoch': episode['final_stoch'][None]}
  logit = model.continuation_decoder(rssm_lib.features(final)).numpy()[0]
  assert p_end[-1] == pytest.approx(1.0 / (1.0 + np.exp(logit)), rel=1e-5)
  first = {'deter': episode['deter'][1:2], 'stoch': episode['stoch'][1:2]}
  logit = model.continuation_decoder(rssm_lib.features(first)).numpy()[0]
  assert p_end[0] == pytest.approx(1.0 / (1.0 + np.exp(logit)), rel=1e-5)
  _, ended = diagnose_run.continuation_foresight(agent, dict(episode, final_discount=1.0), 1)
  assert not ended.any()  # a time limit is not an end the head should see

  assert diagnose_run.roc_auc([0.9, 0.1, 0.2], [True, False, False]) == 1.0
  assert diagnose_run.roc_auc([0.1, 0.9, 0.2], [True, False, False]) == 0.0
  assert diagnose_run.roc_auc([0.5, 0.5, 0.5], [True, False, False]) == 0.5
  assert diagnose_run.roc_auc([0.3, 0.2], [False, False]) is None


def test_reward_foresight_pairs_each_imagined_arrival_with_the_reward_it_paid():
  """The crash check of a planner without a continuation head: the reward head
  on the belief imagined k steps ahead of arrival t, against r_t."""
  agent, episode = _agent_and_episode()
  model = agent.world_model
  predicted, real, ended = diagnose_run.reward_foresight(agent, episode, 3)
  assert ended.tolist() == [False, False, True]
  assert real.tolist() == episode['rewards'][2:].tolist()  # arrivals 3, 4, 5
  state = {k: tf.constant(episode[k][0:1]) for k in ('deter', 'stoch')}
  for t in (0, 1, 2):
    state = model.rssm.prior_step(state, tf.constant(episode['actions'][t:t + 1]), sample=False)
  assert predicted[0] == pytest.approx(
      model.reward_decoder(rssm_lib.features(state)).numpy()[0], rel=1e-5)
  predicted, real, ended = diagnose_run.reward_foresight(agent, episode, 0)
  final = {'deter': episode['final_deter'][None], 'stoch': episode['final_stoch'][None]}
  assert predicted[-1] == pytest.approx(
      model.reward_decoder(rssm_lib.features(final)).numpy()[0], rel=1e-5)
  assert real.tolist() == episode['rewards'].tolist() and ended.tolist()[-1]
  assert all(len(v) == 0 for v in diagnose_run.reward_foresight(agent, episode, 6))


def test_the_critic_check_bootstraps_a_time_limit_but_not_a_terminal():
  rewards = np.array([1.0, 2.0, 3.0])
  assert diagnose_run.discounted_returns(rewards, 0.5, 0.0).tolist() == [2.75, 3.5, 3.0]
  assert diagnose_run.discounted_returns(rewards, 0.5, 8.0).tolist() == [3.75, 5.5, 7.0]


def test_the_approach_check_scores_the_crashing_actions_and_both_plans_before_each_crash():
  """bench.planner_eval's `approach` check: only the last N beliefs before a
  terminal arrival are checked; the actions really taken (the last one
  repeated past the end) and both planners' plans are scored from that belief
  by the seeing planner's continuation head."""
  model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, image_depth=8, continuation_scale=1.0)
  agent = tiny_model.agent(OBS_SPEC, ACTION_SPEC, model=model)
  _, crashed = _agent_and_episode(steps=5)
  _, timed_out = _agent_and_episode(steps=4)
  timed_out['final_discount'] = 1.0
  planner = dict(horizon=3, num_candidates=16, top_k=4, iterations=2)
  seeing = agent.make_policy('cem', True, **planner)
  blind = agent.make_policy('cem', True, continuation_head=None, **planner)

  actions = crashed['actions']
  np.testing.assert_array_equal(planner_eval.taken_plan(actions, 1, 3), actions[1:4])
  np.testing.assert_array_equal(planner_eval.taken_plan(actions, 3, 3),
                                actions[[3, 4, 4]])
  check = planner_eval.approach_check([timed_out, crashed], seeing, blind, approach=2)
  assert (check['episodes'], check['terminal_episodes'], check['checks']) == (2, 1, 2)
  assert sorted(check['survival_by_steps_before_crash']) == [1, 2]
  # One step before the crash (t = 4): the actions taken are a_4 held for the horizon.
  belief = {k: tf.constant(crashed[k][4:5]) for k in ('deter', 'stoch')}
  taken = tf.constant(np.repeat(actions[4:5], 3, 0)[None, None])
  expected = float(seeing.plan_survival(belief, taken).numpy()[0, 0])
  assert expected < 0.999  # the head is there: a survival of 1 would not tell the plans apart
  assert check['survival_by_steps_before_crash'][1][0] == pytest.approx(expected, abs=1e-4)
  # The seeing planner's plan is the one it would act on there (its greedy seed).
  plan_mean, _ = seeing.plan(belief, seeing.greedy_plan_seed())
  expected_plan = float(seeing.plan_survival(belief, plan_mean[:, None]).numpy()[0, 0])
  assert check['survival_by_steps_before_crash'][1][1] == pytest.approx(expected_plan, abs=1e-4)
  # One step before the crash, the plan made at t = 3 less its first step, from b_4.
  earlier = {k: tf.constant(crashed[k][3:4]) for k in ('deter', 'stoch')}
  earlier_plan = seeing.plan(earlier, seeing.greedy_plan_seed())[0].numpy()[0]
  rest = np.concatenate([earlier_plan[1:], earlier_plan[-1:]])[None, None]
  expected_kept = float(seeing.plan_survival(belief, tf.constant(rest)).numpy()[0, 0])
  assert sorted(check['kept_plan_survival_by_steps_before_crash']) == [1]
  assert check['kept_plan_survival_by_steps_before_crash'][1] == pytest.approx(expected_kept,
                                                                               abs=1e-4)
  assert check['taken_survival_mean'] == pytest.approx(np.mean(
      [v[0] for v in check['survival_by_steps_before_crash'].values()]), abs=1e-4)
  # The blind planner's plan is scored by the seeing planner's head, not by its own (none).
  assert check['blind_plan_survival_mean'] < 0.999
  assert planner_eval.approach_check([timed_out], seeing, blind)['checks'] == 0


def _four_step_random_env():
  """A real py environment of OBS_SPEC / ACTION_SPEC's shapes: 4-step episodes,
  the same observations for the same seed whatever the actions."""
  from tf_agents.environments import random_py_environment
  from tf_agents.specs import array_spec
  return random_py_environment.RandomPyEnvironment(
      {'pixels': array_spec.BoundedArraySpec([64, 64, 3], np.uint8, 0, 255, 'pixels'),
       'ego': array_spec.BoundedArraySpec([3], np.float32, -1, 1, 'ego')},
      array_spec.BoundedArraySpec([2], np.float32, -1, 1, 'action'),
      min_duration=4, max_duration=4, seed=3)


def test_an_episode_is_recorded_with_the_policy_given_and_its_filter_beliefs():
  """planner_eval's `--approach_with cem` checks the planner's own crashes: the
  recorded actions are the planner's (replayed frame by frame from its initial
  state), not the actor's, and each belief is the policy state after its frame."""
  from tf_agents.trajectories import time_step as ts
  model = tiny_model.world_model(OBS_SPEC, ACTION_SPEC, image_depth=8, continuation_scale=1.0)
  agent = tiny_model.agent(OBS_SPEC, ACTION_SPEC, model=model)
  env = _four_step_random_env()
  planner = agent.make_policy('cem', True, horizon=3, num_candidates=16, top_k=4, iterations=2)
  episode = diagnose_run.record_episode(agent, env, planner)
  assert len(episode['actions']) == 4

  def replay(policy):
    state, actions, deter = policy.get_initial_state(1), [], []
    for t in range(4):
      step = ts.TimeStep(
          tf.constant([ts.StepType.FIRST if t == 0 else ts.StepType.MID]),
          tf.zeros([1]), tf.ones([1]),
          {k: tf.constant(v[t:t + 1]) for k, v in episode['frames'].items()})
      out = policy.action(step, state)
      state = out.state
      actions.append(out.action.numpy()[0])
      deter.append(state['deter'].numpy()[0])
    return np.array(actions), np.array(deter)

  planner_actions, planner_deter = replay(planner)
  np.testing.assert_allclose(episode['actions'], planner_actions, atol=1e-5)
  np.testing.assert_allclose(episode['deter'], planner_deter, atol=1e-5)
  # From each recorded belief, the plan under the greedy planner's own seed
  # starts with the action it took there.
  for t in range(4):
    belief = {k: tf.constant(episode[k][t:t + 1]) for k in ('deter', 'stoch')}
    plan_mean, _ = planner.plan(belief, planner.greedy_plan_seed())
    np.testing.assert_allclose(np.clip(plan_mean.numpy()[0, 0], -1, 1), episode['actions'][t],
                               atol=1e-5)
  actor_actions, _ = replay(agent.make_policy('sac', True))
  assert np.abs(actor_actions - planner_actions).max() > 1e-3  # the two policies differ here


def test_the_stochastic_diagnosis_samples_its_actions_and_the_greedy_one_repeats():
  """`--policy stochastic` drives the episodes with sampled actions (two sampling
  seeds, two action sequences on the same task seed); `greedy` with the actor's
  mode (the same actions under any sampling seed)."""
  agent = tiny_model.agent(OBS_SPEC, ACTION_SPEC)

  def actions(name, sampling_seed):
    env = _four_step_random_env()
    tf.random.set_seed(sampling_seed)
    return diagnose_run.record_episode(agent, env, diagnose_run.acting_policy(agent, name))['actions']

  np.testing.assert_allclose(actions('greedy', 1), actions('greedy', 2), atol=1e-6)
  assert np.abs(actions('stochastic', 1) - actions('stochastic', 2)).max() > 1e-3
  assert diagnose_run.parse_args(['--root_dir=r']).policy == 'greedy'
  with pytest.raises(ValueError, match="policy 'mode'"):
    diagnose_run.acting_policy(agent, 'mode')


@pytest.mark.parametrize('flags', [['--policies=sac,cme'], ['--approach_with=approach']])
def test_planner_eval_names_an_unknown_policy_before_loading_anything(flags):
  """A typo stops the program at once, naming it and the valid names (the root is never read)."""
  import subprocess
  import sys
  result = subprocess.run(
      [sys.executable, '-m', 'bench.planner_eval', '--root_dir=/nonexistent/root'] + flags,
      capture_output=True, text=True, timeout=300, check=False,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert result.returncode != 0
  name = flags[0].split('=')[1].split(',')[-1]
  assert f"unknown policy '{name}'" in result.stderr
  assert '--approach_with one of sac, cem' in result.stderr
  assert 'Traceback' not in result.stderr


def test_upside_down_steps_wrap_the_pitch():
  # A full turn forward is upright again; past 90 degrees either way is upside down.
  assert diagnose_run.upside_down_steps([2 * np.pi + 0.1, -0.2, 1.5]).mean() == 0.0
  assert diagnose_run.upside_down_steps([np.pi - 0.1, -np.pi + 0.1, 0.0, 3 * np.pi]).mean() == 0.75


def test_torso_pitch_reads_the_real_cheetahs_rooty_joint_through_the_wrappers():
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  env = suites.load_dmc_pixels('cheetah-run', action_repeat=4, image_size=16, seed=0)
  try:
    env.reset()
    pitch = diagnose_run.torso_pitch(env)
    assert pitch is not None and abs(pitch) < np.pi / 2  # starts on its feet
    # TF-Agents' wrappers pass attribute reads through to dm_control's env.
    env.physics.named.data.qpos['rooty'] = np.pi  # turned over
    assert diagnose_run.torso_pitch(env) == pytest.approx(np.pi)
    assert diagnose_run.upside_down_steps([diagnose_run.torso_pitch(env)]).mean() == 1.0
  finally:
    env.close()
  cartpole = suites.load_dmc_pixels('cartpole-swingup', image_size=16, seed=0)
  try:
    cartpole.reset()
    assert diagnose_run.torso_pitch(cartpole) is None  # no planar body
  finally:
    cartpole.close()


def test_torso_pitch_is_none_for_a_physics_that_is_not_dm_controls():
  wrapped = types.SimpleNamespace(_env=types.SimpleNamespace(physics=object()))
  assert diagnose_run.torso_pitch(wrapped) is None
  assert diagnose_run.torso_pitch(types.SimpleNamespace()) is None


def test_steps_before_turning_over_marks_the_upright_lead_into_each_flip():
  upside = np.array([0, 0, 0, 0, 1, 1, 0, 0, 1, 0], bool)
  np.testing.assert_array_equal(diagnose_run.turn_overs(upside), [4, 8])
  before = diagnose_run.steps_before_turning_over(upside, lead=3)
  # Three steps before the first turn-over; before the second, only the two
  # upright steps (the one before them is still upside down).
  np.testing.assert_array_equal(np.flatnonzero(before), [1, 2, 3, 6, 7])
  assert not diagnose_run.steps_before_turning_over(np.zeros(5, bool), lead=3).any()
  # An episode that starts upside down has not turned over.
  assert len(diagnose_run.turn_overs(np.array([1, 1, 0], bool))) == 0


def test_critic_by_posture_splits_q_returns_and_spread_at_the_turn_overs():
  # Episode 1 turns over at step 3 and stays over; episode 2 never does.
  upside = [np.array([0, 0, 0, 1, 1], bool), np.zeros(3, bool)]
  series = [{'critic_q': np.array([10., 20., 30., 1., 3.]),
             'return': np.array([12., 21., 31., 2., 4.]),
             'critic_spread': np.array([0.1, 0.3, 0.5, 0.0, 0.2])},
            {'critic_q': np.array([50., 60., 70.]), 'return': np.array([40., 50., 60.]),
             'critic_spread': np.array([0.05, 0.05, 0.2])}]
  split = diagnose_run.critic_by_posture(series, upside, lead=2)
  assert split == {'critic_q_upside_down': 2.0, 'return_upside_down': 3.0,
                   'critic_spread_upside_down': 0.1,
                   'critic_q_before_turning_over': 25.0, 'return_before_turning_over': 26.0,
                   'critic_spread_before_turning_over': 0.4,
                   'critic_q_upright': 47.5, 'return_upright': 40.5,
                   'critic_spread_upright': 0.1}
  # Without a turn-over there is nothing before one, nor upside down.
  split = diagnose_run.critic_by_posture(series[1:], upside[1:], lead=2)
  assert split['critic_q_before_turning_over'] is None and split['critic_q_upside_down'] is None
  assert split['critic_spread_before_turning_over'] is None
  assert split['critic_q_upright'] == 60.0


def test_steps_to_turning_over_counts_down_to_the_nearest_flip_ahead():
  upside = np.array([0, 0, 0, 0, 1, 1, 0, 0, 1, 0], bool)
  np.testing.assert_array_equal(diagnose_run.steps_to_turning_over(upside),
                                [4, 3, 2, 1, 4, 3, 2, 1, np.inf, np.inf])
  assert np.isinf(diagnose_run.steps_to_turning_over(np.zeros(3, bool))).all()


def test_body_state_reads_the_cheetahs_joints_with_the_pitch_as_sine_and_cosine():
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  env = suites.load_dmc_pixels('cheetah-run', action_repeat=4, image_size=16, seed=0)
  try:
    env.reset()
    physics = env.physics
    physics.named.data.qpos['rootx'] = 123.0  # far down the track: not part of the state
    physics.named.data.qpos['rooty'] = np.pi  # turned over
    physics.named.data.qpos['bthigh'] = 0.25
    physics.named.data.qvel['rooty'] = -3.0
    state = diagnose_run.body_state(env)
    # 9 joints: rootz and the six leg joints, sin and cos of the pitch, 9 velocities.
    assert state.shape == (7 + 2 + 9,) and state.dtype == np.float32
    assert 123.0 not in state
    np.testing.assert_allclose(state[7:9], [0.0, -1.0], atol=1e-6)
    assert state[1] == pytest.approx(0.25)  # bthigh follows rootz
    np.testing.assert_allclose(state[9:], physics.data.qvel, rtol=1e-6)
  finally:
    env.close()
  cartpole = suites.load_dmc_pixels('cartpole-swingup', image_size=16, seed=0)
  try:
    cartpole.reset()
    assert diagnose_run.body_state(cartpole).shape == (4,)  # slider and pole, and their speeds
  finally:
    cartpole.close()
  assert diagnose_run.body_state(types.SimpleNamespace(_env=types.SimpleNamespace(
      physics=object()))) is None
  assert diagnose_run.body_state(_four_step_random_env()) is None


def _episodes_with_flips(num_episodes=6, steps=80, onset=60, flipping=(0, 1, 2, 3)):
  """Upside-down masks: episodes in `flipping` turn over at `onset` and stay over."""
  upside = []
  for i in range(num_episodes):
    u = np.zeros(steps, bool)
    if i in flipping:
      u[onset:] = True
    upside.append(u)
  return upside


def test_fall_foresight_scores_each_lead_bin_against_the_steps_far_from_a_fall():
  upside = _episodes_with_flips()
  distance = [diagnose_run.steps_to_turning_over(u) for u in upside]
  # Sees only the last 5 steps before a fall; rates upside-down steps highest
  # of all, which must not count: they are neither lead-in nor upright running.
  last_five = [np.where(u, 100.0, (d <= 5).astype(float)) for u, d in zip(upside, distance)]
  nearer = [np.where(u, 100.0, -np.minimum(d, 1e3)) for u, d in zip(upside, distance)]
  steps_to_fall = [np.where(u, -1.0, np.minimum(d, 50.0)) for u, d in zip(upside, distance)]
  result = diagnose_run.fall_foresight(
      {'last_five': ('score', last_five), 'nearer': ('score', nearer),
       'steps_to_fall': ('mean', steps_to_fall)},
      upside, lead=25, lead_bins=[5, 12], ridge=0.1)
  assert result['positive_steps'] == 4 * 25
  assert result['negative_steps'] == 4 * 35 + 2 * 80
  assert result['last_five'] == pytest.approx((5 + 0.5 * 20) / 25)
  assert result['by_steps_to_fall'] == {
      '1-5': {'last_five': 1.0, 'nearer': 1.0, 'steps_to_fall': 3.0},
      '6-12': {'last_five': 0.5, 'nearer': 1.0, 'steps_to_fall': 9.0},
      '13-25': {'last_five': 0.5, 'nearer': 1.0, 'steps_to_fall': 19.0}}
  assert result['nearer'] == 1.0
  assert result['steps_to_fall'] == 13.0
  # Farther: the 35 first steps of a flipping episode (26-50 steps ahead, the
  # rest capped at 50) and the never-flipping ones (50); upside down left out.
  farther = (4 * (sum(range(26, 51)) + 10 * 50) + 2 * 80 * 50) / (4 * 35 + 2 * 80)
  assert result['steps_to_fall_farther'] == pytest.approx(round(farther, 1))


def test_the_fall_probe_finds_a_signal_in_the_inputs_and_none_in_noise():
  rng = np.random.default_rng(0)
  upside = _episodes_with_flips()
  distance = [diagnose_run.steps_to_turning_over(u) for u in upside]
  noise = [rng.normal(size=(80, 6)) for _ in upside]
  # One input leans towards a coming fall (plus noise), among five noise inputs.
  signal = [np.concatenate([n[:, :5], (d <= 25)[:, None] + 0.3 * n[:, 5:]], axis=1)
            for n, d in zip(noise, distance)]
  result = diagnose_run.fall_foresight(
      {'signal': ('probe', signal), 'noise': ('probe', noise)}, upside, lead=25,
      lead_bins=[], ridge=0.1)
  assert result['signal'] > 0.95
  assert 0.3 < result['noise'] < 0.7
  assert list(result['by_steps_to_fall']) == ['1-25']


def test_each_episode_is_scored_by_a_probe_that_never_saw_it():
  rng = np.random.default_rng(1)
  upside = _episodes_with_flips()
  used = [~u for u in upside]
  positive = [diagnose_run.steps_to_turning_over(u) <= 25 for u in upside]
  inputs = [rng.normal(size=(80, 4)) for _ in upside]
  scores = diagnose_run.probe_scores_held_out(inputs, positive, used, ridge=0.1)
  assert len(scores) == sum(u.sum() for u in used)
  # Relabel episode 0 (a fall at another step): its own scores stay (its probe
  # never saw its labels), everyone else's move (their probes learnt from them).
  relabelled = [p.copy() for p in positive]
  relabelled[0] = np.zeros(80, bool)
  relabelled[0][10:35] = True
  rescored = diagnose_run.probe_scores_held_out(inputs, relabelled, used, ridge=0.1)
  first = used[0].sum()
  np.testing.assert_allclose(rescored[:first], scores[:first])
  assert np.abs(rescored[first:] - scores[first:]).max() > 1e-6
  # One episode with a fall cannot be scored by the others.
  assert diagnose_run.probe_scores_held_out(
      inputs, [positive[0]] + [np.zeros(80, bool)] * 5, used, ridge=0.1) is None


@pytest.mark.parametrize('flag, fix', [('--lead_bins=5,x', 'whole numbers >= 0'),
                                       ('--foresight=0,-3', 'whole numbers >= 0'),
                                       ('--probe_ridge=0', 'a number above 0'),
                                       ('--turn_over_lead=0', 'a whole number >= 1'),
                                       ('--branch_states=-2', 'a whole number >= 0'),
                                       ('--branch_rollouts=two', 'a whole number >= 1')])
def test_a_bad_check_setting_stops_before_any_episode_runs_naming_the_fix(flag, fix, capsys):
  with pytest.raises(SystemExit):
    diagnose_run.parse_args(['--root_dir=r', flag])
  error = capsys.readouterr().err
  assert flag.split('=')[0] in error and fix in error


def test_the_check_settings_parse_into_step_counts():
  args = diagnose_run.parse_args(['--root_dir=r', '--lead_bins=3,10', '--foresight=0,6'])
  assert args.lead_bins == (3, 10) and args.foresight == (0, 6)
  assert diagnose_run.parse_args(['--root_dir=r', '--lead_bins=']).lead_bins == ()
  assert diagnose_run.parse_args(['--root_dir=r']).lead_bins == (5, 12)


def test_a_branch_from_a_recorded_step_repeats_the_episode_under_the_greedy_actor():
  """fall_branches' rollouts go on from the physics and the filter as they
  were: the greedy actor with its own action there earns the recorded return
  (the critic-bootstrapped one of critic_and_returns) and turns the same way,
  and its soft return adds the actor's -alpha log pi of each later action,
  discounted; another first action or the stochastic actor leads elsewhere."""
  from tf_agents.specs import tensor_spec as specs  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  tf.random.set_seed(3)
  env = suites.load_dmc_pixels('cheetah-run', action_repeat=4, seed=0, time_limit=1.2)
  try:
    agent = tiny_model.agent(specs.from_spec(env.observation_spec()),
                             specs.from_spec(env.action_spec()))
    episode = diagnose_run.record_episode(agent, env, branch_points=True)
    steps = len(episode['rewards'])
    assert steps == 30 and len(episode['branch_points']) == steps
    recorded = diagnose_run.critic_and_returns(agent, episode, float(agent.sac._gamma))['return']  # pylint: disable=protected-access
    greedy = tfa_common.function(agent.make_policy('sac', True).action)
    env.step(np.zeros(6, np.float32))  # wherever the env was left: the branch puts it back
    distribution, _ = agent.actor_network(tf.constant(episode['features']), step_type=(),
                                          network_state=())
    log_pi = distribution.log_prob(np.clip(episode['actions'], -0.999999, 0.999999)).numpy()
    alpha, gamma = float(np.exp(agent.log_alpha.numpy())), float(agent.sac._gamma)  # pylint: disable=protected-access
    for t in (0, 11, 29):
      branch = diagnose_run.branch_rollout(
          agent, env, episode['branch_points'][t], episode['actions'][t], greedy, steps - t)
      assert branch['return'] == pytest.approx(recorded[t], rel=1e-5, abs=1e-5)
      np.testing.assert_allclose(branch['pitch'], episode['torso_pitch'][t:], atol=1e-6)
      bonus = -alpha * sum(gamma ** k * log_pi[t + k] for k in range(1, steps - t))
      assert branch['soft_return'] - branch['return'] == pytest.approx(bonus, rel=1e-4, abs=1e-4)
    assert bonus == 0.0 and abs(log_pi).min() > 1e-2  # the last step: no later action
    pushed = diagnose_run.branch_rollout(
        agent, env, episode['branch_points'][11], -episode['actions'][11], greedy, steps - 11)
    assert abs(pushed['return'] - recorded[11]) > 1e-3
    stochastic = tfa_common.function(diagnose_run.acting_policy(agent, 'stochastic').action)
    sampled = [diagnose_run.branch_rollout(agent, env, episode['branch_points'][0],
                                           episode['actions'][0], stochastic, steps)['return']
               for _ in range(2)]
    assert abs(sampled[0] - sampled[1]) > 1e-3 and abs(sampled[0] - recorded[0]) > 1e-3
  finally:
    env.close()


def test_branch_states_are_drawn_upright_before_a_fall_and_farther_from_one():
  upside = _episodes_with_flips()  # episodes 0-3 turn over at step 60, 4-5 never
  chosen = diagnose_run.choose_branch_states(upside, lead=10, count=12, seed=0)
  before = [(e, t) for e, t, b in chosen if b]
  farther = [(e, t) for e, t, b in chosen if not b]
  assert len(before) == 12 and len(farther) == 12 and len(set(chosen)) == 24
  assert all(50 <= t < 60 and e < 4 for e, t in before)
  assert all(not upside[e][t] and (e >= 4 or t < 50) for e, t in farther)
  assert diagnose_run.choose_branch_states(upside, lead=10, count=12, seed=0) == chosen
  assert diagnose_run.choose_branch_states(upside, lead=10, count=12, seed=1) != chosen
  # Fewer candidates than asked for: all of them (4 flips x 2 steps).
  few = diagnose_run.choose_branch_states(upside, lead=2, count=100, seed=0)
  assert sorted((e, t) for e, t, b in few if b) == [(e, t) for e in range(4) for t in (58, 59)]


def test_branching_without_an_upright_state_reports_no_states_instead_of_failing():
  # Episodes spent wholly on the back leave nothing to branch from: no agent
  # or env is touched, and fall_branches gets empty [states, rollouts] arrays.
  on_its_back = {'torso_pitch': np.full(30, np.pi), 'branch_points': [None] * 30,
                 'actions': np.zeros((30, 6)), 'rewards': np.zeros(30)}
  chosen, returns, soft_returns, turned = diagnose_run.branch_from_episodes(
      None, None, [on_its_back], lead=10, count=4, rollouts=6, seed=0)
  assert chosen == [] and returns.shape == soft_returns.shape == turned.shape == (0, 6)
  assert 'branch_points' not in on_its_back
  result = diagnose_run.fall_branches([], [], returns, soft_returns, turned, [])
  assert result['states_before_turning_over'] == result['states_farther'] == 0
  assert result['critic_q_farther'] is None and result['critic_vs_soft_return_corr'] is None


def test_fall_branches_compares_the_critic_with_the_stochastic_rollouts_per_class():
  critic_q = [100.0, 80.0, 120.0, 110.0]
  greedy_return = [40.0, 20.0, 130.0, 100.0]
  rollout_returns = [[90.0, 50.0], [60.0, 60.0], [120.0, 140.0], [100.0, 100.0]]
  soft_returns = [[80.0, 40.0], [50.0, 50.0], [110.0, 130.0], [90.0, 90.0]]
  turned = [[False, True], [True, True], [False, False], [False, True]]
  result = diagnose_run.fall_branches(critic_q, greedy_return, rollout_returns, soft_returns,
                                      turned, [True, True, False, False])
  assert result['states_before_turning_over'] == 2 and result['states_farther'] == 2
  assert result['critic_q_before_turning_over'] == 90.0
  assert result['greedy_return_before_turning_over'] == 30.0
  assert result['stochastic_return_before_turning_over'] == 65.0
  assert result['stochastic_soft_return_before_turning_over'] == 55.0
  assert result['critic_minus_soft_return_before_turning_over'] == 35.0
  assert result['stochastic_turn_over_share_before_turning_over'] == 0.75
  assert result['stochastic_return_farther'] == 115.0
  assert result['critic_minus_soft_return_farther'] == 10.0
  assert result['stochastic_turn_over_share_farther'] == 0.25
  assert result['critic_vs_soft_return_corr'] == pytest.approx(
      np.corrcoef(critic_q, [60.0, 50.0, 120.0, 90.0])[0, 1], abs=1e-3)

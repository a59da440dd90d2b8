"""Why a trained run scores what it scores: model, critic and entropy checks (issue 14).

  python -m bench.diagnose_run --root_dir=ROOT [--episodes 2] [--seed 100]
      [--horizon 12] [--context 5] [--policy greedy|stochastic]
      [--turn_over_lead 25] [--lead_bins 5,12] [--probe_ridge 0.1]
      [--branch_states 0] [--branch_rollouts 8]

Loads ROOT's newest checkpoint (its own operative config) and drives actor
episodes on the run's task (greedy, or with `--policy stochastic` the policy
that samples its actions, as the stochastic evaluation and SLAC's curves do),
recording every frame, action, reward and filter belief. Then, on those
episodes, one JSON line per check:

  open_loop_image_mse   the world model's open-loop frames: observe `context`
                        frames, imagine `horizon` more under the real actions;
                        pixel MSE per imagined step, and the same MSE for
                        "nothing moves" (repeat the last context frame). A
                        ratio near 1 means the model predicts no motion.
  open_loop_reward      summed reward over `horizon` steps predicted open loop
                        from the filtered belief vs the real sum: correlation,
                        mean absolute error (what a planner would rely on).
  critic_calibration    min(Q1, Q2) of the actor's action at each belief of the
                        first half of each episode vs the discounted return
                        that followed (bootstrapped at the time limit with the
                        critic's own value): bias and correlation.
  policy_entropy        entropy of the actor's tanh-Gaussian at the visited
                        beliefs (Monte-Carlo, 64 samples) against SAC's target
                        entropy, and the temperature alpha.
  continuation_foresight  (runs with a continuation head) whether the head
                        sees an episode's end coming: per arrival at step t,
                        P(end) by the head on the prior imagined k steps open
                        loop from the belief at t - k under the real actions;
                        at the arrivals that ended an episode (discount 0) vs
                        all others, and the ROC AUC between them, per k
                        (k = 0: the filter's belief after seeing frame t).
  reward_foresight      the same arrivals through the reward head: the reward
                        it predicts at the arrivals that ended an episode (a
                        crash's penalty) and elsewhere, beside the real ones,
                        per k. A planner without a continuation head sees a
                        crash only through this.
  upside_down           (dm_control's planar bodies: cheetah, walker, hopper)
                        the share of episodes the body spent more than 10% of
                        its steps upside down in (torso pitch past 90 degrees),
                        and the mean return of those episodes and of the
                        others: whether low returns are flips or slow running.
                        Beside it, min-critic Q against the discounted return
                        that followed, upside down, in the `turn_over_lead`
                        steps before each turn-over, and upright elsewhere:
                        whether the critic sees what a flip costs; and the
                        twin critics' spread |Q1 - Q2| there (what a
                        pessimistic target on their disagreement could use).
  fall_foresight        (with upside_down) whether a fall can be seen coming:
                        the upright steps in the `turn_over_lead` steps
                        before a turn-over against upright steps farther from
                        one, as ROC AUC, overall and by steps to the fall, of
                        a linear probe on the features SAC sees (fit on the
                        other episodes), the same probe on the simulator's
                        joint state, minus the critic's Q, and minus the
                        return that followed: whether a critic blind to a
                        fall lacks the features or does not use them.
  fall_branches         (with upside_down, `--branch_states N` > 0) whether the
                        critic is wrong about the lead-in to a fall, or right
                        for the policy it values: from N upright states before
                        a turn-over and N farther from one, the physics and
                        the filter put back as they were, the recorded action
                        taken, then `branch_rollouts` rollouts of the
                        stochastic policy (whose Q the critic learns) to the
                        episode's end; their mean discounted return and how
                        many turned over, beside the critic's Q there.
"""
import argparse
import os
import sys

from bench import common


ACTING_POLICIES = ('greedy', 'stochastic')


def step_counts(text):
  """'0,1,3' -> (0, 1, 3): agent-step counts, checked before any episode runs."""
  error = argparse.ArgumentTypeError(
      f'{text!r}: give agent-step counts as comma-separated whole numbers >= 0, e.g. 5,12')
  try:
    counts = tuple(int(v) for v in text.split(',') if v.strip())
  except ValueError:
    raise error from None
  if any(c < 0 for c in counts):
    raise error
  return counts


def whole_at_least(minimum):
  """An argparse type: one whole number >= `minimum`, checked before any episode runs."""
  def parse(text):
    try:
      value = int(text)
    except ValueError:
      value = None
    if value is None or value < minimum:
      raise argparse.ArgumentTypeError(f'{text!r}: give a whole number >= {minimum}')
    return value
  return parse


def positive_float(text):
  error = argparse.ArgumentTypeError(f'{text!r}: give a number above 0, e.g. 0.1')
  try:
    value = float(text)
  except ValueError:
    raise error from None
  if not value > 0:  # also NaN
    raise error
  return value


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--root_dir', required=True)
  parser.add_argument('--episodes', type=int, default=2)
  parser.add_argument('--seed', type=int, default=100,
                      help="the task's seed, and the stochastic policy's sampling seed")
  parser.add_argument('--policy', choices=ACTING_POLICIES, default='greedy',
                      help='which actor drives the episodes: its mode, or its sampled actions')
  parser.add_argument('--horizon', type=int, default=12, help='imagined agent steps')
  parser.add_argument('--context', type=int, default=5, help='observed frames before imagining')
  parser.add_argument('--stride', type=int, default=8, help='agent steps between checked windows')
  parser.add_argument('--turn_over_lead', type=whole_at_least(1), default=25,
                      help='agent steps before a turn-over that the upside_down check calls leading into it')
  parser.add_argument('--lead_bins', type=step_counts, default=(5, 12),
                      help='steps-to-fall bin edges below --turn_over_lead for the fall_foresight check')
  parser.add_argument('--probe_ridge', type=positive_float, default=0.1,
                      help="fall_foresight's linear probes: ridge penalty on standardized inputs")
  parser.add_argument('--branch_states', type=whole_at_least(0), default=0,
                      help='fall_branches check: upright states branched from, per class (before a '
                      'turn-over / farther from one); 0 skips the check (it costs minutes)')
  parser.add_argument('--branch_rollouts', type=whole_at_least(1), default=8,
                      help='fall_branches check: stochastic-policy rollouts from each branched state')
  parser.add_argument('--foresight', type=step_counts, default=(0, 1, 3, 6, 12),
                      help='imagined steps k of the continuation_foresight check (0: filtered)')
  return parser.parse_args(argv)


UPSIDE_DOWN_SHARE = 0.1  # an episode "flipped": this share of its steps upside down


def dm_physics(env):
  """dm_control's physics under `env`'s wrappers (TF-Agents' wrappers keep the
  wrapped env as `_env`, dm_control's suite wrappers as `_environment`); None
  where there is none."""
  for _ in range(16):
    physics = getattr(env, 'physics', None)
    if physics is not None:
      return physics
    env = getattr(env, '_env', None) or getattr(env, '_environment', None)
    if env is None:
      return None
  return None


def torso_pitch(env):
  """The body's pitch in radians (the `rooty` joint of dm_control's planar
  bodies: cheetah, walker, hopper) under `env`'s wrappers; None where the task
  has no such joint or `env` no dm_control physics."""
  physics = dm_physics(env)
  try:
    return None if physics is None else float(physics.named.data.qpos['rooty'][0])
  except (KeyError, AttributeError):  # no such joint, or not dm_control's physics
    return None


def body_state(env):
  """What the simulator knows of the body now, as a linear probe's reference
  input: the joint positions (the pitch `rooty` as its sine and cosine, which do
  not jump at a full turn; the track position `rootx` left out, the task does
  not depend on it) and all joint velocities. None without dm_control physics."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  physics = dm_physics(env)
  try:
    qpos, qvel = np.array(physics.data.qpos), np.array(physics.data.qvel)
    names = list(physics.named.data.qpos.axes.row.names)
  except AttributeError:  # None, or not dm_control's physics
    return None
  if len(names) != len(qpos):  # ball or free joints: several numbers per name
    return np.concatenate([qpos, qvel]).astype(np.float32)
  kept = [qpos[i] for i, name in enumerate(names) if name not in ('rootx', 'rooty')]
  if 'rooty' in names:
    pitch = qpos[names.index('rooty')]
    kept += [np.sin(pitch), np.cos(pitch)]
  return np.concatenate([kept, qvel]).astype(np.float32)


def upside_down_steps(pitches):
  """Per step, whether the pitch (radians, unwrapped) is past 90 degrees."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  wrapped = np.angle(np.exp(1j * np.asarray(pitches, np.float64)))  # into (-pi, pi]
  return np.abs(wrapped) > np.pi / 2


def turn_overs(upside_down):
  """The steps where the body turns over: upside down after an upright step."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  upside_down = np.asarray(upside_down, bool)
  return np.flatnonzero(~upside_down[:-1] & upside_down[1:]) + 1


def steps_to_turning_over(upside_down):
  """Per step, how many steps until the next turn-over (1: the next step is
  upside down); inf where none follows."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  distance = np.full(len(upside_down), np.inf)
  for onset in turn_overs(upside_down)[::-1]:  # the nearest onset is written last
    distance[:onset] = onset - np.arange(onset)
  return distance


def steps_before_turning_over(upside_down, lead):
  """The upright steps among the `lead` steps before each turn-over: where a
  critic that sees a flip coming values the state below upright running."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return (steps_to_turning_over(upside_down) <= lead) & ~np.asarray(upside_down, bool)


def batched_time_step(step):
  """A py environment's time step as a batch of one, as a TF policy takes it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  return ts.TimeStep(tf.constant([step.step_type]), tf.constant([step.reward], tf.float32),
                     tf.constant([step.discount], tf.float32),
                     {k: tf.constant(v[None]) for k, v in step.observation.items()})


def physics_state(env):
  """The full integration state of `env`'s dm_control physics (positions,
  velocities, the solver's warm start, controls): what `restore_physics` needs
  to go on exactly as the simulator would have. None without dm_control physics."""
  import mujoco  # pylint: disable=g-import-not-at-top
  physics = dm_physics(env)
  return None if physics is None else physics.get_state(sig=mujoco.mjtState.mjSTATE_INTEGRATION)


def restore_physics(env, state):
  """Puts `env`'s physics back to `physics_state`'s `state`, with the
  position- and velocity-dependent quantities a finished step leaves behind
  (dm_control's split step relies on them), so the next steps repeat."""
  import mujoco  # pylint: disable=g-import-not-at-top
  physics = dm_physics(env)
  physics.set_state(state, sig=mujoco.mjtState.mjSTATE_INTEGRATION)
  mujoco.mj_step1(physics.model.ptr, physics.data.ptr)


def record_episode(agent, env, policy=None, branch_points=False):
  """One episode as numpy: frames, actions, rewards, and after each frame
  the filter's belief (deter, stoch) and the features SAC sees. `policy`: any
  policy with the actor's filter state (the CEM planner has it); default the
  greedy latent actor. `branch_points`: also keep, per step, what a rollout
  from that step needs (`branch_rollout`): the physics state, the time step
  and the policy state before the policy saw it."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  from planet_tfa.networks import rssm as rssm_lib  # pylint: disable=g-import-not-at-top
  if policy is None:
    policy = agent.make_policy('sac', True)
  act = tfa_common.function(policy.action)
  step, state = env.reset(), policy.get_initial_state(1)
  frames, actions, rewards, deter, stoch, pitch, body = [], [], [], [], [], [], []
  points = []
  while True:  # pylint: disable=while-used
    batched = batched_time_step(step)
    if branch_points and not step.is_last():
      points.append(dict(physics=physics_state(env), time_step=batched, policy_state=state))
    out = act(batched, state)
    if step.is_last():  # the belief after the last frame; its action is never taken
      final_belief = {k: out.state[k].numpy()[0] for k in ('deter', 'stoch')}
      break
    frames.append(step.observation)
    state = out.state
    deter.append(state['deter'].numpy()[0])
    stoch.append(state['stoch'].numpy()[0])
    actions.append(out.action.numpy()[0])
    body.append(body_state(env))  # the simulator at the frame the belief has just seen
    step = env.step(actions[-1])
    rewards.append(float(step.reward))
    pitch.append(torso_pitch(env))
  belief = {'deter': np.array(deter), 'stoch': np.array(stoch)}
  return dict(frames={k: np.stack([f[k] for f in frames]) for k in frames[0]},
              actions=np.array(actions, np.float32), rewards=np.array(rewards, np.float32),
              features=rssm_lib.features(belief).numpy(), final_discount=float(step.discount),
              final_deter=final_belief['deter'], final_stoch=final_belief['stoch'],
              torso_pitch=None if None in pitch else np.array(pitch),
              body_state=None if any(b is None for b in body) else np.stack(body),
              **(dict(branch_points=points) if branch_points else {}), **belief)


def acting_policy(agent, name):
  """The latent actor policy `name` (one of ACTING_POLICIES): 'stochastic'
  samples the posterior and the action, as the collect policy and the
  stochastic evaluation do."""
  if name not in ACTING_POLICIES:
    raise ValueError(f'policy {name!r}: use one of {ACTING_POLICIES}')
  return agent.make_policy('sac', name == 'greedy')


def roc_auc(scores, positive):
  """P(a random positive scores above a random negative), ties counting half."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
  pos, neg = scores[positive], scores[~positive]
  if not len(pos) or not len(neg):
    return None
  above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
  return float(above / (len(pos) * len(neg)))


def foresight_features(agent, episode, k):
  """Features at each arrival t = max(k, 1)..T, imagined k steps from the belief
  at t - k under the real actions (k = 0: the filter's belief after seeing
  frame t, as the heads are trained); the arrivals t; whether each ended the
  episode. None when the episode is shorter than k."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from planet_tfa.networks import rssm as rssm_lib  # pylint: disable=g-import-not-at-top
  model = agent.world_model
  steps = len(episode['actions'])       # beliefs b_0..b_{T-1}; the last arrival is at T
  if k == 0:
    belief = {key: tf.constant(np.concatenate([episode[key][1:], episode[f'final_{key}'][None]]))
              for key in ('deter', 'stoch')}
    arrivals = np.arange(1, steps + 1)
  else:
    starts = np.arange(0, steps - k + 1)
    if not len(starts):
      return None
    start = {key: tf.constant(episode[key][starts]) for key in ('deter', 'stoch')}
    actions = tf.constant(np.stack([episode['actions'][s:s + k] for s in starts]))
    prior = model.rssm.imagine(actions, start, sample=False)
    belief = {key: prior[key][:, -1] for key in ('deter', 'stoch')}
    arrivals = starts + k
  ended = (arrivals == steps) & (episode['final_discount'] == 0.0)
  return rssm_lib.features(belief), arrivals, ended


def continuation_foresight(agent, episode, k):
  """P(end) by the continuation head at each arrival (`foresight_features`), and
  whether it ended the episode."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  foresight = foresight_features(agent, episode, k)
  if foresight is None:
    return np.zeros([0]), np.zeros([0], bool)
  features, _, ended = foresight
  return tf.sigmoid(-agent.world_model.continuation_decoder(features)).numpy(), ended


def reward_foresight(agent, episode, k):
  """The reward head's prediction at each arrival (`foresight_features`), the
  real reward of that arrival, and whether it ended the episode."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  foresight = foresight_features(agent, episode, k)
  if foresight is None:
    return np.zeros([0]), np.zeros([0]), np.zeros([0], bool)
  features, arrivals, ended = foresight
  real = episode['rewards'][arrivals - 1]  # r_t comes with the arrival at t
  return agent.world_model.reward_decoder(features).numpy(), real, ended


def open_loop_images(agent, episode, context, horizon, stride):
  """Per imagined step: model MSE and repeat-last-frame MSE, pixels in [0, 1]."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  length = context + horizon
  starts = range(0, len(episode['actions']) - length + 1, stride)
  pick = lambda x: np.stack([x[t:t + length] for t in starts])  # pylint: disable=unnecessary-lambda-assignment
  observation = {k: tf.constant(pick(v)) for k, v in episode['frames'].items()}
  action = tf.constant(pick(episode['actions']))
  # Mid-episode windows start as training windows do: no reset marker but at t = 0.
  step_type = np.ones([len(starts), length], np.int32)
  if starts[0] == 0:
    step_type[0, 0] = 0
  truth, prediction = agent.world_model.open_loop_prediction(
      observation, action, tf.constant(step_type), context)
  truth = truth.numpy().astype(np.float32) / 255.0
  prediction = prediction.numpy().astype(np.float32) / 255.0
  future = truth[:, context:]
  model = ((prediction[:, context:] - future) ** 2).mean(axis=(0, 2, 3, 4))
  still = ((truth[:, context - 1:context] - future) ** 2).mean(axis=(0, 2, 3, 4))
  return model, still, len(starts)


def open_loop_rewards(agent, episode, horizon, stride):
  """Predicted vs real H-step reward sums from the filtered beliefs."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from planet_tfa.networks import rssm as rssm_lib  # pylint: disable=g-import-not-at-top
  starts = list(range(0, len(episode['actions']) - horizon + 1, stride))
  start = {k: tf.constant(episode[k][starts]) for k in ('deter', 'stoch')}
  plans = tf.constant(np.stack([episode['actions'][t:t + horizon] for t in starts]))
  imagined = agent.world_model.rssm.imagine(plans, start, sample=False)
  predicted = agent.world_model.reward_decoder(rssm_lib.features(imagined)).numpy().sum(-1)
  real = np.array([episode['rewards'][t:t + horizon].sum() for t in starts])
  return predicted, real


def critic_pair(agent, features, actions):
  """(Q1, Q2)(features, actions) of the twin critics, in reward units."""
  sac = agent.sac
  # pylint: disable=protected-access
  return tuple(critic((features, actions), step_type=(), network_state=())[0].numpy()
               / sac._reward_scale_factor
               for critic in (sac._critic_network_1, sac._critic_network_2))


def critic_values(agent, features, actions):
  """min(Q1, Q2)(features, actions) in reward units."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return np.minimum(*critic_pair(agent, features, actions))


def discounted_returns(rewards, gamma, bootstrap):
  """The discounted return after each step, with `bootstrap` the value past the last one."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  returns = np.zeros(len(rewards))
  running = bootstrap
  for t in reversed(range(len(rewards))):
    running = rewards[t] + gamma * running
    returns[t] = running
  return returns


def critic_and_returns(agent, episode, gamma):
  """Per step: `critic_q` min(Q1, Q2), `return` the discounted return after it
  (bootstrapped with the critic's last value at a time limit, nothing after a
  terminal, discount 0) and `critic_spread` |Q1 - Q2|."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  q1, q2 = critic_pair(agent, tf.constant(episode['features']), tf.constant(episode['actions']))
  q = np.minimum(q1, q2)
  # The time limit is not a terminal: the return goes on past it, worth about
  # the critic's value of the last state. A crash ends it.
  bootstrap = q[-1] if episode.get('final_discount', 1.0) > 0 else 0.0
  return {'critic_q': q, 'return': discounted_returns(episode['rewards'], gamma, bootstrap),
          'critic_spread': np.abs(q1 - q2)}


def branch_rollout(agent, env, point, first_action, act, steps):
  """Goes on from a recorded step (`record_episode`'s branch point): the
  physics and the policy's state put back as they were, `first_action` taken
  there, then the actions of `act` (a policy's action function) for up to
  `steps` steps in all. Returns a dict: `return`, the discounted return after
  the step (bootstrapped at a time limit with the critic's value of the last
  step, as `critic_and_returns` does, nothing after a terminal); `soft_return`,
  that plus SAC's entropy bonus, -alpha log pi of each later action,
  discounted as the soft Q the critic learns has it; `pitch` after each step
  (None without a planar body). With the greedy actor and its own action, it
  repeats the recorded episode."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from planet_tfa.networks import rssm as rssm_lib  # pylint: disable=g-import-not-at-top
  env.reset()  # a fresh time limit, then the recorded physics in place of the new episode's
  restore_physics(env, point['physics'])
  time_step, state = point['time_step'], point['policy_state']
  rewards, pitches, features, actions = [], [], [], []
  for i in range(steps):
    out = act(time_step, state)
    state = out.state
    actions.append(np.asarray(first_action, np.float32) if i == 0 else out.action.numpy()[0])
    features.append(rssm_lib.features({k: state[k] for k in ('deter', 'stoch')})[0])
    step = env.step(actions[-1])
    rewards.append(float(step.reward))
    pitches.append(torso_pitch(env))
    if step.is_last():
      break
    time_step = batched_time_step(step)
  features, actions = tf.stack(features), tf.constant(np.array(actions))
  gamma = float(agent.sac._gamma)  # pylint: disable=protected-access
  bootstrap = critic_values(agent, features[-1:], actions[-1:])[0] if step.discount > 0 else 0.0
  returns = discounted_returns(rewards, gamma, bootstrap)
  distribution, _ = agent.actor_network(features, step_type=(), network_state=())
  log_pi = clipped_log_prob(distribution, actions).numpy()
  # In reward units, as critic_values gives Q.
  alpha = float(np.exp(agent.log_alpha.numpy())) / agent.sac._reward_scale_factor  # pylint: disable=protected-access
  # SAC's target r + gamma (Q' - alpha log pi'): each action after the first
  # brings its bonus, discounted from the step it is taken at.
  bonus = -alpha * (gamma ** np.arange(1, len(rewards))) @ log_pi[1:] if len(rewards) > 1 else 0.0
  return {'return': float(returns[0]), 'soft_return': float(returns[0] + bonus),
          'pitch': None if None in pitches else np.array(pitches)}


def choose_branch_states(upside_down_per_episode, lead, count, seed):
  """Up to `count` upright steps at most `lead` steps before a turn-over, and
  up to `count` upright steps farther from one, drawn at random without
  replacement: a list of (episode, step, before_turning_over)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  chosen = []
  for before in (True, False):
    candidates = [(e, int(t)) for e, upside in enumerate(upside_down_per_episode)
                  for t in np.flatnonzero(~np.asarray(upside, bool)
                                          & ((steps_to_turning_over(upside) <= lead) == before))]
    picks = rng.choice(len(candidates), min(count, len(candidates)), replace=False)
    chosen += [(*candidates[i], before) for i in sorted(picks)]
  return chosen


def branch_from_episodes(agent, env, episodes, lead, count, rollouts, seed):
  """Rolls the stochastic policy out `rollouts` times from each state that
  `choose_branch_states` draws from `episodes` (recorded with branch points,
  whose memory this frees). Returns (the chosen (episode, step, before) list,
  and [states, rollouts] arrays of the rollouts' returns, soft returns and
  whether they turned over); None unless every episode has a planar body's
  pitch."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  if any(e['torso_pitch'] is None for e in episodes):
    return None
  upside = [upside_down_steps(e['torso_pitch']) for e in episodes]
  chosen = choose_branch_states(upside, lead, count, seed)
  returns, soft_returns, turned = [], [], []
  if chosen:
    tf.random.set_seed(seed)  # the rollouts' samples repeat with the seed
    act = tfa_common.function(acting_policy(agent, 'stochastic').action)
  for n, (e, t, _) in enumerate(chosen):
    episode = episodes[e]
    outcomes = [branch_rollout(agent, env, episode['branch_points'][t], episode['actions'][t], act,
                               len(episode['rewards']) - t) for _ in range(rollouts)]
    returns.append([o['return'] for o in outcomes])
    soft_returns.append([o['soft_return'] for o in outcomes])
    turned.append([bool(upside_down_steps(o['pitch']).any()) for o in outcomes])
    print(f'# branched state {n + 1}/{len(chosen)}', file=sys.stderr, flush=True)
  for episode in episodes:
    episode.pop('branch_points', None)
  shape = (len(chosen), rollouts)  # [0, rollouts] where no episode had an upright step
  return (chosen, np.array(returns, np.float64).reshape(shape),
          np.array(soft_returns, np.float64).reshape(shape), np.array(turned, bool).reshape(shape))


def fall_branches(critic_q, greedy_return, rollout_returns, rollout_soft_returns,
                  rollout_turned_over, before):
  """Does the critic price the lead-in to a fall as the policy it values would
  live it? Per class of branched states (`before`: at most the lead before a
  turn-over of the recorded episode; else farther from one): the critic's Q
  there, the recorded (greedy) return, the mean discounted return of the
  stochastic policy's rollouts from there and their soft return (with SAC's
  entropy bonus: what the critic estimates), the critic's error against the
  soft return, and the share of the rollouts that turned over. Arrays: one row
  per state, [states, rollouts] for the rollouts."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  critic_q, greedy_return = np.asarray(critic_q, np.float64), np.asarray(greedy_return, np.float64)
  rollout_mean = np.asarray(rollout_returns, np.float64).mean(1)
  soft_mean = np.asarray(rollout_soft_returns, np.float64).mean(1)
  turned = np.asarray(rollout_turned_over, bool)
  before = np.asarray(before, bool)
  result = {}
  for name, mask in (('before_turning_over', before), ('farther', ~before)):
    mean = lambda v: round(float(v[mask].mean()), 1) if mask.any() else None  # pylint: disable=unnecessary-lambda-assignment,cell-var-from-loop
    result.update({f'states_{name}': int(mask.sum()),
                   f'critic_q_{name}': mean(critic_q),
                   f'greedy_return_{name}': mean(greedy_return),
                   f'stochastic_return_{name}': mean(rollout_mean),
                   f'stochastic_soft_return_{name}': mean(soft_mean),
                   f'critic_minus_soft_return_{name}': mean(critic_q - soft_mean),
                   f'stochastic_turn_over_share_{name}':
                       round(float(turned[mask].mean()), 3) if mask.any() else None})
  result['critic_vs_soft_return_corr'] = (round(float(np.corrcoef(critic_q, soft_mean)[0, 1]), 3)
                                          if len(critic_q) > 2 else None)
  return result


def critic_by_posture(series_per_episode, upside_down_per_episode, lead):
  """Does the critic know what a flip costs? The mean of each per-step series
  (critic_and_returns' dicts: Q, the discounted return that followed, the
  critics' spread) upside down, in the `lead` upright steps before a
  turn-over, and upright elsewhere, as '<series>_<posture>' (None where no
  step is)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  upside = np.concatenate(upside_down_per_episode)
  before = np.concatenate([steps_before_turning_over(u, lead) for u in upside_down_per_episode])
  all_steps = {key: np.concatenate([series[key] for series in series_per_episode])
               for key in series_per_episode[0]}
  by_posture = {}
  for posture, mask in (('upside_down', upside), ('before_turning_over', before),
                        ('upright', ~upside & ~before)):
    for key, values in all_steps.items():
      digits = 2 if key == 'critic_spread' else 1  # the spread is ~1% of Q
      by_posture[f'{key}_{posture}'] = (round(float(values[mask].mean()), digits)
                                        if mask.any() else None)
  return by_posture


def probe_scores_held_out(inputs_per_episode, positive_per_episode, used_per_episode, ridge):
  """A linear probe's scores, each episode's from a probe fit on the others
  (leave one episode out: steps of one episode are too alike to test on).
  The probe is ridge regression onto +1 (positive) / -1, the two classes
  weighed equally, on inputs standardized by the training episodes. Returns
  the used steps' scores, concatenated in episode order; None unless two or
  more episodes have positive steps (one cannot be scored by the others)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  inputs = [np.asarray(x, np.float64)[u] for x, u in zip(inputs_per_episode, used_per_episode)]
  labels = [np.asarray(p, bool)[u] for p, u in zip(positive_per_episode, used_per_episode)]
  if sum(label.any() for label in labels) < 2:
    return None
  scores = []
  for held_out in range(len(inputs)):
    x = np.concatenate([v for i, v in enumerate(inputs) if i != held_out])
    y = np.concatenate([v for i, v in enumerate(labels) if i != held_out])
    if y.all():  # only positives left to learn from: nothing separates them
      return None
    mean, std = x.mean(0), np.maximum(x.std(0), 1e-6)
    design = np.concatenate([(x - mean) / std, np.ones([len(x), 1])], axis=1)
    weight = np.where(y, 0.5 / y.sum(), 0.5 / (~y).sum())
    penalty = ridge * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0  # the intercept is not shrunk
    coef = np.linalg.solve(design.T @ (weight[:, None] * design) + penalty,
                           design.T @ (weight * np.where(y, 1.0, -1.0)))
    test = (inputs[held_out] - mean) / std
    scores.append(test @ coef[:-1] + coef[-1])
  return np.concatenate(scores)


def fall_foresight(scorers, upside_down_per_episode, lead, lead_bins, ridge):
  """How well each scorer tells the upright steps at most `lead` steps before
  a turn-over (positive) from upright steps with no turn-over that near
  (negative), as ROC AUC (0.5: it does not see the fall coming), over all of
  them and per bin of steps-to-fall: bins (0, b1], (b1, b2], ... (bk, lead] for
  `lead_bins` = (b1, ..., bk). `scorers`: name -> ('probe', inputs per episode),
  fit held out (`probe_scores_held_out`); ('score', per-episode scores that are
  higher where a fall is nearer, e.g. minus the critic's Q); or ('mean',
  per-episode values), whose mean is given instead of an AUC, and beside it
  the mean farther from a fall as '<name>_farther'."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  distance = [steps_to_turning_over(u) for u in upside_down_per_episode]
  used = [~np.asarray(u, bool) for u in upside_down_per_episode]
  positive = [d <= lead for d in distance]
  distance_used = np.concatenate([d[u] for d, u in zip(distance, used)])
  positive_used = distance_used <= lead
  edges = [0] + [b for b in lead_bins if 0 < b < lead] + [lead]
  result = {'positive_steps': int(positive_used.sum()),
            'negative_steps': int((~positive_used).sum()), 'by_steps_to_fall': {}}
  for name, (kind, series) in scorers.items():
    if kind == 'probe':
      scores = probe_scores_held_out(series, positive, used, ridge)
    else:
      scores = np.concatenate([np.asarray(s, np.float64)[u] for s, u in zip(series, used)])
    if kind == 'mean':
      stat = lambda mask: round(float(scores[mask].mean()), 1) if mask.any() else None  # pylint: disable=unnecessary-lambda-assignment,cell-var-from-loop
      result[f'{name}_farther'] = stat(~positive_used)
    else:
      stat = lambda mask: (None if scores is None or not mask.any()  # pylint: disable=unnecessary-lambda-assignment,cell-var-from-loop
                           else round(roc_auc(scores[mask | ~positive_used],
                                              mask[mask | ~positive_used]), 3))
    result[name] = stat(positive_used)
    for low, high in zip(edges[:-1], edges[1:]):
      in_bin = (distance_used > low) & (distance_used <= high)
      result['by_steps_to_fall'].setdefault(f'{low + 1}-{high}', {})[name] = stat(in_bin)
  return result


def critic_calibration(q, returns):
  """An episode's critic_and_returns on its first half, where the bootstrap
  weighs little in the return."""
  half = len(returns) // 2
  return q[:half], returns[:half]


def clipped_log_prob(distribution, actions):
  """The actor's log pi of `actions`, clipped away from the tanh boundary,
  where float32 log-probs overflow."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return distribution.log_prob(tf.clip_by_value(actions, -0.999999, 0.999999))


def policy_entropy(agent, episode, samples=64):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  distribution, _ = agent.actor_network(tf.constant(episode['features']), step_type=(),
                                        network_state=())
  actions = distribution.sample(samples, seed=0)
  return float(-tf.reduce_mean(clipped_log_prob(distribution, actions)))


def episodes_on_run(root_dir, seed, num_episodes, episode_fn, after=None):
  """Loads ROOT's agent (its own operative config), then `episode_fn(agent, env)`
  `num_episodes` times on the run's task, then `after(agent, env, results)` if
  given (on the same env, after the episodes: they run as without it); returns
  (agent, the episodes' results)."""
  import gin  # pylint: disable=g-import-not-at-top
  from planet_tfa import layout  # pylint: disable=g-import-not-at-top
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
  agent, _ = export.load_agent_from_root(root_dir)
  gin_files.parse_run_config(os.path.join(root_dir, layout.OPERATIVE_CONFIG))
  try:
    env = suites.load_environment(seed=seed)
    try:
      results = []
      for i in range(num_episodes):
        results.append(episode_fn(agent, env))
        print(f'# episode {i + 1}/{num_episodes} done', file=sys.stderr, flush=True)
      if after is not None:
        after(agent, env, results)
    finally:
      env.close()
  finally:
    gin.clear_config()
  return agent, results


def main():
  args = parse_args()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  root = os.path.abspath(args.root_dir)
  if args.policy == 'stochastic':  # its samples repeat with the seed (greedy runs stay as before)
    tf.random.set_seed(args.seed)
  branched = []  # filled after the episodes, on their env
  agent, episodes = episodes_on_run(
      root, args.seed, args.episodes,
      lambda agent, env: record_episode(agent, env, acting_policy(agent, args.policy),
                                        branch_points=args.branch_states > 0),
      after=None if not args.branch_states else lambda agent, env, episodes: branched.append(
          branch_from_episodes(agent, env, episodes, args.turn_over_lead, args.branch_states,
                               args.branch_rollouts, args.seed)))
  run = dict(root_dir=root, train_step=int(agent.train_step_counter.numpy()),
             env_seed=args.seed, episodes=args.episodes, policy=args.policy,
             episode_returns=[round(float(e['rewards'].sum()), 1) for e in episodes])

  model_mse, still_mse, windows = zip(*(open_loop_images(agent, e, args.context, args.horizon,
                                                         args.stride) for e in episodes))
  model_mse, still_mse = np.mean(model_mse, 0), np.mean(still_mse, 0)
  significant = lambda v: float(f'{v:.4g}')  # pylint: disable=unnecessary-lambda-assignment
  common.emit('open_loop_image_mse', significant(model_mse.mean()), 'mse',
              what='pixel MSE of open-loop frames, mean over imagined steps',
              per_step=[significant(v) for v in model_mse],
              repeat_last_frame=[significant(v) for v in still_mse],
              ratio_to_repeat=round(float(model_mse.mean() / still_mse.mean()), 3),
              context=args.context, horizon=args.horizon, windows=int(sum(windows)), **run)

  predicted, real = map(np.concatenate, zip(*(open_loop_rewards(agent, e, args.horizon,
                                                                args.stride) for e in episodes)))
  common.emit('open_loop_reward', round(float(np.corrcoef(predicted, real)[0, 1]), 3),
              'correlation', what=f'predicted vs real {args.horizon}-step reward sum',
              mean_abs_err=round(float(np.abs(predicted - real).mean()), 3),
              mean_real=round(float(real.mean()), 3),
              mean_predicted=round(float(predicted.mean()), 3), windows=len(real), **run)

  gamma = float(agent.sac._gamma)  # pylint: disable=protected-access
  critic_per_episode = [critic_and_returns(agent, e, gamma) for e in episodes]
  q, returns = map(np.concatenate, zip(*(critic_calibration(c['critic_q'], c['return'])
                                          for c in critic_per_episode)))
  common.emit('critic_calibration', round(float((q - returns).mean()), 2), 'return',
              what='mean of min-critic Q minus the discounted return that followed',
              mean_q=round(float(q.mean()), 2), mean_return=round(float(returns.mean()), 2),
              relative_bias=round(float((q - returns).mean() / abs(returns.mean())), 3),
              corr=round(float(np.corrcoef(q, returns)[0, 1]), 3), gamma=gamma,
              steps=len(q), **run)

  entropy = np.mean([policy_entropy(agent, e) for e in episodes])
  common.emit('policy_entropy', round(float(entropy), 3), 'nats',
              target_entropy=float(agent.sac._target_entropy),  # pylint: disable=protected-access
              alpha=round(float(np.exp(agent.log_alpha.numpy())), 4),
              action_dims=int(episodes[0]['actions'].shape[-1]), **run)

  if all(e['torso_pitch'] is not None for e in episodes):
    upside_per_episode = [upside_down_steps(e['torso_pitch']) for e in episodes]
    shares = np.array([u.mean() for u in upside_per_episode])
    flipped = shares > UPSIDE_DOWN_SHARE
    returns = np.array(run['episode_returns'])
    mean_of = lambda v: round(float(v.mean()), 1) if v.size else None  # pylint: disable=unnecessary-lambda-assignment
    by_posture = critic_by_posture(critic_per_episode, upside_per_episode, args.turn_over_lead)
    common.emit('upside_down', round(float(flipped.mean()), 3), 'share of episodes',
                what=f'episodes spending over {UPSIDE_DOWN_SHARE:.0%} of their steps upside down '
                '(torso pitch past 90 degrees); critic_q_* / return_* / critic_spread_*: '
                'min-critic Q, the discounted return that followed and |Q1 - Q2|, upside down, '
                f'in the {args.turn_over_lead} steps before a turn-over, and upright elsewhere',
                upside_down_step_share=[round(float(v), 3) for v in shares],
                mean_return_flipped=mean_of(returns[flipped]),
                mean_return_upright=mean_of(returns[~flipped]),
                turn_overs=sum(len(turn_overs(u)) for u in upside_per_episode),
                **by_posture, **run)
    scorers = {'latent_probe': ('probe', [e['features'] for e in episodes]),
               'critic': ('score', [-c['critic_q'] for c in critic_per_episode]),
               'return_that_followed': ('score', [-c['return'] for c in critic_per_episode]),
               'mean_critic_q': ('mean', [c['critic_q'] for c in critic_per_episode]),
               'mean_return': ('mean', [c['return'] for c in critic_per_episode])}
    if all(e['body_state'] is not None for e in episodes):
      scorers['body_probe'] = ('probe', [e['body_state'] for e in episodes])
    foresight = fall_foresight(scorers, upside_per_episode, args.turn_over_lead,
                               args.lead_bins, args.probe_ridge)
    common.emit('fall_foresight', foresight.pop('latent_probe'), 'auc',
                what=f'ROC AUC: upright steps at most {args.turn_over_lead} steps before a '
                'turn-over vs upright steps farther from one (0.5: blind to the fall). The value: '
                'a linear probe on the features SAC sees, fit leaving each episode out; '
                'body_probe: the same probe on the simulator\'s joint state (what can be known); '
                'critic: minus min-critic Q; return_that_followed: minus the discounted return '
                '(what the critic should learn); mean_critic_q / mean_return: their means there '
                '(_farther: on the upright steps farther from a fall)', ridge=args.probe_ridge, **foresight, **run)
    if branched and branched[0] is not None:
      chosen, *rollouts = branched[0]
      at_chosen = lambda key: [critic_per_episode[e][key][t] for e, t, _ in chosen]  # pylint: disable=unnecessary-lambda-assignment
      branches = fall_branches(at_chosen('critic_q'), at_chosen('return'), *rollouts,
                               [before for _, _, before in chosen])
      common.emit('fall_branches', branches.pop('stochastic_turn_over_share_before_turning_over'),
                  'share of rollouts',
                  what=f'from upright states at most {args.turn_over_lead} steps before a turn-over '
                  'of the recorded episode (the value: the share of the stochastic policy\'s '
                  'rollouts from there that turned over) and farther from one: the critic\'s Q '
                  'there, the recorded return, and the mean discounted return of '
                  f'{args.branch_rollouts} stochastic-policy rollouts from each (the physics and '
                  'the filter put back, the recorded action first), plain and soft (with SAC\'s '
                  'entropy bonus: what the critic estimates)', rollouts_per_state=args.branch_rollouts,
                  **branches, **run)

  if agent.world_model.continuation_decoder is not None:
    for k in args.foresight:
      p_end, ended = map(np.concatenate, zip(*(continuation_foresight(agent, e, k)
                                               for e in episodes)))
      auc = roc_auc(p_end, ended)
      common.emit('continuation_foresight', None if auc is None else round(auc, 3), 'auc',
                  what=f'ROC AUC of P(end) imagined {k} steps ahead (0: filtered): arrivals that ended '
                  'the episode vs the others (0.5: the head does not see the end coming)',
                  imagined_steps=k, terminal_arrivals=int(ended.sum()),
                  other_arrivals=int((~ended).sum()),
                  p_end_at_terminals=significant(p_end[ended].mean()) if ended.any() else None,
                  p_end_elsewhere=significant(p_end[~ended].mean()), **run)
  for k in args.foresight:
    predicted, real, ended = map(np.concatenate, zip(*(reward_foresight(agent, e, k)
                                                      for e in episodes)))
    at_ends = lambda v: significant(v[ended].mean()) if ended.any() else None  # pylint: disable=unnecessary-lambda-assignment,cell-var-from-loop
    common.emit('reward_foresight', at_ends(predicted), 'reward',
                what=f'reward predicted {k} steps ahead (0: filtered) at the arrivals that ended '
                'the episode (None: no episode ended); real_at_terminals: what they paid',
                imagined_steps=k, terminal_arrivals=int(ended.sum()),
                real_at_terminals=at_ends(real),
                predicted_elsewhere=significant(predicted[~ended].mean()),
                real_elsewhere=significant(real[~ended].mean()), **run)
  common.hard_exit()


if __name__ == '__main__':
  main()

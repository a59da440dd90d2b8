"""Return of each acting policy on one trained model (issue 16).

  python -m bench.planner_eval --root_dir=ROOT [--episodes 5] [--seed 100]
      [--policies sac,cem,cem_guided] [--planner 'horizon=12,num_candidates=1000']

Loads ROOT's newest checkpoint into an agent (built from ROOT's operative
config) and runs greedy episodes on the run's task with each policy, all on
the same world model:
  sac         the latent actor (mode of the SAC actor)
  cem         PlaNet's CEM planner (gin defaults: horizon 12, 1000 candidates,
              top 100, 10 iterations; `--planner` overrides)
  cem_guided  the planner with actor guidance: `--guided_share` of the initial
              candidates from the actor, min-critic terminal value
  cem_blind   `cem` without the world model's continuation head: it sums the
              predicted rewards over the whole horizon, through predicted ends
  cem_guided_blind  `cem_guided` without the continuation head
  terminals   not a policy: do plans avoid what the model predicts as terminal?
              Along one greedy actor episode, every 4th step, `cem` and
              `cem_blind` plan from the same belief and seed; the continuation
              head scores each plan's probability that the episode still goes
              on after the horizon
  approach    not a policy: the same question where it can be answered, on the
              approach to a real crash. Greedy episodes (`--episodes`) of the
              policy `--approach_with` names (default the actor; `cem`: the
              planner's own crashes) are recorded; at each of the last
              `--approach` beliefs before every arrival that ended one in a
              terminal, the head scores the actions really taken (which
              crashed) against the plans of `cem` and `cem_blind` from the same
              belief. Taken actions the head scored as surviving mean the model
              did not foresee the crash; scored as ending, the planner chose a
              predicted end
  model       not a policy: how well the world model predicts a plan's return.
              One greedy actor episode; every 4th step, the summed reward the
              model predicts open loop (from the filtered belief, prior means,
              the planner's scoring) for the actor's next H actions against the
              real sum; every 16th step also the predicted return of the CEM
              plan from that belief (what the planner optimises)
Every policy meets the same episodes: a fresh environment seeded `--seed` for
each. One JSON line per policy: returns, mean, wall time per episode, and how
many episodes ended in a terminal (a crash, leaving the road) rather than a
time limit.
"""
import argparse
import os
import statistics
import sys
import time

from bench import common
from bench import diagnose_run


POLICIES = ('sac', 'cem', 'cem_guided', 'cem_blind', 'cem_guided_blind')
CHECKS = ('model', 'terminals', 'approach')


def _parse_overrides(text):
  overrides = {}
  for item in filter(None, (text or '').split(',')):
    key, value = item.split('=', 1)
    overrides[key.strip()] = eval(value, {}, {})  # pylint: disable=eval-used
  return overrides


class TerminalCount:
  """Observer: episodes that ended in a terminal (discount 0), not a truncation."""

  def __init__(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.count = tf.Variable(0, dtype=tf.int64)

  def __call__(self, trajectory):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    ended = tf.logical_and(trajectory.is_last(), tf.equal(trajectory.discount, 0.0))
    return self.count.assign_add(tf.reduce_sum(tf.cast(ended, tf.int64)))


def run_episodes(tf_env, policy, episodes, label=''):
  """Greedy episodes one at a time (as train_eval evaluates); returns, seconds,
  env steps and whether each ended in a terminal."""
  from tf_agents.metrics import tf_metrics  # pylint: disable=g-import-not-at-top
  from planet_tfa import episodes as episodes_lib  # pylint: disable=g-import-not-at-top
  returns_metric = tf_metrics.AverageReturnMetric(buffer_size=1)
  steps_metric = tf_metrics.EnvironmentSteps()
  terminals = TerminalCount()
  driver = episodes_lib.EpisodeDriver(
      tf_env, {'greedy': (policy, [returns_metric, steps_metric, terminals])})
  returns, seconds, steps, ended = [], [], [], []
  for _ in range(episodes):
    before, terminals_before = int(steps_metric.result()), int(terminals.count.numpy())
    start = time.perf_counter()
    driver.run(1)
    seconds.append(time.perf_counter() - start)
    returns.append(float(returns_metric.result()))
    steps.append(int(steps_metric.result()) - before)
    ended.append(int(terminals.count.numpy()) > terminals_before)
    print(f'# {label} episode {len(returns)}/{episodes}: return {returns[-1]:.1f} in '
          f'{seconds[-1]:.1f}s{" (terminal)" if ended[-1] else ""}', file=sys.stderr, flush=True)
  return returns, seconds, steps, ended


def terminal_check(agent, env, seeing, blind, stride=4):
  """The head's survival probability of `seeing`'s and `blind`'s plans along one actor episode."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  survival_fn = tfa_common.function(seeing.plan_survival)
  plan_fns = [tfa_common.function(seeing.plan), tfa_common.function(blind.plan)]
  episode = diagnose_run.record_episode(agent, env)
  survival = []
  for t in range(0, len(episode['actions']), stride):
    belief = {k: tf.constant(episode[k][t:t + 1]) for k in ('deter', 'stoch')}
    plans = [plan(belief, tf.constant([0, t]))[0] for plan in plan_fns]  # [1, H, A] each
    survival.append(survival_fn(belief, tf.stack(plans, 1)).numpy()[0])  # [2]
  survival = np.array(survival)
  return dict(
      actor_episode_return=round(float(episode['rewards'].sum()), 1),
      actor_episode_steps=len(episode['actions']), horizon=seeing.horizon, checks=len(survival),
      seeing_plan_survival_mean=round(float(survival[:, 0].mean()), 3),
      blind_plan_survival_mean=round(float(survival[:, 1].mean()), 3),
      plans_predicted_to_end_seeing=int((survival[:, 0] < 0.5).sum()),
      plans_predicted_to_end_blind=int((survival[:, 1] < 0.5).sum()),
      survival_per_check=[[round(float(a), 3), round(float(b), 3)] for a, b in survival])


def taken_plan(actions, t, horizon):
  """The actions really taken from step t, [H, A]; past the episode's end the last one repeats."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  plan = actions[t:t + horizon]
  return np.concatenate([plan, np.repeat(plan[-1:], horizon - len(plan), 0)])


def approach_check(episodes, seeing, blind, approach=6):
  """At each of the last `approach` beliefs before every terminal arrival of
  `episodes` (recorded by diagnose_run.record_episode): the continuation head's
  P(still going on after the horizon) of the actions really taken, of `seeing`'s
  plan and of `blind`'s (greedy, as each would act: on episodes `seeing` acted
  in, the plan whose first step it took), all from that belief. A planner that avoids predicted
  ends keeps its plans' survival above the crashing actions' where the head
  marks the crash. `kept_`: from each belief after the first, the seeing plan
  made one step earlier, less the step taken: whether the real frame left it
  safe."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  survival_fn = tfa_common.function(seeing.plan_survival)
  plan_fns = [tfa_common.function(seeing.plan), tfa_common.function(blind.plan)]
  seeds = [seeing.greedy_plan_seed(), blind.greedy_plan_seed()]
  rows = []  # [steps before the crash, taken, seeing, blind]
  kept = []  # [steps before the crash, survival of the previous seeing plan's rest from here]
  crashed = [i for i, episode in enumerate(episodes) if episode['final_discount'] == 0]
  for i in crashed:
    actions = episodes[i]['actions']
    previous_plan = None
    for t in range(max(0, len(actions) - approach), len(actions)):
      belief = {k: tf.constant(episodes[i][k][t:t + 1]) for k in ('deter', 'stoch')}
      # The greedy planners' own seeds: on the planner's episodes, the plan it acted on.
      plans = [plan(belief, seed)[0] for plan, seed in zip(plan_fns, seeds)]  # [1, H, A] each
      taken = tf.constant(taken_plan(actions, t, seeing.horizon)[None])
      candidates = [taken] + plans
      if previous_plan is not None:
        # The plan made one step earlier, its first step done, its last held: still
        # safe from the belief the real frame gave (the planner switched plans), or
        # not (the world left the imagined path).
        candidates.append(tf.constant(taken_plan(previous_plan, 1, seeing.horizon)[None]))
      survival = survival_fn(belief, tf.stack(candidates, 1)).numpy()[0]  # [3 or 4]
      rows.append([len(actions) - t] + [float(v) for v in survival[:3]])
      if previous_plan is not None:
        kept.append([len(actions) - t, float(survival[3])])
      previous_plan = plans[0].numpy()[0]
  if not rows:
    return dict(episodes=len(episodes), terminal_episodes=0, checks=0)
  rows = np.array(rows)
  by_distance = {int(d): [round(float(v), 4) for v in rows[rows[:, 0] == d, 1:].mean(0)]
                 for d in sorted(set(rows[:, 0]))}
  return dict(
      episodes=len(episodes), terminal_episodes=len(crashed), horizon=seeing.horizon,
      checks=len(rows),
      taken_survival_mean=round(float(rows[:, 1].mean()), 4),
      seeing_plan_survival_mean=round(float(rows[:, 2].mean()), 4),
      blind_plan_survival_mean=round(float(rows[:, 3].mean()), 4),
      seeing_above_taken=int((rows[:, 2] > rows[:, 1]).sum()),
      seeing_above_blind=int((rows[:, 2] > rows[:, 3]).sum()),
      survival_by_steps_before_crash=by_distance,
      kept_plan_survival_mean=round(float(np.mean([v for _, v in kept])), 4) if kept else None,
      kept_plan_survival_by_steps_before_crash={
          int(d): round(float(np.mean([v for dd, v in kept if dd == d])), 4)
          for d in sorted({d for d, _ in kept})})


def model_check(agent, env, planner, stride=4, plan_stride=16):
  """Predicted vs real H-step returns along one greedy actor episode."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  score_fn = tfa_common.function(planner.plan_returns)
  plan_fn = tfa_common.function(planner.plan)
  episode = diagnose_run.record_episode(agent, env)
  actions, rewards = episode['actions'], episode['rewards'].astype(np.float64)
  beliefs = [{k: tf.constant(episode[k][t:t + 1]) for k in ('deter', 'stoch')}
             for t in range(len(actions))]
  horizon = planner.horizon
  predicted, real, cem_predicted, actor_predicted = [], [], [], []
  for t in range(0, len(actions) - horizon + 1, stride):
    actor_plan = tf.constant(actions[None, None, t:t + horizon])   # [1, 1, H, A]
    predicted.append(float(score_fn(beliefs[t], actor_plan)[0, 0]))
    real.append(float(rewards[t:t + horizon].sum()))
    if t % plan_stride == 0:
      mean, _ = plan_fn(beliefs[t], tf.constant([0, t]))
      cem_predicted.append(float(score_fn(beliefs[t], mean[None])[0, 0]))
      actor_predicted.append(predicted[-1])
  predicted, real = np.array(predicted), np.array(real)
  return dict(
      actor_episode_return=round(float(rewards.sum()), 1), horizon=horizon, windows=len(real),
      corr=round(float(np.corrcoef(predicted, real)[0, 1]), 3),
      mean_abs_err=round(float(np.abs(predicted - real).mean()), 2),
      mean_real=round(float(real.mean()), 2), mean_predicted=round(float(predicted.mean()), 2),
      plan_checks=len(cem_predicted),
      cem_plan_predicted_mean=round(float(np.mean(cem_predicted)), 2),
      actor_plan_predicted_mean=round(float(np.mean(actor_predicted)), 2))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--root_dir', required=True)
  parser.add_argument('--episodes', type=int, default=5)
  parser.add_argument('--seed', type=int, default=100)
  parser.add_argument('--policies', default='sac,cem,cem_guided',
                      help=f'comma list of {", ".join(POLICIES + CHECKS)}')
  parser.add_argument('--planner', default='',
                      help="CemPlanningPolicy overrides, e.g. 'horizon=3,num_candidates=20'")
  parser.add_argument('--approach', type=int, default=6,
                      help="approach: checks per crash, at the last N beliefs before it")
  parser.add_argument('--approach_with', default='sac',
                      help=f"approach: the policy whose greedy episodes are checked "
                      f"(one of {', '.join(POLICIES)})")
  parser.add_argument('--guided_share', type=float, default=0.1)
  parser.add_argument('--guided_value', default='critic', help="terminal value or 'none'")
  return parser.parse_args(argv)


def main():
  args = parse_args()
  import gin  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa import layout  # pylint: disable=g-import-not-at-top
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top

  unknown = [name for name in args.policies.split(',') if name not in POLICIES + CHECKS]
  if args.approach_with not in POLICIES:
    unknown.append(args.approach_with)
  if unknown:
    raise SystemExit(f'unknown policy {unknown[0]!r}: --policies takes '
                     f'{", ".join(POLICIES + CHECKS)}; --approach_with one of {", ".join(POLICIES)}')
  root = os.path.abspath(args.root_dir)
  agent, _ = export.load_agent_from_root(root)
  planner = _parse_overrides(args.planner)
  guided = dict(planner, actor_share=args.guided_share,
                terminal_value=None if args.guided_value == 'none' else args.guided_value)
  makers = {
      'sac': lambda: agent.make_policy('sac', True),
      'cem': lambda: agent.make_policy('cem', True, **planner),
      'cem_guided': lambda: agent.make_policy('cem', True, **guided),
      'cem_blind': lambda: agent.make_policy('cem', True, continuation_head=None, **planner),
      'cem_guided_blind': lambda: agent.make_policy('cem', True, continuation_head=None,
                                                    **guided),
  }
  # The run's task (and its action repeat, time limit) from its own config.
  gin_files.parse_run_config(os.path.join(root, layout.OPERATIVE_CONFIG))
  try:
    for name in args.policies.split(','):
      if name == 'model':
        env = suites.load_environment(seed=args.seed)
        try:
          check = model_check(agent, env, makers['cem']())
        finally:
          env.close()
        common.emit('model_open_loop_return_corr', check.pop('corr'), 'correlation',
                    what='model-predicted vs real H-step return of the actor\'s actions',
                    train_step=int(agent.train_step_counter.numpy()), root_dir=root,
                    env_seed=args.seed, **check)
        continue
      if name == 'approach':
        if agent.world_model.continuation_decoder is None:
          raise SystemExit('approach: this run has no continuation head '
                           '(WorldModel.continuation_scale = 0)')
        env = suites.load_environment(seed=args.seed)
        try:
          recorder = makers[args.approach_with]()
          episodes = [diagnose_run.record_episode(agent, env, recorder)
                      for _ in range(args.episodes)]
        finally:
          env.close()
        check = approach_check(episodes, makers['cem'](), makers['cem_blind'](), args.approach)
        common.emit('approach_survival_seeing', check.get('seeing_plan_survival_mean'),
                    'probability',
                    what='P(episode goes on past the horizon) by the continuation head, '
                    'from the beliefs just before real crashes: of the plan; taken_: of '
                    'the actions really taken; blind_: the planner without the head',
                    train_step=int(agent.train_step_counter.numpy()), root_dir=root,
                    env_seed=args.seed, episodes_of=args.approach_with,
                    episode_returns=[round(float(e['rewards'].sum()), 1) for e in episodes],
                    episode_steps=[len(e['actions']) for e in episodes], **check)
        continue
      if name == 'terminals':
        if agent.world_model.continuation_decoder is None:
          raise SystemExit('terminals: this run has no continuation head '
                           '(WorldModel.continuation_scale = 0)')
        env = suites.load_environment(seed=args.seed)
        try:
          check = terminal_check(agent, env, makers['cem'](), makers['cem_blind']())
        finally:
          env.close()
        common.emit('plan_survival_seeing', check['seeing_plan_survival_mean'], 'probability',
                    what='P(episode goes on past the horizon) of the plan, by the '
                    "continuation head; 'blind_' fields: the planner without it",
                    train_step=int(agent.train_step_counter.numpy()), root_dir=root,
                    env_seed=args.seed, **check)
        continue
      policy = makers[name]()
      tf_env = experiment_lib.make_env(
          experiment_lib.Experiment(env_loader=suites.load_environment), seed=args.seed)
      try:
        returns, seconds, steps, ended = run_episodes(tf_env, policy, args.episodes, name)
      finally:
        experiment_lib.close_env(tf_env)
      details = {}
      if name.startswith('cem'):
        details = dict(horizon=policy.horizon, num_candidates=policy.num_candidates,
                       top_k=policy.top_k, iterations=policy.iterations,
                       actor_candidates=policy.num_actor_candidates)
        if name.startswith('cem_guided'):
          details['terminal_value'] = guided['terminal_value']
      common.emit(f'eval_return_{name}', round(statistics.mean(returns), 1), 'return',
                  returns=[round(r, 1) for r in returns],
                  return_std=round(statistics.pstdev(returns), 1),
                  wall_s_per_episode=round(statistics.median(seconds), 1),
                  all_wall_s=[round(s, 1) for s in seconds], env_steps_per_episode=round(statistics.mean(steps), 1),
                  env_steps=steps, terminal_episodes=sum(ended),
                  train_step=int(agent.train_step_counter.numpy()), root_dir=root,
                  env_seed=args.seed, **details)
  finally:
    gin.clear_config()
  common.hard_exit()


if __name__ == '__main__':
  main()

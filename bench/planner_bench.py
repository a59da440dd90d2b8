"""The cost of one action: PlaNet's CEM planner against the latent SAC actor (issue 16).

  python -m bench.planner_bench [--quick] [--calls 20] [--sac_calls 100]

  planner_action_ms            greedy `CemPlanningPolicy.action` under
                               `common.function`, batch 1, PlaNet's planner
                               (horizon 12, 1000 candidates, top 100, 10
                               iterations), state carried over
  planner_guided_action_ms     the same with actor guidance (10% actor
                               candidates, min-critic terminal value)
  planner_savedmodel_action_ms the greedy planner exported and loaded
                               (`tf.saved_model.load(...).action`)
  planner_iteration_ms         one CEM iteration alone: scoring the 1000
                               candidate sequences (`plan_returns`, [1, 1000,
                               12, A] through the RSSM prior and reward head)
  sac_action_ms                greedy `LatentActorPolicy.action`, batch 1
  sac_action_batch_ms          the actor policy at the planner's natural
                               batch: 1000 environments (frames) in one call
  planner_action_gflop / sac_action_mflop  FLOPs of one action, counted
                               from the layer shapes (bench.flops' rules:
                               multiply-add = 2, element-wise work left out)
Default model sizes (gin/dmc_cartpole_swingup.gin); real cartpole frames.
"""
import argparse
import statistics
import time

import numpy as np

from bench import common
from bench import flops as flops_lib
from bench import policy_bench


def prior_step_flops(rssm):
  """One RSSM prior step per sample: img_in, GRU, img_out, prior stats."""
  # pylint: disable=protected-access
  cell = rssm._cell
  gru = 2 * int(cell.kernel.shape[0]) * int(cell.kernel.shape[1])
  gru += 2 * int(cell.recurrent_kernel.shape[0]) * int(cell.recurrent_kernel.shape[1])
  return (flops_lib._dense(rssm._img_in) + gru + flops_lib._dense(rssm._img_out)
          + flops_lib._dense(rssm._prior_stats))


def filter_step_flops(world_model):
  """One observation through the encoder and a posterior step (both policies)."""
  # pylint: disable=protected-access
  parts = flops_lib.world_model_forward_flops(world_model, 1, 1)
  rssm = world_model.rssm
  return (parts['encoder'] + prior_step_flops(rssm) + flops_lib._dense(rssm._obs_out)
          + flops_lib._dense(rssm._post_stats))


def mlp_flops(network):
  return sum(flops_lib._dense(l) for l in flops_lib._dense_layers(network))


def planner_flops(agent, policy):
  """FLOPs of one planning action at batch 1, by part."""
  # pylint: disable=protected-access
  world_model = agent.world_model
  head = world_model.reward_decoder
  reward = sum(flops_lib._dense(l) for l in head._layers) + flops_lib._dense(head._out)
  step = prior_step_flops(world_model.rssm) + reward
  rollouts = policy.iterations * policy.num_candidates * policy.horizon
  parts = {'filter': filter_step_flops(world_model), 'imagination': rollouts * step}
  actor = mlp_flops(agent.actor_network)
  if policy.num_actor_candidates:
    parts['actor_candidates'] = policy.num_actor_candidates * policy.horizon * (
        actor + prior_step_flops(world_model.rssm))
  if policy._value_critics:
    critic = mlp_flops(agent.sac._critic_network_1)
    parts['terminal_value'] = policy.iterations * policy.num_candidates * (actor + 2 * critic)
  return parts


def _time_steps(time_step_spec, frames, step_type):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  batch = len(frames)
  return ts.TimeStep(step_type=tf.fill([batch], tf.constant(step_type, tf.int32)),
                     reward=tf.zeros([batch]), discount=tf.ones([batch]),
                     observation={'pixels': tf.constant(frames)})


def batched_latency(action_fn, initial_state, time_step_spec, frames, batch, calls, warmup):
  from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
  index = np.arange(batch) % len(frames)
  first = _time_steps(time_step_spec, frames[index], ts.StepType.FIRST)
  mid = _time_steps(time_step_spec, frames[(index + 1) % len(frames)], ts.StepType.MID)
  state, times = initial_state, []
  for i in range(warmup + calls):
    start = time.perf_counter()
    out = action_fn(first if i == 0 else mid, state)
    np.asarray(out.action)
    if i >= warmup:
      times.append((time.perf_counter() - start) * 1e3)
    state = out.state
  return times


def _stats(times):
  return common.summarize(times, digits=2, unit='ms')  # times already in ms


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true', help='tiny sizes (smoke test)')
  # A planner action takes ~1-1.5 s on 2 cores: 20 calls after 3 (~30 s per
  # planner) rather than 10 after 2, whose medians moved by over 10 %.
  parser.add_argument('--calls', type=int, default=20, help='timed planner actions')
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--sac_calls', type=int, default=100)
  parser.add_argument('--batch', type=int, default=None,
                      help="actor policy batch (default: the planner's candidates)")
  parser.add_argument('--skip', default='', help='comma list: guided,savedmodel,batch')
  return parser.parse_args(argv)


def main():
  args = parse_args()
  planner_params = []
  if args.quick:
    args.calls, args.warmup, args.sac_calls = 3, 1, 10
    planner_params = ['CemPlanningPolicy.horizon = 3', 'CemPlanningPolicy.num_candidates = 20',
                      'CemPlanningPolicy.top_k = 4', 'CemPlanningPolicy.iterations = 2']
  skip = set(filter(None, args.skip.split(',')))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  from planet_tfa import saved_policies  # pylint: disable=g-import-not-at-top
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  common.parse_gin(args.quick, planner_params)
  time_step_spec, action_spec, frames = common.env_specs_and_frames(64)
  agent = experiment_lib.make_agent(time_step_spec, action_spec, eval_with='cem')
  planner = agent.policy
  config = dict(horizon=planner.horizon, num_candidates=planner.num_candidates,
                top_k=planner.top_k, iterations=planner.iterations)
  sizes = dict(deter=agent.world_model.rssm.deter_size, stoch=agent.world_model.rssm.stoch_size,
               depth=common.gin_value('WorldModel.image_depth'))
  matmul, _ = flops_lib.matmul_gflops(1024)

  # The SAC actor: encoder + posterior step + actor MLP.
  sac = agent.make_policy('sac', True)
  sac_fn = tfa_common.function(sac.action)
  times = policy_bench.latency(sac_fn, sac.get_initial_state(1), time_step_spec, frames,
                               args.sac_calls, 10)
  sac_flops = filter_step_flops(agent.world_model) + mlp_flops(agent.actor_network)
  sac_ms = statistics.median(times)
  common.emit('sac_action_ms', round(sac_ms, 3), 'ms', batch=1,
              how='common.function(LatentActorPolicy(greedy).action)',
              mflop=round(sac_flops / 1e6, 1), **sizes, **_stats(times))
  common.emit('sac_action_mflop', round(sac_flops / 1e6, 1), 'MFLOP', batch=1, **sizes)

  def planner_lines(policy, name, how):
    action_fn = tfa_common.function(policy.action)
    start = time.perf_counter()
    policy_bench.latency(action_fn, policy.get_initial_state(1), time_step_spec, frames, 1, 0)
    first_s = time.perf_counter() - start
    times = policy_bench.latency(action_fn, policy.get_initial_state(1), time_step_spec,
                                 frames, args.calls, args.warmup)
    parts = planner_flops(agent, policy)
    total = sum(parts.values())
    median = statistics.median(times)
    common.emit(name, round(median, 2), 'ms', batch=1, how=how, **config,
                actor_candidates=policy.num_actor_candidates,
                gflop=round(total / 1e9, 2), achieved_gflops=round(total / median / 1e6, 1),
                matmul_gflops=round(matmul, 1), x_sac=round(median / sac_ms, 1),
                first_call_with_tracing_s=round(first_s, 2), **sizes, **_stats(times))
    return parts, median

  parts, planner_ms = planner_lines(planner, 'planner_action_ms',
                                    'common.function(CemPlanningPolicy(greedy).action)')
  common.emit('planner_action_gflop', round(sum(parts.values()) / 1e9, 2), 'GFLOP',
              batch=1, **{k: round(v / 1e9, 3) for k, v in parts.items()}, **config,
              x_sac=round(sum(parts.values()) / sac_flops, 1),
              rssm_prior_steps=config['iterations'] * config['num_candidates'] * config['horizon'])

  # One iteration's scoring: the planner's natural batch of N candidates.
  start_state = {'deter': tf.zeros([1, sizes['deter']]), 'stoch': tf.zeros([1, sizes['stoch']])}
  candidate_actions = tf.random.uniform(
      [1, planner.num_candidates, planner.horizon, action_spec.shape[0]], -1.0, 1.0)
  score_fn = tfa_common.function(planner.plan_returns)
  times = [t * 1e3 for t in common.timed(
      lambda: score_fn(start_state, candidate_actions).numpy(), args.calls, args.warmup)]
  common.emit('planner_iteration_ms', round(statistics.median(times), 2), 'ms',
              how='common.function(plan_returns) on [1, N, H, A]', **config, **sizes,
              **_stats(times))

  if 'guided' not in skip:
    # The agent's planners have the settings gin held when it was built: override them.
    guided = agent.make_policy('cem', True, actor_share=0.1, terminal_value='critic')
    planner_lines(guided, 'planner_guided_action_ms',
                  'CemPlanningPolicy(actor_share=0.1, terminal_value=critic)')

  if 'savedmodel' not in skip:
    out_dir = common.tmpdir('planner_export')
    start = time.perf_counter()
    paths = saved_policies.export_policies(agent, out_dir, agent.train_step_counter, kind='cem')
    export_s = time.perf_counter() - start
    loaded = tf.saved_model.load(paths['greedy_policy'])
    times = policy_bench.latency(loaded.action, loaded.get_initial_state(1), time_step_spec,
                                 frames, args.calls, args.warmup)
    common.emit('planner_savedmodel_action_ms', round(statistics.median(times), 2), 'ms',
                batch=1, how='tf.saved_model.load(greedy_policy).action', **config,
                export_both_planners_s=round(export_s, 1), **sizes, **_stats(times))

  if 'batch' not in skip:
    batch = args.batch or planner.num_candidates
    times = batched_latency(sac_fn, sac.get_initial_state(batch), time_step_spec, frames,
                            batch, max(3, args.calls // 3), 1)
    median = statistics.median(times)
    common.emit('sac_action_batch_ms', round(median, 2), 'ms', batch=batch,
                how='common.function(LatentActorPolicy(greedy).action), one frame per row',
                per_env_ms=round(median / batch, 4), x_planner=round(median / planner_ms, 2),
                gflop=round(batch * sac_flops / 1e9, 2),
                achieved_gflops=round(batch * sac_flops / median / 1e6, 1), **sizes,
                **_stats(times))
  common.hard_exit()


if __name__ == '__main__':
  main()

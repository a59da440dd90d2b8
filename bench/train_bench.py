"""Training figures (issue 8): seconds per train step, its parts and FLOP floors.

  python -m bench.train_bench [--quick] [--depth 32] [--steps 20] \
      [--matmul_gflops G] [--suffix _tcmalloc]

One process per configuration (peak RSS is the process's own). The replay is
a real Reverb table (`tables.make_experience_table`) holding episodes of real
cartpole frames written through `observers.ReverbEpisodeObserver`; batches come
from `tables.ReplaySampler` ([32, 9]) and are sampled before the timed steps
(sampling is timed on its own). Two fresh `LatentSacAgent`s from
gin/defaults.gin (+ `WorldModel.image_depth`), each trained through
`common.function(agent.train)` as run.py does:

  full  one train step = world-model update + SAC update
  wm    LatentSacAgent(train_sac=False): the world-model update only
  sac   the SAC update alone (`agent.sac.train` on `agent.sac_transitions` of
        precomputed posterior features), a cross-check of full - wm

After each function's first call and 5 more (warm-up, retrace count), the
timed calls of full, wm and sac are interleaved (full, wm, sac, full, ...),
so slow drifts of the machine hit all three alike.

Figures (suffix _d<depth>, plus --suffix):
  train_step_s, wm_update_s  median seconds, with `floor_s` = FLOPs / measured
                      matmul GFLOP/s and `x_floor` = time / floor
  sac_update_s        median over the interleaved pairs of (full - wm); details
                      hold the difference of the medians and the direct `sac` time
  wm_update_gflop     FLOPs of one world-model update (forward x 3), by part
  sample_batch_s      seconds per [32, 9] batch from ReplaySampler
  train_retraces      traces of the train function over the 5 calls after the
                      first (`experimental_get_tracing_count`); expect 0
  peak_rss_mb         ru_maxrss of this process after the full agent's first 6
                      train steps (before the second agent exists)
"""
import argparse
import statistics
import time

from bench import common
from bench import flops as flops_lib


def fill_replay(data_spec, frames, seq, episodes, episode_length):
  from planet_tfa.replay import observers  # pylint: disable=g-import-not-at-top
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  server = tables.ReplayServer([tables.make_experience_table(data_spec)])
  observer = observers.ReverbEpisodeObserver(server.client, seq)
  common.write_episodes(observer, data_spec, common.cycled(frames), episode_length,
                        episodes * episode_length)
  observer.close()
  return server


def sample_batches(data_spec, server, seq, batch, count, keep=None):
  """Times `count` batches from ReplaySampler after the first; returns (the
  first `keep` batches (default all), per-batch seconds). Keeping a bounded
  pool holds the process's memory (its peak RSS figure) apart from `count`."""
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  sampler = tables.ReplaySampler(data_spec, server.address, seq, batch_size=batch,
                                 timeout_s=30.0)
  batches = [next(sampler)]  # starts the pipeline

  def one():
    experience = next(sampler)
    experience.observation['pixels'].numpy()
    if keep is None or len(batches) < keep:
      batches.append(experience)
  times = common.timed(one, count)
  return batches, times


def first_calls(fn, args_list, after=5):
  """First call (tracing) and `after` more; returns (first s, traces after the
  first call, extra traces in the `after` calls)."""
  start = time.perf_counter()
  _block(fn(*args_list[0]))
  first_s = time.perf_counter() - start
  traces = fn.experimental_get_tracing_count()
  for i in range(after):
    _block(fn(*args_list[(i + 1) % len(args_list)]))
  return first_s, traces, fn.experimental_get_tracing_count() - traces


def _block(out):
  """Waits for a train output (LossInfo or a tensor)."""
  loss = out.loss if hasattr(out, 'loss') else out
  return loss.numpy()


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true', help='tiny sizes (smoke test)')
  parser.add_argument('--depth', type=int, default=32)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--seq', type=int, default=9)
  # 20 rounds (about 20 s at depth 32): medians of 10 moved by several percent.
  parser.add_argument('--steps', type=int, default=20, help='timed interleaved rounds')
  parser.add_argument('--sample_count', type=int, default=30, help='timed sampled batches')
  parser.add_argument('--episodes', type=int, default=4, help='episodes in the replay')
  parser.add_argument('--matmul_gflops', type=float, default=None,
                      help='measured fp32 matmul GFLOP/s (default: measure here)')
  parser.add_argument('--suffix', default='', help='appended to every figure name')
  args = parser.parse_args(argv)
  if args.quick:
    args.batch, args.steps, args.sample_count, args.episodes = 4, 3, 3, 2
  return args


def main():
  args = parse_args()

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa.networks import rssm as rssm_lib  # pylint: disable=g-import-not-at-top
  tf.random.set_seed(0)
  common.parse_gin(args.quick, [f'WorldModel.image_depth = {args.depth}'])
  depth = common.gin_value('WorldModel.image_depth')
  episode_length = 126
  time_step_spec, action_spec, frames = common.env_specs_and_frames(episode_length)
  gflops = args.matmul_gflops
  if gflops is None:
    gflops, _ = flops_lib.matmul_gflops()
  tag = f'_d{depth}{args.suffix}'
  config = {'depth': depth, 'batch': args.batch, 'seq': args.seq,
            'rssm': [common.gin_value('RSSM.deter_size'), common.gin_value('RSSM.stoch_size'),
                     common.gin_value('RSSM.hidden_size')],
            'matmul_gflops': round(gflops, 1)}

  # ---- full agent first: replay, sampling, tracing, retraces, peak RSS ----
  full = experiment_lib.make_agent(time_step_spec, action_spec)
  data_spec = full.collect_data_spec
  server = fill_replay(data_spec, frames, args.seq, args.episodes, episode_length)
  batches, sample_times = sample_batches(data_spec, server, args.seq, args.batch,
                                         args.sample_count, keep=11)
  common.emit(f'sample_batch_s{tag}', round(statistics.median(sample_times), 4), 's',
              windows=server.table_size(), frames='real cartpole frames',
              **common.summarize(sample_times), **config)
  full_fn = tfa_common.function(full.train)
  batch_args = [(b,) for b in batches]
  full_first_s, full_traces, retraces = first_calls(full_fn, batch_args)
  common.emit(f'train_retraces{tag}', retraces, 'traces',
              window='5 train calls after the first', traces_in_first_call=full_traces,
              note='the first call traces twice when it creates the optimizer slots')
  common.emit(f'peak_rss_mb{tag}', round(common.peak_rss_mb(), 1), 'MiB',
              what='ru_maxrss after the full agent\'s first 6 train steps (agent, '
                   f'optimizers, replay of {args.episodes} episodes, prefetching sampler)',
              **config)

  # ---- world-model-only agent and the SAC update alone ----
  wm = experiment_lib.make_agent(time_step_spec, action_spec, train_sac=False)
  wm_fn = tfa_common.function(wm.train)
  wm_first_s, _, wm_retraces = first_calls(wm_fn, batch_args)
  features_fn = tf.function(
      lambda e: tf.stop_gradient(rssm_lib.features(full.world_model.loss(e)[2])))
  sac_args = [(b, features_fn(b)) for b in batches[:4]]

  def sac_only(experience, features):
    transition, weights = full.sac_transitions(experience, features)
    return full.sac.train(transition, weights=weights).loss
  sac_fn = tfa_common.function(sac_only)
  first_calls(sac_fn, sac_args)

  # first_calls already warmed each function up (its first call and 5 more).
  times = common.interleave({
      'full': lambda i: _block(full_fn(*batch_args[i % len(batch_args)])),
      'wm': lambda i: _block(wm_fn(*batch_args[i % len(batch_args)])),
      'sac': lambda i: _block(sac_fn(*sac_args[i % len(sac_args)])),
  }, args.steps)

  parts = flops_lib.world_model_forward_flops(full.world_model, args.batch, args.seq)
  wm_flops = 3 * sum(parts.values())
  sac_flops = flops_lib.sac_update_flops(full, args.batch, args.seq)
  med = {k: statistics.median(v) for k, v in times.items()}
  floor = (wm_flops + sac_flops) / (gflops * 1e9)
  common.emit(f'train_step_s{tag}', round(med['full'], 4), 's',
              gflop=round((wm_flops + sac_flops) / 1e9, 2), floor_s=round(floor, 4),
              x_floor=round(med['full'] / floor, 2),
              first_call_with_tracing_s=round(full_first_s, 2),
              **common.summarize(times['full']), **config)
  common.emit(f'wm_update_gflop{tag}', round(wm_flops / 1e9, 2), 'GFLOP',
              forward_gflop_by_part={k: round(v / 1e9, 3) for k, v in parts.items()},
              note='forward x 3 (forward + backward); matmul/conv FLOPs only',
              sac_update_gflop=round(sac_flops / 1e9, 3), **config)
  floor = wm_flops / (gflops * 1e9)
  common.emit(f'wm_update_s{tag}', round(med['wm'], 4), 's',
              floor_s=round(floor, 4), x_floor=round(med['wm'] / floor, 2),
              retraces_after_first=wm_retraces, first_call_with_tracing_s=round(wm_first_s, 2),
              **common.summarize(times['wm']), **config)
  paired = statistics.median(f - w for f, w in zip(times['full'], times['wm']))
  floor = sac_flops / (gflops * 1e9)
  common.emit(f'sac_update_s{tag}', round(paired, 4), 's',
              how='median over interleaved rounds of (full - wm)',
              difference_of_medians_s=round(med['full'] - med['wm'], 4),
              direct_sac_train_s=round(med['sac'], 4),
              direct_min_max_s=[round(min(times['sac']), 4), round(max(times['sac']), 4)],
              gflop=round(sac_flops / 1e9, 3), floor_s=round(floor, 5),
              x_floor=round(paired / floor, 1), **config)
  server.stop()
  common.hard_exit()


if __name__ == '__main__':
  main()

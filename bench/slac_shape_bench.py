"""SLAC-shaped training iteration (issue 8): model batch 32 x 9, SAC batch 256 x 9.

  python -m bench.slac_shape_bench [--quick] [--depth 32] [--sac_batch 256] [--steps 15] \
      [--warmup 3]

Two layouts of one train step, same agent and replay, depth-32 conv at 64x64x3:
  reuse     SAC learns from the features of the model's own 32 windows (default)
  separate  SAC gets its own 256 windows, encoded without gradients after the
            model update (`train(experience, sac_experience=...)`, SLAC's layout)
Each time is also given as a ratio to its FLOP floor (FLOPs / measured matmul
GFLOP/s): world-model update (forward x 3) + SAC update, plus for `separate`
the forward encoder + RSSM pass over the SAC windows.

After each layout's first (tracing) call, `--warmup` untimed rounds, then
`--steps` timed rounds alternate the two layouts (reuse, separate, reuse, ...)
so a slow phase of the machine hits both; each figure is the median of its
rounds (with IQR, min, max). The batches come from a pool of `--pool`
pre-sampled batches, cycled: the step's cost does not depend on the frames.

`--precisions float32,mixed_bfloat16` also times `WorldModel.image_precision =
'mixed_bfloat16'` (figures named *_bf16; their floor is still the fp32 one).
"""
import argparse
import statistics

from bench import common
from bench import flops as flops_lib
from bench import train_bench


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true')
  parser.add_argument('--depth', type=int, default=32)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--sac_batch', type=int, default=256)
  parser.add_argument('--seq', type=int, default=9)
  # 5 steps ranged 0.85-1.11 s across four runs; 15 interleaved rounds after
  # 3 warm-up rounds keep two runs within a few percent (~1 min per precision).
  parser.add_argument('--steps', type=int, default=15, help='timed rounds (median taken)')
  parser.add_argument('--warmup', type=int, default=3, help='untimed rounds after tracing')
  parser.add_argument('--pool', type=int, default=4, help='pre-sampled batches, cycled')
  parser.add_argument('--precisions', default='float32',
                      help='Comma-separated WorldModel.image_precision values.')
  args = parser.parse_args(argv)
  if args.quick:
    args.batch, args.sac_batch, args.steps, args.warmup, args.pool = 4, 8, 2, 1, 2
  return args


def main():
  args = parse_args()

  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  common.parse_gin(args.quick, [f'WorldModel.image_depth = {args.depth}'])
  episode_length = 126
  time_step_spec, action_spec, frames = common.env_specs_and_frames(episode_length)
  gflops, _ = flops_lib.matmul_gflops()
  server = None
  for precision in args.precisions.split(','):
    common.parse_gin(args.quick, [f'WorldModel.image_depth = {args.depth}',
                                  f"WorldModel.image_precision = '{precision}'"])
    agent = experiment_lib.make_agent(time_step_spec, action_spec)
    if server is None:
      server = train_bench.fill_replay(agent.collect_data_spec, frames, args.seq, 4,
                                       episode_length)
      model_batches, _ = train_bench.sample_batches(agent.collect_data_spec, server, args.seq,
                                                    args.batch, args.pool)
      sac_batches, _ = train_bench.sample_batches(agent.collect_data_spec, server, args.seq,
                                                  args.sac_batch, args.pool)
    suffix = '' if precision == 'float32' else '_bf16'
    _time_layouts(agent, model_batches, sac_batches, gflops, args, precision, suffix)
  server.stop()
  common.hard_exit(0)


def _time_layouts(agent, model_batches, sac_batches, gflops, args, precision, suffix):
  """Times both layouts of one agent; emits train_iteration_s_{reuse,separate}."""
  from tf_agents.utils import common as tfa_common  # pylint: disable=g-import-not-at-top
  # One tf.function per call signature (with and without sac_experience).
  reuse_fn = tfa_common.function(agent.train)
  separate_fn = tfa_common.function(agent.train)
  wm = sum(flops_lib.world_model_forward_flops(agent.world_model, args.batch,
                                               args.seq).values())
  sac_reuse = flops_lib.sac_update_flops(agent, args.batch, args.seq)
  sac_separate = flops_lib.sac_update_flops(agent, args.sac_batch, args.seq)
  encode = flops_lib.world_model_forward_flops(agent.world_model, args.sac_batch, args.seq)
  encode = encode['encoder'] + encode['rssm']
  n = len(model_batches)
  layouts = {
      'reuse': (lambda i: reuse_fn(model_batches[i % n]).loss.numpy(), 3 * wm + sac_reuse),
      'separate': (lambda i: separate_fn(model_batches[i % n],
                                         sac_experience=sac_batches[i % n]).loss.numpy(),
                   3 * wm + sac_separate + encode),
  }
  config = {'depth': args.depth, 'model_batch': args.batch, 'sac_batch': args.sac_batch,
            'seq': args.seq, 'image_precision': precision, 'matmul_gflops': round(gflops, 1),
            'warmup_rounds': args.warmup}
  for step, _ in layouts.values():
    step(0)  # traces
  times = common.interleave({name: step for name, (step, _) in layouts.items()},
                            args.steps, args.warmup)
  for name, (_, flop) in layouts.items():
    median = statistics.median(times[name])
    floor = flop / (gflops * 1e9)
    common.emit(f'train_iteration_s_{name}{suffix}', round(median, 4), 's',
                gflop=round(flop / 1e9, 2), floor_s=round(floor, 4),
                x_floor=round(median / floor, 2), **common.summarize(times[name]), **config)


if __name__ == '__main__':
  main()

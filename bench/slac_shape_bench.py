"""SLAC-shaped training iteration (issue 8): model batch 32 x 9, SAC batch 256 x 9.

  python -m bench.slac_shape_bench [--quick] [--depth 32] [--sac_batch 256] [--steps 5]

Two layouts of one train step, same agent and replay, depth-32 conv at 64x64x3:
  reuse     SAC learns from the features of the model's own 32 windows (default)
  separate  SAC gets its own 256 windows, encoded without gradients after the
            model update (`train(experience, sac_experience=...)`, SLAC's layout)
Each time is also given as a ratio to its FLOP floor (FLOPs / measured matmul
GFLOP/s): world-model update (forward x 3) + SAC update, plus for `separate`
the forward encoder + RSSM pass over the SAC windows.

`--precisions float32,mixed_bfloat16` also times `WorldModel.image_precision =
'mixed_bfloat16'` (figures named *_bf16; their floor is still the fp32 one).
"""
import argparse
import statistics

from bench import common
from bench import flops as flops_lib
from bench import train_bench


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true')
  parser.add_argument('--depth', type=int, default=32)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--sac_batch', type=int, default=256)
  parser.add_argument('--seq', type=int, default=9)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--precisions', default='float32',
                      help='Comma-separated WorldModel.image_precision values.')
  args = parser.parse_args()
  if args.quick:
    args.batch, args.sac_batch, args.steps = 4, 8, 2

  from planet_tfa.agents import latent_sac_agent  # pylint: disable=g-import-not-at-top
  common.parse_gin(args.quick, [f'WorldModel.image_depth = {args.depth}'])
  episode_length = 126
  time_step_spec, action_spec, frames = common.env_specs_and_frames(episode_length)
  gflops, _ = flops_lib.matmul_gflops(repeats=5)
  server = None
  for precision in args.precisions.split(','):
    common.parse_gin(args.quick, [f'WorldModel.image_depth = {args.depth}',
                                  f"WorldModel.image_precision = '{precision}'"])
    agent = latent_sac_agent.LatentSacAgent(time_step_spec, action_spec)
    if server is None:
      server = train_bench.fill_replay(agent.collect_data_spec, frames, args.seq, 4,
                                       episode_length)
      model_batches, _ = train_bench.sample_batches(agent.collect_data_spec, server, args.seq,
                                                    args.batch, args.steps + 2)
      sac_batches, _ = train_bench.sample_batches(agent.collect_data_spec, server, args.seq,
                                                  args.sac_batch, args.steps + 2)
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
  layouts = {
      'reuse': (lambda i: reuse_fn(model_batches[i]), 3 * wm + sac_reuse),
      'separate': (lambda i: separate_fn(model_batches[i], sac_experience=sac_batches[i]),
                   3 * wm + sac_separate + encode),
  }
  config = {'depth': args.depth, 'model_batch': args.batch, 'sac_batch': args.sac_batch,
            'seq': args.seq, 'image_precision': precision, 'matmul_gflops': round(gflops, 1)}
  for name, (step, flop) in layouts.items():
    step(0).loss.numpy()  # trace
    step(1).loss.numpy()
    times = []
    for i in range(args.steps):
      times.append(common.timed(lambda: step(i + 2).loss.numpy(), 1)[0])
    median = statistics.median(times)
    floor = flop / (gflops * 1e9)
    common.emit(8, f'train_iteration_s_{name}{suffix}', round(median, 4), 's',
                gflop=round(flop / 1e9, 2), floor_s=round(floor, 4),
                x_floor=round(median / floor, 2), **common.summarize(times), **config)


if __name__ == '__main__':
  main()

"""FLOP floors: fp32 matmul throughput of this machine and the FLOPs of an update.

  python -m bench.flops [--size 2048] [--repeats 20] [--warmup 3]

prints the measured `tf.linalg.matmul` throughput (GFLOP/s). The other
functions count the FLOPs of one world-model update and one SAC update from
the layer shapes of a built `LatentSacAgent` (multiply-add = 2 FLOPs;
forward + backward ~ 3x forward; element-wise ops, the softplus/KL/log-prob
arithmetic and Adam are left out, so the floor is a lower bound).
"""
import argparse

from bench import common


def matmul_gflops(size=2048, repeats=20, warmup=3, min_time_s=1.0):
  """Median fp32 throughput of a [size, size] x [size, size] matmul, GFLOP/s.

  At least `repeats` calls and `min_time_s` of them: the floors of every
  training figure divide by this number, so it must not wobble.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.random.normal([size, size], seed=1)
  b = tf.random.normal([size, size], seed=2)
  times = common.timed(lambda: tf.linalg.matmul(a, b).numpy(), repeats, warmup, min_time_s)
  flops = 2.0 * size ** 3
  stats = common.summarize(times)
  return flops / stats['median_s'] / 1e9, stats


def _conv_out(size, kernel, stride):
  return (size - kernel) // stride + 1  # VALID


def _deconv_out(size, kernel, stride):
  return (size - 1) * stride + kernel  # VALID


def _dense(layer):
  fan_in, fan_out = layer.kernel.shape
  return 2 * int(fan_in) * int(fan_out)


def world_model_forward_flops(world_model, batch, seq):
  """Forward FLOPs of `WorldModel.loss` on a [batch, seq] window, by part."""
  frames = batch * seq
  parts = {}
  # pylint: disable=protected-access
  enc = 0
  for key, encoder in world_model.encoder._encoders.items():
    size = world_model.observation_spec[key].shape[0]
    for conv in encoder._convs:
      kh, kw, cin, cout = (int(d) for d in conv.kernel.shape)
      size = _conv_out(size, kh, conv.strides[0])
      enc += 2 * size * size * kh * kw * cin * cout
  parts['encoder'] = enc * frames
  dec = 0
  for decoder in world_model.decoders.values():
    dec += _dense(decoder._project)
    size = 1
    for deconv in decoder._deconvs:
      kh, kw, cout, cin = (int(d) for d in deconv.kernel.shape)
      # Each input pixel scatters a kh x kw x cout patch per input channel.
      dec += 2 * size * size * cin * kh * kw * cout
      size = _deconv_out(size, kh, deconv.strides[0])
  parts['decoder'] = dec * frames
  rssm = world_model.rssm
  cell = rssm._cell
  gru = 2 * int(cell.kernel.shape[0]) * int(cell.kernel.shape[1])
  gru += 2 * int(cell.recurrent_kernel.shape[0]) * int(cell.recurrent_kernel.shape[1])
  step = (_dense(rssm._img_in) + gru + _dense(rssm._img_out) + _dense(rssm._prior_stats)
          + _dense(rssm._obs_out) + _dense(rssm._post_stats))
  parts['rssm'] = step * frames  # one posterior step (with its prior) per frame
  head = world_model.reward_decoder
  parts['reward'] = (sum(_dense(l) for l in head._layers) + _dense(head._out)) * frames
  return parts


def sac_update_flops(agent, batch, seq):
  """FLOPs of one SacAgent.train on the batch*(seq-1) pairs of a window batch.

  Per pair (a = actor forward, c = one critic forward):
    critic loss: actor on next (a) + 2 target critics (2c) + 2 critics fwd+bwd (6c)
    actor loss:  actor fwd+bwd (3a) + 2 critics fwd + input-gradient (4c)
    alpha loss:  actor fwd (a)
  = 5a + 12c.
  """
  # pylint: disable=protected-access
  def mlp(network):
    return sum(_dense(v) for v in _dense_layers(network))
  actor = mlp(agent._actor_network)
  critic = mlp(agent.sac._critic_network_1)
  return (5 * actor + 12 * critic) * batch * (seq - 1)


def _dense_layers(network):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [l for l in network.submodules
          if isinstance(l, tf.keras.layers.Dense) and getattr(l, 'kernel', None) is not None]


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--size', type=int, default=2048)
  parser.add_argument('--repeats', type=int, default=20, help='at least this many timed calls')
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--min_time_s', type=float, default=1.0,
                      help='time calls until at least this much is spent')
  return parser.parse_args(argv)


def main():
  args = parse_args()
  gflops, stats = matmul_gflops(args.size, args.repeats, args.warmup, args.min_time_s)
  info = common.machine_info()
  common.emit('matmul_fp32_gflops', round(gflops, 1), 'GFLOP/s',
              size=args.size, **stats, tf_gpus=info['gpus'], cores=info['cores'])


if __name__ == '__main__':
  main()

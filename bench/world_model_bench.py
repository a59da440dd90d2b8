"""Seconds per world-model update (forward, backward, Adam apply) on synthetic frames.

Prints one JSON line per configuration, so runs on different machines (or
before/after a change) can be compared line by line:

  python -m bench.world_model_bench [--steps 10] [--warmup 3] [--depths 32,16]
"""
import argparse
import json
import statistics
import time

import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from bench import common
from planet_tfa.agents import world_model as wm_lib
from planet_tfa.networks import rssm as rssm_lib


def synthetic_batch(batch, seq, action_size, seed=0):
  """Random 64x64x3 uint8 frames in one episode per row (FIRST then MID)."""
  rng = np.random.default_rng(seed)
  step_type = np.full([batch, seq], ts.StepType.MID, np.int32)
  step_type[:, 0] = ts.StepType.FIRST
  step_type = tf.constant(step_type)
  return trajectory.Trajectory(
      step_type=step_type,
      observation={'pixels': tf.constant(
          rng.integers(0, 256, [batch, seq, 64, 64, 3]).astype(np.uint8))},
      action=tf.constant(rng.uniform(-1, 1, [batch, seq, action_size]).astype(np.float32)),
      policy_info=(),
      next_step_type=step_type,
      reward=tf.constant(rng.normal(size=[batch, seq]).astype(np.float32)),
      discount=tf.ones([batch, seq]))


def bench_update(depth, jit, batch, seq, steps, warmup, action_size=2):
  """Median wall time of one compiled update, after `warmup` calls (tracing, XLA)."""
  tf.keras.backend.clear_session()
  tf.random.set_seed(0)
  obs_spec = {'pixels': tensor_spec.BoundedTensorSpec([64, 64, 3], tf.uint8, 0, 255)}
  action_spec = tensor_spec.BoundedTensorSpec([action_size], tf.float32, -1.0, 1.0)
  model = wm_lib.WorldModel(obs_spec, action_spec, image_depth=depth,
                            rssm=rssm_lib.RSSM(deter_size=200, stoch_size=30, hidden_size=200))
  optimizer = tf.keras.optimizers.legacy.Adam(1e-3)
  experience = synthetic_batch(batch, seq, action_size)
  variables = model.trainable_variables

  @tf.function(jit_compile=jit)
  def update(experience):
    with tf.GradientTape() as tape:
      loss, _, _ = model.loss(experience)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  start = time.perf_counter()
  for _ in range(warmup):
    update(experience).numpy()
  warmup_s = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    update(experience).numpy()  # .numpy() waits for the device.
    times.append(time.perf_counter() - start)
  return {
      'sec_per_update': round(statistics.median(times), 4),
      'min_s': round(min(times), 4),
      'max_s': round(max(times), 4),
      'warmup_s': round(warmup_s, 2),
      'n': steps,
      'params': int(sum(np.prod(v.shape) for v in variables)),
  }


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--depths', default='32,16')
  parser.add_argument('--jit', default='0,1', help='0 (no XLA), 1 (jit_compile) or both')
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--seq', type=int, default=9)
  parser.add_argument('--steps', type=int, default=10, help='timed updates (median taken)')
  parser.add_argument('--warmup', type=int, default=3)
  return parser.parse_args(argv)


def main():
  args = parse_args()
  info = common.machine_info()
  for depth in [int(d) for d in args.depths.split(',')]:
    for jit in [bool(int(j)) for j in args.jit.split(',')]:
      result = bench_update(depth, jit, args.batch, args.seq, args.steps, args.warmup)
      line = {'name': f'world_model_update_d{depth}_{"xla" if jit else "nojit"}',
              'depth': depth, 'jit': jit, 'batch': args.batch, 'seq': args.seq,
              'rssm': [200, 30, 200], **result, **info}
      print(json.dumps(line), flush=True)


if __name__ == '__main__':
  main()

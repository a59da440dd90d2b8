"""The PyTorch SLAC peer's iteration, in the peer's own Python (bench.peer_slac runs this file).

  PEER_PYTHON bench/peer_slac_worker.py PEER_DIR THREADS

Imports only NumPy, PyTorch and the peer's checkout (its Python needs nothing
of this project). Fills the peer's buffer with random episodes, prints
`ready`, then for each `run` line on stdin runs one iteration (what the peer's
trainer does per environment step after its warm-up: `update_latent`, then
`update_sac`) and prints `done`; exits at end of input.
"""
import os
import sys

import numpy as np


class _NoWriter:
  """The peer's updates log through a SummaryWriter every 1000 steps; not timed here."""

  def add_scalar(self, *args, **kwargs):
    del args, kwargs


def make_peer(peer_dir, threads, episodes=4, episode_length=126, seed=0):
  import torch  # pylint: disable=g-import-not-at-top,import-error
  sys.path.insert(0, peer_dir)
  from slac.algo import SlacAlgorithm  # pylint: disable=g-import-not-at-top,import-error
  torch.set_num_threads(threads)
  state_shape, action_shape = (3, 64, 64), (6,)  # cheetah's action size
  algo = SlacAlgorithm(state_shape, action_shape, action_repeat=4,
                       device=torch.device('cpu'), seed=seed)
  rng = np.random.default_rng(seed)
  for _ in range(episodes):
    algo.buffer.reset_episode(rng.integers(0, 256, state_shape, dtype=np.uint8))
    for t in range(episode_length):
      # append(action, reward, done, next_state, episode_done): the peer's
      # buffer asserts each episode is closed before the next reset.
      algo.buffer.append(rng.uniform(-1, 1, action_shape).astype(np.float32),
                         float(rng.normal()), False,
                         rng.integers(0, 256, state_shape, dtype=np.uint8),
                         t == episode_length - 1)
  return algo


def main():
  peer_dir, threads = sys.argv[1], int(sys.argv[2])
  algo = make_peer(peer_dir, threads)
  writer = _NoWriter()
  print('ready', flush=True)
  for line in sys.stdin:
    if line.strip() == 'run':
      algo.update_latent(writer)
      algo.update_sac(writer)
      print('done', flush=True)


if __name__ == '__main__':
  os.environ.setdefault('OMP_NUM_THREADS', sys.argv[2] if len(sys.argv) > 2 else '1')
  main()

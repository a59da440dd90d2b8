"""How far the belief a policy acts on is from the beliefs SAC trained on (issue 21, cause 1).

  python -m bench.belief_gap --root_dir=ROOT [--episodes 1] [--window 9] [--drive full|window]

Training windows are filtered from the zero state, so SAC only sees beliefs
with at most `window - 1` steps of history. A filter that carries its state
through a whole episode acts on beliefs it never trained on. On ROOT's
checkpoint this drives greedy episodes (the actor's mode, posterior-mean
filters) and, at every step, builds both beliefs from the same frames and
actions: the whole-episode filter's and the `window`-step zero-state
filter's (`RssmEncodingNetwork(window=...)`, what `acting_window` acts on).
One JSON line with, over the steps after the first `window` (before them
the two are the same filter):

  feature_rel_dist   |f_full - f_window| / |f_window|, mean and percentiles
  actor_mode_diff    mean absolute difference of the actor's mode (action units)
  q_diff             mean |min-Q(f_full, a) - min-Q(f_window, a)| at the taken a,
                     and the mean |Q| for scale
`--drive` chooses whose action steps the env (default: full, as runs with
acting_window=None acted).
"""
import argparse
import os

from bench import common


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--root_dir', required=True)
  parser.add_argument('--episodes', type=int, default=1)
  parser.add_argument('--window', type=int, default=9)
  parser.add_argument('--drive', choices=('full', 'window'), default='full')
  parser.add_argument('--seed', type=int, default=100)
  return parser.parse_args(argv)


def belief_gap_episode(agent, env, window, drive):
  """Per step after the first `window`: (feature rel. distance, mode diff, Q diff, |Q|)."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  from tf_agents.trajectories import time_step as ts
  from planet_tfa.networks import rssm_network
  from bench import diagnose_run
  model = agent.world_model
  filters = {kind: rssm_network.RssmEncodingNetwork(model.encoder, model.rssm, agent.action_spec,
                                                    window=size)
             for kind, size in (('full', None), ('window', window))}
  keys = list(filters['full'].input_tensor_spec)

  @tf.function
  def filter_step(observation, step_type, states):
    out = {}
    for kind, net in filters.items():
      features, state = net(observation, step_type=step_type, network_state=states[kind],
                            sample=False)
      mode = agent.actor_network(features, step_type=(), network_state=())[0].mode()
      out[kind] = (features, state, mode)
    return out

  step = env.reset()
  states = {kind: net.get_initial_state(1) for kind, net in filters.items()}
  rows, t = [], 0
  while not step.is_last():
    observation = {k: tf.constant(step.observation[k][None]) for k in keys}
    out = filter_step(observation, tf.constant([step.step_type]), states)
    action = out[drive][2]
    for kind in filters:
      states[kind] = dict(out[kind][1], prev_action=tf.cast(action, tf.float32))
    if t >= window:
      full, win = out['full'][0], out['window'][0]
      q_full = diagnose_run.critic_values(agent, full, action)
      q_win = diagnose_run.critic_values(agent, win, action)
      rows.append((float(tf.norm(full - win) / tf.maximum(tf.norm(win), 1e-6)),
                   float(tf.reduce_mean(tf.abs(out['full'][2] - out['window'][2]))),
                   float(np.abs(q_full - q_win).mean()), float(np.abs(q_win).mean())))
    step = env.step(action.numpy()[0])
    t += 1
  return rows


def main():
  args = parse_args()
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bench import diagnose_run  # pylint: disable=g-import-not-at-top

  root = os.path.abspath(args.root_dir)
  agent, per_episode = diagnose_run.episodes_on_run(
      root, args.seed, args.episodes,
      lambda agent, env: belief_gap_episode(agent, env, args.window, args.drive))
  rows = [row for episode in per_episode for row in episode]
  rel, mode, q_diff, q_abs = map(np.array, zip(*rows))
  pct = lambda v: {f'p{p}': round(float(np.percentile(v, p)), 4) for p in (10, 50, 90)}  # pylint: disable=unnecessary-lambda-assignment
  common.emit('belief_gap', round(float(rel.mean()), 4), 'relative L2',
              what=f'whole-episode belief vs the {args.window}-step zero-state window belief',
              feature_rel_dist=pct(rel), actor_mode_diff=round(float(mode.mean()), 4),
              actor_mode_diff_pct=pct(mode), q_diff=round(float(q_diff.mean()), 3),
              q_abs=round(float(q_abs.mean()), 3), steps=len(rows), window=args.window,
              drive=args.drive, root_dir=root,
              train_step=int(agent.train_step_counter.numpy()))
  common.hard_exit()


if __name__ == '__main__':
  main()

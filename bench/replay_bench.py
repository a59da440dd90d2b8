"""Replay figures (issue 3): storage per env step, sampling rate, warm-up rate.

  python -m bench.replay_bench [--quick] [--episodes 8] [--sample_batches 60]

All on real components: a Reverb server with the project's
`tables.make_experience_table` (T+1 = 9 windows, stride 1), written through
`observers.ReverbEpisodeObserver` and read through `tables.ReplaySampler`.

  replay_warmup_env_steps_per_s   random policy on dm_control cartpole swing-up
                                  (pixels, action repeat 8) through
                                  `episodes_lib.Collection.warmup`, writing to
                                  Reverb; episodes after a first (tracing) one.
  replay_storage_{dmc,random}     bytes of a Reverb checkpoint of the table per
                                  stored env step, as a multiple of the raw
                                  64x64x3 frame (12288 B). Reverb compresses
                                  chunks (zstd, delta encoding), so real frames
                                  (`dmc`: those warm-up episodes) come out far
                                  below 1x; incompressible uniform-noise frames
                                  (`random`) show what the window layout costs:
                                  ~1x means each step is stored once, not once
                                  per window (9x).
  replay_sample_{dmc,random}      [B, T+1] = [32, 9] windows per second through
                                  ReplaySampler (prefetch 2), after warm-up.
"""
import argparse
import shutil
import statistics
import time

from bench import common


def build(quick, root_dir):
  """Agent data spec, a checkpointing server with the experience table."""
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  common.parse_gin(quick)
  time_step_spec, action_spec, _ = common.env_specs_and_frames(0)
  agent = experiment_lib.make_agent(time_step_spec, action_spec)
  table = tables.make_experience_table(agent.collect_data_spec)
  server = tables.ReplayServer([table], root_dir=root_dir)
  return agent, server


def storage(server, steps):
  """Checkpoint the table; bytes of the checkpoint per stored env step."""
  path = server.checkpoint(keep=1)
  size = common.dir_bytes(path)
  return size, size / steps, path


def sample_rate(data_spec, server, batch, seq, batches, warmup=5):
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  sampler = tables.ReplaySampler(data_spec, server.address, seq, batch_size=batch,
                                 timeout_s=30.0)
  def one():
    experience = next(sampler)
    experience.observation['pixels'].numpy()  # materialised on the host
  times = common.timed(one, batches, warmup)
  # The median batch, not the mean: one slow batch of a shared machine
  # would otherwise move the rate.
  return batch / statistics.median(times), common.summarize(times)


def run(args):
  from planet_tfa import experiment as run_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa import episodes as episodes_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa.replay import observers  # pylint: disable=g-import-not-at-top
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top

  seq = args.seq
  lines = []
  # ---- real dm_control: warm-up through Collection, then storage + sampling ----
  root = common.tmpdir('replay_dmc')
  try:
    agent, server = build(args.quick, root)
    tf_env = run_lib.make_env(run_lib.Experiment(env_loader=suites.load_environment), seed=0)
    episode_observer = observers.TFReverbObserver(
        lambda: observers.ReverbEpisodeObserver(server.client, seq),
        batch_size=tf_env.batch_size)
    collection = episodes_lib.Collection(
        tf_env, None, agent.collect_policy, agent.policy, episode_observer)
    env_steps = collection.train_metrics['env_steps']
    start = time.perf_counter()
    collection.warmup(1)  # traces the driver's tf.function
    first_s = time.perf_counter() - start
    rates = []
    for _ in range(args.episodes):
      before = int(env_steps.result())
      start = time.perf_counter()
      collection.warmup(1)
      rates.append((int(env_steps.result()) - before) / (time.perf_counter() - start))
    steps_per_episode = int(env_steps.result()) // (args.episodes + 1)
    lines.append(common.emit(
        'replay_warmup_env_steps_per_s', round(statistics.median(rates), 1), 'env steps/s',
        task='cartpole-swingup pixels 64x64, action repeat 8, random policy',
        episodes=args.episodes, steps_per_episode=steps_per_episode,
        min=round(min(rates), 1), max=round(max(rates), 1),
        first_episode_with_tracing_s=round(first_s, 2)))
    run_lib.close_env(tf_env)
    stored = episode_observer.observers[0].steps_written
    size, per_step, path = storage(server, stored)
    lines.append(common.emit(
        'replay_storage_dmc', round(per_step / common.RAW_FRAME_BYTES, 4), 'x raw obs bytes',
        bytes_per_step=round(per_step, 1), raw_obs_bytes=common.RAW_FRAME_BYTES,
        checkpoint_bytes=size, stored_steps=stored, windows=server.table_size(),
        sequence_length=seq, stride=1, frames='real dm_control cartpole frames',
        **common.chunk_steps_per_step(path, stored)))
    rate, stats = sample_rate(agent.collect_data_spec, server, args.batch, seq,
                              args.sample_batches)
    lines.append(common.emit(
        'replay_sample_dmc', round(rate, 1), 'sequences/s', batch=args.batch, seq=seq,
        batches_per_s=round(rate / args.batch, 2), frames='real dm_control cartpole frames',
        windows=server.table_size(), **stats))
    server.stop()
  finally:
    shutil.rmtree(root, ignore_errors=True)

  # ---- incompressible frames: same episode length, written in Python ----
  root = common.tmpdir('replay_random')
  try:
    from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
    table = tables.make_experience_table(agent.collect_data_spec)
    server = tables.ReplayServer([table], root_dir=root)
    observer = observers.ReverbEpisodeObserver(server.client, seq)
    episode_length = steps_per_episode + 1  # + the boundary step
    steps, write_s = common.write_episodes(observer, agent.collect_data_spec,
                                           common.fresh_noise(), episode_length,
                                           episode_length * (args.episodes + 1))
    size, per_step, path = storage(server, steps)
    lines.append(common.emit(
        'replay_storage_random', round(per_step / common.RAW_FRAME_BYTES, 4),
        'x raw obs bytes', bytes_per_step=round(per_step, 1),
        raw_obs_bytes=common.RAW_FRAME_BYTES, checkpoint_bytes=size, stored_steps=steps,
        windows=server.table_size(), sequence_length=seq, stride=1,
        frames='uniform random uint8 (incompressible)',
        python_write_steps_per_s=round(steps / write_s, 1),
        **common.chunk_steps_per_step(path, steps)))
    rate, stats = sample_rate(agent.collect_data_spec, server, args.batch, seq,
                              args.sample_batches)
    lines.append(common.emit(
        'replay_sample_random', round(rate, 1), 'sequences/s', batch=args.batch, seq=seq,
        batches_per_s=round(rate / args.batch, 2),
        frames='uniform random uint8 (incompressible)', windows=server.table_size(), **stats))
    observer.close()
    server.stop()
  finally:
    shutil.rmtree(root, ignore_errors=True)
  return lines


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true', help='tiny sizes (smoke test)')
  # Episodes take ~1 s each: 8 (median) rather than 4.
  parser.add_argument('--episodes', type=int, default=8, help='timed warm-up episodes')
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--seq', type=int, default=9)
  parser.add_argument('--sample_batches', type=int, default=60, help='timed batches (~6 ms)')
  args = parser.parse_args(argv)
  if args.quick:
    args.episodes, args.sample_batches, args.batch = 2, 3, 4
  return args


def main():
  args = parse_args()
  run(args)
  common.hard_exit()


if __name__ == '__main__':
  main()

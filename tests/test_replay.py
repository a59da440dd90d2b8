"""Reverb windows, drivers and replay persistence, on real Reverb servers."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf
from tf_agents.environments import tf_py_environment
from tf_agents.policies import random_tf_policy
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.specs import tensor_spec

from planet_tfa.agents import world_model
from planet_tfa import episodes
from planet_tfa import errors
from planet_tfa.replay import observers
from planet_tfa.replay import tables

WINDOW = 9


def _data_spec(env):
  tf_env = tf_py_environment.TFPyEnvironment(env)
  policy = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
  return tf_env, policy, policy.trajectory_spec


def _server(data_spec, root_dir=None, **table_kwargs):
  table = tables.make_experience_table(data_spec, capacity_env_steps=10_000,
                                       rate_limiter=tables.make_rate_limiter('min_size', 1),
                                       **table_kwargs)
  return tables.ReplayServer([table], root_dir=root_dir)


def _collection(tf_env, policy, server, eval_env=None, eval_policy=None):
  observer = observers.TFReverbObserver(
      lambda: observers.ReverbEpisodeObserver(server.client, WINDOW))
  return episodes.Collection(tf_env, eval_env, policy, eval_policy or policy, observer)


def _all_windows(server, data_spec):
  """Every item of the table (sampled 30x over through the project's sampler, deduplicated)."""
  size = server.table_size()
  sampler = tables.ReplaySampler(data_spec, server.address, WINDOW, batch_size=size * 30,
                                 timeout_s=5)
  batch = tf.nest.map_structure(lambda x: x.numpy(), next(sampler))
  keys = batch.observation['state'][:, 0, :2]  # (episode id, first step) names a window
  _, first_rows = np.unique(keys, axis=0, return_index=True)
  assert len(first_rows) == size
  return tf.nest.map_structure(lambda x: x[np.sort(first_rows)], batch)


def test_windows_never_span_episodes_and_padding_is_masked(counting_env):
  env = counting_env(episode_lengths=(5, 12, 3, 20, 8))
  tf_env, policy, data_spec = _data_spec(env)
  server = _server(data_spec)
  _collection(tf_env, policy, server).warmup(5)
  windows = _all_windows(server, data_spec)
  state = windows.observation['state']
  mask = world_model.valid_mask(tf.constant(windows.step_type)).numpy()
  assert mask.min() == 0, 'short episodes should have produced padded windows'
  for row in range(state.shape[0]):
    valid = mask[row] > 0
    episode_ids = np.unique(state[row, valid, 0])
    assert len(episode_ids) == 1, f'window mixes episodes {episode_ids}'
    # Valid steps are consecutive steps of the episode ...
    np.testing.assert_array_equal(np.diff(state[row, valid, 1]), 1)
    # ... and the window ends where the episode ends if it is padded.
    if not valid.all():
      last = np.flatnonzero(valid)[-1]
      assert windows.step_type[row, last] == ts.StepType.LAST
      np.testing.assert_array_equal(state[row, ~valid], 0)
  # Episodes of 5, 3 and 8 steps (6, 4, 9 time steps): the first two are
  # shorter than the window and gave one padded window each.
  padded_episodes = state[mask.min(axis=1) == 0, 0, 0]
  np.testing.assert_array_equal(np.sort(padded_episodes), [0.0, 2.0])
  server.stop()


def test_next_observation_follows_the_action(counting_env):
  env = counting_env(episode_lengths=(15, 11))
  tf_env, policy, data_spec = _data_spec(env)
  server = _server(data_spec)
  _collection(tf_env, policy, server).warmup(4)
  windows = _all_windows(server, data_spec)
  state = windows.observation['state']
  action = windows.action[..., 0]
  mask = world_model.valid_mask(tf.constant(windows.step_type)).numpy()
  checked = 0
  for row in range(state.shape[0]):
    for t in range(WINDOW - 1):
      if mask[row, t + 1] and windows.step_type[row, t] != ts.StepType.LAST:
        # obs[t+1] records the action that led to it.
        assert state[row, t + 1, 2] == pytest.approx(action[row, t], abs=1e-6)
        assert state[row, t + 1, 1] == state[row, t, 1] + 1
        assert windows.reward[row, t] == state[row, t + 1, 1]
        checked += 1
  assert checked > 50
  server.stop()


def test_warmup_writes_exactly_n_episodes_and_eval_writes_none(counting_env):
  env = counting_env(episode_lengths=(10, 14))
  tf_env, policy, data_spec = _data_spec(env)
  eval_env = tf_py_environment.TFPyEnvironment(
      counting_env(episode_lengths=(10,), first_episode_id=1000))
  server = _server(data_spec)
  collection = _collection(tf_env, policy, server, eval_env=eval_env)
  collection.warmup(3)
  assert int(collection.train_metrics['episodes'].result()) == 3
  size_after_warmup = server.table_size()
  # Episodes of 10, 14, 10 steps -> 11, 15, 11 time steps -> 3 + 7 + 3 windows.
  assert size_after_warmup == 13
  windows = _all_windows(server, data_spec)
  assert set(np.unique(windows.observation['state'][:, :, 0])) <= {0.0, 1.0, 2.0}
  assert len(np.unique(windows.observation['state'][:, 0, 0])) == 3

  collection.evaluate(2)
  assert int(collection.eval_metrics['episodes'].result()) == 2
  assert server.table_size() == size_after_warmup
  assert int(collection.train_metrics['episodes'].result()) == 3
  server.stop()


def test_evaluating_on_the_train_env_keeps_its_episodes_out_and_collection_consistent(
    counting_env):
  """eval_env is train_env (CARLA): evaluation runs between collection episodes."""
  env = counting_env(episode_lengths=(10, 14, 12, 11, 13))
  tf_env, policy, data_spec = _data_spec(env)
  server = _server(data_spec)
  collection = _collection(tf_env, policy, server, eval_env=tf_env)
  collection.warmup(1)       # episode 0
  collection.evaluate(2)     # episodes 1 and 2, on the same env
  collection.collect(1)      # episode 3
  assert int(collection.eval_metrics['episodes'].result()) == 2
  assert int(collection.train_metrics['episodes'].result()) == 2
  windows = _all_windows(server, data_spec)
  state = windows.observation['state']
  assert set(np.unique(state[:, :, 0])) == {0.0, 3.0}  # no evaluation episode
  mask = world_model.valid_mask(tf.constant(windows.step_type)).numpy()
  for row in range(state.shape[0]):
    # Collection continued the env's own episode: consecutive steps from 0,
    # no stale observation from before the evaluation.
    valid = mask[row] > 0
    np.testing.assert_array_equal(np.diff(state[row, valid, 1]), 1)
  assert 0.0 in state[state[:, 0, 0] == 3.0][:, 0, 1]  # episode 3 starts at step 0
  server.stop()


def test_unfinished_episode_never_reaches_the_table(counting_env):
  env = counting_env(episode_lengths=(30,))
  tf_env, policy, data_spec = _data_spec(env)
  server = _server(data_spec)
  writer = observers.ReverbEpisodeObserver(server.client, WINDOW)
  time_step = env.reset()
  for _ in range(20):  # 20 of 30 steps, then the "collector dies"
    action = np.array([0.5], np.float32)
    next_time_step = env.step(action)
    writer(trajectory.from_transition(time_step, policy_step.PolicyStep(action),
                                      next_time_step))
    time_step = next_time_step
  assert writer.pending_steps == 20
  writer.close()
  assert server.table_size() == 0
  server.stop()


def test_replay_checkpoint_round_trip_keeps_items_and_samples_at_once(tmp_path, counting_env):
  env = counting_env(episode_lengths=(12, 9))
  tf_env, policy, data_spec = _data_spec(env)
  server = _server(data_spec, root_dir=str(tmp_path))
  _collection(tf_env, policy, server).warmup(4)
  size = server.table_size()
  before = _all_windows(server, data_spec)
  path = server.checkpoint()
  assert path.startswith(str(tmp_path / 'replay'))
  server.stop()

  restored = _server(data_spec, root_dir=str(tmp_path))
  assert restored.table_size() == size
  start = time.time()
  sampler = tables.ReplaySampler(data_spec, restored.address, WINDOW, batch_size=4,
                                 timeout_s=30)
  next(sampler)
  assert time.time() - start < 10, 'the restored rate limiter blocked sampling'
  after = _all_windows(restored, data_spec)
  key = lambda w: sorted(map(tuple, w.observation['state'][:, :, :2].reshape(len(w.step_type), -1)))
  assert set(key(after)) == set(key(before))
  restored.stop()


def test_empty_table_raises_named_error_instead_of_hanging(counting_env):
  env = counting_env()
  _, _, data_spec = _data_spec(env)
  server = _server(data_spec)
  sampler = tables.ReplaySampler(data_spec, server.address, WINDOW, batch_size=2,
                                 timeout_s=1.0)
  start = time.time()
  with pytest.raises(tables.ReplayEmptyError) as error:
    next(sampler)
  assert time.time() - start < 15
  message = str(error.value)
  assert "'experience'" in message and server.address in message
  assert 'holds 0 windows' in message and 'warm-up' in message
  server.stop()


def test_sampler_prefetches_batches_while_the_learner_trains(counting_env):
  # Sampling overlaps training only if the dataset ends in a prefetch.
  env = counting_env()
  _, _, data_spec = _data_spec(env)
  server = _server(data_spec)
  sampler = tables.ReplaySampler(data_spec, server.address, WINDOW, batch_size=2,
                                 timeout_s=1.0, prefetch=3)
  graph = tf.compat.v1.GraphDef.FromString(
      tf.raw_ops.DatasetToGraphV2(input_dataset=sampler.dataset._variant_tensor).numpy())
  ops = [node.op for node in graph.node]
  assert 'PrefetchDataset' in ops
  buffer_sizes = [node.input[1] for node in graph.node if node.op == 'PrefetchDataset']
  constants = {node.name: tf.make_ndarray(node.attr['value'].tensor)
               for node in graph.node if node.op == 'Const'}
  assert [int(constants[name]) for name in buffer_sizes] == [3]
  server.stop()


def test_capacity_is_converted_from_env_steps_to_items(counting_env):
  assert tables.capacity_in_items(1000, 1) == 1000
  assert tables.capacity_in_items(1000, 4) == 250
  env = counting_env(episode_lengths=(40,))
  tf_env, policy, data_spec = _data_spec(env)
  table = tables.make_experience_table(data_spec, capacity_env_steps=20)
  server = tables.ReplayServer([table])
  _collection(tf_env, policy, server).warmup(1)
  assert server.table_size() == 20  # 41 time steps -> 33 windows, FIFO keeps 20
  server.stop()


@pytest.mark.slow  # a Reverb server in another process
def test_sampler_reads_a_server_in_another_process(tmp_path, counting_env):
  """A Reverb server in a separate process, written and sampled over gRPC."""
  script = textwrap.dedent('''
      import sys, time
      import tensorflow as tf
      from tf_agents.specs import tensor_spec
      from planet_tfa.replay import tables
      sys.path.insert(0, sys.argv[2])
      from counting_env import CountingEnv
      from tf_agents.policies import random_py_policy
      env = CountingEnv()
      from tf_agents.trajectories import trajectory, policy_step
      spec = trajectory.Trajectory(
          step_type=tensor_spec.from_spec(env.time_step_spec().step_type),
          observation=tensor_spec.from_spec(env.observation_spec()),
          action=tensor_spec.from_spec(env.action_spec()), policy_info=(),
          next_step_type=tensor_spec.from_spec(env.time_step_spec().step_type),
          reward=tensor_spec.from_spec(env.time_step_spec().reward),
          discount=tensor_spec.from_spec(env.time_step_spec().discount))
      table = tables.make_experience_table(spec, capacity_env_steps=1000)
      server = tables.ReplayServer([table], port=int(sys.argv[1]))
      print('ready', flush=True)
      time.sleep(120)
  ''')
  import portpicker
  port = portpicker.pick_unused_port()
  here = os.path.dirname(os.path.abspath(__file__))
  proc = subprocess.Popen([sys.executable, '-c', script, str(port), here],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  try:
    assert proc.stdout.readline().strip() == 'ready'
    address = f'localhost:{port}'
    client = tables.wait_for_server(address, deadline_s=30)
    env = counting_env(episode_lengths=(12,))
    tf_env, policy, data_spec = _data_spec(env)
    observer = observers.TFReverbObserver(
        lambda: observers.ReverbEpisodeObserver(client, WINDOW))
    collection = episodes.Collection(tf_env, None, policy, policy, observer)
    collection.warmup(2)
    assert client.server_info()[tables.EXPERIENCE_TABLE].current_size == 10
    sampler = tables.ReplaySampler(data_spec, address, WINDOW, batch_size=3, timeout_s=10)
    batch = next(sampler)
    assert batch.observation['state'].shape == (3, WINDOW, 3)
  finally:
    proc.kill()
    proc.wait()


def test_unreachable_server_fails_after_deadline_naming_the_address():
  import portpicker
  address = f'localhost:{portpicker.pick_unused_port()}'
  start = time.time()
  with pytest.raises(tables.ReplayUnavailableError, match=address):
    tables.wait_for_server(address, deadline_s=3, initial_backoff_s=0.2)
  assert time.time() - start < 20


def test_samples_per_insert_rate_limiter_holds_the_learner_to_the_ratio(counting_env):
  """2 samples per window, an error buffer of 20, sampling from 1 window on:
  5 windows allow exactly 5 * 2 + (20 - 2) = 28 samples, then the learner
  blocks; one more window allows exactly 2 more."""
  env = counting_env(episode_lengths=(12, 8))
  tf_env, policy, data_spec = _data_spec(env)
  # Inserts block too once they run more than the error buffer ahead: leave
  # room for the warm-up's 5 windows (diff 10 <= 2 + 20).
  limiter = tables.make_rate_limiter('samples_per_insert', min_size=1, samples_per_insert=2.0,
                                     error_buffer=20.0)
  table = tables.make_experience_table(data_spec, capacity_env_steps=1000, rate_limiter=limiter)
  server = tables.ReplayServer([table])
  collection = _collection(tf_env, policy, server)
  stats = lambda: server.client.server_info()[tables.EXPERIENCE_TABLE].rate_limiter_info
  sampler = tables.ReplaySampler(data_spec, server.address, WINDOW, batch_size=1,
                                 timeout_s=5.0, prefetch=1)

  def draw_until_blocked():
    # The sampler raises once the limiter has held it for timeout_s; one that
    # never blocks runs past the cap and fails. Reverb's dataset samples ahead
    # of what next() returns, so the exact count is the server's.
    with pytest.raises(tables.ReplayEmptyError):
      for _ in range(60):
        next(sampler)
    return stats().sample_stats.completed

  collection.warmup(1)  # the 12-step episode: 13 time steps -> 5 windows
  assert stats().insert_stats.completed == 5
  assert draw_until_blocked() == 28
  collection.warmup(1)  # the 8-step episode: 9 time steps -> 1 window
  assert stats().insert_stats.completed == 6
  assert draw_until_blocked() == 30
  with pytest.raises(ValueError, match='samples_per_insert'):
    tables.make_rate_limiter('samples_per_insert')
  server.stop()


def test_one_stride_setting_drives_the_table_and_the_observer(counting_env):
  import gin  # pylint: disable=g-import-not-at-top
  env = counting_env(episode_lengths=(40,))
  tf_env, policy, data_spec = _data_spec(env)
  gin.bind_parameter('window_stride.stride_length', 4)
  try:
    table = tables.make_experience_table(data_spec, capacity_env_steps=1000)
    server = tables.ReplayServer([table])
    _collection(tf_env, policy, server).warmup(1)
  finally:
    gin.clear_config()
  # The table holds 1000 env steps' worth of windows at one per 4 steps...
  assert server.client.server_info()[tables.EXPERIENCE_TABLE].max_size == 250
  # ...because the observer writes one window every 4 steps: 41 time steps
  # hold 33 windows at stride 1, every 4th of them at stride 4.
  windows = _all_windows(server, data_spec)
  starts = sorted(windows.observation['state'][:, 0, 1].astype(int).tolist())
  assert starts == list(range(0, 33, 4))
  server.stop()


def test_windows_ending_near_a_terminal_step_are_sampled_more_often(tmp_path, counting_env):
  import gin  # pylint: disable=g-import-not-at-top
  # Episode 0 ends in a terminal step (discount 0), episode 1 is truncated.
  env = counting_env(episode_lengths=(20,), truncated_episodes=(1,))
  tf_env, policy, data_spec = _data_spec(env)
  gin.bind_parameter('terminal_oversampling.priority', 4.0)
  gin.bind_parameter('terminal_oversampling.steps_before', 3)
  try:
    server = _server(data_spec, root_dir=str(tmp_path))
    _collection(tf_env, policy, server).warmup(2)
    assert tables.check_sampler(server.client.server_info())
    samples = server.client.sample(tables.EXPERIENCE_TABLE, num_samples=3000,
                                   emit_timesteps=False)
    seen = {}
    for sample in samples:
      window = tf.nest.pack_sequence_as(data_spec, list(sample.data))
      episode_id, last_step = window.observation['state'][-1, :2].astype(int)
      seen[(episode_id, last_step)] = (sample.info.priority, sample.info.probability)
    # 21 time steps per episode: windows end at steps 8..20 of each.
    assert sorted(seen) == [(e, i) for e in (0, 1) for i in range(8, 21)]
    # The terminal transition is step 19 -> 20: the windows ending at 16..20 are within
    # 3 steps of it or at it; the truncated episode gets no priority anywhere.
    for (episode_id, last_step), (priority, _) in seen.items():
      expected = 4.0 if episode_id == 0 and last_step >= 16 else 1.0
      assert priority == pytest.approx(expected), (episode_id, last_step)
    probability = {key: p for key, (_, p) in seen.items()}
    assert probability[(0, 20)] == pytest.approx(4 * probability[(0, 8)])
    assert probability[(1, 20)] == pytest.approx(probability[(0, 8)])
    server.checkpoint()
    server.stop()
    gin.clear_config()
    # A run resumed with oversampling off still samples by priority (Reverb restores the
    # sampler from the checkpoint), and says so instead of silently ignoring the setting.
    restored = _server(data_spec, root_dir=str(tmp_path))
    info = restored.client.server_info()
    assert info[tables.EXPERIENCE_TABLE].current_size == 26
    assert not tables.check_sampler(info)
    restored.stop()
  finally:
    gin.clear_config()


def test_terminal_oversampling_rejects_a_priority_below_one():
  import gin  # pylint: disable=g-import-not-at-top
  gin.bind_parameter('terminal_oversampling.priority', 0.5)
  try:
    with pytest.raises(errors.ConfigError, match='terminal_oversampling.priority=0.5'):
      tables.terminal_oversampling()
  finally:
    gin.clear_config()

"""Evaluation videos: layout, GIF files, pruning, and recording from a real driver."""
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from PIL import ImageSequence
from tf_agents.environments import tf_py_environment
from tf_agents.policies import random_tf_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa import videos
from planet_tfa.agents import world_model as world_model_lib
from planet_tfa import episodes
from planet_tfa.networks import rssm


def gif_frames(path):
  with Image.open(path) as gif:
    return [np.asarray(frame.convert('RGB')) for frame in ImageSequence.Iterator(gif)]


def test_frame_indices_are_bounded_and_keep_both_ends():
  assert list(videos.frame_indices(5, 10)) == [0, 1, 2, 3, 4]
  chosen = videos.frame_indices(1000, 100)
  assert len(chosen) == 100 and chosen[0] == 0 and chosen[-1] == 999
  assert np.all(np.diff(chosen) > 0)


def test_real_frames_left_model_frames_right_one_row_per_key():
  rng = np.random.default_rng(0)
  real = {'camera': rng.integers(0, 256, (4, 8, 8, 3), np.uint8),
          'mask': rng.integers(0, 256, (4, 8, 8, 1), np.uint8)}
  model = {'camera': rng.integers(0, 256, (4, 8, 8, 3), np.uint8),
           'mask': rng.integers(0, 256, (4, 8, 8, 1), np.uint8)}
  frames = videos.real_model_frames(real, model, ['camera', 'mask'])
  gap = videos.SEPARATOR_PX
  assert frames.shape == (4, 8 + gap + 8, 8 + gap + 8, 3)
  np.testing.assert_array_equal(frames[:, :8, :8], real['camera'])
  np.testing.assert_array_equal(frames[:, :8, 8 + gap:], model['camera'])
  # A one-channel image is shown grey, in the second row.
  np.testing.assert_array_equal(frames[:, 8 + gap:, :8, 1], real['mask'][..., 0])
  np.testing.assert_array_equal(frames[:, 8 + gap:, 8 + gap:, 2], model['mask'][..., 0])
  assert np.all(frames[:, :, 8:8 + gap] == 255)


def test_gif_has_every_frame_scaled_and_old_gifs_are_pruned(tmp_path):
  frames = np.zeros((6, 10, 20, 3), np.uint8)
  for t in range(6):
    frames[t, :, :10] = 40 * t  # left half changes over time
    frames[t, :, 10:] = 200
  for step in (10, 20, 30):
    path = videos.write_gif(frames, str(tmp_path / f'eval_{step}.gif'), fps=5, scale=3)
  decoded = gif_frames(path)
  assert len(decoded) == 6
  assert decoded[0].shape == (30, 60, 3)
  for t, frame in enumerate(decoded):
    assert abs(int(frame[5, 5, 0]) - 40 * t) <= 2
    assert abs(int(frame[5, 50, 0]) - 200) <= 2
  removed = videos.prune_videos(str(tmp_path), keep_last=2)
  assert [os.path.basename(p) for p in removed] == ['eval_10.gif']
  assert sorted(p.name for p in tmp_path.iterdir()) == ['eval_20.gif', 'eval_30.gif']


def test_summary_strip_puts_frames_side_by_side():
  frames = np.arange(20, dtype=np.uint8)[:, None, None, None] * np.ones((20, 4, 6, 3), np.uint8)
  strip = videos.summary_strip(frames, num_frames=4)
  assert strip.shape == (1, 4, 24, 3)
  assert [int(strip[0, 0, 6 * i, 0]) for i in range(4)] == [0, 6, 13, 19]


@pytest.fixture
def highway_tf_env():
  pytest.importorskip('highway_env', reason="needs pip install -e '.[highway]'")
  from planet_tfa.environments import highway  # pylint: disable=g-import-not-at-top
  py_env = highway.load_highway('racetrack', seed=3, episode_seconds=2.0)
  tf_env = tf_py_environment.TFPyEnvironment(py_env)
  yield tf_env
  py_env.close()


def test_eval_video_records_the_first_episode_and_writes_real_and_model(highway_tf_env, tmp_path):
  env = highway_tf_env
  model = world_model_lib.WorldModel(
      env.observation_spec(), env.action_spec(), encoder_keys=['camera', 'lidar'],
      decoder_keys=['camera', 'lidar', 'birdeye'], image_depth=4,
      rssm=rssm.RSSM(deter_size=8, stoch_size=4, hidden_size=8))
  recorder = videos.EvalVideo(str(tmp_path), model, max_frames=50, scale=1)
  policy = random_tf_policy.RandomTFPolicy(env.time_step_spec(), env.action_spec())
  driver = episodes.EpisodeDriver(env, {'random': (policy, [recorder.observer])})
  driver.run(1)
  assert recorder.recorded_steps == 0  # not armed: records nothing
  recorder.arm()
  driver._time_step = None  # pylint: disable=protected-access
  driver.run(2)
  observation, actions, step_types = recorder.episode()
  # Only the first of the two episodes: FIRST ... LAST.
  assert step_types[0] == ts.StepType.FIRST and step_types[-1] == ts.StepType.LAST
  assert np.all(step_types[1:-1] == ts.StepType.MID)
  assert actions.shape == (len(step_types), 2)
  writer = tf.summary.create_file_writer(str(tmp_path / 'events'))
  with writer.as_default():
    path = recorder.write(train_step=42)
  writer.flush()
  assert path == str(tmp_path / 'eval_42.gif')
  frames = gif_frames(path)
  assert len(frames) == len(step_types)
  gap = videos.SEPARATOR_PX
  assert frames[0].shape == (3 * 64 + 2 * gap, 2 * 64 + gap, 3)
  # Left half: the real camera (GIF palettes shift colours a little).
  real_camera = observation['camera']
  for t in (0, len(frames) - 1):
    error = np.abs(frames[t][:64, :64].astype(int) - real_camera[t].astype(int)).mean()
    assert error < 6, error
  # Right half: the untrained model's reconstruction, not a copy of the input.
  expected = model.reconstruct({k: tf.constant(observation[k][None]) for k in ('camera', 'lidar')},
                               tf.constant(actions[None]), tf.constant(step_types[None]),
                               keys=['camera'])['camera'].numpy()[0]
  error = np.abs(frames[0][:64, 64 + gap:].astype(int) - expected[0].astype(int)).mean()
  assert error < 6, error
  assert np.abs(frames[0][:64, 64 + gap:].astype(int) - real_camera[0].astype(int)).mean() > 10
  assert recorder.write(train_step=43) is None  # nothing recorded since


def test_a_model_without_image_keys_gets_no_video(tmp_path):
  # Vector observations (e.g. tests/counting_env.py's 'sensor'): nothing to show.
  model = world_model_lib.WorldModel(
      {'sensor': tf.TensorSpec([3], tf.float32)},
      tensor_spec.BoundedTensorSpec([1], tf.float32, -1.0, 1.0),
      rssm=rssm.RSSM(deter_size=8, stoch_size=4, hidden_size=8))
  recorder = videos.EvalVideo(str(tmp_path), model)
  recorder.arm()
  recorder._record(np.array([ts.StepType.FIRST]), np.zeros([1, 1], np.float32),  # pylint: disable=protected-access
                   np.zeros([1, 3], np.float32))
  assert recorder.recorded_steps == 0
  assert recorder.write(train_step=1) is None
  assert not list(tmp_path.iterdir())

"""Evaluation videos: what the agent saw next to what its world model made of it.

Every evaluation records its first episode through an observer on the eval
driver and writes ROOT/eval/videos/eval_<train_step>.gif (Pillow; no ffmpeg
needed): per frame, one row per image key (e.g. camera, lidar, birdeye, or
pixels on DeepMind Control), the real frame on the left and the world model's
posterior reconstruction on the right. The same real|model frames, a few
evenly spaced steps side by side, go to TensorBoard.

Size is bounded three ways: at most `max_steps` steps are recorded, at most
`max_frames` of them (evenly spaced) go into a GIF, and only the newest
`keep_last` GIFs are kept.
"""
import glob
import os
import re

import gin
import numpy as np
import tensorflow as tf
from PIL import Image
from tf_agents.trajectories import time_step as ts

SEPARATOR_PX = 2
_NAME = re.compile(r'eval_(\d+)\.gif$')


def frame_indices(num_steps, max_frames):
  """At most max_frames evenly spaced indices into num_steps, first and last included."""
  if num_steps <= max_frames:
    return np.arange(num_steps)
  return np.unique(np.round(np.linspace(0, num_steps - 1, max_frames)).astype(np.int64))


def _as_rgb(images):
  """[..., H, W, C] uint8 with C in (1, 3, 4, other) -> [..., H, W, 3]."""
  images = np.asarray(images, np.uint8)
  channels = images.shape[-1]
  if channels == 3:
    return images
  if channels == 4:
    return images[..., :3]
  return np.repeat(images[..., :1], 3, axis=-1)  # a mask or grey image: channel 0


def real_model_frames(real, model, keys):
  """{key: [T, H, W, C]} real and model frames -> [T, rows, 2W+sep, 3] uint8.

  One row per key (separated by white lines): real on the left, model on the right.
  """
  rows = []
  for key in keys:
    left, right = _as_rgb(real[key]), _as_rgb(model[key])
    if left.shape != right.shape:
      raise ValueError(f"'{key}': real frames {left.shape} and model frames "
                       f'{right.shape} differ')
    gap = np.full(left.shape[:2] + (SEPARATOR_PX, 3), 255, np.uint8)
    rows.append(np.concatenate([left, gap, right], axis=2))
  separator = np.full((rows[0].shape[0], SEPARATOR_PX) + rows[0].shape[2:], 255, np.uint8)
  stacked = []
  for index, row in enumerate(rows):
    if index:
      stacked.append(separator)
    stacked.append(row)
  return np.concatenate(stacked, axis=1)


def write_gif(frames, path, fps=10, scale=2):
  """[T, H, W, 3] uint8 -> an animated GIF, each pixel `scale` x `scale`, looping."""
  frames = np.asarray(frames, np.uint8)
  images = [Image.fromarray(f) for f in frames]
  if scale != 1:
    size = (frames.shape[2] * scale, frames.shape[1] * scale)
    images = [im.resize(size, Image.NEAREST) for im in images]
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  partial = path + '.partial'  # a reader never sees a half-written GIF
  images[0].save(partial, format='GIF', save_all=True, append_images=images[1:],
                 duration=max(int(round(1000.0 / fps)), 20), loop=0)
  os.replace(partial, path)
  return path


def prune_videos(video_dir, keep_last):
  """Deletes all but the `keep_last` eval_<step>.gif files with the highest steps."""
  videos = []
  for path in glob.glob(os.path.join(video_dir, 'eval_*.gif')):
    match = _NAME.search(os.path.basename(path))
    if match:
      videos.append((int(match.group(1)), path))
  videos.sort()
  removed = [path for _, path in videos[:max(len(videos) - keep_last, 0)]]
  for path in removed:
    os.remove(path)
  return removed


def summary_strip(frames, num_frames=8):
  """[T, H, W, 3] -> [1, H, n*W, 3]: n evenly spaced frames side by side."""
  frames = np.asarray(frames, np.uint8)
  chosen = frames[frame_indices(len(frames), num_frames)]
  return np.concatenate(list(chosen), axis=1)[None]


@gin.configurable
class EvalVideo:
  """Records the first episode of an evaluation and writes its real|model video.

  Use: pass `observer` to the eval driver; `arm()` before an evaluation;
  `write(train_step)` after it (inside a summary writer's default scope for the
  TensorBoard image).

  Args:
    video_dir: where eval_<train_step>.gif go (ROOT/eval/videos).
    world_model: the agent's WorldModel (its encoders read the recorded steps).
    keys: image keys to show; None: every image key the model decodes. A
      model without image keys (vector observations) gets no videos.
    max_steps: steps recorded per episode (the video shows the first ones).
    max_frames: frames per GIF, evenly spaced over the recorded steps.
    keep_last: GIFs kept on disk (older ones are deleted).
    fps, scale: GIF frame rate and pixel magnification.
    summary_frames: frames in the TensorBoard strip.
  """

  def __init__(self, video_dir, world_model, keys=None, max_steps=1000, max_frames=100,
               keep_last=10, fps=10, scale=2, summary_frames=8):
    self.video_dir = video_dir
    self._world_model = world_model
    self._keys = list(world_model.image_decoder_keys if keys is None else keys)
    # The filter needs the encoder inputs; the video shows self._keys.
    self._recorded_keys = sorted(set(self._keys) | set(world_model.encoder_keys))
    self._max_steps = max_steps
    self._max_frames = max_frames
    self._keep_last = keep_last
    self._fps = fps
    self._scale = scale
    self._summary_frames = summary_frames
    self._armed = False
    self._steps = []

  def arm(self):
    """Records the next episode that the eval driver starts."""
    self._armed = bool(self._keys)  # nothing to show without image keys
    self._steps = []

  @property
  def recorded_steps(self):
    return len(self._steps)

  def _record(self, step_type, action, *images):
    if not self._armed:
      return np.int64(0)
    step_type = int(np.asarray(step_type).reshape(-1)[0])
    if not self._steps and step_type != ts.StepType.FIRST:
      return np.int64(0)  # wait for an episode start
    if len(self._steps) < self._max_steps:
      self._steps.append((step_type, np.asarray(action)[0].copy(),
                          [np.asarray(image)[0].copy() for image in images]))
    if step_type == ts.StepType.LAST:
      self._armed = False  # the first episode only
    return np.int64(0)

  def observer(self, trajectory):
    """TF-Agents observer (batched, inside tf.function): row 0 of each step."""
    images = [trajectory.observation[key] for key in self._recorded_keys]
    return tf.numpy_function(self._record, [trajectory.step_type, trajectory.action] + images,
                             tf.int64, name='eval_video_record')

  def episode(self):
    """The recorded steps as (observation {key: [T, ...]}, action [T, A], step_type [T])."""
    step_types = np.array([s[0] for s in self._steps], np.int32)
    actions = np.stack([s[1] for s in self._steps])
    observation = {key: np.stack([s[2][i] for s in self._steps])
                   for i, key in enumerate(self._recorded_keys)}
    return observation, actions, step_types

  def write(self, train_step):
    """Writes the recorded episode's GIF and TensorBoard strip; returns the path or None."""
    self._armed = False
    if not self._steps or not self._keys:
      return None
    observation, actions, step_types = self.episode()
    inputs = {key: tf.constant(observation[key][None]) for key in self._world_model.encoder_keys}
    model = self._world_model.reconstruct(inputs, tf.constant(actions[None]),
                                          tf.constant(step_types[None]), keys=self._keys)
    model = {key: value.numpy()[0] for key, value in model.items()}
    frames = real_model_frames(observation, model, self._keys)
    frames = frames[frame_indices(len(frames), self._max_frames)]
    path = write_gif(frames, os.path.join(self.video_dir, f'eval_{int(train_step)}.gif'),
                     fps=self._fps, scale=self._scale)
    prune_videos(self.video_dir, self._keep_last)
    tf.summary.image('eval/video_real_left_model_right',
                     summary_strip(frames, self._summary_frames), step=int(train_step))
    self._steps = []
    return path

"""The periodic work around the training loop, as small interval hooks.

After every iteration the learner calls each hook with the `IterationState`;
a hook acts when its interval divides the iteration, and hooks made with
`at_end=True` also on the loop's last iteration (the state's `final`). Each
hook does one thing and can be built and called alone.
"""
import dataclasses
import os
import time
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from planet_tfa import layout
from planet_tfa import summaries


@dataclasses.dataclass
class IterationState:
  """What the loop knows after an iteration; hooks read it (EvalHook adds the return)."""
  iteration: int
  train_step: int
  env_steps: int                      # agent steps collected in this run, warm-up included
  rates: dict                         # per-second rates since the previous iteration
  loss_info: Any = None               # the iteration's last LossInfo (None: no train step yet)
  experience: Any = None              # the iteration's last sampled windows
  final: bool = False                 # the loop ends after this iteration
  eval_return: Optional[float] = None  # the newest evaluation's mean return
  eval_return_stochastic: Optional[float] = None  # ... of the stochastic policy


class IntervalHook:
  """Runs `run(state)` every `interval` iterations (0 or None: never), and at
  the end too when `at_end`."""

  def __init__(self, interval, at_end=False):
    self.interval = interval
    self.at_end = at_end

  def due(self, state):
    if not self.interval:
      return False
    return state.iteration % self.interval == 0 or (self.at_end and state.final)

  def __call__(self, state):
    if self.due(state):
      self.run(state)

  def run(self, state):
    raise NotImplementedError


class ScalarSummaryHook(IntervalHook):
  """Losses, training-episode metrics and rates to the train summary writer."""

  def __init__(self, interval, writer, train_metrics):
    super().__init__(interval)
    self._writer = writer
    self._metrics = train_metrics

  def due(self, state):
    return state.loss_info is not None and super().due(state)

  def run(self, state):
    with self._writer.as_default():
      summaries.write_scalars(dict(state.loss_info.extra), state.train_step, 'losses/')
      summaries.write_scalars({
          'metrics/return': self._metrics['return'].result(),
          'metrics/episode_length': self._metrics['episode_length'].result(),
          'metrics/env_steps': self._metrics['env_steps'].result(),
          'metrics/episodes': self._metrics['episodes'].result(),
          'rates/env_steps_per_sec': state.rates.get('env_steps'),
          'rates/train_steps_per_sec': state.rates.get('train_steps'),
          'metrics/iteration': state.iteration,
      }, state.train_step)


class OpenLoopImageHook(IntervalHook):
  """The model's open-loop predictions of a sampled batch next to the truth, as an image."""

  def __init__(self, interval, writer, open_loop_fn, sequence_length):
    super().__init__(interval)
    self._writer = writer
    self._open_loop_fn = open_loop_fn
    self._context = max(1, sequence_length // 3)

  def due(self, state):
    return state.experience is not None and super().due(state)

  def run(self, state):
    experience = state.experience
    truth, prediction = self._open_loop_fn(
        experience.observation, experience.action, experience.step_type, self._context)
    with self._writer.as_default():
      tf.summary.image('open_loop/truth_top_model_bottom',
                       summaries.open_loop_strip(truth, prediction), step=state.train_step)


def append_eval_record(root_dir, record):
  """ROOT/eval_returns.csv: one line per evaluation, for plotting learning curves."""
  path = os.path.join(root_dir, layout.EVAL_RECORDS)
  columns = list(record)
  if os.path.exists(path):
    with open(path) as f:
      header = f.readline().strip()
    if header:
      columns = header.split(',')  # a resumed older run keeps its columns
  with open(path, 'a') as f:
    if not os.path.exists(path) or f.tell() == 0:
      f.write(','.join(columns) + '\n')
    f.write(','.join(str(record.get(c, '')) for c in columns) + '\n')


class EvalHook(IntervalHook):
  """Greedy episodes; their return to the state, ROOT/eval_returns.csv, the
  best-return variable, TensorBoard and (first episode) a video."""

  def __init__(self, interval, num_episodes, collection, root_dir, writer, best_return,
               video=None, started_at=None):
    super().__init__(interval, at_end=True)
    self._num_episodes = num_episodes
    self._collection = collection
    self._root_dir = root_dir
    self._writer = writer
    self._best_return = best_return
    self._video = video
    self._started_at = time.time() if started_at is None else started_at

  def due(self, state):
    return self._num_episodes > 0 and super().due(state)

  def run(self, state):
    if self._video is not None:
      self._video.arm()  # records the first eval episode
    mean_return = self._collection.evaluate(self._num_episodes)
    # The stochastic policy's return too: what SLAC's curves report.
    stochastic_return = self._collection.evaluate(self._num_episodes, stochastic=True)
    state.eval_return = mean_return
    state.eval_return_stochastic = stochastic_return
    record = {
        'iteration': state.iteration, 'train_step': state.train_step,
        'env_steps': state.env_steps,
        'wall_time_s': round(time.time() - self._started_at, 1),
        'eval_return': mean_return}
    if stochastic_return is not None:
      record['eval_return_stochastic'] = stochastic_return
    append_eval_record(self._root_dir, record)
    self._best_return.assign(max(float(self._best_return.numpy()), mean_return))
    with self._writer.as_default():
      scalars = {'metrics/return': mean_return,
                 'metrics/episode_length':
                     self._collection.eval_metrics['episode_length'].result()}
      if stochastic_return is not None:
        scalars['metrics/return_stochastic'] = stochastic_return
      summaries.write_scalars(scalars, state.train_step)
      if self._video is not None:
        self._video.write(state.train_step)  # ROOT/eval/videos/eval_<step>.gif


class CallbackHook(IntervalHook):
  """Calls `fn()` on its interval: checkpoints, policy exports."""

  def __init__(self, interval, fn):
    super().__init__(interval)
    self._fn = fn

  def run(self, state):
    del state
    self._fn()


def image_mse(loss_extra):
  """Mean over the decoded images of their squared error per pixel channel
  (the world model's `<key>_image_mse` terms); None when it decodes no image."""
  errors = [float(np.asarray(value)) for name, value in loss_extra.items()
            if name.endswith('_image_mse')]
  return sum(errors) / len(errors) if errors else None


class ProgressHook(IntervalHook):
  """One console line per iteration: counters, rates, losses, returns, elapsed, ETA."""

  def __init__(self, progress, train_metrics, replay_size=None, interval=1, printer=print,
               random_return=None):
    super().__init__(interval)
    self._random_return = random_return  # shown next to the eval return, to beat
    self._progress = progress
    self._metrics = train_metrics
    self._replay_size = replay_size
    self._print = printer

  def run(self, state):
    loss = state.loss_info
    fields = {
        'train step': state.train_step,
        'env steps': state.env_steps,
        'replay windows': self._replay_size() if self._replay_size else None,
        'env steps/s': state.rates.get('env_steps'),
        'train steps/s': state.rates.get('train_steps'),
        # Not the model loss: its image NLL constant (~0.92 nats per pixel
        # channel, ~1.13e4 per 64x64x3 frame) hides any change at 4 digits.
        # The images' error per pixel channel, KL and reward error show the
        # model learning; TensorBoard has every term.
        'image mse': image_mse(loss.extra) if loss is not None else None,
        **{label: float(np.asarray(loss.extra[term])) if loss is not None else None
           for label, term in (('kl', 'kl'), ('reward mse', 'reward_mse'))},
        'return': float(np.asarray(self._metrics['return'].result())),
        'eval return': state.eval_return,
    }
    if state.eval_return is not None and self._random_return is not None:
      fields['vs random policy'] = self._random_return
    self._print(self._progress.line(state.iteration, fields, env_steps=state.env_steps),
                flush=True)

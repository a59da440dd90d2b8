"""What a user sees: TensorBoard scalars and prediction images, progress lines."""
import datetime
import time

import numpy as np
import tensorflow as tf


def write_scalars(scalars, step, prefix=''):
  for name, value in scalars.items():
    if value is None:
      continue
    tf.summary.scalar(prefix + name, tf.cast(value, tf.float32), step=step)


def open_loop_strip(truth, prediction, max_sequences=3):
  """[B, T, H, W, C] uint8 pairs -> one image [1, rows*(2H+2), T*W, C].

  Per sequence: the real frames on top, the model's frames below (the first
  frames reconstructed from observations, the rest imagined open loop), then
  a white separator line.
  """
  truth = np.asarray(truth)[:max_sequences]
  prediction = np.asarray(prediction)[:max_sequences]
  rows = []
  for real, pred in zip(truth, prediction):
    top = np.concatenate(list(real), axis=1)
    bottom = np.concatenate(list(pred), axis=1)
    separator = np.full((2,) + top.shape[1:], 255, np.uint8)
    rows.append(np.concatenate([top, bottom, separator], axis=0))
  image = np.concatenate(rows, axis=0)
  if image.shape[-1] not in (1, 3, 4):  # e.g. a 2-channel mask: show channel 0
    image = image[..., :1]
  return image[None]


def format_duration(seconds):
  if seconds is None or not np.isfinite(seconds):
    return '?'
  return str(datetime.timedelta(seconds=int(seconds)))


class Progress:
  """Rates and ETA over a run of `total` iterations (resumed runs count from `start`).

  The ETA is the nearest of the run's ends: `total` iterations, the
  `time_budget_s` and the `env_step_budget` (agent steps, as `env_steps`
  counts them), each extrapolated from this start's rate. The rates are
  counted from `loop_starts()`, so one-off work before the loop (the world
  model's pre-training: an hour on the DMC recipe) does not stretch the ETA;
  elapsed time and the time budget still count from the start.
  """

  # Above this, num_iterations is a "no limit" placeholder: not worth printing.
  _SHOWN_TOTAL = 10**7

  def __init__(self, total, start=0, time_budget_s=None, env_step_budget=None,
               start_env_steps=0):
    self.total = total
    self.start = start
    self.time_budget_s = time_budget_s
    self.env_step_budget = env_step_budget
    self.start_env_steps = start_env_steps
    self.started_at = time.time()
    self.loop_started_at = None  # None: rates count from the start
    self._last_time = self.started_at
    self._last = {}

  def rates(self, counters):
    """Per-second rates of each counter since the previous call."""
    now = time.time()
    elapsed = max(now - self._last_time, 1e-9)
    rates = {k: (v - self._last.get(k, v)) / elapsed for k, v in counters.items()}
    self._last = dict(counters)
    self._last_time = now
    return rates

  def loop_starts(self, env_steps):
    """The train loop begins: rates (and so the ETA) count from here, at `env_steps`."""
    self.loop_started_at = time.time()
    self.start_env_steps = env_steps

  def eta(self, iteration, env_steps=None):
    since = self.started_at if self.loop_started_at is None else self.loop_started_at
    elapsed = time.time() - since
    estimates = []
    done = iteration - self.start
    if done > 0:
      estimates.append(elapsed / done * (self.total - iteration))
    if self.env_step_budget is not None and env_steps is not None:
      collected = env_steps - self.start_env_steps
      if collected > 0:
        estimates.append(elapsed / collected * max(0, self.env_step_budget - env_steps))
    if self.time_budget_s is not None:
      estimates.append(max(0.0, self.time_budget_s - (time.time() - self.started_at)))
    return min(estimates) if estimates else None

  def line(self, iteration, fields, env_steps=None):
    parts = [f'iter {iteration}/{self.total}' if self.total < self._SHOWN_TOTAL
             else f'iter {iteration}']
    for name, value in fields.items():
      if value is None:
        continue
      parts.append(f'{name} {value:.4g}' if isinstance(value, float) else f'{name} {value}')
    parts.append(f'elapsed {format_duration(time.time() - self.started_at)}')
    parts.append(f'ETA {format_duration(self.eta(iteration, env_steps))}')
    return ' | '.join(parts)


class StepProgress:
  """A line every `interval_s` seconds during a long unit of work (an
  iteration's train steps), so minutes of training are not minutes of silence."""

  def __init__(self, label, total, interval_s=30.0, printer=print, clock=time.time):
    self._label = label
    self._total = total
    self._interval_s = interval_s
    self._print = printer
    self._clock = clock
    self._started_at = self._last_print = clock()

  def update(self, done):
    """Prints `done`/total with the rate and time left, when the interval has passed."""
    now = self._clock()
    if not self._interval_s or now - self._last_print < self._interval_s or done >= self._total:
      return False
    self._last_print = now
    rate = done / max(now - self._started_at, 1e-9)
    left = (self._total - done) / rate if rate > 0 else None
    self._print(f'  {self._label} {done}/{self._total} | {rate:.3g}/s | '
                f'{format_duration(left)} left', flush=True)
    return True

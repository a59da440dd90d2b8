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
  """Rates and ETA over a run of `total` iterations (resumed runs count from `start`)."""

  def __init__(self, total, start=0, time_budget_s=None):
    self.total = total
    self.start = start
    self.time_budget_s = time_budget_s
    self.started_at = time.time()
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

  def eta(self, iteration):
    done = iteration - self.start
    if done <= 0:
      return None
    elapsed = time.time() - self.started_at
    remaining = elapsed / done * (self.total - iteration)
    if self.time_budget_s is not None:
      remaining = min(remaining, max(0.0, self.time_budget_s - elapsed))
    return remaining

  def line(self, iteration, fields):
    parts = [f'iter {iteration}/{self.total}']
    for name, value in fields.items():
      if value is None:
        continue
      parts.append(f'{name} {value:.4g}' if isinstance(value, float) else f'{name} {value}')
    parts.append(f'elapsed {format_duration(time.time() - self.started_at)}')
    parts.append(f'ETA {format_duration(self.eta(iteration))}')
    return ' | '.join(parts)

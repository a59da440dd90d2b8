"""Reverb replay of T+1-step windows: table, server (with checkpoints) and sampler.

Items are windows of `sequence_length` (= T+1) consecutive steps of one episode,
written every `window_stride()` steps (default 1) by `observers.ReverbEpisodeObserver`. Reverb stores the
steps once, in chunks shared by the overlapping windows, so the next
observation of every transition is in its window at no extra storage.
"""
import logging
import math
import os
import shutil
import time

import gin
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.replay_buffers import reverb_replay_buffer
from tf_agents.specs import tensor_spec

from planet_tfa import errors
from planet_tfa import layout
from planet_tfa import setting_values

EXPERIENCE_TABLE = 'experience'
VARIABLES_TABLE = 'variables'
# A standalone server's queue of the environment steps of each episode the
# collectors wrote: what the learner's data ratio per environment step counts.
COLLECTED_STEPS_TABLE = 'collected_steps'


class ReplayEmptyError(errors.UserError, RuntimeError):
  """Sampling waited longer than the timeout for the table to allow a sample."""


class ReplayUnavailableError(errors.UserError, ConnectionError):
  """The Reverb server at an address could not be reached before a deadline."""


@gin.configurable
def window_stride(stride_length=1):
  """Env steps between the starts of consecutive windows of an episode.

  The one setting behind both what `observers.ReverbEpisodeObserver` writes
  and how many items the table keeps for its `capacity_env_steps`, so the two
  cannot disagree. Above 1 the windows overlap less and the table holds the
  same env steps in fewer items; the window ending on an episode's LAST step
  is then written only when it falls on the stride.
  """
  if not setting_values.is_whole(stride_length) or stride_length < 1:
    raise errors.ConfigError(
        f'window_stride.stride_length={stride_length!r}: must be a whole number >= 1 '
        '(env steps between the starts of consecutive replay windows; 1 = every step).')
  return stride_length


@gin.configurable
def terminal_oversampling(priority=1.0, steps_before=8):
  """How much more often the windows that end just before or at a terminal step are sampled.

  A window whose last step lies at most `steps_before` steps before the
  terminal step of its episode (discount 0: a crash, leaving the road), or is
  that step or the boundary after it, gets sampling priority `priority`; every
  other window 1. At 1 (the default) the table samples uniformly. Above 1 the
  table samples in proportion to priority, with no importance weights: the
  model and the critics see the few windows that end an episode `priority`
  times as often, on purpose (on the driving task they are under 1 % of the
  windows, and the last transition is in 2 windows where a middle one is in 9).

  The one setting behind both the table's sampler and the priorities the
  observers write, so the two cannot disagree. A table restored from a replay
  checkpoint keeps the sampler it was built with (Reverb restores a table's
  options from the checkpoint); `check_sampler` says so.
  """
  if not setting_values.is_number(priority) or not priority >= 1:
    raise errors.ConfigError(
        f'terminal_oversampling.priority={priority!r}: must be a number >= 1 (how many times '
        'as often windows ending at a terminal step are sampled; 1 = uniform sampling).')
  if not setting_values.is_whole(steps_before) or steps_before < 0:
    raise errors.ConfigError(
        f'terminal_oversampling.steps_before={steps_before!r}: must be a whole number >= 0 '
        '(the steps before a terminal step whose windows are sampled more often).')
  return float(priority), steps_before


def window_priorities(episode_length, terminal, priority, steps_before):
  """Sampling priority of the window ending at each step of an episode.

  `episode_length` counts the episode's steps including the boundary step
  after the last transition; `terminal`: whether that last transition had
  discount 0. Its index is `episode_length - 2`.
  """
  priorities = np.ones(episode_length, np.float64)
  if terminal and priority != 1.0:
    priorities[max(0, episode_length - 2 - steps_before):] = priority
  return priorities


def check_sampler(server_info, address=None, table=EXPERIENCE_TABLE):
  """Warns when the experience table does not sample as `terminal_oversampling` says.

  Reverb restores a table's sampler from its checkpoint, so a run resumed (or a
  server restarted) with a new `terminal_oversampling.priority` keeps sampling
  as before: the run goes on, correct but without the new sampling. Returns
  whether the table samples as configured.
  """
  priority, _ = terminal_oversampling()
  options = server_info[table].sampler_options
  prioritised = options.WhichOneof('distribution') == 'prioritized'
  if prioritised == (priority > 1.0):
    return True
  where = f' at {address}' if address else ''
  message = (
      f"replay table '{table}'{where} samples "
      f"{'by priority' if prioritised else 'uniformly'} but terminal_oversampling.priority="
      f'{priority:g} asks for {"prioritised" if priority > 1.0 else "uniform"} sampling. '
      "Reverb restored the table's sampler from the replay checkpoint it was built with, so "
      'this run keeps its old sampling (new windows still get the new priorities). Start a '
      'new root_dir (or a new server) to sample the new way.')
  logging.warning(message)
  print(f'WARNING: {message}', flush=True)
  return False


def experience_signature(data_spec):
  """The experience table's signature: `data_spec` with a time dimension.

  The one place it is computed: the table is built with it, and the learner
  and collectors check a remote server's table against it.
  """
  return tensor_spec.add_outer_dim(tensor_spec.from_spec(data_spec))


def capacity_in_items(capacity_env_steps, stride_length):
  """Each env step starts about one window every `stride_length` steps."""
  return max(1, math.ceil(capacity_env_steps / stride_length))


@gin.configurable
def make_rate_limiter(kind='min_size', min_size=1, samples_per_insert=None,
                      error_buffer=None):
  """'min_size': sample once `min_size` items exist (PlaNet/SLAC behaviour).

  'samples_per_insert': keep the learner within `error_buffer` samples of
  `samples_per_insert` samples per inserted window (for many collectors).
  It limits both sides: collectors block when they run more than the buffer
  ahead of the learner, so in a single process the warm-up must fit in it.
  """
  if kind == 'min_size':
    return reverb.rate_limiters.MinSize(min_size)
  if kind == 'samples_per_insert':
    if samples_per_insert is None:
      raise ValueError("rate limiter 'samples_per_insert' needs "
                       'make_rate_limiter.samples_per_insert in gin')
    if error_buffer is None:
      error_buffer = max(1.0, samples_per_insert) * 100
    return reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=samples_per_insert, min_size_to_sample=min_size,
        error_buffer=error_buffer)
  raise ValueError(f"unknown rate limiter kind {kind!r}: use 'min_size' or "
                   "'samples_per_insert'")


@gin.configurable
def make_experience_table(data_spec, name=EXPERIENCE_TABLE, capacity_env_steps=100_000,
                          rate_limiter=None):
  """The window table; its signature is `data_spec` with a time dim added.

  `capacity_env_steps` counts env steps; the item limit follows from
  `window_stride()`, the same stride the observers write with. It samples
  uniformly, or by priority when `terminal_oversampling` asks for it.
  """
  priority, _ = terminal_oversampling()
  return reverb.Table(
      name,
      sampler=(reverb.selectors.Prioritized(priority_exponent=1.0) if priority > 1.0
               else reverb.selectors.Uniform()),
      remover=reverb.selectors.Fifo(),
      max_size=capacity_in_items(capacity_env_steps, window_stride()),
      rate_limiter=rate_limiter or make_rate_limiter(),
      max_times_sampled=0,
      signature=experience_signature(data_spec))


def make_collected_steps_table(max_size=1_000_000):
  """One int64 per episode a collector wrote (its env steps), each read once (a FIFO queue).

  A full queue (a learner that stopped draining it for a million episodes)
  blocks the collectors' reports, not their episodes' windows.
  """
  return reverb.Table.queue(COLLECTED_STEPS_TABLE, max_size,
                            signature=tf.TensorSpec([], tf.int64, 'env_steps'))


def report_collected_steps(client, env_steps):
  """A collector's report of one written episode's env steps."""
  client.insert(np.int64(env_steps), {COLLECTED_STEPS_TABLE: 1.0})


def make_variables_table(variables_spec, name=VARIABLES_TABLE):
  """One item: the newest policy variables (for remote collectors)."""
  return reverb.Table(
      name, sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
      max_size=1, rate_limiter=reverb.rate_limiters.MinSize(1), max_times_sampled=0,
      signature=variables_spec)


class ReplayServer:
  """A Reverb server whose tables persist to `ROOT/replay/`.

  On start it restores the newest checkpoint there (Reverb's default
  checkpointer), so a restarted run continues with its replay contents.
  """

  def __init__(self, tables, root_dir=None, port=None):
    self.checkpoint_dir = os.path.join(root_dir, layout.REPLAY_DIR) if root_dir else None
    checkpointer = None
    if self.checkpoint_dir:
      os.makedirs(self.checkpoint_dir, exist_ok=True)
      checkpointer = reverb.platform.checkpointers_lib.DefaultCheckpointer(
          path=self.checkpoint_dir)
    self.server = reverb.Server(tables, port=port, checkpointer=checkpointer)
    self.port = self.server.port
    self.address = f'localhost:{self.port}'
    self.client = reverb.Client(self.address)

  def table_size(self, table=EXPERIENCE_TABLE):
    return self.client.server_info()[table].current_size

  def checkpoint(self, keep=2):
    """Writes the tables to `ROOT/replay/`; returns the checkpoint path.

    Reverb writes each checkpoint into a new directory and marks it done at
    the end, so a crash mid-write leaves the previous one loadable. Only the
    newest `keep` are kept: each holds the whole table.
    """
    if not self.checkpoint_dir:
      return None
    start = time.time()
    path = self.client.checkpoint()
    logging.info('replay checkpoint written to %s in %.1fs', path, time.time() - start)
    self._prune(keep, path)
    return path

  def _prune(self, keep, newest):
    done = sorted(d for d in os.listdir(self.checkpoint_dir)
                  if os.path.exists(os.path.join(self.checkpoint_dir, d, 'DONE')))
    for name in done[:-keep]:
      if os.path.join(self.checkpoint_dir, name) != newest:
        shutil.rmtree(os.path.join(self.checkpoint_dir, name), ignore_errors=True)

  def stop(self):
    self.server.stop()


def wait_for_server(address, deadline_s=60.0, initial_backoff_s=0.5, max_backoff_s=10.0):
  """Returns a connected `reverb.Client`, retrying with backoff until the deadline."""
  start = time.time()
  backoff = initial_backoff_s
  last_error = None
  while True:
    client = reverb.Client(address)
    remaining = deadline_s - (time.time() - start)
    try:
      client.server_info(timeout=max(1, int(min(remaining, max_backoff_s))))
      return client
    except Exception as error:  # pylint: disable=broad-except
      last_error = error
    remaining = deadline_s - (time.time() - start)
    if remaining <= 0:
      raise ReplayUnavailableError(
          f'no Reverb server answered at {address} within {deadline_s:.0f}s '
          f'({type(last_error).__name__}). Start it with `python -m '
          f'planet_tfa.programs.serve --port=...` or fix --replay_server.')
    logging.warning('Reverb server at %s not reachable yet; retrying in %.1fs',
                    address, backoff)
    time.sleep(min(backoff, remaining))
    backoff = min(backoff * 2, max_backoff_s)


@gin.configurable
class ReplaySampler:
  """Iterates `[B, T+1]` trajectory windows from the experience table.

  Sampling never blocks forever: after `timeout_s` without a sample it raises
  `ReplayEmptyError` saying which table is empty and why that usually happens.
  """

  def __init__(self, data_spec, server_address, sequence_length, batch_size=32,
               timeout_s=60.0, prefetch=2, table_name=EXPERIENCE_TABLE):
    self.server_address = server_address
    self.table_name = table_name
    self.timeout_s = timeout_s
    self._client = reverb.Client(server_address)
    self._buffer = reverb_replay_buffer.ReverbReplayBuffer(
        data_spec, table_name, sequence_length=sequence_length,
        server_address=server_address,
        rate_limiter_timeout_ms=int(timeout_s * 1000))
    # num_steps == item length: otherwise items are cut into shuffled chunks.
    self.dataset = self._buffer.as_dataset(
        sample_batch_size=batch_size, num_steps=sequence_length).prefetch(prefetch)
    self._iterator = None

  def __iter__(self):
    return self

  def __next__(self):
    if self._iterator is None:
      self._iterator = iter(self.dataset)
    try:
      experience, _ = next(self._iterator)
      return experience
    except (StopIteration, tf.errors.OutOfRangeError):
      self._iterator = None
      size = self._client.server_info()[self.table_name].current_size
      raise ReplayEmptyError(
          f"replay table '{self.table_name}' at {self.server_address} gave no sample "
          f'within {self.timeout_s:.0f}s: it holds {size} windows. Usually no warm-up '
          'ran (train_eval.initial_collect_episodes = 0), all episodes were shorter '
          'than the rate limiter allows, or no collector writes to this server.'
      ) from None

"""Writing driver steps into Reverb, one whole episode at a time.

`ReverbEpisodeObserver` buffers the steps of the running episode and hands
them to TF-Agents' `ReverbAddTrajectoryObserver` only when the episode ends,
so an episode cut short (a killed collector) never reaches the table, and
windows never span two episodes. Episodes shorter than the window are padded
with zero boundary steps, which the world model masks.

An env that abandons an episode mid-way (CarlaEnv after a simulator fault)
returns the FIRST step of a new one where a MID or LAST step was due. The
transition into it is made up, so it is not written: the abandoned episode
ends at the last observation it has, as a truncation (discount 1), and only
steps the simulator produced reach the table.

`TFReverbObserver` lets the same Python observer run under a TF driver inside
`tf.function`: it strips the batch dimension with `tf.numpy_function`.
"""
import gin
import numpy as np
import tensorflow as tf
from tf_agents.replay_buffers import reverb_utils
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory as trajectory_lib

from planet_tfa.replay import tables


class _PrioritisedWindowWriter(reverb_utils.ReverbAddTrajectoryObserver):
  """TF-Agents' window writer with the priority of the next windows settable."""

  def set_priority(self, priority):
    self._priority = float(priority)  # read by each create_item of the base class


@gin.configurable
class ReverbEpisodeObserver:
  """Unbatched Python observer: complete episodes -> T+1-step windows.

  A window starts every `tables.window_stride()` steps: the stride the
  table's capacity is computed with, so both always agree. Windows near an
  episode's terminal step get the priority `tables.terminal_oversampling()`
  gives them (it only matters to a table that samples by priority).
  """

  FLUSH_EVERY = 16

  def __init__(self, client, sequence_length, table_name=tables.EXPERIENCE_TABLE,
               pad_short_episodes=True):
    self._terminal_priority, self._steps_before = tables.terminal_oversampling()
    self._writer = _PrioritisedWindowWriter(
        client, table_name, sequence_length, stride_length=tables.window_stride(),
        pad_end_of_episodes=pad_short_episodes)
    self._episode = []
    self.episodes_written = 0
    self.steps_written = 0

  def __call__(self, trajectory):
    if not trajectory.is_boundary() and trajectory.next_step_type == ts.StepType.FIRST:
      self._end_cut_episode(trajectory)
      return
    self._episode.append(trajectory)
    if trajectory.is_boundary():
      self._write_episode()

  def _end_cut_episode(self, into_next):
    """The env abandoned the episode after `into_next`'s observation: end it there.

    The step before becomes the last one; `into_next`, whose observation is the
    last real one and whose reward and discount are a FIRST step's (0 and 1,
    what every boundary carries), becomes the boundary. A cut at the first step
    leaves no transition: nothing is written.
    """
    if not self._episode:
      return
    last = np.asarray(ts.StepType.LAST, into_next.step_type.dtype)
    self._episode[-1] = self._episode[-1].replace(next_step_type=last)
    self._episode.append(into_next.replace(step_type=last))
    self._write_episode()

  def _write_episode(self):
    # The window ending at step i is created when step i is appended.
    terminal = len(self._episode) >= 2 and float(np.asarray(self._episode[-2].discount)) == 0.0
    priorities = tables.window_priorities(len(self._episode), terminal,
                                          self._terminal_priority, self._steps_before)
    for index, step in enumerate(self._episode):
      self._writer.set_priority(priorities[index])
      self._writer(step)
      if index % self.FLUSH_EVERY == self.FLUSH_EVERY - 1:
        self._writer.flush()  # bounds the writer's unconfirmed items
    self._writer.flush()
    self.episodes_written += 1
    self.steps_written += len(self._episode)
    self._episode = []

  @property
  def pending_steps(self):
    """Steps of the unfinished episode (dropped if the process dies)."""
    return len(self._episode)

  def discard_pending(self):
    """Forgets the unfinished episode (e.g. after a simulator crash)."""
    self._episode = []

  def close(self):
    self._writer.close()


class TFReverbObserver:
  """Adapter for batched TF drivers: one Python observer per batch row."""

  def __init__(self, observer_factory, batch_size=1):
    self.observers = [observer_factory() for _ in range(batch_size)]

  def _write(self, *flat_arrays):
    for row, observer in enumerate(self.observers):
      row_arrays = [np.asarray(a)[row] for a in flat_arrays]
      observer(tf.nest.pack_sequence_as(self._structure, row_arrays))
    return np.int64(0)

  def __call__(self, trajectory):
    self._structure = tf.nest.map_structure(lambda _: 0, trajectory)
    flat = tf.nest.flatten(trajectory)
    return tf.numpy_function(self._write, flat, tf.int64, name='reverb_write')

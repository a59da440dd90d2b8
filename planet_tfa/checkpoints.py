"""Run checkpoints that never silently restart a run, and world-model restores.

`RunCheckpoints` keeps the last few checkpoints of a set of objects. Restoring
verifies every tensor of a checkpoint is readable before using it, falls back
to the previous checkpoint with a warning when the newest one is damaged, and
raises when checkpoints exist but none can be read (so a run never starts
from scratch on top of its own history).
"""
import logging
import os

import tensorflow as tf


class CheckpointError(RuntimeError):
  """Checkpoints exist but cannot be used."""


def verify_readable(path):
  """Reads every tensor of the checkpoint at `path`; raises on damage."""
  reader = tf.train.load_checkpoint(path)
  for name in reader.get_variable_to_shape_map():
    reader.get_tensor(name)


class RunCheckpoints:
  """A `tf.train.Checkpoint` of `objects` managed in `directory`."""

  def __init__(self, directory, max_to_keep=3, **objects):
    self.directory = directory
    self.checkpoint = tf.train.Checkpoint(**objects)
    self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep)

  def _candidates(self):
    """Checkpoint prefixes, newest first, from the state file and the disk."""
    found = set(self.manager.checkpoints)
    if os.path.isdir(self.directory):
      for name in os.listdir(self.directory):
        if name.endswith('.index'):
          found.add(os.path.join(self.directory, name[:-len('.index')]))
    def number(prefix):
      try:
        return int(prefix.rsplit('-', 1)[1])
      except (IndexError, ValueError):
        return -1
    return sorted(found, key=number, reverse=True)

  def has_checkpoints(self):
    return bool(self._candidates())

  def restore(self, partial=False):
    """Restores the newest readable checkpoint; returns its path or None if none exist.

    With `partial`, the checkpoint may hold more objects than this one (e.g.
    only the agent out of a whole run); every object here must still match.
    """
    candidates = self._candidates()
    if not candidates:
      return None
    failures = []
    for path in candidates:
      try:
        verify_readable(path)
        status = self.checkpoint.restore(path)
        if partial:
          status.expect_partial()
        status.assert_existing_objects_matched()
      except (tf.errors.OpError, ValueError, AssertionError) as error:
        message = str(error).splitlines()[0][:200]
        logging.warning('checkpoint %s is unreadable (%s): trying the previous one',
                        path, message)
        print(f'WARNING: checkpoint {path} is unreadable ({message}); '
              'falling back to the previous one', flush=True)
        failures.append(f'{path}: {message}')
        continue
      if failures:
        print(f'Resumed from the older checkpoint {path}', flush=True)
      return path
    raise CheckpointError(
        f'{self.directory} holds checkpoints but none can be restored:\n  '
        + '\n  '.join(failures)
        + '\nThe run was not started, so nothing was overwritten. Move this root_dir '
        'away to start a new run, or fix the config so it matches the checkpoint.')

  def save(self, step):
    return self.manager.save(checkpoint_number=int(step))

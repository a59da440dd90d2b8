"""Run checkpoints that never silently restart a run, and world-model restores.

`RunCheckpoints` keeps the last few checkpoints of a set of objects. Restoring
verifies every tensor of a checkpoint is readable before using it, falls back
to the previous checkpoint with a warning when the newest one is damaged, and
raises when checkpoints exist but none can be read (so a run never starts
from scratch on top of its own history).
"""
import logging
import os
import tempfile

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from planet_tfa import errors
from planet_tfa import layout


class CheckpointError(errors.UserError, RuntimeError):
  """Checkpoints exist but cannot be used."""


def verify_readable(path):
  """Reads every tensor of the checkpoint at `path`; raises on damage."""
  reader = tf.train.load_checkpoint(path)
  for name in reader.get_variable_to_shape_map():
    reader.get_tensor(name)


def _is_optimizer(obj):
  optimizers = (tf.keras.optimizers.Optimizer, tf.keras.optimizers.legacy.Optimizer)
  return isinstance(obj, optimizers)


def unrestored_variables(path, **objects):
  """Checkpoint keys of the variables that `path` holds under `objects`' names
  and that no variable of `objects` takes: what a partial restore drops silently.

  Walks the checkpoint's object graph and the objects' own graph by the same
  names (so it does not depend on which path a checkpoint names a shared
  object by). The state of an optimizer that is there is not counted: it
  creates its slots, step count and hyper-parameters at its first update and
  restores them then; only the slots of variables that are dropped go too.
  """
  reader = tf.train.load_checkpoint(path)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor('_CHECKPOINTABLE_OBJECT_GRAPH'))
  roots = [(ref.node_id, objects[ref.local_name]) for ref in graph.nodes[0].children
           if ref.local_name in objects]
  matched, optimizer_nodes = set(), set()
  stack = list(roots)
  while stack:
    node_id, obj = stack.pop()
    if node_id in matched:
      continue
    matched.add(node_id)
    if _is_optimizer(obj):
      optimizer_nodes.add(node_id)
      continue
    children = tf.train.TrackableView.children(obj)
    stack.extend((ref.node_id, children[ref.local_name])
                 for ref in graph.nodes[node_id].children if ref.local_name in children)
  reachable = set()
  stack = [node_id for node_id, _ in roots]
  while stack:
    node_id = stack.pop()
    if node_id in reachable or node_id in optimizer_nodes:
      continue
    reachable.add(node_id)
    stack.extend(ref.node_id for ref in graph.nodes[node_id].children)
  dropped = reachable - matched
  # Slots go with their optimizer (one that is not restored) and with their
  # variable (an optimizer that is restored has no variable to put them on).
  for node_id in dropped | optimizer_nodes:
    dropped.update(slot.slot_variable_node_id for slot in graph.nodes[node_id].slot_variables
                   if node_id in dropped or slot.original_variable_node_id in dropped)
  return sorted(attribute.checkpoint_key for node_id in dropped
                for attribute in graph.nodes[node_id].attributes)


class RunCheckpoints:
  """A `tf.train.Checkpoint` of `objects` managed in `directory`.

  `optional`: objects added after runs already existed (e.g. counters of a new
  setting). They are saved like the rest under `optional/`, but a checkpoint
  written before them restores without them (they keep their initial value)
  instead of failing the match of every object.
  """

  def __init__(self, directory, max_to_keep=3, optional=None, **objects):
    self.directory = directory
    self._objects = dict(objects)
    self._required = tf.train.Checkpoint(**objects)
    self._optional = (tf.train.Checkpoint(optional=tf.train.Checkpoint(**optional))
                      if optional else None)
    saved = dict(objects)
    if optional:
      saved['optional'] = self._optional.optional
    self.checkpoint = tf.train.Checkpoint(**saved)
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
    only the agent out of a whole run); every object here must still match,
    and every variable the checkpoint holds of these objects must be restored
    (CheckpointError naming the others: the objects were built differently
    from those that wrote it).
    """
    candidates = self._candidates()
    if not candidates:
      return None
    failures = []
    for path in candidates:
      try:
        verify_readable(path)
        status = self._required.restore(path)
        if partial or self._optional is not None:
          status.expect_partial()
        status.assert_existing_objects_matched()
        if self._optional is not None:
          self._optional.restore(path).expect_partial()
      except Exception as error:  # pylint: disable=broad-except
        # Damage shows up as OpError, ValueError, IndexError ("read less
        # bytes than requested") or others: any failure means unusable.
        message = (str(error).splitlines() or [type(error).__name__])[0][:200]
        logging.warning('checkpoint %s cannot be restored (%s): trying the previous one',
                        path, message)
        print(f'WARNING: checkpoint {path} cannot be restored ({message}); '
              'falling back to the previous one', flush=True)
        failures.append(f'{path}: {message}')
        continue
      if partial:
        dropped = unrestored_variables(path, **self._objects)
        if dropped:
          names = [key.replace('/.ATTRIBUTES/VARIABLE_VALUE', '') for key in dropped]
          raise CheckpointError(
              f'{path} holds {len(dropped)} variables of {", ".join(sorted(self._objects))} '
              'that the objects built here do not have (they were built from another '
              'config than the one that wrote the checkpoint):\n  ' + '\n  '.join(names))
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


# ---- world model: its own checkpoints and selective restore -----------------

_WORLD_MODEL_PREFIX = 'agent/_world_model/'


class WorldModelMismatchError(errors.UserError, ValueError):
  """A checkpoint's world-model variable has another shape than the model's."""


def world_model_checkpoint(world_model):
  """A checkpoint object whose keys match the world model inside a run checkpoint.

  The run checkpoint stores the model at `agent/_world_model/...`; using the
  same path here means one restore accepts both a run checkpoint and a
  world-model-only checkpoint.
  """
  return tf.train.Checkpoint(agent=tf.train.Checkpoint(_world_model=world_model))


def resolve_checkpoint(path):
  """A checkpoint prefix from a run root, a checkpoint directory or a prefix."""
  path = os.path.abspath(os.path.expanduser(path))
  for directory in (os.path.join(path, layout.WORLD_MODEL_DIR),
                    os.path.join(path, layout.CHECKPOINT_DIR), path):
    if os.path.isdir(directory):
      latest = tf.train.latest_checkpoint(directory)
      if latest:
        return latest
  if os.path.exists(path + '.index'):
    return path
  raise CheckpointError(
      f'no checkpoint at {path}: give a run root (with world_model/ or '
      'train/checkpoints/), a checkpoint directory, or a checkpoint prefix such '
      'as ROOT/world_model/ckpt-1000.')


def _shapes_of(checkpoint_object):
  """Key -> shape of every variable the object would save (via a scratch save)."""
  with tempfile.TemporaryDirectory() as scratch:
    prefix = checkpoint_object.write(os.path.join(scratch, 'probe'))
    return tf.train.load_checkpoint(prefix).get_variable_to_shape_map()


def _is_value(key):
  return key.endswith('.ATTRIBUTES/VARIABLE_VALUE')


def restore_world_model(world_model, path, log=print):
  """Restores encoders, RSSM, decoders and reward head from `path` into `world_model`.

  Leaves every other variable of the agent (actor, critics, alpha, optimizer
  state) untouched. Reports what was restored, what the model has that the
  checkpoint lacks, and what the checkpoint has that was not used; raises
  WorldModelMismatchError naming the variable and both shapes on a mismatch.
  Returns the resolved checkpoint prefix.
  """
  prefix = resolve_checkpoint(path)
  verify_readable(prefix)
  stored = {k: v for k, v in tf.train.load_checkpoint(prefix)
            .get_variable_to_shape_map().items() if _is_value(k)}
  expected = {k: v for k, v in _shapes_of(world_model_checkpoint(world_model)).items()
              if _is_value(k)}
  strip = lambda k: k[len(_WORLD_MODEL_PREFIX):].replace('/.ATTRIBUTES/VARIABLE_VALUE', '')
  mismatched = [(k, expected[k], stored[k]) for k in sorted(expected)
                if k in stored and list(stored[k]) != list(expected[k])]
  if mismatched:
    lines = [f'  {strip(k)}: model {model_shape}, checkpoint {ckpt_shape}'
             for k, model_shape, ckpt_shape in mismatched]
    raise WorldModelMismatchError(
        f'world model in {prefix} does not fit this model ({len(mismatched)} '
        'variables differ in shape):\n' + '\n'.join(lines)
        + '\nUse the same RSSM/encoder/decoder sizes (see the source run\'s '
        'operative_config.gin) or drop train_eval.world_model_checkpoint.')
  restored = sorted(k for k in expected if k in stored)
  missing = sorted(k for k in expected if k not in stored)
  unused_model = sorted(k for k in stored if k.startswith(_WORLD_MODEL_PREFIX)
                        and k not in expected)
  other = [k for k in stored if not k.startswith(_WORLD_MODEL_PREFIX)]
  if not restored:
    raise CheckpointError(f'{prefix} holds no world-model variables '
                          f'(its keys start with {sorted({k.split("/")[0] for k in stored})}).')
  status = world_model_checkpoint(world_model).restore(prefix)
  status.expect_partial()
  log(f'World model restored from {prefix}: {len(restored)} variables.')
  if missing:
    log(f'  the model has {len(missing)} variables the checkpoint lacks '
        '(left at their initial values): ' + ', '.join(strip(k) for k in missing))
  if unused_model:
    log(f'  the checkpoint has {len(unused_model)} world-model variables this model '
        'does not use: ' + ', '.join(strip(k) for k in unused_model))
  if other:
    log(f'  not used: {len(other)} other variables (SAC actor, critics, alpha, '
        'optimizer state, counters) stay freshly initialised.')
  return prefix

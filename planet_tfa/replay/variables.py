"""Policy variables on a Reverb server, and checks that a server fits this agent.

The learner publishes `{policy_variables: collect_policy.variables(),
train_step}` as the single item of the `variables` table; collectors pull it
into their own copy of the policy before every episode. TF-Agents'
`ReverbVariableContainer` moves the variables *by position*, so every role
must build the agent from the same gin config. `check_table` turns a
mismatch into an error naming the table and the first differing tensor,
instead of a shape error deep inside Reverb or a silently wrong policy.
"""
import reverb
import tensorflow as tf
from tf_agents.experimental.distributed import reverb_variable_container

from planet_tfa import errors
from planet_tfa.replay import tables

POLICY_KEY = reverb_variable_container.POLICY_KEY
TRAIN_STEP_KEY = reverb_variable_container.TRAIN_STEP_KEY


class ServerMismatchError(errors.UserError, ValueError):
  """The server's tables were built for another agent or environment."""


def variables_nest(policy, train_step):
  """What the `variables` table holds: the policy's variables and the train step."""
  return {POLICY_KEY: policy.variables(), TRAIN_STEP_KEY: train_step}


def variables_signature(policy, train_step, named=False):
  """The `variables` table signature (as in TF-Agents' sac_reverb_server).

  `named` keeps the variable names, for error messages only.
  """
  return tf.nest.map_structure(
      lambda v: tf.TensorSpec(v.shape, v.dtype, name=v.name if named else None),
      variables_nest(policy, train_step))


def _describe(spec):
  return f'{spec.dtype.name}{list(spec.shape.as_list() if spec.shape.rank is not None else [])}'


def check_table(server_info, table, expected_signature, address):
  """Raises ServerMismatchError unless `table` exists with `expected_signature`.

  Compares dtypes and shapes tensor by tensor (names and nest types may
  differ: Reverb stores signatures in its own encoding).
  """
  fix = ('Start the server (planet_tfa.programs.serve), the learner and every collector with the same '
         '--gin_file/--gin_param (task, world-model and SAC sizes), or give the '
         'server a fresh --root_dir if its restored replay came from another config.')
  if table not in server_info:
    raise ServerMismatchError(
        f'the Reverb server at {address} has no table {table!r} (it has '
        f'{sorted(server_info)}): it is not a planet_tfa replay server. {fix}')
  signature = server_info[table].signature
  if signature is None:
    raise ServerMismatchError(f'table {table!r} at {address} has no signature. {fix}')
  theirs = tf.nest.flatten(signature)
  ours = tf.nest.flatten(expected_signature)
  if len(theirs) != len(ours):
    raise ServerMismatchError(
        f'table {table!r} at {address} holds {len(theirs)} tensors per item, this '
        f'process expects {len(ours)}. {fix}')
  for index, (server_spec, local_spec) in enumerate(zip(theirs, ours)):
    server_shape = tf.TensorShape(server_spec.shape)
    if (tf.as_dtype(server_spec.dtype) != local_spec.dtype
        or not server_shape.is_compatible_with(local_spec.shape)
        or server_shape.rank != local_spec.shape.rank):
      raise ServerMismatchError(
          f'table {table!r} at {address}: tensor {index} ({local_spec.name or "?"}) is '
          f'{_describe(tf.TensorSpec(server_shape, server_spec.dtype))} on the server '
          f'but {_describe(local_spec)} here. {fix}')


class PolicyVariables:
  """The learner's publish / the collector's pull of one policy's variables.

  Args:
    address: 'host:port' of the server.
    policy: the collect policy whose `variables()` are synced.
    train_step: int64 variable published with them (the "policy version").
    client: an already connected `reverb.Client` (else one is made).
  """

  def __init__(self, address, policy, train_step, client=None):
    self.address = address
    self._train_step = train_step
    self._nest = variables_nest(policy, train_step)
    self._client = client or reverb.Client(address)
    check_table(self._client.server_info(), tables.VARIABLES_TABLE,
                variables_signature(policy, train_step, named=True), address)
    self._container = reverb_variable_container.ReverbVariableContainer(
        address, table_names=[tables.VARIABLES_TABLE])

  def publish(self):
    """Replaces the published variables with this process's current ones."""
    self._container.push(self._nest, tables.VARIABLES_TABLE)

  def published(self):
    """Whether the learner has published any variables yet."""
    return self._client.server_info()[tables.VARIABLES_TABLE].current_size > 0

  def pull(self):
    """Assigns the newest published variables; returns their train step.

    Returns None (and changes nothing) while nothing is published: sampling
    the empty table would block.
    """
    if not self.published():
      return None
    self._container.update(self._nest, tables.VARIABLES_TABLE)
    return int(self._train_step.numpy())

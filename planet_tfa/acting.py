"""Acting one step at a time at a fixed batch size: the policy call a driving stack makes.

A stack acting at 10-20 Hz calls the policy once per frame, at batch 1. Through
a `tf.function` (or a SavedModel's restored `action`) every call first binds its
nested time step and state against the traced signatures, about 0.3 ms in
TensorFlow 2.15, a quarter of a batch-1 step. `StepFunction` traces the step
once for the batch's fixed specs and calls that concrete function directly:

    step = acting.StepFunction(policy)        # a TFPolicy, or tf.saved_model.load(dir)
    state = step.get_initial_state()
    for time_step in frames:                  # batched [1, ...] tensors or arrays
      policy_step = step(time_step, state)
      state = policy_step.state

It computes what `policy.action` computes (same graph, same variables). At
batch 1 the step's small convolutions and matmuls also run faster on one
intra-op thread than split over several: an acting process sets
`TF_NUM_INTRAOP_THREADS=1` in its environment, or calls `use_intra_op_threads(1)`
before TensorFlow runs its first op (docs/performance.md has the figures).
"""
import tensorflow as tf
from tf_agents.policies import tf_policy


def _with_batch(spec_nest, batch_size):
  """Specs with a leading batch dimension of batch_size (replacing an unknown one)."""
  def batched(spec):
    return tf.TensorSpec([batch_size] + spec.shape.as_list(), spec.dtype, spec.name)
  return tf.nest.map_structure(batched, spec_nest)


def _saved_model_specs(loaded):
  """(time_step_spec, policy_state_spec), batched with an unknown size, of a
  SavedModel policy's `action(time_step, policy_state)`."""
  action = getattr(loaded, 'action', None)
  concrete = list(getattr(action, 'concrete_functions', ()))
  if not concrete:
    raise TypeError(f'{loaded!r} has no saved `action` function: pass a TFPolicy or '
                    'the result of tf.saved_model.load(POLICY_DIR) on an exported policy')
  args, _ = concrete[0].structured_input_signature
  time_step_spec, policy_state_spec = args[0], args[1]
  unbatch = lambda spec: tf.TensorSpec(spec.shape[1:], spec.dtype, spec.name)
  return (tf.nest.map_structure(unbatch, time_step_spec),
          tf.nest.map_structure(unbatch, policy_state_spec))


def use_intra_op_threads(count=1):
  """Runs each op on `count` threads; must come before TensorFlow's first op."""
  try:
    tf.config.threading.set_intra_op_parallelism_threads(count)
  except RuntimeError as error:
    raise RuntimeError(
        f'cannot set {count} intra-op thread(s): TensorFlow has already run an op in this '
        'process. Call acting.use_intra_op_threads before anything else runs, or set '
        f'TF_NUM_INTRAOP_THREADS={count} in the environment before starting Python.') from error


class StepFunction:
  """`policy.action(time_step, policy_state)` at one fixed batch size, traced once.

  `policy`: a TFPolicy, or a SavedModel policy loaded with `tf.saved_model.load`.
  """

  def __init__(self, policy, batch_size=1):
    if isinstance(policy, tf_policy.TFPolicy):
      time_step_spec, policy_state_spec = policy.time_step_spec, policy.policy_state_spec
    else:
      time_step_spec, policy_state_spec = _saved_model_specs(policy)
    self.batch_size = batch_size
    self.time_step_spec = _with_batch(time_step_spec, batch_size)
    self.policy_state_spec = _with_batch(policy_state_spec, batch_size)
    self._policy = policy
    # A plain two-argument function: the concrete function's call then takes
    # exactly (time_step, policy_state), with no seed argument to bind.
    action = tf.function(lambda time_step, policy_state: policy.action(time_step, policy_state),
                         autograph=False)
    self._concrete = action.get_concrete_function(self.time_step_spec, self.policy_state_spec)

  def get_initial_state(self):
    return self._policy.get_initial_state(self.batch_size)

  def __call__(self, time_step, policy_state):
    try:
      return self._concrete(time_step, policy_state)
    except (TypeError, ValueError) as error:
      raise ValueError(
          f'this step function acts at batch {self.batch_size} on time steps of '
          f'{self.time_step_spec} and states of {self.policy_state_spec}; the inputs given do '
          f'not match ({error}). Build another with StepFunction(policy, batch_size=N) for '
          'another batch size.') from error

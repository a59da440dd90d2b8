"""The acting policy as a batch-1 TFLite model, and a `PyPolicy` that runs it.

A driving stack acts at 10-20 Hz beside perception, one observation at a
time. At batch 1 a TensorFlow policy call costs 4-6 ms on two Zen 3 cores
(about 1 ms of per-call dispatch, and oneDNN convolutions tuned for batches;
docs/performance.md); the same step as a TFLite model with XNNPACK's kernels,
its shapes fixed at batch 1, costs 0.56 ms for the default policy and 2 ms
for the driving policy's 8-step window. `export_policies` writes
`policy_batch1.tflite` into each exported greedy policy's directory (beside
its SavedModel, from the same weights), and `TFLitePolicy.load(dir)` acts
with it through TF-Agents' `PyPolicy` interface:

  policy = lite_policy.TFLitePolicy.load('ROOT/policies/greedy_policy')
  state = policy.get_initial_state(1)
  step = policy.action(time_step, state)   # step.action, step.state

The model holds the whole step (filter and actor) with builtin ops only, so
it also runs on the standalone TFLite runtime. A policy whose step cannot be
expressed that way (bf16 image layers, a SavedModel exported before the
acting window's filter was unrolled) exports its SavedModel alone.
"""
import os
import time

import numpy as np
import tensorflow as tf
from absl import logging
from tf_agents.policies import policy_saver
from tf_agents.policies import py_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as ts

TFLITE_NAME = 'policy_batch1.tflite'
_TIME_STEP_FIELDS = ('step_type', 'reward', 'discount')


def _flat_inputs(time_step, policy_state):
  """{input name: value} of a (time step, policy state) pair: the model's signature."""
  named = {field: getattr(time_step, field) for field in _TIME_STEP_FIELDS}
  named.update({f'observation_{k}': v for k, v in time_step.observation.items()})
  named.update({f'state_{k}': v for k, v in policy_state.items()})
  return named


def _check_flat(time_step_spec, policy_state_spec):
  if not isinstance(time_step_spec.observation, dict) or not isinstance(policy_state_spec, dict):
    raise ValueError('a TFLite policy needs dict observations and a dict policy state, '
                     f'got {time_step_spec.observation} and {policy_state_spec}')


def _saved_specs(policy_dir):
  """(time_step_spec, action_spec, policy_state_spec) PolicySaver wrote beside a SavedModel."""
  specs_path = os.path.join(policy_dir, policy_saver.POLICY_SPECS_PBTXT)
  if not os.path.exists(specs_path):
    raise FileNotFoundError(f'{policy_dir} is not an exported policy (no '
                            f'{policy_saver.POLICY_SPECS_PBTXT})')
  specs = policy_saver.specs_from_collect_data_spec(tensor_spec.from_pbtxt_file(specs_path))
  return specs['time_step_spec'], specs['action_spec'], specs['policy_state_spec']


def convert(policy_dir):
  """The TFLite flatbuffer of the SavedModel policy's `action` at batch 1 (builtin ops only)."""
  time_step_spec, _, policy_state_spec = _saved_specs(policy_dir)
  _check_flat(time_step_spec, policy_state_spec)
  saved_policy = tf.saved_model.load(policy_dir)
  signature = {name: tf.TensorSpec([1] + list(spec.shape), spec.dtype, name=name)
               for name, spec in _flat_inputs(time_step_spec, policy_state_spec).items()}

  @tf.function(input_signature=[signature])
  def action(inputs):
    time_step = ts.TimeStep(
        *(inputs[f] for f in _TIME_STEP_FIELDS),
        observation={k: inputs[f'observation_{k}'] for k in time_step_spec.observation})
    state = {k: inputs[f'state_{k}'] for k in policy_state_spec}
    step = saved_policy.action(time_step, state)
    return dict({'action': step.action},
                **{f'state_{k}': v for k, v in step.state.items()})

  converter = tf.lite.TFLiteConverter.from_concrete_functions(
      [action.get_concrete_function()], saved_policy)
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  return converter.convert()


def write(policy_dir):
  """Writes `policy_dir/policy_batch1.tflite` from the SavedModel there; returns
  its path, or None (with a warning that says why) when the policy's step has
  no builtin-ops form."""
  try:
    flatbuffer = convert(policy_dir)
  except Exception as error:  # pylint: disable=broad-except
    # The converter raises its own error types (ConverterError among them);
    # the SavedModel beside it is the complete export either way.
    first_line = (str(error).strip().splitlines() or [''])[0]
    logging.warning('No TFLite policy in %s: %s: %s', policy_dir, type(error).__name__,
                    first_line)
    return None
  path = os.path.join(policy_dir, TFLITE_NAME)
  with open(path, 'wb') as f:
    f.write(flatbuffer)
  return path


KERNELS = ('xnnpack', 'builtin')


def _interpreter(model_path, num_threads, kernels):
  resolver = tf.lite.experimental.OpResolverType
  return tf.lite.Interpreter(
      model_path=model_path, num_threads=num_threads,
      experimental_op_resolver_type=(resolver.AUTO if kernels == 'xnnpack'
                                     else resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES))


def _invoke_seconds(interpreter, calls=20):
  """Median seconds of one step on zero inputs (after a warm-up step)."""
  interpreter.allocate_tensors()
  interpreter.invoke()
  times = []
  for _ in range(calls):
    start = time.perf_counter()
    interpreter.invoke()
    times.append(time.perf_counter() - start)
  return sorted(times)[calls // 2]


def _zeros(spec, batch_size):
  return np.zeros([batch_size] + list(spec.shape), spec.dtype)


class TFLitePolicy(py_policy.PyPolicy):
  """Runs `policy_batch1.tflite` as a `PyPolicy`: one environment, batch 1.

  Time steps and states may be batched ([1, ...]) or not (a PyEnvironment's
  single time step); the result is shaped like the time step given.
  """

  def __init__(self, model_path, time_step_spec, action_spec, policy_state_spec,
               num_threads=1, kernels='auto'):
    """`kernels`: 'xnnpack' (TFLite's default delegate), 'builtin' (TFLite's
    reference kernels) or 'auto': whichever runs this model faster here,
    timed on a few steps at load. XNNPACK halves the step of the one-frame
    filter (0.7 against 1.4 ms, Zen 3); on the driving model's 8-step window
    it is slower (2.8 against 1.7 ms), as its many small ops run split between
    the delegate and the interpreter."""
    _check_flat(time_step_spec, policy_state_spec)
    if kernels not in KERNELS + ('auto',):
      raise ValueError(f"kernels={kernels!r}: use 'auto' or one of {KERNELS}")
    if not os.path.exists(model_path):
      raise FileNotFoundError(
          f'no TFLite policy at {model_path}: policies exported before 2026-12-02 have '
          'none; re-export the run with `python -m planet_tfa.programs.export '
          '--root_dir=ROOT`')
    if kernels == 'auto':
      kernels = min(KERNELS, key=lambda k: _invoke_seconds(_interpreter(model_path, num_threads,
                                                                        k)))
    self.kernels = kernels
    self._interpreter = _interpreter(model_path, num_threads, kernels)
    signatures = self._interpreter.get_signature_list()
    if len(signatures) != 1:
      raise ValueError(f'{model_path}: expected one signature, found {sorted(signatures)}')
    (name, io_names), = signatures.items()
    expected = sorted(_flat_inputs(time_step_spec, policy_state_spec))
    if sorted(io_names['inputs']) != expected:
      raise ValueError(f'{model_path} takes {sorted(io_names["inputs"])}, but the policy specs '
                       f'give {expected}: the model and its specs come from different exports')
    # Tensor indices once: a SignatureRunner call re-sizes and re-allocates
    # every tensor, which re-prepares XNNPACK's kernels and costs more than
    # the step itself.
    self._interpreter.allocate_tensors()
    runner = self._interpreter.get_signature_runner(name)
    self._input_index = {k: d['index'] for k, d in runner.get_input_details().items()}
    self._output_index = {k: d['index'] for k, d in runner.get_output_details().items()}
    self._input_dtypes = {name: spec.dtype for name, spec
                          in _flat_inputs(time_step_spec, policy_state_spec).items()}
    super().__init__(time_step_spec, action_spec, policy_state_spec=policy_state_spec)

  @classmethod
  def load(cls, policy_dir, num_threads=1, kernels='auto'):
    """The TFLite policy exported into a greedy policy's SavedModel directory."""
    time_step_spec, action_spec, policy_state_spec = _saved_specs(policy_dir)
    return cls(os.path.join(policy_dir, TFLITE_NAME), time_step_spec, action_spec,
               policy_state_spec, num_threads=num_threads, kernels=kernels)

  def _get_initial_state(self, batch_size=None):
    if batch_size not in (None, 1):
      raise ValueError(f'a TFLite policy acts at batch 1, not batch_size={batch_size}')
    return {k: _zeros(spec, 1) for k, spec in self.policy_state_spec.items()}

  def _action(self, time_step, policy_state):
    unbatched = np.ndim(time_step.step_type) == 0
    if unbatched:
      time_step = tf.nest.map_structure(lambda x: np.asarray(x)[None], time_step)
    if not policy_state:
      policy_state = self._get_initial_state(1)
    inputs = {name: np.asarray(value, self._input_dtypes[name])
              for name, value in _flat_inputs(time_step, policy_state).items()}
    for name, value in inputs.items():
      self._interpreter.set_tensor(self._input_index[name], value)
    self._interpreter.invoke()
    outputs = {name: self._interpreter.get_tensor(index)
               for name, index in self._output_index.items()}
    state = {k: outputs[f'state_{k}'] for k in self.policy_state_spec}
    action = outputs['action'][0] if unbatched else outputs['action']
    return policy_step.PolicyStep(action, state, ())

"""The Python environments inside a TF-Agents (TF)PyEnvironment, for reading what they declare.

Loaders and environments state things about themselves as attributes (`action_repeat`,
`control_ranges()`, `set_autopilot`); TF-Agents wrappers forward attribute reads to the env they
wrap, but a `TFPyEnvironment` holds a `BatchedPyEnvironment` of them. One unwrapping for all.
"""


def python_envs(env):
  """[PyEnvironment]: the envs of a TFPyEnvironment's batch, or [env] for a Python env."""
  batched = getattr(env, 'pyenv', env)  # TFPyEnvironment -> BatchedPyEnvironment
  return list(getattr(batched, 'envs', [batched]))

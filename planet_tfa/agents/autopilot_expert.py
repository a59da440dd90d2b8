"""The simulator's own autopilot as the expert: CARLA's Traffic Manager drives, the replay records its controls.

In synchronous CARLA the Traffic Manager computes the ego's control inside
the tick, so no policy can know it before the step: the env, with its
autopilot on (`CarlaEnv.set_autopilot`), ignores the action it is given,
and after the step `applied_action()` is what the Traffic Manager applied
(`ego.get_control()`, mapped back into the action range). So:

- `AutopilotPolicy` is the TF-Agents policy the episode driver runs: its
  action is a placeholder the env ignores;
- `AutopilotExpert.recording(observer)` wraps the replay observer so each
  trajectory carries the applied action instead of the placeholder; the
  replay marks these episodes no differently from any other;
- `AutopilotExpert.driving()` hands the ego to the autopilot for a run of
  episodes and takes it back after, at the episode boundary the run ends on.
"""
import contextlib

import numpy as np
import tensorflow as tf
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from planet_tfa import env_unwrap
from planet_tfa import errors


class AutopilotPolicy(tf_policy.TFPolicy):
  """Zeros in the action's shape: the env's autopilot drives instead (module doc)."""

  def __init__(self, time_step_spec, action_spec, name='AutopilotPolicy'):
    super().__init__(time_step_spec, action_spec, policy_state_spec=(), info_spec=(),
                     name=name)

  def _action(self, time_step, policy_state, seed=None):
    batch = tf.shape(tf.nest.flatten(time_step.observation)[0])[0]
    placeholder = tf.zeros(tf.concat([[batch], self.action_spec.shape], 0),
                           self.action_spec.dtype)
    return policy_step.PolicyStep(placeholder, policy_state, ())

  def _distribution(self, time_step, policy_state):
    raise NotImplementedError('AutopilotPolicy acts with action() only.')


def autopilot_envs(tf_env):
  """The Python envs inside a TFPyEnvironment, each of which must offer an autopilot."""
  envs = env_unwrap.python_envs(tf_env)
  lacking = [type(env).__name__ for env in envs if not callable(getattr(env, 'set_autopilot',
                                                                        None))]
  if lacking:
    raise errors.ConfigError(
        "train_eval.expert='autopilot' hands the car to the simulator's own autopilot "
        f"(CARLA's Traffic Manager); this task's environment ({lacking[0]}) has none. Use "
        "train_eval.expert='controller' (the route-following controller on `state`).")
  return envs


class AutopilotExpert:
  """The policy, the recording and the hand-over of the autopilot expert on one TF env."""

  def __init__(self, tf_env):
    self._tf_env = tf_env
    self._envs = autopilot_envs(tf_env)
    self.policy = AutopilotPolicy(tf_env.time_step_spec(), tf_env.action_spec())

  def _set(self, enabled):
    def hand_over():
      for env in self._envs:
        env.set_autopilot(enabled)
    # In the env's own thread, as every other call to the simulator.
    execute = getattr(self._tf_env, '_execute', None)
    if execute is None:
      hand_over()
    else:
      execute(hand_over)

  @contextlib.contextmanager
  def driving(self):
    """The autopilot drives every episode run inside; the agent gets the car back after."""
    self._set(True)
    try:
      yield
    finally:
      self._set(False)

  def _applied_actions(self, unused_order):
    return np.stack([env.applied_action() for env in self._envs]).astype(np.float32)

  def recording(self, observer):
    """`observer`, fed trajectories whose action is the one the autopilot applied."""
    dtype = self.policy.action_spec.dtype

    def observe(trajectory):
      # next_step_type comes out of env.step: the read runs after the step.
      applied = tf.numpy_function(self._applied_actions, [trajectory.next_step_type],
                                  tf.float32, stateful=True)
      applied = tf.cast(tf.reshape(applied, tf.shape(trajectory.action)), dtype)
      return observer(trajectory._replace(action=applied))

    return observe

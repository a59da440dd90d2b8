"""A route-following driving controller: the expert for warm-up and demonstrations.

Both driving tasks (CARLA and highway-env) expose the same `state` vector
(`carla.specs.STATE_NAMES`): lateral offset from the route or lane centre (m,
+ right), heading error to it (rad, + turned right), speed (m/s) and the
distance to the vehicle ahead (m). This policy drives on it, and on the
`route` input where the task has one (`carla.route.ROUTE_NAMES`: the route's
point 10 m ahead in the ego frame, (f, r), gives the curvature ahead
kappa = 2 r / (f^2 + r^2), + turning right):

  wheel angle (rad)   = -(k_offset_rad_per_m * offset + k_heading_rad_per_rad * heading_error)
                        + k_route_m * kappa             (kappa: a bicycle's L * kappa feed-forward)
  acceleration (m/s^2) = k_speed_per_s * (v_goal - speed),  v_goal = min(target_speed,
                         (front_distance - min_gap) / headway,   (slows behind a car)
                         sqrt(max_lateral_accel / |kappa|))      (and before a curve)

In physical units: the env's `control_ranges()` (carla.specs.ControlRanges:
the wheel angle at steering 1, the acceleration at full throttle, the
deceleration at full brake, each after the env's steer and brake limits)
turns them into the action, so the same gains turn the wheels by the same
angle on highway-env and on CARLA, under any limits. (Before 2026-12-07 the
gains were in action units, so a limit of 0.5 halved every wheel angle; the
old names `k_offset`, `k_heading`, `k_speed`, `k_route` still work in those
units and are converted with the env's ranges.)

`k_route_m = 0` and `max_lateral_accel = None` (the defaults) drive on `state`
alone.

At junctions nothing changes in the law: where a task plans a route
(CARLA; highway-env's intersection and roundabout), `state` measures the
offset and heading against the planned route and the route's points lie on
the planned branch, so the same feedback and feedforward take the planned
turn, and `front_distance` slows it behind a car in its corridor.

both clipped to the action bounds, plus Gaussian noise of `noise_std` times
each bound's half-range on collect (so warm-up data covers the actions near
the expert's, not only the expert's). Its baselines on the highway-env
racetrack are in docs/driving.md.
It is a TF-Agents `TFPolicy`, so the episode drivers run it like any other
policy, and its actions land in the replay as any policy's do.
"""
import gin
import tensorflow as tf
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step

from planet_tfa import env_unwrap
from planet_tfa import errors
from planet_tfa.environments.carla import specs as carla_specs

STATE_KEY = 'state'
ROUTE_KEY = 'route'
_ROUTE_POINT = slice(6, 8)  # (forward, right) of the route's point 10 m ahead


@gin.configurable
class ExpertDrivingPolicy(tf_policy.TFPolicy):
  """Proportional lane-and-speed controller on observation['state'] (module doc)."""

  def __init__(self, time_step_spec, action_spec, target_speed=5.0,
               k_offset_rad_per_m=0.24, k_heading_rad_per_rad=1.2, k_speed_per_s=1.5,
               k_route_m=0.0, min_gap=8.0, headway=1.5, noise_std=0.1,
               max_lateral_accel=None, control_ranges=None, k_offset=None, k_heading=None,
               k_speed=None, k_route=None, seed=None, name='ExpertDrivingPolicy'):
    """`control_ranges`: the env's (carla.specs.ControlRanges; None: highway-env's full
    ranges). `k_offset`, `k_heading`, `k_speed`, `k_route`: the gains in action units of
    before 2026-12-07, converted with `control_ranges` when given."""
    observation_spec = time_step_spec.observation
    if not isinstance(observation_spec, dict) or STATE_KEY not in observation_spec:
      raise errors.ConfigError(
          "the expert driving policy steers on observation['state'] (offset, heading error, "
          'speed, distance ahead), which this task does not have (keys: '
          f'{sorted(observation_spec) if isinstance(observation_spec, dict) else observation_spec}'
          "). Use train_eval.warmup_policy='random' for it.")
    if tuple(action_spec.shape) != (2,):
      raise errors.ConfigError(f'the expert driving policy acts [acceleration, steering]; this '
                               f'task has actions of shape {tuple(action_spec.shape)}.')
    if target_speed <= 0 or noise_std < 0:
      raise errors.ConfigError(
          f'ExpertDrivingPolicy.target_speed={target_speed!r} must be > 0 and '
          f'ExpertDrivingPolicy.noise_std={noise_std!r} >= 0.')
    if max_lateral_accel is not None and max_lateral_accel <= 0:
      raise errors.ConfigError(f'ExpertDrivingPolicy.max_lateral_accel={max_lateral_accel!r} '
                               'must be > 0 (m/s^2) or None.')
    ranges = control_ranges or carla_specs.HIGHWAY_ENV_RANGES
    self.control_ranges = ranges
    # Gains in action units (the old names) become physical with this env's ranges.
    if k_offset is not None:
      k_offset_rad_per_m = k_offset * ranges.steer_rad
    if k_heading is not None:
      k_heading_rad_per_rad = k_heading * ranges.steer_rad
    if k_route is not None:
      k_route_m = k_route * ranges.steer_rad
    if k_speed is not None:
      k_speed_per_s = k_speed * ranges.accel_mps2
    self._gains = (float(k_offset_rad_per_m), float(k_heading_rad_per_rad), float(k_speed_per_s))
    self._k_route = float(k_route_m)
    self._max_lateral_accel = max_lateral_accel
    self._uses_route = ROUTE_KEY in observation_spec and (
        self._k_route != 0.0 or max_lateral_accel is not None)
    self._target_speed = float(target_speed)
    self._min_gap = float(min_gap)
    self._headway = float(headway)
    self._noise_std = float(noise_std)
    self._seed_stream = tf.random.Generator.from_seed(seed) if seed is not None else None
    super().__init__(time_step_spec, action_spec, policy_state_spec=(), info_spec=(),
                     clip=True, name=name)

  def controls(self, state, route=None):
    """[B, 4] state (and [B, 12] route, or None) -> [B, 2] noise-free actions in the bounds."""
    state = tf.cast(state, tf.float32)
    offset, heading, speed, front = tf.unstack(state[..., :4], axis=-1)
    k_offset, k_heading, k_speed = self._gains
    goal = tf.minimum(self._target_speed,
                      tf.maximum(front - self._min_gap, 0.0) / self._headway)
    steering = -(k_offset * offset + k_heading * heading)
    if route is not None and self._uses_route:
      forward, right = tf.unstack(tf.cast(route, tf.float32)[..., _ROUTE_POINT], axis=-1)
      curvature = 2.0 * right / tf.maximum(tf.square(forward) + tf.square(right), 1.0)
      steering += self._k_route * curvature
      if self._max_lateral_accel is not None:
        goal = tf.minimum(goal, tf.sqrt(self._max_lateral_accel
                                        / tf.maximum(tf.abs(curvature), 1e-4)))
    acceleration = k_speed * (goal - speed)
    # Physical -> action: the wheel angle over the angle at steering 1, the acceleration over
    # the full throttle's (braking: over the full brake's deceleration).
    ranges = self.control_ranges
    pedal = tf.where(acceleration >= 0.0, acceleration / ranges.accel_mps2,
                     acceleration / ranges.decel_mps2)
    low = tf.constant(self.action_spec.minimum, tf.float32)
    high = tf.constant(self.action_spec.maximum, tf.float32)
    return tf.clip_by_value(tf.stack([pedal, steering / ranges.steer_rad], -1), low, high)

  def _action(self, time_step, policy_state, seed=None):
    action = self.controls(time_step.observation[STATE_KEY],
                           time_step.observation.get(ROUTE_KEY))
    if self._noise_std > 0:
      low = tf.constant(self.action_spec.minimum, tf.float32)
      high = tf.constant(self.action_spec.maximum, tf.float32)
      scale = self._noise_std * (high - low) / 2.0
      noise = (self._seed_stream.normal(tf.shape(action)) if self._seed_stream is not None
               else tf.random.normal(tf.shape(action)))
      action = tf.clip_by_value(action + scale * noise, low, high)
    return policy_step.PolicyStep(tf.cast(action, self.action_spec.dtype), policy_state, ())

  def _distribution(self, time_step, policy_state):
    raise NotImplementedError('ExpertDrivingPolicy acts with action() only.')


def env_control_ranges(tf_env):
  """The control ranges of the (first) Python env inside a TF env, None when it has none."""
  ranges = getattr(env_unwrap.python_envs(tf_env)[0], 'control_ranges', None)
  return ranges() if callable(ranges) else None

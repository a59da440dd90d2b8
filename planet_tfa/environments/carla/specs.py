"""Observation and action specs of the CARLA driving task; they need no server.

Observations are a dict of three uint8 images and a small float state:
  camera:  front RGB camera.
  lidar:   bird's-eye image rendered from the lidar sweep of the last tick.
  birdeye: semantic mask (road/route, other vehicles, ego), a privileged
           reconstruction target that a deployed policy should not consume.
  state:   [lateral offset to route centre (m), heading error (rad),
            speed (m/s), distance to the next vehicle ahead in the lane (m)].
  route:   the route input leaderboard agents get: the next junction's command
            one-hot (route.COMMANDS: follow lane, left, right, straight), then
            the planned route's points 5, 10, 15 and 20 m ahead in the ego
            frame (m forward, m right); route.ROUTE_NAMES.
The embedded highway-env task (environments/highway.py) shares these specs.
"""
import collections
import dataclasses

import gin
import numpy as np
from tf_agents.specs import array_spec

from planet_tfa.environments.carla import route

STATE_SIZE = 4
STATE_NAMES = ('lateral_offset_m', 'heading_error_rad', 'speed_mps', 'front_distance_m')


@gin.configurable
def observation_spec(image_size=64, state_size=STATE_SIZE):
  """Observation specs; needs no server, so agents and tests build from it."""
  def image(name):
    return array_spec.BoundedArraySpec(
        (image_size, image_size, 3), np.uint8, minimum=0, maximum=255, name=name)
  return collections.OrderedDict(
      camera=image('camera'),
      lidar=image('lidar'),
      birdeye=image('birdeye'),
      state=array_spec.ArraySpec((state_size,), np.float32, name='state'),
      route=array_spec.ArraySpec((route.ROUTE_SIZE,), np.float32, name='route'))


def action_spec():
  """[acceleration (>0 throttle, <0 brake), steering], both in [-1, 1]."""
  return array_spec.BoundedArraySpec(
      (2,), np.float32, minimum=-1.0, maximum=1.0, name='action')


def action_to_control(action, steer_limit=1.0, brake_limit=1.0):
  """Action -> (throttle, brake, steer); one pedal axis so throttle and brake never
  overlap. The limits scale steering and braking (CarlaEpisode.steer_limit, brake_limit)."""
  acceleration, steer = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
  return (float(max(acceleration, 0.0)), float(max(-acceleration, 0.0) * brake_limit),
          float(steer * steer_limit))


def control_to_action(throttle, brake, steer, steer_limit=1.0, brake_limit=1.0):
  """(throttle, brake, steer) -> the action that sends it (action_to_control's inverse).

  A control outside what the limits let an action send (an autopilot's full
  brake under brake_limit 0.5) maps to the nearest action: the bound.
  """
  acceleration = float(throttle) if throttle > 0.0 else -float(brake) / brake_limit
  return np.clip(np.array([acceleration, float(steer) / steer_limit]), -1.0, 1.0).astype(
      np.float32)


@dataclasses.dataclass(frozen=True)
class ControlRanges:
  """What an action of magnitude 1 does physically, under the env's steer and brake limits.

  A controller that thinks in physical units (a wheel angle, an acceleration)
  divides by these to get the action, so the same gains turn the wheels by the
  same angle whatever each environment's action range and limits are.
  """
  steer_rad: float  # road-wheel angle at steering +-1
  accel_mps2: float  # acceleration at full throttle (+1)
  decel_mps2: float  # deceleration at full brake (-1)

  def __post_init__(self):
    for name in ('steer_rad', 'accel_mps2', 'decel_mps2'):
      if not getattr(self, name) > 0:
        raise ValueError(f'ControlRanges.{name}={getattr(self, name)!r}: must be > 0.')


# highway-env 1.11's ContinuousAction at full range: +-45 degrees of steering, +-5 m/s^2.
HIGHWAY_ENV_RANGES = ControlRanges(steer_rad=0.7853981633974483, accel_mps2=5.0, decel_mps2=5.0)

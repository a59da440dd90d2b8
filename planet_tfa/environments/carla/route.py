"""The planned route as a polyline: projection of the ego onto it, and the state vector."""
import collections
import math

import numpy as np

from planet_tfa.environments.carla import geometry

RouteProjection = collections.namedtuple(
    'RouteProjection', ['arc_length', 'lateral_offset', 'yaw_deg', 'segment'])


def route_arc_lengths(route_xy):
  """Cumulative distance [N] along a polyline [N, 2], starting at 0."""
  route_xy = np.asarray(route_xy, np.float64)
  steps = np.linalg.norm(np.diff(route_xy, axis=0), axis=-1)
  return np.concatenate([[0.0], np.cumsum(steps)])


def project_onto_route(route_xy, position_xy, first_segment=0, num_segments=None,
                       arc_lengths=None):
  """Nearest point of segments [first, first+num) of a route to a position.

  Searching a window after the last segment keeps a looping or self-crossing
  route from snapping to a later lap. lateral_offset > 0: right of the route.
  """
  route_xy = np.asarray(route_xy, np.float64)
  if arc_lengths is None:
    arc_lengths = route_arc_lengths(route_xy)
  last = len(route_xy) - 1
  first = int(np.clip(first_segment, 0, last - 1))
  stop = last if num_segments is None else min(last, first + int(num_segments))
  starts, ends = route_xy[first:stop], route_xy[first + 1:stop + 1]
  direction = ends - starts
  length = np.maximum(np.linalg.norm(direction, axis=-1), 1e-9)
  offset = np.asarray(position_xy, np.float64) - starts
  along = np.clip((offset * direction).sum(-1) / length**2, 0.0, 1.0)
  distance = np.linalg.norm(offset - along[:, None] * direction, axis=-1)
  best = int(np.argmin(distance))
  unit = direction[best] / length[best]
  lateral = -offset[best, 0] * unit[1] + offset[best, 1] * unit[0]
  return RouteProjection(
      arc_length=float(arc_lengths[first + best] + along[best] * length[best]),
      lateral_offset=float(lateral),
      yaw_deg=float(math.degrees(math.atan2(unit[1], unit[0]))),
      segment=first + best)


def heading_error(ego_yaw_deg, lane_yaw_deg):
  """Ego yaw minus lane yaw in radians, wrapped to [-pi, pi)."""
  angle = math.radians(ego_yaw_deg - lane_yaw_deg)
  return (angle + math.pi) % (2.0 * math.pi) - math.pi


def front_vehicle_distance(ego_xy, ego_yaw_deg, others_xy, corridor_half_width=2.0,
                           max_distance=50.0):
  """Distance ahead to the nearest other vehicle centre in the ego's corridor, capped."""
  others_xy = np.asarray(others_xy, np.float64).reshape(-1, 2)
  if not len(others_xy):
    return float(max_distance)
  forward_right = geometry.world_to_ego(others_xy, ego_xy, ego_yaw_deg)
  ahead = ((forward_right[:, 0] > 0.0) & (forward_right[:, 0] <= max_distance)
           & (np.abs(forward_right[:, 1]) <= corridor_half_width))
  return float(forward_right[ahead, 0].min()) if ahead.any() else float(max_distance)


def state_vector(lateral_offset, heading_error_rad, speed, front_distance):
  return np.array([lateral_offset, heading_error_rad, speed, front_distance], np.float32)

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


# ---- the route input (what a leaderboard agent is given) ----------------------
# The next junction's command, one-hot, then the route's points ahead of the
# ego at ROUTE_POINT_SPACING_M, ROUTE_POINT_SPACING_M * 2, ... in the ego frame
# (metres forward, metres right). CARLA and highway-env share it.
COMMANDS = ('follow_lane', 'left', 'right', 'straight')
ROUTE_POINTS = 4
ROUTE_POINT_SPACING_M = 5.0
ROUTE_SIZE = len(COMMANDS) + 2 * ROUTE_POINTS
ROUTE_NAMES = tuple(f'command_{c}' for c in COMMANDS) + tuple(
    f'point_{k}_{axis}_m' for k in range(1, ROUTE_POINTS + 1) for axis in ('forward', 'right'))


def points_along(route_xy, arc_lengths, arcs):
  """World points [K, 2] of a polyline at arc lengths `arcs` (clamped to its ends)."""
  route_xy = np.asarray(route_xy, np.float64)
  arcs = np.clip(np.asarray(arcs, np.float64), arc_lengths[0], arc_lengths[-1])
  return np.stack([np.interp(arcs, arc_lengths, route_xy[:, 0]),
                   np.interp(arcs, arc_lengths, route_xy[:, 1])], -1)


def junction_command(arc_lengths, yaws_deg, in_junction, arc_now, command_distance=20.0,
                     turn_deg=30.0):
  """The command of the junction the ego is in, else of the next one within `command_distance`.

  The turn is the route's yaw change from the waypoint before the junction to
  the first one after it (CARLA's yaw grows clockwise: + is right), so the
  command holds from `command_distance` before the junction until its exit,
  however the ego's own heading turns on the way; after the exit (or with no
  junction ahead, or one the route leaves before passing): 'follow_lane'.
  """
  in_junction = np.asarray(in_junction, bool)
  arc_lengths = np.asarray(arc_lengths)
  if not len(arc_lengths):
    return 'follow_lane'
  # The route waypoint at or behind the ego: inside a junction, its entry lies behind.
  here = int(np.clip(np.searchsorted(arc_lengths, arc_now, side='right') - 1, 0,
                     len(arc_lengths) - 1))
  if in_junction[here]:
    entry = here
    while entry > 0 and in_junction[entry - 1]:
      entry -= 1
  else:
    ahead = np.flatnonzero(in_junction & (arc_lengths >= arc_now)
                           & (arc_lengths <= arc_now + command_distance))
    if not len(ahead):
      return 'follow_lane'
    entry = ahead[0]
  exits = np.flatnonzero(~in_junction[entry:])
  if not len(exits):
    return 'follow_lane'  # the route ends inside it: no exit to point at yet
  before, after = max(entry - 1, 0), entry + exits[0]
  turn = (yaws_deg[after] - yaws_deg[before] + 180.0) % 360.0 - 180.0
  if turn > turn_deg:
    return 'right'
  if turn < -turn_deg:
    return 'left'
  return 'straight'


def route_points_ahead(route_xy, arc_lengths, arc_now):
  """World points [ROUTE_POINTS, 2] of the route every ROUTE_POINT_SPACING_M past `arc_now`."""
  return points_along(route_xy, arc_lengths,
                      arc_now + ROUTE_POINT_SPACING_M * np.arange(1, ROUTE_POINTS + 1))


def route_vector(command, points_ahead_xy, ego_xy, ego_yaw_deg):
  """[ROUTE_SIZE] float32: the command one-hot, then the points ahead in the ego frame."""
  ahead = geometry.world_to_ego(points_ahead_xy, ego_xy, ego_yaw_deg)
  one_hot = np.zeros(len(COMMANDS), np.float32)
  one_hot[COMMANDS.index(command)] = 1.0
  return np.concatenate([one_hot, np.asarray(ahead, np.float32).reshape(-1)])

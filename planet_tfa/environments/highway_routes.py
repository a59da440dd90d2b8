"""The ego's planned route on a highway-env road network, in CARLA's route conventions.

highway-env's junction scenarios (highway_scenarios.py) name the route as the
nodes of their road graph from the ego's start to its destination; this module
turns that into what CarlaEnv keeps for its planned route: a polyline of lane
centre points every `spacing_m` with their yaw (degrees) and whether each lies
in a junction, so the command, the route points ahead, the ego's offset and
heading error and its progress come from `carla.route` exactly as in CARLA.

highway-env's (x, y, heading) match CARLA's top-down frame: y is 90 degrees
clockwise from x on the screen and a heading grows clockwise, so a yaw that
grows along the route is a right turn (+), as CARLA's `junction_command` reads it.
"""
import math

import numpy as np

from planet_tfa.environments.carla import route as carla_route

# A wrong branch leaves the planned lanes this far before it counts as off the route
# (one lane width): far enough for a cut corner, close enough to name the branch early.
DEFAULT_OFF_ROUTE_M = 4.0
# The projection searches this many segments past the last one, so a route
# that passes near itself (a roundabout) never snaps ahead.
_SEARCH_SEGMENTS = 30


def lanes_along(network, nodes, first_lane_id=0):
  """Lane indices [(from, to, id)] along graph `nodes`: each lane the one that
  starts nearest to where the one before it ends (roads with several lanes)."""
  if len(nodes) < 2:
    raise ValueError(f'a route needs at least two road nodes, got {nodes!r}')
  lanes = [(nodes[0], nodes[1], first_lane_id)]
  for start, end in zip(nodes[1:-1], nodes[2:]):
    previous_end = network.get_lane(lanes[-1]).position(network.get_lane(lanes[-1]).length, 0.0)
    candidates = network.graph[start][end]
    best = min(range(len(candidates)),
               key=lambda i: np.linalg.norm(candidates[i].position(0.0, 0.0) - previous_end))
    lanes.append((start, end, best))
  return lanes


class PlannedRoute:
  """A planned route through highway-env lanes; `locate` follows the ego along it."""

  def __init__(self, network, lane_indices, in_junction_fn, spacing_m=1.0,
               command_distance=20.0, turn_deg=30.0):
    points, yaws, junction, edges = [], [], [], []
    for index in lane_indices:
      lane = network.get_lane(index)
      length = float(lane.length)
      arcs = np.append(np.arange(0.0, length, spacing_m), length)
      for s in arcs:
        xy = np.asarray(lane.position(s, 0.0), np.float64)
        if points and np.linalg.norm(xy - points[-1]) < 1e-3:
          continue  # the next lane starts where this one ended
        points.append(xy)
        yaws.append(math.degrees(lane.heading_at(s)))
        junction.append(bool(in_junction_fn(index)))
      edges.append(index[:2])
    self.lane_indices = list(lane_indices)
    self.edges = frozenset(edges)
    self.xy = np.array(points)
    self.yaws_deg = np.array(yaws)
    self.in_junction = np.array(junction, bool)
    self.arc_lengths = carla_route.route_arc_lengths(self.xy)
    self.length = float(self.arc_lengths[-1])
    self._command_distance = float(command_distance)
    self._turn_deg = float(turn_deg)
    inside = np.flatnonzero(self.in_junction)
    # Arc lengths where the route enters and leaves its (first) junction; None: no junction.
    self.junction_entry = float(self.arc_lengths[inside[0]]) if len(inside) else None
    self.junction_exit = float(self.arc_lengths[inside[-1]]) if len(inside) else None
    # The junction's command, read as CARLA reads it from in front of the junction.
    self.junction_command = (
        carla_route.junction_command(self.arc_lengths, self.yaws_deg, self.in_junction,
                                     self.junction_entry, command_distance, turn_deg)
        if len(inside) else None)
    self._segment = 0

  def locate(self, position_xy):
    """The ego's projection (carla.route.RouteProjection) on the route ahead of its last one."""
    projection = carla_route.project_onto_route(self.xy, position_xy, self._segment,
                                                _SEARCH_SEGMENTS, self.arc_lengths)
    self._segment = projection.segment
    return projection

  def distance(self, position_xy):
    """Metres from a position to the nearest point of the whole route."""
    starts, direction = self.xy[:-1], np.diff(self.xy, axis=0)
    offset = np.asarray(position_xy, np.float64) - starts
    along = np.clip((offset * direction).sum(-1)
                    / np.maximum((direction**2).sum(-1), 1e-12), 0.0, 1.0)
    return float(np.linalg.norm(offset - along[:, None] * direction, axis=-1).min())

  def command(self, arc_now):
    """CARLA's command: the junction's turn from `command_distance` before its
    entry until the route leaves it (held through the junction), else follow_lane."""
    if self.junction_entry is None or arc_now >= self.junction_exit:
      return 'follow_lane'
    return carla_route.junction_command(self.arc_lengths, self.yaws_deg, self.in_junction,
                                        min(arc_now, self.junction_entry),
                                        self._command_distance, self._turn_deg)

  def points_ahead(self, arc_now):
    """World points [ROUTE_POINTS, 2] on the planned lanes 5, 10, 15, 20 m past `arc_now`."""
    return carla_route.route_points_ahead(self.xy, self.arc_lengths, arc_now)

  def on_route_edge(self, lane_index):
    """Whether a lane belongs to one of the route's roads (any of its lanes)."""
    return tuple(lane_index[:2]) in self.edges

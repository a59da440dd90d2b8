"""highway-env 1.11 scenarios with a planned route, made to take continuous actions.

Imported only by gymnasium, through the entry points highway.py registers
(`ROUTED_ENTRY_POINTS`) once highway-env is importable, so highway-env stays an optional extra.

Each class adds what the loader needs to plan the ego's route, and changes only
what stops highway-env's scenario from working with continuous throttle+steering:

  intersection: highway-env's 4-way junction. The ego enters from arm
      `ego_arm` (0: south, highway-env's only start; 1: east, the major road)
      and its destination is `destination_turn` ('left' / 'right' /
      'straight'), set per episode by the loader. highway-env plans the ego's
      route only for its discrete-action vehicles (the continuous one has no
      `plan_route_to`) and ends the episode when the ego is 25 m into *any*
      exit; here the loader plans the route and ends it (off the route, or at
      its end). With `ego_right_of_way` (default) the other cars yield to the
      ego (EgoFirstRoad): highway-env's lane priorities make the ego yield on
      its own approach, which no controller on `state` and `route` can do.
  roundabout: highway-env's reward counts lane changes with `action in [0, 2]`,
      which raises on a continuous action (at reset already); the reward here
      drops that term. The ego enters from the south; its destination is
      `destination_turn` (the east exit is right, north straight, west left).
  merge: the same `action in [0, 2]`; its end at x > 370 m (the merge passed) is
      a terminal in highway-env, here the route's end (a truncation: the road goes on).
"""
import numpy as np

from highway_env import utils
from highway_env.envs import intersection_env
from highway_env.envs import merge_env
from highway_env.envs import roundabout_env
from highway_env.road import regulation
from highway_env.vehicle import behavior
from highway_env.vehicle import controller

TURNS = ('left', 'right', 'straight')


class IntersectionIDMVehicle(behavior.IDMVehicle):
  """The intersection's traffic: highway-env sets its driving constants (a 7 m
  gap, harder acceleration) on the class of its other vehicles; on this one
  they stay off the racetrack's cars in a process that drives both (a mix)."""


class EgoFirstRoad(regulation.RegulatedRoad):
  """highway-env's junction rules, but the ego goes first: while it approaches the
  junction (within `EGO_ZONE_M` of it) or crosses it, the cars approaching on the
  other arms wait (within `WAIT_ZONE_M` of the junction), and in any conflict
  highway-env predicts, its car yields. Only highway-env's cars can yield; a
  controller on `state` and `route` sees no crossing car until it is ahead."""

  JUNCTION_HALF_M = 11.0  # the crossing's square: |x|, |y| below this (intersection_env)
  EGO_ZONE_M = 20.0
  WAIT_ZONE_M = 25.0

  @staticmethod
  def respect_priorities(v1, v2):
    if not isinstance(v1, controller.ControlledVehicle):
      return v2
    if not isinstance(v2, controller.ControlledVehicle):
      return v1
    return regulation.RegulatedRoad.respect_priorities(v1, v2)

  def enforce_road_rules(self):
    super().enforce_road_rules()
    for ego in self.vehicles:
      if isinstance(ego, controller.ControlledVehicle) or not self._approaching(ego):
        continue
      for car in self.vehicles:
        if (isinstance(car, controller.ControlledVehicle) and car.lane_index[0].startswith('o')
            and car.lane_index[0] != ego.lane_index[0]
            and car.lane.length - car.lane.local_coordinates(car.position)[0]
            < self.WAIT_ZONE_M):
          car.color = self.YIELDING_COLOR  # as highway-env marks (and later unmarks) it
          car.target_speed = 0
          car.is_yielding = True
          car.yield_timer = 0

  def _approaching(self, ego):
    """On an approach within EGO_ZONE_M of the crossing, or in it."""
    if ego.lane_index[0].startswith('ir'):
      return True
    return (ego.lane_index[0].startswith('o') and np.max(np.abs(ego.position))
            < self.JUNCTION_HALF_M + self.EGO_ZONE_M)


def _crashed_or_off_road(env):
  return bool(env.vehicle.crashed or (env.config['offroad_terminal'] and not env.vehicle.on_road))


class RoutedIntersection(intersection_env.IntersectionEnv):
  """highway-env's intersection with the ego's arm and destination chosen (module doc)."""

  @classmethod
  def default_config(cls):
    config = super().default_config()
    config.update({'ego_arm': 0, 'destination_turn': 'straight', 'offroad_terminal': True,
                   'ego_right_of_way': True,
                   'other_vehicles_type': f'{__name__}.IntersectionIDMVehicle'})
    return config

  def _arm_and_exit(self):
    arm = int(self.config['ego_arm']) % 4
    turn = self.config['destination_turn']
    if turn not in TURNS:
      raise ValueError(f'destination_turn={turn!r}: one of {TURNS}')
    # Arms count counter-clockwise on the screen: the next arm is a left turn.
    exit_arm = {'right': arm - 1, 'left': arm + 1, 'straight': arm + 2}[turn] % 4
    return arm, exit_arm

  def planned_route_nodes(self):
    arm, exit_arm = self._arm_and_exit()
    return [f'o{arm}', f'ir{arm}', f'il{exit_arm}', f'o{exit_arm}']

  @staticmethod
  def is_junction(lane_index):
    return lane_index[0].startswith('ir')  # inner-ring to inner-ring: the crossing itself

  def _make_road(self):
    super()._make_road()
    if self.config['ego_right_of_way']:
      self.road = EgoFirstRoad(network=self.road.network, np_random=self.np_random,
                               record_history=self.config['show_trajectories'])

  def _make_vehicles(self, n_vehicles=10):
    arm, exit_arm = self._arm_and_exit()
    self.config['destination'] = f'o{exit_arm}'
    super()._make_vehicles(n_vehicles)  # places the ego on arm 0
    if arm:
      self._move_ego_to_arm(arm)

  def _move_ego_to_arm(self, arm):
    ego = self.controlled_vehicles[0]
    longitudinal, _ = ego.lane.local_coordinates(ego.position)
    lane = self.road.network.get_lane((f'o{arm}', f'ir{arm}', 0))
    ego.position = np.asarray(lane.position(longitudinal, 0.0), np.float64)
    ego.heading = lane.heading_at(longitudinal)
    ego.on_state_update()
    # As highway-env does at the ego's start: no car within 20 m of it.
    self.road.vehicles = [v for v in self.road.vehicles if v is ego
                          or np.linalg.norm(v.position - ego.position) >= 20]

  def _is_terminated(self):
    return _crashed_or_off_road(self)


def _action_free_rewards(env):
  """highway-env's reward terms without the discrete lane-change flag."""
  scaled_speed = utils.lmap(env.vehicle.speed, env.config.get('reward_speed_range', [20, 30]),
                            [0, 1])
  return {'collision_reward': env.vehicle.crashed,
          'high_speed_reward': float(np.clip(scaled_speed, 0, 1)),
          'lane_change_reward': 0.0,
          'on_road_reward': env.vehicle.on_road}


class RoutedRoundabout(roundabout_env.RoundaboutEnv):
  """highway-env's roundabout with continuous actions and a chosen exit (module doc)."""

  EXITS = {'right': 'exr', 'straight': 'nxr', 'left': 'wxr'}

  @classmethod
  def default_config(cls):
    config = super().default_config()
    config.update({'destination_turn': 'straight', 'offroad_terminal': True,
                   'reward_speed_range': [8.0, 16.0]})
    return config

  def _rewards(self, action):
    return _action_free_rewards(self)

  def planned_route_nodes(self):
    turn = self.config['destination_turn']
    if turn not in self.EXITS:
      raise ValueError(f'destination_turn={turn!r}: one of {TURNS}')
    return self.road.network.shortest_path('ser', self.EXITS[turn])

  @staticmethod
  def is_junction(lane_index):
    # The ring and the curved ramps onto and off it; the straight roads to and
    # from them run between an outer node (name ending in 'r') and a ramp.
    return not (lane_index[0].endswith('r') or lane_index[1].endswith('r'))

  def _is_terminated(self):
    return _crashed_or_off_road(self)


class RoutedMerge(merge_env.MergeEnv):
  """highway-env's merge with continuous actions; its end is the route's (module doc)."""

  @classmethod
  def default_config(cls):
    config = super().default_config()
    config.update({'offroad_terminal': True})
    return config

  def _rewards(self, action):
    rewards = _action_free_rewards(self)
    rewards['right_lane_reward'] = self.vehicle.lane_index[2] / 1
    return rewards

  def planned_route_nodes(self):
    return ['a', 'b', 'c', 'd']

  @staticmethod
  def is_junction(lane_index):
    del lane_index
    return False  # one road: the ramp joins it, the ego's lane goes on

  def _is_terminated(self):
    return _crashed_or_off_road(self)

  def _is_truncated(self):
    return self.time >= self.config['duration']

"""Driving without a simulator server: highway-env 1.11 with CarlaEnv's observation layout.

`load_highway` returns a TF-Agents PyEnvironment whose observation and action
specs are `carla.specs.observation_spec()` and `carla.specs.action_spec()` (imported,
not redefined), so `gin/highway_sac.gin` trains the recipe of `gin/carla_sac.gin`
(both include `gin/driving.gin`; tests/test_driving_recipe.py names what may differ) on any machine.

What each key means here (all images 64x64 uint8, forward up, right to the right):
  camera:  highway-env's own top-down rendering around the ego (offscreen
           pygame, `render_pixels` square at `scaling` px/m), turned so the
           ego's heading points up (as a vehicle-mounted sensor sees the
           road: highway-env draws world-aligned), the central square kept
           and box-filtered to 64x64. highway-env has no first-person view;
           this is the sensor image the encoder sees, as CARLA's front camera is.
  lidar:   highway-env's `LidarObservation`, the scenario's observation type
           here (the distance to the nearest vehicle in each of `lidar_cells`
           angular sectors, up to `lidar_range` m), turned into lidar points
           and drawn by `carla.geometry.lidar_to_birdeye`:
           channel 0 the obstacle hit of each sector, channel 1 ground returns
           along each ray up to its hit (what a real lidar sees of the road
           surface), channel 2 an intensity that falls with distance.
  birdeye: `carla.geometry.render_semantic_birdeye` of highway-env's road network
           (channel 0: lane surfaces at ROAD_VALUE, the planned route's lanes
           at ROUTE_VALUE on the routed scenarios), the other vehicles' boxes
           (channel 1) and the ego's box (channel 2); same geometry as CARLA
           (0.5 m/px, 24 m ahead, 8 m behind). Decode-only target.
  state:   carla.specs.STATE_NAMES: [lateral offset from the route (m, + right),
           heading error to it (rad), speed (m/s), distance to the nearest
           vehicle centre ahead within 2 m of the ego's axis (m, capped at 50,
           `carla.route.front_vehicle_distance`)]. The route is the planned
           one on the routed scenarios (below), as in CARLA; elsewhere the
           ego's current lane.
  route:   carla.route.ROUTE_NAMES, as CARLA's: the command and the route's
           centre 5, 10, 15 and 20 m ahead in the ego frame (m forward, m
           right). Tracks and highways have no junctions: follow_lane, and the
           ego lane's centre ahead (following the lanes that continue it).

Routed scenarios ('intersection', 'roundabout', 'merge'; highway_scenarios.py):
each episode draws its destination (a turn in `destinations`, from the seeded
stream) and plans the route along highway-env's lanes to it
(highway_routes.py). The command is the junction's turn read as CARLA reads it
(`carla.route.junction_command`: the route's yaw change across the junction,
+ right) from `command_distance` before the junction until the route leaves
it, follow_lane elsewhere; the route points lie on the planned lanes (the
branch the route takes, not the lane the ego happens to be nearest). The
reward's speed is the progress along the route (m/s). Farther than
`off_route_m` from the route and on none of its roads (a wrong exit) ends the
episode as 'off_route' (terminal, the crash penalty, as CARLA's off-road);
reaching the route's end is 'route_complete' (a truncation: the road goes on).

Why not highway-env's `OccupancyGrid` observation for the mask: it marks one
cell per vehicle centre and only lane *centre lines* as road, and it took
46 ms per step on the racetrack (a pandas frame and ~3600 lane waypoints per
step) against a few ms for drawing the lane quads near the ego and the boxes.
It is also the racetrack's default observation, so the loader replaces it by
the (cheap) lidar, which it uses.

Action: [acceleration, steering] in [-1, 1] (CARLA's order) to highway-env's
`ContinuousAction` with both axes on: acceleration spans +-5 m/s^2, steering
+-45 degrees (highway-env's defaults), and speeds stay in [0, `max_speed`]
(no reversing, like CARLA's throttle/brake). `steer_limit` and `brake_limit`
narrow the two ranges (gym-carla caps steering at 0.3 and braking at 0.375 of
CARLA's): a uniform random action then is a driveable one more often.

Reward (`reward_shape`):
  'lane_speed' (the original): highway-env's own reward (racetrack: lane
      centring, action cost) times clip(forward speed / target_speed, 0, 1);
      standing still earns 0, so stopping is a safe optimum.
  'track_speed' (no safe stop; what gin/highway_sac.gin uses): per step
      speed_weight * (1 - |v - v*| / v*) + lane_weight * centring * clip(v / v*, 0, 1)
      - step_cost, with v the forward speed, v* = target_speed and centring
      = 1 - min(|lateral offset| / (lane width / 2), 1); a crash or leaving
      the road adds -crash_penalty and ends the episode (terminal). Standing
      still costs step_cost every step. docs/driving.md compares it with
      gym-carla's and interp-e2e-driving's.

Episode ends: gymnasium `terminated` (a crash, leaving the road) -> a
terminal step (discount 0); `truncated` (the `episode_seconds` time limit) ->
a truncation (discount 1), so the critic bootstraps through the time limit.
`get_info()` says why (`reason`: collision / off_road / off_route / terminal /
time_limit / route_complete), how far the ego drove (`distance_m`, its
odometer), `route_completion` (the share of the planned route driven; on a
track, of what the target speed covers in the time limit), and at a junction
its `junction_command` and `exit` ('commanded': past the junction on the
planned exit; 'wrong': left the route there; None: not past it).

`scenario_mix` makes one environment of several scenarios, one drawn per
episode (scenario_mix.py), so one agent trains on all of them.

Headless rendering: highway-env draws with pygame; with `SDL_VIDEODRIVER=dummy`
pygame silently renders all-black frames, so the loader drops that setting
(with a warning) and renders offscreen, and a black first frame is an error.
"""
import inspect
import logging
import math
import os

import gin
import numpy as np
from PIL import Image
from tf_agents.environments import py_environment
from tf_agents.trajectories import time_step as ts

from planet_tfa import errors
from planet_tfa.environments.carla import geometry as carla_geometry
from planet_tfa.environments.carla import reward as carla_reward
from planet_tfa.environments.carla import route as carla_route
from planet_tfa.environments.carla import specs as carla_specs
from planet_tfa.environments import highway_routes
from planet_tfa.environments import scenario_mix as scenario_mix_lib

HIGHWAY_ENV_VERSION = '1.11'
INSTALL_HINT = "pip install -e '.[highway]'   (installs highway-env==%s)" % HIGHWAY_ENV_VERSION

# Scenario name -> (gymnasium id, highway-env config overrides). Only scenarios
# that take continuous throttle+steering, render offscreen and end on crashes are
# here; 'lane-keeping-v0' is not (it takes no render_mode and never terminates
# or truncates in 1.11).
SCENARIOS = {
    # A closed track with curves and one other car; the reward pays staying in
    # the lane centre (times the speed factor below). terminate_off_road: leaving
    # the asphalt ends the episode, as in CARLA.
    'racetrack': ('racetrack-v0', {'terminate_off_road': True}),
    'racetrack-oval': ('racetrack-oval-v0', {'terminate_off_road': True}),
    'racetrack-large': ('racetrack-large-v0', {'terminate_off_road': True}),
    # Straight three-lane highway with traffic; the reward pays speed, the right
    # lanes and no crash. highway-env ticks it at 1 Hz; 5 Hz suits continuous steering.
    'highway-fast': ('highway-fast-v0', {'offroad_terminal': True, 'policy_frequency': 5}),
    'highway': ('highway-v0', {'offroad_terminal': True, 'policy_frequency': 5}),
    # Scenarios with a planned route (highway_scenarios.py): a destination
    # drawn per episode from `destinations`, the command, state and route
    # points from the route, and an end when the ego leaves it or reaches its end.
    # A 4-way junction, the ego entering from the south (config {'ego_arm': 1}:
    # from the east, the major road); traffic: 'initial_vehicle_count' cars
    # (highway-env: 10), and a new one each step with 'spawn_probability' (0.6).
    'intersection': ('planet_tfa-intersection-v0',
                     {'policy_frequency': 5, 'initial_vehicle_count': 3,
                      'spawn_probability': 0.1}),
    # A two-lane roundabout with 4 cars, the ego entering from the south.
    'roundabout': ('planet_tfa-roundabout-v0', {'policy_frequency': 5}),
    # A two-lane road that a ramp joins, 4 cars; the route is the ego's lane to the road's end.
    'merge': ('planet_tfa-merge-v0', {'policy_frequency': 5}),
}

# The routed scenarios' classes (highway_scenarios.py), imported by gymnasium
# when one is made: that module imports highway-env, an optional extra.
ROUTED_ENTRY_POINTS = {
    'planet_tfa-intersection-v0':
        'planet_tfa.environments.highway_scenarios:RoutedIntersection',
    'planet_tfa-roundabout-v0': 'planet_tfa.environments.highway_scenarios:RoutedRoundabout',
    'planet_tfa-merge-v0': 'planet_tfa.environments.highway_scenarios:RoutedMerge',
}
DESTINATIONS = ('left', 'right', 'straight')

REWARD_SHAPES = ('lane_speed', 'track_speed')
COLLISION = carla_reward.COLLISION
OFF_ROAD = carla_reward.OFF_ROAD
TIME_LIMIT = carla_reward.TIME_LIMIT
OTHER_TERMINAL = 'terminal'  # a scenario's own end (e.g. reaching an exit)
OFF_ROUTE = 'off_route'  # left the planned route (a wrong exit): terminal, as off_road
ROUTE_COMPLETE = 'route_complete'  # reached the route's end: a truncation (the road goes on)
# Junction outcomes in get_info()['exit'].
COMMANDED_EXIT = 'commanded'
WRONG_EXIT = 'wrong'
# The route ends this far before its last lane does (the ego is 5 m long).
_ROUTE_END_MARGIN_M = 10.0
# Past the junction's last point by this much, the ego has taken its exit.
_EXIT_TAKEN_M = 5.0

# Lidar points are drawn by carla.geometry.lidar_to_birdeye, which sorts them by
# height above the ground below a sensor this high (CarlaEnv's defaults).
_LIDAR_HEIGHT = 2.4
_OBSTACLE_HEIGHT = 1.0  # a hit on a car body: well above the ground tolerance
_LANE_QUAD_LENGTH_M = 4.0  # chord error on a 20 m curve: 0.1 m, a fifth of a pixel


class HighwayEnvError(errors.UserError):
  """A problem with highway-env that the user can fix (scenario, install, display)."""


def import_highway_env():
  """Imports gymnasium + highway-env (registering the scenarios) only when used."""
  try:
    import gymnasium  # pylint: disable=g-import-not-at-top
    import highway_env  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as error:
    raise ImportError(
        'load_highway needs highway-env %s (and gymnasium), which is not installed. '
        'Install it with: %s' % (HIGHWAY_ENV_VERSION, INSTALL_HINT)) from error
  for env_id, entry_point in ROUTED_ENTRY_POINTS.items():
    if env_id not in gymnasium.registry:
      gymnasium.register(id=env_id, entry_point=entry_point)
  return gymnasium


def scenario_id(scenario):
  """Scenario name -> (gymnasium id, config overrides); unknown names list the valid ones."""
  if scenario not in SCENARIOS:
    raise HighwayEnvError(
        'unknown highway-env scenario %r; valid scenarios: %s. Set it in gin with '
        'load_highway.scenario = "racetrack".' % (scenario, ', '.join(sorted(SCENARIOS))))
  return SCENARIOS[scenario]


def _allow_offscreen_rendering():
  """Drops SDL_VIDEODRIVER=dummy, under which pygame renders only black frames."""
  os.environ.setdefault('SDL_AUDIODRIVER', 'dummy')  # no sound card: quiet ALSA errors
  if os.environ.get('SDL_VIDEODRIVER') == 'dummy':
    logging.warning('SDL_VIDEODRIVER=dummy makes highway-env render black frames; '
                    'unsetting it (highway-env renders offscreen without it).')
    del os.environ['SDL_VIDEODRIVER']


# ------------------------------------------------ pure array conversions ---


def resize_frame(frame, image_size):
  """RGB uint8 [H, W, 3] -> [S, S, 3], box-filtered (averages, so thin lines survive)."""
  frame = np.asarray(frame, np.uint8)
  if frame.shape[:2] == (image_size, image_size):
    return frame
  return np.asarray(Image.fromarray(frame).resize((image_size, image_size), Image.BOX))


def heading_up_frame(frame, heading_rad):
  """A world-aligned top-down frame centred on the ego -> the ego's heading up.

  highway-env draws x right and y down, so a heading h points at screen angle
  -h (counter-clockwise from +x); turning the frame by 90 degrees + h puts it
  up. The central square of side / sqrt(2) is kept: it holds no corner that
  the turn filled with background.
  """
  frame = np.asarray(frame, np.uint8)
  side = frame.shape[0]
  turned = Image.fromarray(frame).rotate(90.0 + math.degrees(heading_rad),
                                         resample=Image.BILINEAR)
  keep = int(side / math.sqrt(2.0))
  start = (side - keep) // 2
  return np.asarray(turned.crop((start, start, start + keep, start + keep)))


def lidar_sectors_to_points(distances, ego_heading_rad, lidar_range, ground_spacing_m=0.5):
  """highway-env lidar distances [cells] (world-frame sectors) -> points [N, 4].

  Sector i looks along world angle i * 2pi / cells. Returns sensor-frame points
  (x forward, y right, z up relative to a sensor `_LIDAR_HEIGHT` above the
  ground, intensity) as CARLA's lidar delivers them: one obstacle point per
  sector that hit something closer than `lidar_range`, and ground points every
  `ground_spacing_m` along each ray up to its hit or the range.
  """
  distances = np.asarray(distances, np.float64).reshape(-1)
  cells = len(distances)
  angles = np.arange(cells) * (2.0 * np.pi / cells) - ego_heading_rad  # ego frame
  forward, right = np.cos(angles), np.sin(angles)
  hit = distances < lidar_range
  hit_d = distances[hit]
  obstacle = np.stack([hit_d * forward[hit], hit_d * right[hit],
                       np.full_like(hit_d, _OBSTACLE_HEIGHT - _LIDAR_HEIGHT),
                       1.0 - hit_d / lidar_range], axis=-1)
  steps = np.arange(ground_spacing_m, lidar_range, ground_spacing_m)
  reach = np.minimum(distances, lidar_range)[:, None]
  on_ray = steps[None, :] < reach  # [cells, steps]
  ray_d = np.broadcast_to(steps[None, :], on_ray.shape)[on_ray]
  sector = np.nonzero(on_ray)[0]
  ground = np.stack([ray_d * forward[sector], ray_d * right[sector],
                     np.full_like(ray_d, -_LIDAR_HEIGHT), 1.0 - ray_d / lidar_range], axis=-1)
  return np.concatenate([obstacle, ground], axis=0).astype(np.float32)


def lane_quads(lanes, quad_length_m=_LANE_QUAD_LENGTH_M):
  """highway-env lanes -> world quads [N, 4, 2] covering their surfaces."""
  quads = []
  for lane in lanes:
    length = float(lane.length)
    s = np.append(np.arange(0.0, length, quad_length_m), length)
    if len(s) < 2:
      continue
    centre = np.array([lane.position(x, 0.0) for x in s])
    yaw_deg = np.degrees([lane.heading_at(x) for x in s])
    width = np.array([lane.width_at(x) for x in s])
    quads.append(carla_geometry.lane_segment_quads(centre[:-1], yaw_deg[:-1], width[:-1],
                                                   centre[1:], yaw_deg[1:], width[1:]))
  return np.concatenate(quads) if quads else np.zeros((0, 4, 2))


def vehicle_box(vehicle):
  return carla_geometry.box_polygon(vehicle.position, math.degrees(vehicle.heading),
                                    vehicle.LENGTH / 2.0, vehicle.WIDTH / 2.0)


def birdeye_view_radius(geometry, slack_m=10.0):
  """Farthest a lane-quad vertex or vehicle centre can be and still touch the image (m).

  The distance from the ego to the image's farthest corner, plus `slack_m` for
  a quad or box that reaches into the image from outside (quads are 4 m long).
  """
  size, mpp = geometry.image_size, geometry.meters_per_pixel
  rows = max(geometry.ego_row + 0.5, size - geometry.ego_row - 0.5)
  cols = max(geometry.ego_col + 0.5, size - geometry.ego_col - 0.5)
  return math.hypot(rows, cols) * mpp + slack_m


def wrap_angle(angle):
  return (angle + np.pi) % (2.0 * np.pi) - np.pi


def end_reason(terminated, truncated, crashed, on_road):
  """Why a step ended the episode (None: it did not); a terminal outranks the time limit."""
  if terminated:
    if crashed:
      return COLLISION
    if not on_road:
      return OFF_ROAD
    return OTHER_TERMINAL
  if truncated:
    return TIME_LIMIT
  return None


# ----------------------------------------------------------- environment ---


class HighwayDrivingEnv(py_environment.PyEnvironment):
  """highway-env as a PyEnvironment with CarlaEnv's specs; built by `load_highway`."""

  def __init__(self, scenario='racetrack', seed=None, image_size=64, episode_seconds=40.0,
               target_speed=10.0, max_speed=20.0, render_pixels=128, scaling=2.5,
               meters_per_pixel=0.5, lidar_range=32.0, lidar_cells=180, config=None,
               reward_shape='lane_speed', speed_weight=1.0, lane_weight=0.5, step_cost=0.1,
               crash_penalty=20.0, steer_limit=1.0, brake_limit=1.0, heading_up=True,
               destinations=DESTINATIONS, off_route_m=highway_routes.DEFAULT_OFF_ROUTE_M,
               command_distance=20.0):
    check_destinations(destinations)
    if reward_shape not in REWARD_SHAPES:
      raise HighwayEnvError(f'load_highway.reward_shape={reward_shape!r}: use one of '
                            f'{REWARD_SHAPES}.')
    for name, limit in (('steer_limit', steer_limit), ('brake_limit', brake_limit)):
      if not 0.0 < limit <= 1.0:
        raise HighwayEnvError(f'load_highway.{name}={limit!r}: a fraction of highway-env\'s '
                              'range in (0, 1].')
    if reward_shape == 'track_speed' and not target_speed:
      raise HighwayEnvError("load_highway.reward_shape='track_speed' needs a target_speed > 0.")
    self._reward_shape = reward_shape
    self._reward_weights = (float(speed_weight), float(lane_weight), float(step_cost),
                            float(crash_penalty))
    self._limits = np.array([1.0, float(steer_limit)])
    self._brake_limit = float(brake_limit)
    self._heading_up = heading_up
    # The base class resets on the step after LAST, as TF-Agents drivers expect.
    super().__init__(handle_auto_reset=True)
    env_id, overrides = scenario_id(scenario)
    gymnasium = import_highway_env()
    _allow_offscreen_rendering()
    env_config = dict(overrides)
    env_config.update({
        # The lidar is the one observation used as is; the scenarios' defaults
        # (occupancy grids, kinematics tables) cost up to 50 ms a step.
        'observation': {'type': 'LidarObservation', 'cells': int(lidar_cells),
                        'maximum_range': float(lidar_range), 'normalize': False},
        'offscreen_rendering': True,
        'action': {'type': 'ContinuousAction', 'longitudinal': True, 'lateral': True,
                   'speed_range': [0.0, float(max_speed)]},
        'duration': float(episode_seconds),
        'screen_width': int(render_pixels), 'screen_height': int(render_pixels),
        'centering_position': [0.5, 0.5],
        'scaling': float(scaling),
    })
    env_config.update(config or {})
    self.scenario = scenario
    self._env = gymnasium.make(env_id, render_mode='rgb_array', config=env_config)
    self._sim = self._env.unwrapped
    self._lidar_range = float(lidar_range)
    self._image_size = int(image_size)
    self._geometry = carla_geometry.birdeye_geometry(image_size, meters_per_pixel)
    self._view_radius = birdeye_view_radius(self._geometry)
    self._target_speed = target_speed
    self._episode_seconds = float(episode_seconds)
    self._step_seconds = 1.0 / float(self._sim.config['policy_frequency'])
    self._destinations = tuple(destinations)
    self._off_route_m = float(off_route_m)
    self._command_distance = float(command_distance)
    # Planned-route scenarios (highway_scenarios.py) say which road nodes the route takes.
    self._routed = hasattr(self._sim, 'planned_route_nodes')
    self.reseed(seed)
    self._road_quads = np.zeros((0, 4, 2))
    self._route_quads = np.zeros((0, 4, 2))
    self._route = None
    self._projection = None  # the ego on the route (carla.route.RouteProjection)
    self._route_start_arc = 0.0
    self._exit = None
    self._info = {}
    self._odometer = 0.0
    self._last_position = None

  def reseed(self, seed):
    """The next reset seeds highway-env and the destination draws with `seed` (None: random)."""
    self._seed = seed
    self._destination_rng = np.random.default_rng(seed)

  @property
  def routed(self):
    """Whether the scenario has a planned route with a destination (else: the lane ahead)."""
    return self._routed

  def observation_spec(self):
    return carla_specs.observation_spec(self._image_size)

  def action_spec(self):
    return carla_specs.action_spec()

  def control_ranges(self):
    """What the action's [-1, 1] does physically here (carla.specs.ControlRanges), limits included."""
    action_type = self._sim.action_type
    return carla_specs.ControlRanges(
        steer_rad=float(action_type.steering_range[1]) * float(self._limits[1]),
        accel_mps2=float(action_type.acceleration_range[1]),
        decel_mps2=-float(action_type.acceleration_range[0]) * self._brake_limit)

  def get_info(self):
    """reason (None until the episode ends), distance_m, speed_mps, crashed, on_road,
    route_completion, junction_command and exit (module doc)."""
    return dict(self._info)

  def render(self, mode='rgb_array'):
    return self._env.render()

  def close(self):
    self._env.close()

  @property
  def simulator(self):
    """The unwrapped highway-env environment (tests place vehicles through it)."""
    return self._sim

  def _reset(self):
    # The first reset seeds highway-env's RNG; later ones continue its sequence.
    options = None
    if self._routed:
      turn = self._destinations[self._destination_rng.integers(len(self._destinations))]
      options = {'config': {'destination_turn': turn}}
    lidar, _ = self._env.reset(seed=self._seed, options=options)
    self._seed = None
    road = self._sim.road
    lanes = [lane for by_to in road.network.graph.values() for lane_list in by_to.values()
             for lane in lane_list]
    self._road_quads = lane_quads(lanes)  # the road is static within an episode
    self._odometer = 0.0
    self._last_position = np.array(self._sim.vehicle.position, np.float64)
    self._exit = None
    if self._routed:
      self._plan_route()
    observation = self._observe(lidar)
    if observation['camera'].max() == 0:
      raise HighwayEnvError(
          'highway-env rendered an all-black camera frame: pygame has no working '
          'video driver (SDL_VIDEODRIVER=%r). Unset SDL_VIDEODRIVER before pygame '
          'is first used; highway-env renders offscreen without a display.'
          % os.environ.get('SDL_VIDEODRIVER'))
    self._info = self._make_info(None)
    return ts.restart(observation)

  def _plan_route(self):
    """The ego's planned route of this episode, from its lane to the destination."""
    sim, vehicle = self._sim, self._sim.vehicle
    network = sim.road.network
    lane_indices = highway_routes.lanes_along(network, sim.planned_route_nodes(),
                                              vehicle.lane_index[2])
    self._route = highway_routes.PlannedRoute(network, lane_indices, sim.is_junction,
                                              command_distance=self._command_distance)
    self._route_quads = lane_quads([network.get_lane(index) for index in lane_indices])
    self._projection = self._route.locate(vehicle.position)
    self._route_start_arc = self._projection.arc_length

  def _route_end_reason(self, vehicle):
    """Off the planned route (terminal), at its end (truncation), or None; notes the exit."""
    route, arc = self._route, self._projection.arc_length
    if route.junction_exit is not None and arc >= route.junction_exit + _EXIT_TAKEN_M:
      self._exit = self._exit or COMMANDED_EXIT
    # On a road of the route (e.g. its other lane in a roundabout) is never off it.
    if (route.distance(vehicle.position) > self._off_route_m
        and not route.on_route_edge(vehicle.lane_index)):
      if route.junction_entry is not None and arc >= route.junction_entry - _EXIT_TAKEN_M:
        self._exit = self._exit or WRONG_EXIT
      return OFF_ROUTE
    if arc >= route.length - _ROUTE_END_MARGIN_M:
      return ROUTE_COMPLETE
    return None

  def _step(self, action):
    action = np.clip(np.asarray(action, np.float64).reshape(2), -1.0, 1.0)
    # The agent's [-1, 1] spans the narrowed ranges: braking and steering limits.
    sim_action = action * self._limits
    if sim_action[0] < 0:
      sim_action[0] *= self._brake_limit
    lidar, reward, terminated, truncated, info = self._env.step(sim_action)
    vehicle = self._sim.vehicle
    position = np.array(vehicle.position, np.float64)
    self._odometer += float(np.linalg.norm(position - self._last_position))
    self._last_position = position
    reason = end_reason(terminated, truncated, bool(info.get('crashed', vehicle.crashed)),
                        bool(vehicle.on_road))
    if self._routed:
      last_arc = self._projection.arc_length
      self._projection = self._route.locate(position)
      # The reward's speed is the progress along the planned route.
      forward_speed = (self._projection.arc_length - last_arc) / self._step_seconds
      if not terminated:
        route_reason = self._route_end_reason(vehicle)
        if route_reason == OFF_ROUTE:
          reason, terminated = OFF_ROUTE, True
        elif route_reason is not None:
          reason, truncated = route_reason, True
    else:
      forward_speed = vehicle.speed * math.cos(self._heading_error(vehicle))
    if self._reward_shape == 'track_speed':
      reward = self._track_speed_reward(vehicle, forward_speed, terminated)
    elif self._target_speed:
      # Racetrack's own reward pays lane centring whether or not the car moves;
      # scaling by the speed makes standing still worth nothing.
      reward *= float(np.clip(forward_speed / self._target_speed, 0.0, 1.0))
    self._info = self._make_info(reason)
    observation = self._observe(lidar)
    if reason is None:
      return ts.transition(observation, np.float32(reward), discount=1.0)
    if terminated:
      return ts.termination(observation, np.float32(reward))
    return ts.truncation(observation, np.float32(reward), discount=1.0)

  def _track_speed_reward(self, vehicle, forward_speed, terminated):
    """The 'track_speed' reward (module doc): no safe stop."""
    speed_weight, lane_weight, step_cost, crash_penalty = self._reward_weights
    target = self._target_speed
    speed_term = max(1.0 - abs(forward_speed - target) / target, -1.0)
    lateral, _ = self._offset_and_heading_error(vehicle)
    half_width = vehicle.lane.width_at(0.0) / 2.0
    centring = 1.0 - min(abs(lateral) / half_width, 1.0)
    moving = float(np.clip(forward_speed / target, 0.0, 1.0))
    reward = speed_weight * speed_term + lane_weight * centring * moving - step_cost
    if terminated:
      reward -= crash_penalty
    return reward

  def _make_info(self, reason):
    vehicle = self._sim.vehicle
    return {'reason': reason, 'distance_m': self._odometer, 'speed_mps': float(vehicle.speed),
            'crashed': bool(vehicle.crashed), 'on_road': bool(vehicle.on_road),
            'route_completion': self._route_completion(),
            'junction_command': self._route.junction_command if self._routed else None,
            'exit': self._exit}

  def _route_completion(self):
    """Fraction of the planned route driven; on a route without end (a track) the
    route is what the target speed covers in the time limit."""
    if self._routed:
      total = self._route.length - _ROUTE_END_MARGIN_M - self._route_start_arc
      done = self._projection.arc_length - self._route_start_arc
    elif self._target_speed:
      total, done = self._target_speed * self._episode_seconds, self._odometer
    else:
      return None
    return float(np.clip(done / max(total, 1e-6), 0.0, 1.0))

  def _heading_error(self, vehicle):
    lane = vehicle.lane
    longitudinal, _ = lane.local_coordinates(vehicle.position)
    return float(wrap_angle(vehicle.heading - lane.heading_at(longitudinal)))

  def _offset_and_heading_error(self, vehicle):
    """(m right of, rad turned right from) the planned route, or the ego's lane without one."""
    if self._routed:
      heading_error = wrap_angle(vehicle.heading - math.radians(self._projection.yaw_deg))
      return self._projection.lateral_offset, float(heading_error)
    lane = vehicle.lane
    longitudinal, lateral = lane.local_coordinates(vehicle.position)
    return lateral, float(wrap_angle(vehicle.heading - lane.heading_at(longitudinal)))

  def _observe(self, lidar_sectors):
    """lidar_sectors: highway-env's LidarObservation [cells, (distance, speed)]."""
    sim = self._sim
    vehicle = sim.vehicle
    frame = self._env.render()
    # render() arms highway-env's per-substep rendering of the next step's
    # intermediate frames, which nobody sees here: turn it off (2-3x faster).
    sim.enable_auto_render = False
    if self._heading_up:
      frame = heading_up_frame(frame, vehicle.heading)
    camera = resize_frame(frame, self._image_size)

    ego_xy = np.array(vehicle.position, np.float64)
    ego_yaw_deg = math.degrees(vehicle.heading)
    points = lidar_sectors_to_points(
        np.asarray(lidar_sectors)[:, 0], vehicle.heading, self._lidar_range,
        ground_spacing_m=self._geometry.meters_per_pixel)
    lidar = carla_geometry.lidar_to_birdeye(
        points, self._geometry, lidar_range=self._lidar_range, lidar_height=_LIDAR_HEIGHT,
        exclude_half_extent=(vehicle.LENGTH / 2.0, vehicle.WIDTH / 2.0))

    others = [v for v in sim.road.vehicles if v is not vehicle
              and np.linalg.norm(np.asarray(v.position) - ego_xy) <= self._view_radius]
    birdeye = carla_geometry.render_semantic_birdeye(
        self._geometry, ego_xy, ego_yaw_deg,
        road_polygons=carla_geometry.cull_polygons(self._road_quads, ego_xy, self._view_radius),
        route_polygons=carla_geometry.cull_polygons(self._route_quads, ego_xy,
                                                    self._view_radius),
        vehicle_polygons=[vehicle_box(v) for v in others],
        ego_polygon=vehicle_box(vehicle))

    lateral, heading_error = self._offset_and_heading_error(vehicle)
    front = carla_route.front_vehicle_distance(
        ego_xy, ego_yaw_deg, [v.position for v in sim.road.vehicles if v is not vehicle])
    state = carla_route.state_vector(lateral, heading_error, vehicle.speed, front)
    if self._routed:
      arc = self._projection.arc_length
      route_input = carla_route.route_vector(self._route.command(arc),
                                             self._route.points_ahead(arc), ego_xy, ego_yaw_deg)
    else:
      route_input = self._lane_route_input(vehicle, ego_xy, ego_yaw_deg)
    return {'camera': camera, 'lidar': lidar, 'birdeye': birdeye, 'state': state,
            'route': route_input}

  def _lane_route_input(self, vehicle, ego_xy, ego_yaw_deg):
    """CARLA's route input without a planned route: the ego's lane ahead, no junctions."""
    longitudinal, _ = vehicle.lane.local_coordinates(vehicle.position)
    network = self._sim.road.network
    lane_index, lane = vehicle.lane_index, vehicle.lane
    lane_start = 0.0  # arc length, from the ego's lane's start, where `lane` starts
    points = []
    for k in range(1, carla_route.ROUTE_POINTS + 1):
      target = longitudinal + k * carla_route.ROUTE_POINT_SPACING_M
      while target - lane_start > lane.length:  # past this lane's end: the lane after it
        lane_start += lane.length
        lane_index = network.next_lane(lane_index, position=lane.position(lane.length, 0.0))
        lane = network.get_lane(lane_index)
      points.append(lane.position(target - lane_start, 0.0))
    return carla_route.route_vector('follow_lane', points, ego_xy, ego_yaw_deg)


def check_destinations(destinations):
  """`destinations` must be a non-empty list of DESTINATIONS."""
  if (isinstance(destinations, str) or not destinations
      or any(d not in DESTINATIONS for d in destinations)):
    raise HighwayEnvError(
        f'load_highway.destinations={destinations!r}: a non-empty list of the turns a '
        f'routed scenario draws its destination from, each one of {DESTINATIONS}, e.g. '
        "load_highway.destinations = ['left', 'right'].")


# What a scenario_mix entry may set besides its scenario: load_highway's own settings.
_MIX_ENTRY_KEYS = ('label', 'weight')
_MIX_HINT = ("e.g. load_highway.scenario_mix = ['racetrack', {'scenario': 'intersection', "
             "'destinations': ['left', 'right'], 'weight': 2.0}]")


def mix_entries(scenario_mix):
  """load_highway.scenario_mix -> [dict(scenario=, label=, weight=, **settings)], checked.

  An entry is a scenario name or a dict with 'scenario' and any of load_highway's
  settings (its 'config' replaces the shared one), a 'label' (default: the
  scenario) and a 'weight' (default 1: how often it is drawn, relative to the others).
  """
  if isinstance(scenario_mix, str) or not isinstance(scenario_mix, (list, tuple)) \
      or not scenario_mix:
    raise HighwayEnvError(f'load_highway.scenario_mix={scenario_mix!r}: a non-empty list of '
                          f'scenarios, {_MIX_HINT}.')
  settings = set(_LOADER_SETTINGS)
  entries = []
  for entry in scenario_mix:
    entry = {'scenario': entry} if isinstance(entry, str) else entry
    if not isinstance(entry, dict) or 'scenario' not in entry:
      raise HighwayEnvError(f'load_highway.scenario_mix entry {entry!r} names no scenario: '
                            f'{_MIX_HINT}.')
    entry = dict(entry)
    unknown = set(entry) - settings - set(_MIX_ENTRY_KEYS) - {'scenario'}
    if unknown:
      raise HighwayEnvError(
          f'load_highway.scenario_mix entry {entry!r}: unknown key(s) {sorted(unknown)}; an '
          f'entry takes scenario, label, weight and load_highway\'s settings '
          f'({", ".join(sorted(settings))}).')
    try:
      scenario_id(entry['scenario'])
    except HighwayEnvError as error:
      raise HighwayEnvError(f'load_highway.scenario_mix entry {entry!r}: {error}') from None
    if 'destinations' in entry:
      check_destinations(entry['destinations'])
    weight = entry.setdefault('weight', 1.0)
    if not isinstance(weight, (int, float)) or weight <= 0:
      raise HighwayEnvError(f'load_highway.scenario_mix entry {entry!r}: weight must be a '
                            'number > 0.')
    entry.setdefault('label', entry['scenario'])
    entries.append(entry)
  labels = [e['label'] for e in entries]
  if len(set(labels)) != len(labels):
    raise HighwayEnvError(f'load_highway.scenario_mix labels {labels} repeat: give entries of '
                          "the same scenario a 'label' each.")
  return entries


@gin.configurable
def load_highway(scenario='racetrack', seed=None, image_size=64, episode_seconds=40.0,
                 target_speed=10.0, max_speed=20.0, render_pixels=128, scaling=2.5,
                 meters_per_pixel=0.5, lidar_range=32.0, lidar_cells=180, config=None,
                 reward_shape='lane_speed', speed_weight=1.0, lane_weight=0.5, step_cost=0.1,
                 crash_penalty=20.0, steer_limit=1.0, brake_limit=1.0, heading_up=True,
                 destinations=DESTINATIONS, off_route_m=highway_routes.DEFAULT_OFF_ROUTE_M,
                 command_distance=20.0, scenario_mix=None):
  """A highway-env driving scenario with CarlaEnv's observation layout (module doc).

  Args:
    scenario: one of SCENARIOS ('racetrack', 'racetrack-oval', 'racetrack-large',
      'highway-fast', 'highway', 'intersection', 'roundabout', 'merge').
    seed: seeds highway-env's first reset and the destination draws (None: random).
    image_size: side of every image key (the model's decoders need 64).
    episode_seconds: time limit (simulated seconds); reaching it truncates.
    target_speed: m/s; the scenario's reward is multiplied by
      clip(forward speed / target_speed, 0, 1). None: highway-env's reward as is.
    max_speed: the ego's speed is kept in [0, max_speed] m/s.
    render_pixels, scaling: side (px) and zoom (px per m) of highway-env's
      rendering before it is resized to the camera image (128 px at 2.5 px/m
      shows 51 m around the ego).
    meters_per_pixel: lidar and bird's-eye scale (CarlaEnv's 0.5: 32 m x 32 m).
    lidar_range, lidar_cells: highway-env LidarObservation range (m) and sectors.
    config: extra highway-env config entries, applied last (e.g.
      {'other_vehicles': 3} on the racetrack, {'vehicles_count': 30} on highways,
      {'initial_vehicle_count': 2, 'spawn_probability': 0.0} or {'ego_arm': 1}
      at the intersection).
    reward_shape, speed_weight, lane_weight, step_cost, crash_penalty: the
      reward (module doc): 'lane_speed' (original) or 'track_speed' (no safe stop).
    steer_limit, brake_limit: fractions of highway-env's steering (+-45 deg)
      and braking (-5 m/s^2) ranges that the action's [-1, 1] spans.
    heading_up: turn the camera frame so the ego's heading points up.
    destinations: the turns ('left', 'right', 'straight') a routed scenario
      (intersection, roundabout) draws each episode's destination from.
    off_route_m: on a routed scenario, farther than this from the planned
      route and on none of its roads ends the episode as 'off_route' (terminal).
    command_distance: the route input names the junction's turn from this many
      metres before it (CARLA's CarlaRoute.command_distance) until the ego leaves it.
    scenario_mix: None, or a list of scenarios to draw each episode from
      (`mix_entries`: names or dicts of a scenario and settings that replace
      the ones above for it): one environment that drives them all
      (scenario_mix.py); `scenario` is then unused.
  """
  settings = dict(image_size=image_size, episode_seconds=episode_seconds,
                  target_speed=target_speed, max_speed=max_speed, render_pixels=render_pixels,
                  scaling=scaling, meters_per_pixel=meters_per_pixel, lidar_range=lidar_range,
                  lidar_cells=lidar_cells, config=config, reward_shape=reward_shape,
                  speed_weight=speed_weight, lane_weight=lane_weight, step_cost=step_cost,
                  crash_penalty=crash_penalty, steer_limit=steer_limit,
                  brake_limit=brake_limit, heading_up=heading_up, destinations=destinations,
                  off_route_m=off_route_m, command_distance=command_distance)
  if scenario_mix is None:
    return HighwayDrivingEnv(scenario=scenario, seed=seed, **settings)
  entries = mix_entries(scenario_mix)
  envs = [HighwayDrivingEnv(**dict(settings, **{k: v for k, v in entry.items()
                                                if k not in _MIX_ENTRY_KEYS}))
          for entry in entries]
  return scenario_mix_lib.ScenarioMixEnv(envs, [e['label'] for e in entries],
                                         [e['weight'] for e in entries], seed=seed)


# load_highway's settings that a scenario_mix entry may set.
_LOADER_SETTINGS = tuple(name for name in inspect.signature(load_highway).parameters
                         if name not in ('seed', 'scenario_mix', 'scenario'))

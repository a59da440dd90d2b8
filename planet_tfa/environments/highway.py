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
           (channel 0: lane surfaces at ROAD_VALUE; highway-env has no planned
           route, so ROUTE_VALUE never appears), the other vehicles' boxes
           (channel 1) and the ego's box (channel 2); same geometry as CARLA
           (0.5 m/px, 24 m ahead, 8 m behind). Decode-only target.
  state:   carla.specs.STATE_NAMES: [lateral offset from the centre of the ego's
           current lane (m, + right), heading error to that lane (rad), speed
           (m/s), distance to the nearest vehicle centre ahead within 2 m of
           the ego's axis (m, capped at 50, `carla.route.front_vehicle_distance`)].
           CARLA measures offset and heading against its planned route; here
           the ego's current lane is the route.
  route:   carla.route.ROUTE_NAMES, as CARLA's: the command (always
           follow_lane: highway-env's roads have no junctions to choose at)
           and the ego lane's centre 5, 10, 15 and 20 m ahead (following the
           lanes that continue it) in the ego frame (m forward, m right).

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
`get_info()` says why (`reason`: collision / off_road / terminal / time_limit)
and how far the ego drove (`distance_m`, its odometer over the episode).

Headless rendering: highway-env draws with pygame; with `SDL_VIDEODRIVER=dummy`
pygame silently renders all-black frames, so the loader drops that setting
(with a warning) and renders offscreen, and a black first frame is an error.
"""
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
}

REWARD_SHAPES = ('lane_speed', 'track_speed')
COLLISION = carla_reward.COLLISION
OFF_ROAD = carla_reward.OFF_ROAD
TIME_LIMIT = carla_reward.TIME_LIMIT
OTHER_TERMINAL = 'terminal'  # a scenario's own end (e.g. reaching an exit)

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
               crash_penalty=20.0, steer_limit=1.0, brake_limit=1.0, heading_up=True):
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
    self._seed = seed
    self._road_quads = np.zeros((0, 4, 2))
    self._info = {}
    self._odometer = 0.0
    self._last_position = None

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
    """reason (None until the episode ends), distance_m, speed_mps, crashed, on_road."""
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
    lidar, _ = self._env.reset(seed=self._seed)
    self._seed = None
    road = self._sim.road
    lanes = [lane for by_to in road.network.graph.values() for lane_list in by_to.values()
             for lane in lane_list]
    self._road_quads = lane_quads(lanes)  # the road is static within an episode
    self._odometer = 0.0
    self._last_position = np.array(self._sim.vehicle.position, np.float64)
    observation = self._observe(lidar)
    if observation['camera'].max() == 0:
      raise HighwayEnvError(
          'highway-env rendered an all-black camera frame: pygame has no working '
          'video driver (SDL_VIDEODRIVER=%r). Unset SDL_VIDEODRIVER before pygame '
          'is first used; highway-env renders offscreen without a display.'
          % os.environ.get('SDL_VIDEODRIVER'))
    self._info = self._make_info(None)
    return ts.restart(observation)

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
    forward_speed = vehicle.speed * math.cos(self._heading_error(vehicle))
    reason = end_reason(terminated, truncated, bool(info.get('crashed', vehicle.crashed)),
                        bool(vehicle.on_road))
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
    lane = vehicle.lane
    _, lateral = lane.local_coordinates(vehicle.position)
    half_width = lane.width_at(0.0) / 2.0
    centring = 1.0 - min(abs(lateral) / half_width, 1.0)
    moving = float(np.clip(forward_speed / target, 0.0, 1.0))
    reward = speed_weight * speed_term + lane_weight * centring * moving - step_cost
    if terminated:
      reward -= crash_penalty
    return reward

  def _make_info(self, reason):
    vehicle = self._sim.vehicle
    return {'reason': reason, 'distance_m': self._odometer, 'speed_mps': float(vehicle.speed),
            'crashed': bool(vehicle.crashed), 'on_road': bool(vehicle.on_road)}

  def _heading_error(self, vehicle):
    lane = vehicle.lane
    longitudinal, _ = lane.local_coordinates(vehicle.position)
    return float(wrap_angle(vehicle.heading - lane.heading_at(longitudinal)))

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
        vehicle_polygons=[vehicle_box(v) for v in others],
        ego_polygon=vehicle_box(vehicle))

    lane = vehicle.lane
    longitudinal, lateral = lane.local_coordinates(vehicle.position)
    heading_error = wrap_angle(vehicle.heading - lane.heading_at(longitudinal))
    front = carla_route.front_vehicle_distance(
        ego_xy, ego_yaw_deg, [v.position for v in sim.road.vehicles if v is not vehicle])
    state = carla_route.state_vector(lateral, heading_error, vehicle.speed, front)
    return {'camera': camera, 'lidar': lidar, 'birdeye': birdeye, 'state': state,
            'route': self._route_input(vehicle, longitudinal, ego_xy, ego_yaw_deg)}

  def _route_input(self, vehicle, longitudinal, ego_xy, ego_yaw_deg):
    """CARLA's route input: the ego's lane ahead is the route and it has no junctions."""
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


@gin.configurable
def load_highway(scenario='racetrack', seed=None, image_size=64, episode_seconds=40.0,
                 target_speed=10.0, max_speed=20.0, render_pixels=128, scaling=2.5,
                 meters_per_pixel=0.5, lidar_range=32.0, lidar_cells=180, config=None,
                 reward_shape='lane_speed', speed_weight=1.0, lane_weight=0.5, step_cost=0.1,
                 crash_penalty=20.0, steer_limit=1.0, brake_limit=1.0, heading_up=True):
  """A highway-env driving scenario with CarlaEnv's observation layout (module doc).

  Args:
    scenario: one of SCENARIOS ('racetrack', 'racetrack-oval', 'racetrack-large',
      'highway-fast', 'highway').
    seed: seeds highway-env's first reset (None: random).
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
      {'other_vehicles': 3} on the racetrack, {'vehicles_count': 30} on highways).
    reward_shape, speed_weight, lane_weight, step_cost, crash_penalty: the
      reward (module doc): 'lane_speed' (original) or 'track_speed' (no safe stop).
    steer_limit, brake_limit: fractions of highway-env's steering (+-45 deg)
      and braking (-5 m/s^2) ranges that the action's [-1, 1] spans.
    heading_up: turn the camera frame so the ego's heading points up.
  """
  return HighwayDrivingEnv(scenario=scenario, seed=seed, image_size=image_size,
                           episode_seconds=episode_seconds, target_speed=target_speed,
                           max_speed=max_speed, render_pixels=render_pixels, scaling=scaling,
                           meters_per_pixel=meters_per_pixel, lidar_range=lidar_range,
                           lidar_cells=lidar_cells, config=config, reward_shape=reward_shape,
                           speed_weight=speed_weight, lane_weight=lane_weight,
                           step_cost=step_cost, crash_penalty=crash_penalty,
                           steer_limit=steer_limit, brake_limit=brake_limit,
                           heading_up=heading_up)

"""The settings CarlaEnv takes, in the groups a driving engineer tunes together.

Each group is a frozen dataclass and a gin configurable under a short name:

  CarlaServer   where the server is, its ports, time-outs and reconnecting
  CarlaWorld    the scenario: town, weather, traffic, traffic lights, ego vehicle, tick length
  CarlaSensors  camera and its exposure, bird's-eye scale, the state's front-distance cap,
                sensor delivery
  CarlaLidar    the lidar blueprint and how its sweep becomes an image
  CarlaRoute    how the route ahead is planned and re-planned
  CarlaReward   reward weights
  CarlaEpisode  agent steps, the settling after a spawn, and what ends an episode
  CarlaAutopilot how the Traffic Manager drives the ego when it is the expert

e.g. `CarlaServer.port = 2000`, `CarlaLidar.range = 32.0`, `CarlaEpisode.max_steps = 1000`.
`seed` and `instance` stay on CarlaEnv: the program passes them per env. The
flat `CarlaEnv.<name>` bindings of older versions are listed in
planet_tfa/renamed_bindings.py.
"""
import dataclasses

import gin

from planet_tfa.environments.carla import reward


def _coerce(settings, **types):
  """Casts fields in place, as the flat constructor did, so gin's ints and lists behave."""
  for name, cast in types.items():
    object.__setattr__(settings, name, cast(getattr(settings, name)))


@gin.configurable('CarlaServer')
@dataclasses.dataclass(frozen=True)
class ServerSettings:
  """The simulator endpoint (instance K of a host adds K * port_stride to both ports)."""
  host: str = 'localhost'
  port: int = 2000
  tm_port: int = 8000  # Traffic Manager: one per client process
  port_stride: int = 10  # a server listens on 3 consecutive ports
  timeout_s: float = 10.0  # no answer within this -> CarlaConnectionError
  load_world_timeout_s: float = 120.0  # loading a town takes far longer than an RPC
  check_version: bool = True
  reconnect_attempts: int = 6
  reconnect_initial_delay_s: float = 1.0
  reconnect_max_delay_s: float = 30.0
  reconnect_deadline_s: float = 180.0

  def __post_init__(self):
    _coerce(self, timeout_s=float, load_world_timeout_s=float)

  def reconnect_kwargs(self):
    """Arguments of client.retry_with_backoff."""
    return dict(max_attempts=self.reconnect_attempts,
                initial_delay_s=self.reconnect_initial_delay_s,
                max_delay_s=self.reconnect_max_delay_s,
                deadline_s=self.reconnect_deadline_s)


@gin.configurable('CarlaWorld')
@dataclasses.dataclass(frozen=True)
class WorldSettings:
  """The scenario: town, weather, traffic and the ego vehicle, ticked synchronously."""
  town: str = 'Town03'
  weather: str = 'ClearNoon'  # a carla.WeatherParameters preset
  num_vehicles: int = 20
  ego_blueprint: str = 'vehicle.tesla.model3'
  spawn_retries: int = 20
  fixed_delta_seconds: float = 0.05  # one tick: 20 Hz
  no_rendering_mode: bool = False  # the camera needs rendering
  # Every traffic light green and frozen: the camera at 64 px barely shows a
  # light's colour, so a red one would be a penalty the policy cannot see
  # coming. False: the lights cycle and their state is drawn in the bird's-eye
  # mask (geometry.TRAFFIC_LIGHT_VALUES).
  freeze_traffic_lights: bool = True

  def __post_init__(self):
    _coerce(self, num_vehicles=int, fixed_delta_seconds=float, no_rendering_mode=bool,
            freeze_traffic_lights=bool)


@gin.configurable('CarlaSensors')
@dataclasses.dataclass(frozen=True)
class SensorSettings:
  """Camera and bird's-eye images, the state's front-distance cap, sensor data delivery."""
  image_size: int = 64  # every image observation is image_size x image_size
  camera_fov: float = 90.0
  # CARLA's default auto-exposure ('histogram') adapts over the first frames of
  # every new camera, i.e. of every episode; a manual exposure looks the same
  # from the first frame. 'histogram' restores CARLA's default.
  camera_exposure_mode: str = 'manual'
  camera_shutter_speed: float = 200.0  # 1/s; these three only with 'manual' (CARLA's defaults)
  camera_iso: float = 100.0
  camera_fstop: float = 1.4
  meters_per_pixel: float = 0.5  # 32 m x 32 m around the ego at 64 px
  ego_position: tuple = (0.75, 0.5)  # (row, col) fractions: 24 m ahead, 8 m behind
  front_max_distance: float = 50.0
  timeout_s: float = 10.0  # no data for a ticked frame within this -> SensorTimeout
  buffer_size: int = 4  # newest items kept per sensor

  def __post_init__(self):
    _coerce(self, ego_position=tuple, buffer_size=int)

  def camera_attributes(self):
    """Attributes of sensor.camera.rgb, as strings."""
    attributes = dict(image_size_x=self.image_size, image_size_y=self.image_size,
                      fov=self.camera_fov, exposure_mode=self.camera_exposure_mode)
    if self.camera_exposure_mode == 'manual':
      attributes.update(shutter_speed=self.camera_shutter_speed, iso=self.camera_iso,
                        fstop=self.camera_fstop)
    return {key: str(value) for key, value in attributes.items()}


@gin.configurable('CarlaLidar')
@dataclasses.dataclass(frozen=True)
class LidarSettings:
  """The roof lidar's blueprint, and which points its bird's-eye image keeps."""
  range: float = 32.0
  height: float = 2.4  # metres above the vehicle's origin
  channels: int = 32
  points_per_second: int = 100000
  upper_fov: float = 10.0
  lower_fov: float = -30.0
  # CARLA's defaults drop ~45% of the points at random; these ask for a full,
  # deterministic sweep.
  dropoff_general_rate: float = 0.0
  dropoff_intensity_limit: float = 1.0
  dropoff_zero_intensity: float = 0.0
  noise_stddev: float = 0.0
  ground_tolerance: float = 0.4  # higher above the ground is an obstacle
  max_obstacle_height: float = 4.0

  def blueprint_attributes(self, fixed_delta_seconds):
    """Attributes of sensor.lidar.ray_cast, as strings; one full turn per tick."""
    attributes = dict(
        dropoff_general_rate=self.dropoff_general_rate,
        dropoff_intensity_limit=self.dropoff_intensity_limit,
        dropoff_zero_intensity=self.dropoff_zero_intensity,
        noise_stddev=self.noise_stddev,
        range=self.range, channels=self.channels,
        points_per_second=self.points_per_second,
        rotation_frequency=1.0 / fixed_delta_seconds,
        upper_fov=self.upper_fov, lower_fov=self.lower_fov)
    return {key: str(value) for key, value in attributes.items()}


@gin.configurable('CarlaRoute')
@dataclasses.dataclass(frozen=True)
class RouteSettings:
  """The route ahead: waypoint spacing, how far it is planned, when it is re-planned."""
  spacing: float = 2.0  # metres between route waypoints
  lookahead: float = 100.0  # metres planned ahead of the ego
  replan_distance: float = 1.75  # this far off the plan on another lane: follow that lane
  road_spacing: float = 2.0  # metres between the map's lane quads (bird's-eye road)
  command_distance: float = 20.0  # a junction this close ahead sets the route's command

  def __post_init__(self):
    _coerce(self, replan_distance=float, command_distance=float)


@gin.configurable('CarlaReward')
@dataclasses.dataclass(frozen=True)
class RewardSettings:
  """Weights of reward.reward_terms (same names)."""
  target_speed: float = 8.0  # m/s
  lane_threshold: float = 1.0  # metres off the route centre before lane_departure costs
  collision_penalty: float = 50.0
  lane_departure_weight: float = 1.0
  jerk_weight: float = 0.5
  overspeed_weight: float = 1.0
  # No safe stop: a cost every step, and a penalty when the episode ends
  # 'stuck' (with 'stuck' in CarlaEpisode.terminal_reasons, as carla_sac.gin
  # sets, a terminal). 0 keeps the original reward.
  step_cost: float = 0.0
  stuck_penalty: float = 0.0
  # Paid on a step where the ego left the planned route for another lane (the
  # other branch at a junction, or a lane change): the route input shows the
  # planned branch, so a run can make following it pay. 0: the route simply
  # re-plans onto the lane taken.
  replan_penalty: float = 0.0


@gin.configurable('CarlaEpisode')
@dataclasses.dataclass(frozen=True)
class EpisodeSettings:
  """What one agent step is, how an episode starts, and what ends it."""
  action_repeat: int = 2  # ticks per agent step
  # Ticks between spawning and the first observation (0.5 s at 20 Hz): spawn
  # points are above the ground, so the ego drops, lands and settles, and the
  # sensors start up, before the agent sees or is scored on anything.
  settle_ticks: int = 10
  max_steps: int = 1000  # agent steps before a time-limit truncation
  off_road_distance: float = 3.0  # metres off the route centre
  stuck_speed: float = 0.5  # m/s
  stuck_steps: int = 100  # steps slower than stuck_speed before a 'stuck' truncation
  # A car (centre to centre) or a red light's stop line this close ahead: the ego may wait
  # there; those steps count neither towards 'stuck' nor pay the step cost. 0: never.
  wait_distance: float = 12.0  # m: a car or red light this close ahead: waiting, not stuck
  terminal_reasons: tuple = reward.TERMINAL_REASONS  # the others are truncations
  # Fractions of CARLA's steering and brake ranges that the action's [-1, 1]
  # spans (gym-carla: 0.3 and 0.375); 1.0 keeps the full ranges.
  steer_limit: float = 1.0
  brake_limit: float = 1.0
  # The ego's physics at full controls, for controllers in physical units (specs.ControlRanges).
  # Approximations for vehicle.tesla.model3 (CARLA's front-wheel max_steer_angle is 70 degrees);
  # not measured here: no CARLA server runs on these machines.
  max_steer_deg: float = 70.0  # road-wheel angle at steer 1.0
  full_throttle_mps2: float = 4.0  # acceleration at throttle 1.0
  full_brake_mps2: float = 8.0  # deceleration at brake 1.0

  def __post_init__(self):
    _coerce(self, action_repeat=int, settle_ticks=int, terminal_reasons=tuple,
            steer_limit=float, brake_limit=float, wait_distance=float, max_steer_deg=float,
            full_throttle_mps2=float, full_brake_mps2=float)
    for name in ('steer_limit', 'brake_limit'):
      if not 0.0 < getattr(self, name) <= 1.0:
        raise ValueError(f'CarlaEpisode.{name}={getattr(self, name)!r}: a fraction of '
                         "CARLA's range in (0, 1].")


@gin.configurable('CarlaAutopilot')
@dataclasses.dataclass(frozen=True)
class AutopilotSettings:
  """How CARLA's Traffic Manager drives the ego when it is the expert (train_eval.expert='autopilot').

  The recorded action is the control the Traffic Manager applied
  (`ego.get_control()`, mapped back into the action range).
  """
  speed: float = None  # m/s; None: the Traffic Manager's own (the road's speed limit)
  follow_route: bool = True  # drive the planned route (TrafficManager.set_path), branches included
  lane_changes: bool = False  # TM's own lane changes leave the plan
  ignore_lights: bool = False  # with lights frozen green (CarlaWorld) this changes nothing
  # DART-style exploration: per step, the chance that the Traffic Manager hands the ego over for
  # `perturb_steps` steps to its last action plus an offset ~ N(0, perturb_std) (action units),
  # then takes back; those steps are recorded as the actions applied. 0: the TM drives throughout.
  perturb_probability: float = 0.0  # per step: the chance of a hand-over (0: never)
  perturb_steps: int = 5  # agent steps each hand-over lasts
  perturb_std: float = 0.3  # std of the offset added to the TM's last action (action units)

  def __post_init__(self):
    _coerce(self, perturb_probability=float, perturb_steps=int, perturb_std=float)
    if not 0.0 <= self.perturb_probability <= 1.0:
      raise ValueError(f'CarlaAutopilot.perturb_probability={self.perturb_probability!r}: '
                       'a probability per step in [0, 1] (0: no perturbation).')
    if self.perturb_steps < 1 or self.perturb_std < 0:
      raise ValueError(f'CarlaAutopilot.perturb_steps={self.perturb_steps!r} and '
                       f'perturb_std={self.perturb_std!r}: steps >= 1 and a std >= 0.')
    if self.speed is not None:
      _coerce(self, speed=float)
      if self.speed <= 0:
        raise ValueError(f'CarlaAutopilot.speed={self.speed!r}: m/s > 0, or None for the '
                         "Traffic Manager's own speed.")

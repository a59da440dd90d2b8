"""A test double for the CARLA 0.9.16 *server*, behind the client's Python API.

No CARLA server runs on these machines, so the tests put this module in place
of the `carla` package (`sys.modules['carla']`, or `tests/carla_double_path`
on PYTHONPATH for subprocesses). Everything the adapter calls keeps the real
client's names, parameters and semantics; `tests/test_carla_double_contract.py`
checks each public name and signature here against the installed `carla` wheel.
What a server would do is simulated small:

- `world.tick()` advances one fixed step and returns the new frame; sensor data
  of that frame reach `listen` callbacks on a separate thread, as in CARLA, so
  they may arrive after `tick()` returns;
- synchronous settings, the fixed delta and the Traffic Manager's synchronous
  mode take effect (the world records which clients ticked it);
- vehicles spawned above the ground (spawn points are 0.5 m up) drop and land
  before their wheels grip; then they move under the controls applied
  (kinematic bicycle model); traffic put on autopilot by a batch
  `SetAutopilot` glides along its lane at 6 m/s, while a vehicle given
  `Vehicle.set_autopilot` (the ego under the Traffic Manager's expert) is
  driven by controls, as CARLA's TM drives: pure pursuit on the path of
  `TrafficManager.set_path` (else its lane, straight on at forks) at the
  `set_desired_speed`, and `get_control()` reports the control it applied; oriented
  boxes that overlap fire the collision sensors; `Map.get_waypoint(
  project_to_road=False)` finds no lane off the road;
- sensor streams reach the client in no fixed order across sensors: a test can
  hold one sensor type's data back and release it later (`hold`, `release`);
- a lidar with CARLA's default drop-off loses ~45 % of its points at random;
  an RGB camera left at CARLA's default auto-exposure ('histogram') adapts
  over its first frames, a manual exposure is the same from the first frame;
- one traffic light at the fork cycles green, yellow, red unless frozen; its
  stop line lies on the approach lane;
- a server can hang (RPCs time out, the world stays), die and restart (a new
  world without actors), each for good or for a while, or never have been
  started (connection time-out).

Server-side controls that no client has (`start_server`, `Simulator.hang`, ...)
are listed in DOUBLE_ONLY and exempt from the contract test. Failing calls
raise at once instead of after the client time-out; tests that time the real
time-out use the real client against a closed port.
"""
import fnmatch
import itertools
import math
import queue
import threading
import time
import types

import numpy as np

VERSION = '0.9.16'
# Names a test uses to drive the server; not part of CARLA's client API.
DOUBLE_ONLY = frozenset({
    'VERSION', 'DOUBLE_ONLY', 'Simulator', 'start_server', 'server_at', 'stop_all',
    'TOWN', 'LANE_WIDTH', 'SPAWN_POINTS', 'GRAVITY', 'LIGHT_CYCLE', 'np', 'math', 'fnmatch',
    'itertools', 'queue', 'threading', 'time', 'types'})

_SERVERS = {}          # (host, port) -> Simulator
_TRAFFIC_MANAGERS = {}  # (host, tm_port) -> Simulator owning that TM
_LOCK = threading.RLock()
_LOCAL_HOSTS = ('localhost', '127.0.0.1')


def _host_key(host):
  return 'localhost' if host in _LOCAL_HOSTS else host


# ------------------------------------------------------------ value types ---


class Vector3D:

  def __init__(self, x=0.0, y=0.0, z=0.0):
    self.x, self.y, self.z = float(x), float(y), float(z)

  def length(self):
    return math.sqrt(self.x**2 + self.y**2 + self.z**2)

  def __repr__(self):
    return '%s(x=%.3f, y=%.3f, z=%.3f)' % (type(self).__name__, self.x, self.y, self.z)


class Location(Vector3D):

  def distance(self, location):
    return math.sqrt((self.x - location.x)**2 + (self.y - location.y)**2
                     + (self.z - location.z)**2)


class Rotation:

  def __init__(self, pitch=0.0, yaw=0.0, roll=0.0):
    self.pitch, self.yaw, self.roll = float(pitch), float(yaw), float(roll)

  def get_forward_vector(self):
    yaw = math.radians(self.yaw)
    return Vector3D(math.cos(yaw), math.sin(yaw), 0.0)


class Transform:

  def __init__(self, location=None, rotation=None):
    self.location = Location() if location is None else Location(
        location.x, location.y, location.z)
    self.rotation = Rotation() if rotation is None else Rotation(
        rotation.pitch, rotation.yaw, rotation.roll)

  def transform(self, in_point):
    """Local -> world (yaw only: the double's world is flat)."""
    yaw = math.radians(self.rotation.yaw)
    x = self.location.x + in_point.x * math.cos(yaw) - in_point.y * math.sin(yaw)
    y = self.location.y + in_point.x * math.sin(yaw) + in_point.y * math.cos(yaw)
    return Vector3D(x, y, self.location.z + in_point.z)

  def get_forward_vector(self):
    return self.rotation.get_forward_vector()


class BoundingBox:

  def __init__(self, location=None, extent=None):
    self.location = location if location is not None else Location()
    self.extent = extent if extent is not None else Vector3D()


class VehicleControl:

  def __init__(self, throttle=0.0, steer=0.0, brake=0.0, hand_brake=False, reverse=False):
    self.throttle, self.steer, self.brake = float(throttle), float(steer), float(brake)
    self.hand_brake, self.reverse = bool(hand_brake), bool(reverse)


class WorldSettings:
  """fixed_delta_seconds None (or 0) means a variable time step, as in CARLA."""

  def __init__(self, synchronous_mode=False, no_rendering_mode=False,
               fixed_delta_seconds=0.0):
    self.synchronous_mode = bool(synchronous_mode)
    self.no_rendering_mode = bool(no_rendering_mode)
    self.fixed_delta_seconds = fixed_delta_seconds or None

  def _copy(self):
    return WorldSettings(self.synchronous_mode, self.no_rendering_mode,
                         self.fixed_delta_seconds)


class LaneType:
  NONE = 1
  Driving = 2
  Sidewalk = 32
  Any = -2


class TrafficLightState:
  Red = 0
  Yellow = 1
  Green = 2
  Off = 3
  Unknown = 4


class WeatherParameters:

  def __init__(self, cloudiness=0.0, precipitation=0.0, precipitation_deposits=0.0,
               wind_intensity=0.0, sun_azimuth_angle=0.0, sun_altitude_angle=0.0):
    self.cloudiness, self.precipitation = float(cloudiness), float(precipitation)
    self.precipitation_deposits, self.wind_intensity = precipitation_deposits, wind_intensity
    self.sun_azimuth_angle, self.sun_altitude_angle = sun_azimuth_angle, sun_altitude_angle


WeatherParameters.ClearNoon = WeatherParameters(5.0, sun_altitude_angle=45.0)
WeatherParameters.WetCloudySunset = WeatherParameters(60.0, sun_altitude_angle=15.0)


# ------------------------------------------------------ sensor data types ---


class SensorData:

  def __init__(self, frame, timestamp, transform):
    self.frame, self.timestamp, self.transform = frame, timestamp, transform


class Image(SensorData):

  def __init__(self, frame, timestamp, transform, width, height, raw_data):
    super().__init__(frame, timestamp, transform)
    self.width, self.height, self.raw_data = width, height, raw_data


class LidarMeasurement(SensorData):

  def __init__(self, frame, timestamp, transform, raw_data, channels):
    super().__init__(frame, timestamp, transform)
    self.raw_data, self.channels = raw_data, channels


class CollisionEvent(SensorData):

  def __init__(self, frame, timestamp, transform, actor, other_actor):
    super().__init__(frame, timestamp, transform)
    self.actor, self.other_actor = actor, other_actor


# -------------------------------------------------------------------- map ---

TOWN = 'Carla/Maps/Town03'
LANE_WIDTH = 3.5


def _polyline(points, spacing=0.5):
  """Dense [N, 2] points along the corners `points`, ~spacing apart."""
  out = [np.asarray(points[0], np.float64)]
  for start, end in zip(points[:-1], points[1:]):
    start, end = np.asarray(start, np.float64), np.asarray(end, np.float64)
    count = max(int(math.ceil(np.linalg.norm(end - start) / spacing)), 1)
    for k in range(1, count + 1):
      out.append(start + (end - start) * k / count)
  return np.array(out)


class _Lane:
  """A driving lane: a centre polyline, its arc length and its successors."""

  def __init__(self, road_id, lane_id, corners):
    self.road_id, self.lane_id = road_id, lane_id
    self.xy = _polyline(corners)
    steps = np.linalg.norm(np.diff(self.xy, axis=0), axis=-1)
    self.arc = np.concatenate([[0.0], np.cumsum(steps)])
    self.length = float(self.arc[-1])
    direction = np.diff(self.xy, axis=0)
    self.yaw = np.degrees(np.arctan2(direction[:, 1], direction[:, 0]))
    self.successors = []
    self.predecessors = []

  def pose(self, s):
    s = float(np.clip(s, 0.0, self.length))
    index = int(np.clip(np.searchsorted(self.arc, s, side='right') - 1, 0, len(self.xy) - 2))
    fraction = (s - self.arc[index]) / max(self.arc[index + 1] - self.arc[index], 1e-9)
    xy = self.xy[index] + fraction * (self.xy[index + 1] - self.xy[index])
    return xy, float(self.yaw[index])


def _town_lanes():
  """A straight eastbound road that forks at x=100 into straight on and a right turn.

  CARLA's frame is left-handed: yaw 90 faces +y, which is to the right of an
  eastbound driver. Vehicles keep right, so eastbound lanes lie at +y. A short
  bay beside the approach (x = -50..-44, one lane to the right) ends with no
  successor: a dead end.
  """
  y = LANE_WIDTH / 2
  approach = _Lane(1, -1, [(-120.0, y), (100.0, y)])
  straight = _Lane(2, -1, [(100.0, y), (320.0, y)])
  radius = 12.0
  arc = [(100.0 + radius * math.sin(t), y + radius - radius * math.cos(t))
         for t in np.linspace(0.0, math.pi / 2, 13)]
  right_turn = _Lane(3, -1, arc + [(100.0 + radius, 220.0)])
  oncoming = _Lane(1, 1, [(320.0, -y), (-120.0, -y)])
  bay = _Lane(4, -2, [(-50.0, y + LANE_WIDTH), (-44.0, y + LANE_WIDTH)])
  approach.successors = [straight, right_turn]
  for lane in (straight, right_turn):
    lane.predecessors = [approach]
  return [approach, straight, right_turn, oncoming, bay]


SPAWN_POINTS = [(0, s) for s in (20.0, 60.0, 100.0, 140.0, 180.0)] + [
    (1, s) for s in (40.0, 90.0, 140.0)] + [(2, s) for s in (60.0, 110.0, 160.0)]


class Waypoint:

  def __init__(self, lane, s):
    self._lane, self.s = lane, float(s)
    xy, yaw = lane.pose(self.s)
    self.transform = Transform(Location(xy[0], xy[1], 0.0), Rotation(yaw=yaw))
    self.lane_width = LANE_WIDTH
    self.road_id, self.lane_id = lane.road_id, lane.lane_id
    self.lane_type = LaneType.Driving
    self.is_junction = any(abs(self.s - end) < 10.0 for end in (0.0, lane.length)) and (
        bool(lane.successors) or lane.road_id in (2, 3))

  def next(self, distance):
    """Waypoints `distance` ahead: one per branch when a junction lies within it."""
    target = self.s + float(distance)
    if target <= self._lane.length:
      return [Waypoint(self._lane, target)]
    rest = target - self._lane.length
    return [Waypoint(lane, min(rest, lane.length)) for lane in self._lane.successors]

  def previous(self, distance):
    """Waypoints `distance` behind: one per predecessor when the lane starts within it."""
    target = self.s - float(distance)
    if target >= 0.0:
      return [Waypoint(self._lane, target)]
    return [Waypoint(lane, max(lane.length + target, 0.0)) for lane in self._lane.predecessors]


class Map:

  def __init__(self, name=TOWN):
    self.name = name
    self._lanes = _town_lanes()
    self._points = np.concatenate([lane.xy for lane in self._lanes])
    self._owners = np.concatenate([[k] * len(lane.xy) for k, lane in enumerate(self._lanes)])
    self._arcs = np.concatenate([lane.arc for lane in self._lanes])

  def get_spawn_points(self):
    points = []
    for lane_index, s in SPAWN_POINTS:
      xy, yaw = self._lanes[lane_index].pose(s)
      points.append(Transform(Location(xy[0], xy[1], 0.5), Rotation(yaw=yaw)))
    return points

  def get_waypoint(self, location, project_to_road=True, lane_type=LaneType.Driving):
    del lane_type  # every lane of the double is a driving lane
    distance = np.hypot(self._points[:, 0] - location.x, self._points[:, 1] - location.y)
    nearest = int(np.argmin(distance))
    if not project_to_road and distance[nearest] > LANE_WIDTH / 2:
      return None
    return Waypoint(self._lanes[self._owners[nearest]], self._arcs[nearest])

  def generate_waypoints(self, distance):
    return [Waypoint(lane, s) for lane in self._lanes
            for s in np.arange(0.0, lane.length, float(distance))]


# ------------------------------------------------------------- blueprints ---


class ActorAttribute:

  def __init__(self, attribute_id, value):
    self.id, self._value = attribute_id, str(value)

  def as_str(self):
    return self._value

  def as_int(self):
    return int(self._value)

  def as_float(self):
    return float(self._value)

  def __str__(self):
    return self._value

  def __int__(self):
    return int(self._value)

  def __float__(self):
    return float(self._value)


_VEHICLE_EXTENTS = {'vehicle.tesla.model3': (2.4, 1.05, 0.75),
                    'vehicle.audi.a2': (1.85, 0.9, 0.78),
                    'vehicle.lincoln.mkz_2020': (2.45, 1.05, 0.75),
                    'vehicle.yamaha.yzf': (1.1, 0.45, 0.65)}
# CARLA's defaults for the attributes the adapter may set.
_SENSOR_ATTRIBUTES = {
    'sensor.camera.rgb': {'image_size_x': '800', 'image_size_y': '600', 'fov': '90.0',
                          'sensor_tick': '0.0', 'exposure_mode': 'histogram',
                          'shutter_speed': '200.0', 'iso': '100.0', 'fstop': '1.4'},
    'sensor.lidar.ray_cast': {
        'range': '10.0', 'channels': '32', 'points_per_second': '56000',
        'rotation_frequency': '10.0', 'upper_fov': '10.0', 'lower_fov': '-30.0',
        'horizontal_fov': '360.0', 'dropoff_general_rate': '0.45',
        'dropoff_intensity_limit': '0.8', 'dropoff_zero_intensity': '0.4',
        'noise_stddev': '0.0', 'atmosphere_attenuation_rate': '0.004', 'sensor_tick': '0.0'},
    'sensor.other.collision': {},
}


class ActorBlueprint:

  def __init__(self, blueprint_id, attributes):
    self.id = blueprint_id
    self.tags = blueprint_id.split('.')
    self._attributes = dict(attributes, role_name='')

  def has_attribute(self, arg2):
    return arg2 in self._attributes

  def get_attribute(self, arg2):
    if arg2 not in self._attributes:
      raise IndexError("blueprint '%s' has no attribute '%s'" % (self.id, arg2))
    return ActorAttribute(arg2, self._attributes[arg2])

  def set_attribute(self, arg2, arg3):
    if arg2 not in self._attributes:
      raise IndexError("blueprint '%s' has no attribute '%s'" % (self.id, arg2))
    self._attributes[arg2] = str(arg3)

  def _copy(self):
    copy = ActorBlueprint(self.id, {})
    copy._attributes = dict(self._attributes)
    return copy


class BlueprintLibrary:

  def __init__(self, blueprints=None):
    if blueprints is None:
      blueprints = [ActorBlueprint(i, {'number_of_wheels': '2' if 'yamaha' in i else '4'})
                    for i in _VEHICLE_EXTENTS]
      blueprints += [ActorBlueprint(i, a) for i, a in _SENSOR_ATTRIBUTES.items()]
    self._blueprints = blueprints

  def find(self, id):  # pylint: disable=redefined-builtin
    for blueprint in self._blueprints:
      if blueprint.id == id:
        return blueprint._copy()
    raise IndexError("no blueprint with id '%s'" % id)

  def filter(self, wildcard_pattern):
    return BlueprintLibrary([b._copy() for b in self._blueprints
                             if fnmatch.fnmatch(b.id, wildcard_pattern)])

  def __iter__(self):
    return iter(self._blueprints)

  def __len__(self):
    return len(self._blueprints)


# -------------------------------------------------------------- simulator ---


class _ActorState:
  """What the server knows about one actor."""

  def __init__(self, actor_id, blueprint, transform, parent_id):
    self.id, self.type_id = actor_id, blueprint.id
    self.attributes = dict(blueprint._attributes)
    self.xy = np.array([transform.location.x, transform.location.y])
    self.z, self.yaw = transform.location.z, transform.rotation.yaw
    self.offset = transform  # relative transform for attached sensors
    self.parent_id = parent_id
    self.speed = 0.0
    self.control = VehicleControl()
    self.autopilot_port = None
    self.lane = None  # (lane, s) for autopilot vehicles
    self.driven = False  # autopilot by controls (Vehicle.set_autopilot), not gliding
    self.path = []  # [N, 2] points the Traffic Manager follows (set_path)
    self.desired_speed = 30.0 / 3.6  # TM's default: the towns' speed limit
    self.callback = None
    self.rng = np.random.default_rng(actor_id)
    extent = _VEHICLE_EXTENTS.get(blueprint.id)
    self.extent = extent
    self.vz = 0.0  # falling after a spawn above the ground
    self.spawn_frame = self.grip_frame = 0
    self.light_state, self.light_frozen, self.light_time = TrafficLightState.Green, False, 0.0
    self.stop_waypoints = []

  @property
  def is_vehicle(self):
    return self.type_id.startswith('vehicle.')


def _box_corners(xy, yaw_deg, half_length, half_width):
  yaw = math.radians(yaw_deg)
  forward = np.array([math.cos(yaw), math.sin(yaw)])
  right = np.array([-math.sin(yaw), math.cos(yaw)])
  signs = np.array([[1, -1], [1, 1], [-1, 1], [-1, -1]], np.float64)
  return xy + signs[:, :1] * half_length * forward + signs[:, 1:] * half_width * right


def _boxes_overlap(corners_a, corners_b):
  """Separating-axis test of two rectangles [4, 2]."""
  for corners in (corners_a, corners_b):
    for k in range(2):
      edge = corners[k + 1] - corners[k]
      axis = np.array([-edge[1], edge[0]])
      project_a, project_b = corners_a @ axis, corners_b @ axis
      if project_a.max() < project_b.min() or project_b.max() < project_a.min():
        return False
  return True


GRAVITY = 9.81
# How long each state of an unfrozen traffic light lasts (s), and the next one.
LIGHT_CYCLE = {TrafficLightState.Green: (10.0, TrafficLightState.Yellow),
               TrafficLightState.Yellow: (3.0, TrafficLightState.Red),
               TrafficLightState.Red: (10.0, TrafficLightState.Green)}


class Simulator:
  """One simulated CARLA server (DOUBLE_ONLY): its world, actors, clock and TMs."""

  WHEELBASE = 2.9
  MAX_STEER_DEG = 35.0
  SUSPENSION_TICKS = 3  # after landing, the wheels grip only from the tick after these

  def __init__(self, host, port, version=VERSION, map_name=TOWN):
    self.host, self.port, self.version = host, int(port), version
    self.map_name = map_name
    self.alive, self.hanging = True, False
    self._back_at = None  # when a timed stall or crash ends
    self._held = {}  # sensor type -> data held back (see hold)
    self.episode_ids = itertools.count(1000)
    self.ticking_clients = set()
    self._stream = queue.Queue()
    self._stream_thread = threading.Thread(target=self._deliver, daemon=True)
    self._stream_thread.start()
    self._new_world()

  # -- server-side controls for tests --

  def hang(self, seconds=None):
    """RPCs time out; the world and its actors stay (a stalled server), for good or `seconds`."""
    self.hanging = True
    self._back_at = None if seconds is None else time.monotonic() + seconds

  def resume(self):
    self.hanging, self._back_at = False, None

  def kill(self, restart_after_s=None):
    """The server dies; with restart_after_s a supervisor restarts it that much later."""
    self.alive = False
    self._back_at = None if restart_after_s is None else time.monotonic() + restart_after_s
    with _LOCK:
      for key in [k for k, owner in _TRAFFIC_MANAGERS.items() if owner is self]:
        del _TRAFFIC_MANAGERS[key]

  def restart(self):
    """Back up with a fresh world: no actors, asynchronous default settings."""
    self.alive, self.hanging, self._back_at = True, False, None
    self._new_world()

  def hold(self, type_id):
    """Holds back the data of every sensor of `type_id`: it reaches the client late (release)."""
    self._held.setdefault(type_id, [])

  def release(self, type_id):
    """Sends what `hold` kept back, in order, and waits until its callbacks have run."""
    for item in self._held.pop(type_id, []):
      self._stream.put(item)
    self.drain()

  def drain(self):
    """Waits until every sensor datum sent so far has reached its callback."""
    self._stream.join()

  def actors(self, role_prefix=''):
    return [a for a in self.actor_states.values()
            if a.attributes.get('role_name', '').startswith(role_prefix)]

  # -- internals --

  def _new_world(self):
    self.episode_id = next(self.episode_ids)
    self.map = Map(self.map_name)
    self.settings = WorldSettings()
    self.frame = 0
    self.elapsed = 0.0
    self.actor_states = {}
    self.actor_ids = itertools.count(1)
    self.tm_synchronous = {}
    self.weather = WeatherParameters.ClearNoon
    # One traffic light at the fork; its stop line lies 4 m before it on the approach.
    light = _ActorState(next(self.actor_ids), ActorBlueprint('traffic.traffic_light', {}),
                        Transform(Location(97.0, 2.0 * LANE_WIDTH, 0.0), Rotation(yaw=180.0)),
                        None)
    approach = self.map._lanes[0]  # pylint: disable=protected-access
    light.stop_waypoints = [Waypoint(approach, approach.length - 4.0)]
    light.light_state = TrafficLightState.Red
    self.actor_states[light.id] = light

  def check(self, timeout_s):
    if self._back_at is not None and time.monotonic() >= self._back_at:
      if self.alive:
        self.resume()
      else:
        self.restart()
    if not self.alive or self.hanging:
      raise RuntimeError(
          'time-out of %dms while waiting for the simulator, make sure the simulator is '
          'ready and connected to %s:%d' % (int(timeout_s * 1000), self.host, self.port))

  def _deliver(self):
    while True:
      callback, data = self._stream.get()
      try:
        callback(data)
      except Exception:  # pylint: disable=broad-except
        pass  # CARLA's stream threads swallow callback errors too
      finally:
        self._stream.task_done()

  def _send(self, state, data):
    held = self._held.get(state.type_id)
    (self._stream.put if held is None else held.append)((state.callback, data))

  def spawn(self, blueprint, transform, parent_id=None):
    if parent_id is not None and parent_id not in self.actor_states:
      raise RuntimeError('Spawn failed because the parent actor was destroyed')
    state = _ActorState(next(self.actor_ids), blueprint, transform, parent_id)
    state.spawn_frame = self.frame
    if state.is_vehicle:
      corners = self._corners(state)
      for other in self.actor_states.values():
        if other.is_vehicle and _boxes_overlap(corners, self._corners(other)):
          return None
    self.actor_states[state.id] = state
    return state

  def destroy(self, actor_id):
    # As in CARLA, attached sensors outlive a destroyed parent: whoever
    # spawned them must destroy them too.
    return self.actor_states.pop(actor_id, None) is not None

  def pose(self, state):
    """World (xy, z, yaw) of an actor, following its parent for sensors."""
    parent = self.actor_states.get(state.parent_id)
    if parent is None:
      return state.xy, state.z, state.yaw
    world = Transform(Location(parent.xy[0], parent.xy[1], parent.z),
                      Rotation(yaw=parent.yaw)).transform(state.offset.location)
    return np.array([world.x, world.y]), world.z, parent.yaw + state.offset.rotation.yaw

  def _corners(self, state):
    return _box_corners(state.xy, state.yaw, state.extent[0], state.extent[1])

  def tick(self, client_id):
    self.ticking_clients.add(client_id)
    dt = self.settings.fixed_delta_seconds or 0.05
    self.frame += 1
    self.elapsed += dt
    for state in list(self.actor_states.values()):
      if state.is_vehicle:
        self._move(state, dt)
      elif state.type_id == 'traffic.traffic_light' and not state.light_frozen:
        state.light_time += dt
        duration, following = LIGHT_CYCLE.get(state.light_state, (math.inf, None))
        if state.light_time >= duration:
          state.light_state, state.light_time = following, 0.0
    collisions = []
    vehicles = [s for s in self.actor_states.values() if s.is_vehicle]
    for a, b in itertools.combinations(vehicles, 2):
      if _boxes_overlap(self._corners(a), self._corners(b)):
        collisions += [(a, b), (b, a)]
    for state in list(self.actor_states.values()):
      if state.callback is None:
        continue
      if state.type_id == 'sensor.other.collision':
        for actor, other in collisions:
          if actor.id == state.parent_id:
            self._send(state, CollisionEvent(self.frame, self.elapsed, None,
                                             Actor(self, actor.id), Actor(self, other.id)))
      else:
        self._send(state, self._measure(state))
    return self.frame

  def _move(self, state, dt):
    if state.z > 0.0 or state.vz:
      # Spawned above the ground: it drops, lands, and its suspension settles
      # before the wheels grip; until then controls do nothing.
      state.vz -= GRAVITY * dt
      state.z = max(state.z + state.vz * dt, 0.0)
      if state.z == 0.0:
        state.vz = 0.0
        state.grip_frame = self.frame + self.SUSPENSION_TICKS + 1
      return
    if self.frame < state.grip_frame:
      return
    if state.autopilot_port is not None and state.driven:
      if self.tm_synchronous.get(state.autopilot_port):
        state.control = self._autopilot_control(state)
    elif state.autopilot_port is not None and state.lane is not None:
      lane, s = state.lane
      s += 6.0 * dt * (1.0 if self.tm_synchronous.get(state.autopilot_port) else 0.0)
      if s > lane.length and lane.successors:
        s, lane = s - lane.length, lane.successors[0]
      state.lane = (lane, min(s, lane.length))
      state.xy, state.yaw = lane.pose(state.lane[1])
      state.speed = 6.0
      return
    control = state.control
    acceleration = 4.0 * control.throttle - 8.0 * control.brake - 0.05 * state.speed
    state.speed = max(state.speed + acceleration * dt, 0.0)
    yaw_rate = state.speed / self.WHEELBASE * math.tan(
        math.radians(self.MAX_STEER_DEG) * float(np.clip(control.steer, -1.0, 1.0)))
    state.yaw = (state.yaw + math.degrees(yaw_rate * dt) + 180.0) % 360.0 - 180.0
    heading = math.radians(state.yaw)
    state.xy = state.xy + state.speed * dt * np.array([math.cos(heading), math.sin(heading)])

  def _autopilot_control(self, state, lookahead=6.0):
    """The TM's control of a driven vehicle: pure pursuit on its path, P control of speed."""
    heading = np.array([math.cos(math.radians(state.yaw)), math.sin(math.radians(state.yaw))])
    # Path points behind the vehicle or already reached are done.
    while len(state.path) and (np.dot(state.path[0] - state.xy, heading) < 0.5
                               or np.linalg.norm(state.path[0] - state.xy) < 1.0):
      state.path = state.path[1:]
    ahead = [p for p in state.path if np.linalg.norm(p - state.xy) >= lookahead]
    if ahead:
      target = ahead[0]
    else:
      lane = self.map.get_waypoint(Location(state.xy[0], state.xy[1]))
      following = lane.next(lookahead) if lane is not None else []
      if not following:
        return VehicleControl(brake=1.0)
      target = np.array([following[0].transform.location.x, following[0].transform.location.y])
    to_target = target - state.xy
    alpha = math.atan2(to_target[1], to_target[0]) - math.radians(state.yaw)
    alpha = (alpha + math.pi) % (2 * math.pi) - math.pi
    distance = max(float(np.linalg.norm(to_target)), 1e-3)
    wheel = math.atan(2.0 * self.WHEELBASE * math.sin(alpha) / distance)
    steer = float(np.clip(wheel / math.radians(self.MAX_STEER_DEG), -1.0, 1.0))
    pedal = float(np.clip(0.5 * (state.desired_speed - state.speed), -1.0, 1.0))
    return VehicleControl(throttle=max(pedal, 0.0), steer=steer, brake=max(-pedal, 0.0))

  def _measure(self, state):
    xy, z, yaw = self.pose(state)
    transform = Transform(Location(xy[0], xy[1], z), Rotation(yaw=yaw))
    attributes = state.attributes
    if state.type_id == 'sensor.camera.rgb':
      width, height = int(attributes['image_size_x']), int(attributes['image_size_y'])
      bgra = np.zeros((height, width, 4), np.uint8)
      exposure = self._exposure(state)
      bgra[: height // 2] = np.clip(np.array([200, 150, 90]) * exposure, 0, 255).tolist() + [255]
      bgra[height // 2:] = np.clip(np.array([90, 90, 90]) * exposure, 0, 255).tolist() + [255]
      # Pixel (0, 0) carries the frame number: tests check what matched it.
      bgra[0, 0, 0], bgra[0, 0, 1] = self.frame % 256, (self.frame // 256) % 256
      return Image(self.frame, self.elapsed, transform, width, height, bgra.tobytes())
    return LidarMeasurement(self.frame, self.elapsed, transform,
                            self._lidar_points(state, xy, z, yaw).tobytes(),
                            int(attributes['channels']))

  def _exposure(self, state):
    """Brightness factor of a camera: auto-exposure starts bright and adapts; manual is fixed."""
    attributes = state.attributes
    if attributes['exposure_mode'] == 'histogram':
      return 1.0 + 0.8 * math.exp(-(self.frame - state.spawn_frame) / 10.0)
    return (float(attributes['iso']) / 100.0 * 200.0 / float(attributes['shutter_speed'])
            * (1.4 / float(attributes['fstop']))**2)

  def _lidar_points(self, state, xy, z, yaw):
    """Ground rings and the sides of other vehicles, in the sensor frame, with drop-off."""
    attributes = state.attributes
    lidar_range = float(attributes['range'])
    angles = np.radians(np.arange(0.0, 360.0, 1.0))
    rings = [np.stack([r * np.cos(angles), r * np.sin(angles), np.full_like(angles, -z),
                       np.full_like(angles, 0.3)], -1) for r in (4.0, 8.0, 12.0)]
    points = [np.concatenate(rings)]
    yaw_rad = math.radians(yaw)
    for other in self.actor_states.values():
      if not other.is_vehicle or other.id == state.parent_id:
        continue
      corners = self._corners(other)
      for start, end in zip(corners, np.roll(corners, -1, axis=0)):
        along = np.linspace(0.0, 1.0, 12)[:, None]
        edge = start + along * (end - start)
        delta = edge - xy
        forward = delta[:, 0] * math.cos(yaw_rad) + delta[:, 1] * math.sin(yaw_rad)
        right = -delta[:, 0] * math.sin(yaw_rad) + delta[:, 1] * math.cos(yaw_rad)
        for height in (0.5, 1.0):
          points.append(np.stack([forward, right, np.full_like(forward, height - z),
                                  np.full_like(forward, 0.6)], -1))
    points = np.concatenate(points)
    points = points[np.hypot(points[:, 0], points[:, 1]) <= lidar_range]
    # Share of a turn swept in one tick: rotation_frequency * dt.
    swept = float(attributes['rotation_frequency']) * (self.settings.fixed_delta_seconds or 0.05)
    if swept < 1.0:
      azimuth = np.degrees(np.arctan2(points[:, 1], points[:, 0])) % 360.0
      points = points[azimuth < 360.0 * swept]
    drop_rate = float(attributes['dropoff_general_rate'])
    intensity_limit = float(attributes['dropoff_intensity_limit'])
    if drop_rate > 0.0:
      keep = (state.rng.random(len(points)) >= drop_rate) | (points[:, 3] > intensity_limit)
      points = points[keep]
    noise = float(attributes['noise_stddev'])
    if noise > 0.0:
      points[:, :3] += state.rng.normal(0.0, noise, points[:, :3].shape)
    return points.astype(np.float32)


def start_server(port=2000, host='localhost', version=VERSION, map_name=TOWN):
  """Starts a simulated server (DOUBLE_ONLY); CARLA takes port, port+1 and port+2."""
  with _LOCK:
    for (other_host, other_port), server in _SERVERS.items():
      if other_host == _host_key(host) and server.alive and abs(other_port - port) <= 2:
        raise OSError('ports %d-%d are taken by the CARLA server on port %d'
                      % (port, port + 2, other_port))
    server = Simulator(_host_key(host), port, version, map_name)
    _SERVERS[(_host_key(host), int(port))] = server
    return server


def server_at(port=2000, host='localhost'):
  return _SERVERS.get((_host_key(host), int(port)))


def stop_all():
  with _LOCK:
    for server in _SERVERS.values():
      server.kill()
    _SERVERS.clear()
    _TRAFFIC_MANAGERS.clear()


# ----------------------------------------------------------------- actors ---


class Actor:
  """A handle on a server-side actor, as in CARLA: stale once destroyed."""

  def __init__(self, simulator, actor_id):
    self._simulator, self.id = simulator, actor_id

  def _state(self):
    self._simulator.check(2.0)
    state = self._simulator.actor_states.get(self.id)
    if state is None:
      raise RuntimeError('trying to operate on a destroyed actor; an actor\'s function '
                         'was called, but the actor is already destroyed.')
    return state

  @property
  def type_id(self):
    return self._state().type_id

  @property
  def attributes(self):
    return dict(self._state().attributes)

  @property
  def is_alive(self):
    return self.id in self._simulator.actor_states

  @property
  def parent(self):
    parent_id = self._state().parent_id
    return None if parent_id is None else _actor(self._simulator, parent_id)

  @property
  def bounding_box(self):
    extent = self._state().extent or (0.0, 0.0, 0.0)
    return BoundingBox(Location(0.0, 0.0, extent[2]), Vector3D(*extent))

  def get_transform(self):
    xy, z, yaw = self._simulator.pose(self._state())
    return Transform(Location(xy[0], xy[1], z), Rotation(yaw=yaw))

  def get_location(self):
    return self.get_transform().location

  def get_velocity(self):
    state = self._state()
    yaw = math.radians(state.yaw)
    return Vector3D(state.speed * math.cos(yaw), state.speed * math.sin(yaw), state.vz)

  def set_transform(self, transform):
    state = self._state()
    state.xy = np.array([transform.location.x, transform.location.y])
    state.z, state.yaw = transform.location.z, transform.rotation.yaw

  def destroy(self):
    self._simulator.check(2.0)
    return self._simulator.destroy(self.id)


class Vehicle(Actor):

  def apply_control(self, control):
    state = self._state()
    if state.autopilot_port is None:  # The autopilot overrides controls, as in CARLA.
      state.control = VehicleControl(control.throttle, control.steer, control.brake)

  def set_autopilot(self, enabled=True, tm_port=8000):
    self._simulator.check(2.0)
    if enabled and _TRAFFIC_MANAGERS.get((self._simulator.host, tm_port)) is not self._simulator:
      raise RuntimeError('no traffic manager of this server on port %d' % tm_port)
    state = self._state()
    state.autopilot_port = int(tm_port) if enabled else None
    state.driven = bool(enabled)
    state.path = []

  def get_control(self):
    return self._state().control


class Sensor(Actor):

  def listen(self, callback):
    self._state().callback = callback

  def stop(self):
    self._state().callback = None

  def is_listening(self):
    return self._state().callback is not None


class TrafficLight(Actor):

  def get_state(self):
    return self._state().light_state

  def set_state(self, state):
    light = self._state()
    light.light_state, light.light_time = int(state), 0.0

  def freeze(self, freeze):
    self._state().light_frozen = bool(freeze)

  def is_frozen(self):
    return self._state().light_frozen

  def get_stop_waypoints(self):
    return list(self._state().stop_waypoints)


def _actor(simulator, actor_id):
  type_id = simulator.actor_states[actor_id].type_id
  cls = (Vehicle if type_id.startswith('vehicle.') else
         TrafficLight if type_id.startswith('traffic.traffic_light') else Sensor)
  return cls(simulator, actor_id)


class ActorList:

  def __init__(self, actors):
    self._actors = list(actors)

  def filter(self, wildcard_pattern):
    return ActorList(a for a in self._actors if fnmatch.fnmatch(a.type_id, wildcard_pattern))

  def find(self, id):  # pylint: disable=redefined-builtin
    for actor in self._actors:
      if actor.id == id:
        return actor
    return None

  def __iter__(self):
    return iter(self._actors)

  def __len__(self):
    return len(self._actors)


# ------------------------------------------------------ world and client ---


class World:

  def __init__(self, client, simulator):
    self._client, self._simulator = client, simulator
    self.id = simulator.episode_id

  def _live(self):
    self._simulator.check(self._client._timeout_s)
    if self._simulator.episode_id != self.id:
      raise RuntimeError('the world %d is gone: the server loaded another map or restarted'
                         % self.id)
    return self._simulator

  def get_settings(self):
    return self._live().settings._copy()

  def apply_settings(self, settings, seconds=0.0):
    del seconds
    simulator = self._live()
    simulator.settings = settings._copy()
    return simulator.frame

  def get_map(self):
    return self._live().map

  def get_blueprint_library(self):
    self._live()
    return BlueprintLibrary()

  def set_weather(self, arg2):
    self._live().weather = arg2

  def get_weather(self):
    return self._live().weather

  def try_spawn_actor(self, blueprint, transform, attach_to=None):
    state = self._live().spawn(blueprint, transform,
                               None if attach_to is None else attach_to.id)
    return None if state is None else _actor(self._simulator, state.id)

  def spawn_actor(self, blueprint, transform, attach_to=None):
    actor = self.try_spawn_actor(blueprint, transform, attach_to)
    if actor is None:
      raise RuntimeError('Spawn failed because of collision at spawn position')
    return actor

  def freeze_all_traffic_lights(self, frozen):
    for state in self._live().actor_states.values():
      if state.type_id.startswith('traffic.traffic_light'):
        state.light_frozen = bool(frozen)

  def get_actors(self, actor_ids=None):
    simulator = self._live()
    ids = simulator.actor_states if actor_ids is None else [
        i for i in actor_ids if i in simulator.actor_states]
    return ActorList(_actor(simulator, i) for i in ids)

  def tick(self, seconds=0.0):
    del seconds
    return self._live().tick(id(self._client))


class TrafficManager:

  def __init__(self, client, simulator, port):
    self._client, self._simulator, self._port = client, simulator, port

  def get_port(self):
    return self._port

  def set_synchronous_mode(self, mode_switch):
    self._simulator.check(self._client._timeout_s)
    self._simulator.tm_synchronous[self._port] = bool(mode_switch)

  def set_random_device_seed(self, value):
    self._simulator.check(self._client._timeout_s)
    del value

  def _vehicle(self, actor):
    self._simulator.check(self._client._timeout_s)
    return self._simulator.actor_states[actor.id]

  def set_path(self, actor, path, empty_buffer=True):
    del empty_buffer
    self._vehicle(actor).path = np.array([[p.x, p.y] for p in path]).reshape(-1, 2)

  def set_desired_speed(self, actor, speed):
    self._vehicle(actor).desired_speed = float(speed) / 3.6  # km/h, as CARLA takes it

  def auto_lane_change(self, actor, enable):
    self._vehicle(actor)
    del enable  # The double's autopilot never changes lanes.

  def ignore_lights_percentage(self, actor, perc):
    self._vehicle(actor)
    del perc  # The double's autopilot does not stop at lights.


class Client:

  def __init__(self, host='127.0.0.1', port=2000, worker_threads=0):
    del worker_threads
    self._host, self._port, self._timeout_s = host, int(port), 5.0

  def _server(self):
    server = _SERVERS.get((_host_key(self._host), self._port))
    if server is None:
      raise RuntimeError(
          'time-out of %dms while waiting for the simulator, make sure the simulator is '
          'ready and connected to %s:%d' % (int(self._timeout_s * 1000), self._host, self._port))
    server.check(self._timeout_s)
    return server

  def set_timeout(self, seconds):
    self._timeout_s = float(seconds)

  def get_client_version(self):
    return VERSION

  def get_server_version(self):
    return self._server().version

  def get_world(self):
    return World(self, self._server())

  def load_world(self, map_name, reset_settings=True):
    server = self._server()
    server.map_name = map_name if map_name.startswith('Carla/') else 'Carla/Maps/' + map_name
    settings = server.settings
    server._new_world()  # pylint: disable=protected-access
    if not reset_settings:
      server.settings = settings
    return World(self, server)

  def get_trafficmanager(self, port=8000):
    server = self._server()
    key = (_host_key(self._host), int(port))
    with _LOCK:
      owner = _TRAFFIC_MANAGERS.get(key)
      for other in _SERVERS.values():
        if other.alive and other.host == key[0] and 0 <= int(port) - other.port <= 2:
          raise RuntimeError('trafficmanager port %d is taken by the CARLA server on port %d'
                             % (port, other.port))
      if owner is not None and owner is not server and owner.alive:
        # In CARLA this client would silently drive the other world's traffic.
        raise RuntimeError('trafficmanager port %d already serves the CARLA server on '
                           'port %d' % (port, owner.port))
      _TRAFFIC_MANAGERS[key] = server
    return TrafficManager(self, server, int(port))

  def apply_batch_sync(self, commands, do_tick=False):
    server = self._server()
    responses = [_run_command(server, c) for c in commands]
    if do_tick:
      server.tick(id(self))
    return responses


# --------------------------------------------------------------- commands ---


class _Response:

  def __init__(self, actor_id=0, error=''):
    self.actor_id, self.error = actor_id, error

  def has_error(self):
    return bool(self.error)


class _SpawnActor:

  def __init__(self, blueprint, transform, parent=None):
    self.blueprint, self.transform = blueprint, transform
    self.parent_id = None if parent is None else (
        parent if isinstance(parent, int) else parent.id)
    self._then = []

  def then(self, command):
    self._then.append(command)
    return self


class _SetAutopilot:

  def __init__(self, actor, enabled, tm_port=8000):
    self.actor_id = actor if isinstance(actor, int) else actor.id
    self.enabled, self.tm_port = bool(enabled), int(tm_port)


class _DestroyActor:

  def __init__(self, actor):
    self.actor_id = actor if isinstance(actor, int) else actor.id


def _run_command(server, command_, future_id=0):
  if isinstance(command_, _SpawnActor):
    state = server.spawn(command_.blueprint, command_.transform, command_.parent_id)
    if state is None:
      return _Response(0, 'Spawn failed because of collision at spawn position')
    for follow_up in command_._then:
      response = _run_command(server, follow_up, state.id)
      if response.error:
        server.destroy(state.id)
        return _Response(0, response.error)
    return _Response(state.id)
  actor_id = command_.actor_id or future_id
  if isinstance(command_, _SetAutopilot):
    state = server.actor_states.get(actor_id)
    if state is None:
      return _Response(actor_id, 'actor %d not found' % actor_id)
    if _TRAFFIC_MANAGERS.get((server.host, command_.tm_port)) is not server:
      return _Response(actor_id, 'no traffic manager of this server on port %d'
                       % command_.tm_port)
    state.autopilot_port = command_.tm_port if command_.enabled else None
    waypoint = server.map.get_waypoint(Location(state.xy[0], state.xy[1]))
    state.lane = (waypoint._lane, waypoint.s)  # pylint: disable=protected-access
    return _Response(actor_id)
  if isinstance(command_, _DestroyActor):
    if not server.destroy(actor_id):
      return _Response(actor_id, 'actor %d not found' % actor_id)
    return _Response(actor_id)
  raise TypeError('the double does not implement command %r' % (command_,))


command = types.ModuleType('carla.command')
command.SpawnActor = _SpawnActor
command.SetAutopilot = _SetAutopilot
command.DestroyActor = _DestroyActor
command.Response = _Response
command.FutureActor = 0

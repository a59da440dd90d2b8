"""CARLA 0.9.16 driving environment (TF-Agents PyEnvironment) for PlaNet / latent SAC.

Observations are a dict of three 64x64 uint8 images and a small float state:
  camera:  front RGB camera.
  lidar:   bird's-eye image rendered from the lidar sweep of the last tick.
  birdeye: semantic mask (road/route, other vehicles, ego), a privileged
           reconstruction target that a deployed policy should not consume.
  state:   [lateral offset to route centre (m), heading error (rad),
            speed (m/s), distance to the next vehicle ahead in the lane (m)].

Everything that turns simulator data into arrays (lidar rendering, polygon
rasterising, route projection, reward, termination) is a module-level numpy
function, so it is tested without a server. `carla` is imported lazily inside
`import_carla`, so this module (and `observation_spec`) import without it.

Frames: CARLA is left-handed with z up. Seen from above, yaw turns +x towards
+y; a vehicle with yaw psi faces (cos psi, sin psi) and its right-hand side is
(-sin psi, cos psi). Sensor-frame lidar points are x forward, y right, z up.
Bird's-eye images put forward up (smaller row) and right to the right (larger
column); the ego sits at the centre of pixel (ego_row, ego_col).
"""
import collections
import importlib.metadata
import logging
import math
import queue
import re
import threading
import time

import gin
import numpy as np
from PIL import Image
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

CARLA_VERSION = '0.9.16'
INSTALL_HINT = "pip install -e '.[carla]'   (installs carla==%s)" % CARLA_VERSION
STATE_SIZE = 4
STATE_NAMES = ('lateral_offset_m', 'heading_error_rad', 'speed_mps', 'front_distance_m')

COLLISION = 'collision'
OFF_ROAD = 'off_road'
STUCK = 'stuck'
TIME_LIMIT = 'time_limit'
SIMULATOR_ERROR = 'simulator_error'
# Only these end the MDP (discount 0). 'stuck' and 'time_limit' are cut-offs
# of a process that would go on, so they bootstrap (discount 1).
TERMINAL_REASONS = (COLLISION, OFF_ROAD)

# Every actor this adapter spawns carries a role_name with this prefix, so a
# new process can find and destroy what a crashed one left in the world.
ROLE_PREFIX = 'planet_tfa'
# CARLA's server listens on port, port + 1 (streaming) and port + 2.
SERVER_PORTS = 3

# Semantic bird's-eye channel values.
ROAD_VALUE = 128
ROUTE_VALUE = 255
VEHICLE_VALUE = 255
EGO_VALUE = 255


class CarlaEnvError(Exception):
  """Base class of the errors this environment raises on purpose."""


class CarlaConnectionError(CarlaEnvError, ConnectionError):
  """No CARLA server answered (at start, or after a crash and all retries)."""


class CarlaVersionError(CarlaEnvError):
  """Client and server versions differ; CARLA's RPC is not compatible across them."""


class CarlaPortError(CarlaEnvError, ValueError):
  """The Traffic Manager port is taken (by another server's TM or a simulator)."""


class CarlaSpawnError(CarlaEnvError):
  """The ego vehicle could not be placed at any of the tried spawn points."""


class SensorTimeout(CarlaEnvError):
  """A sensor delivered nothing for the ticked frame: the server stalled or died."""


# The carla client raises plain RuntimeError on RPC time-outs and lost servers.
SIMULATOR_FAULTS = (RuntimeError, SensorTimeout)


# ----------------------------------------------------------------- specs ---


@gin.configurable(module='carla_env')
def observation_spec(image_size=64, state_size=STATE_SIZE):
  """Observation specs; needs no server, so agents and tests build from it."""
  def image(name):
    return array_spec.BoundedArraySpec(
        (image_size, image_size, 3), np.uint8, minimum=0, maximum=255, name=name)
  return collections.OrderedDict(
      camera=image('camera'),
      lidar=image('lidar'),
      birdeye=image('birdeye'),
      state=array_spec.ArraySpec((state_size,), np.float32, name='state'))


def action_spec():
  """[acceleration (>0 throttle, <0 brake), steering], both in [-1, 1]."""
  return array_spec.BoundedArraySpec(
      (2,), np.float32, minimum=-1.0, maximum=1.0, name='action')


def action_to_control(action):
  """Action -> (throttle, brake, steer); one pedal axis so throttle and brake never overlap."""
  acceleration, steer = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
  return float(max(acceleration, 0.0)), float(max(-acceleration, 0.0)), float(steer)


# ------------------------------------------------------ client / versions ---


def import_carla():
  """Imports the CARLA client only when a server is actually used."""
  try:
    import carla  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise ImportError(
        'CarlaEnv needs the CARLA %s Python client, which is not installed. '
        'Install it with: %s' % (CARLA_VERSION, INSTALL_HINT)) from error
  return carla


def client_version(client=None):
  """Version of the installed client, from the client itself or the package metadata."""
  if client is not None:
    try:
      return client.get_client_version()
    except RuntimeError:
      pass
  try:
    return importlib.metadata.version('carla')
  except importlib.metadata.PackageNotFoundError:
    return 'unknown (carla package not installed)'


def _release(version):
  """'0.9.16-12-gabc' -> (0, 9, 16); dev builds share the release's RPC protocol."""
  match = re.search(r'(\d+)\.(\d+)\.(\d+)', str(version))
  return tuple(int(part) for part in match.groups()) if match else str(version).strip()


def check_versions(client_version_str, server_version_str):
  """Raises CarlaVersionError when client and server releases differ."""
  if _release(client_version_str) != _release(server_version_str):
    raise CarlaVersionError(
        'CARLA client %s does not match the server %s; the RPC protocol differs '
        'between releases. Run a CARLA %s server, or install the client that '
        'matches the server (pip install carla==%s).' %
        (client_version_str, server_version_str, client_version_str,
         server_version_str))


def connection_error_message(host, port, version, timeout_s, cause):
  return (
      'No CARLA server answered at %s:%s within %gs (CARLA client %s): %s. '
      'Start a CARLA %s server there, e.g. `./CarlaUE4.sh -carla-rpc-port=%s` '
      '(the server must be the same version as the client), or point the '
      'environment at a running one with gin: CarlaEnv.host = "..." and '
      'CarlaEnv.port = ....' % (host, port, timeout_s, version, cause, version,
                                port))


def instance_ports(port, tm_port, instance=0, port_stride=10):
  """(simulator port, Traffic Manager port) of instance K: both shifted by K * stride.

  Raises ValueError naming the gin bindings when the ports of two instances,
  or a Traffic Manager and its simulator, would collide.
  """
  port, tm_port, instance, port_stride = int(port), int(tm_port), int(instance), int(port_stride)
  if instance < 0:
    raise ValueError('CarlaEnv.instance must be >= 0, got %d' % instance)
  if instance and port_stride < SERVER_PORTS:
    raise ValueError(
        'CarlaEnv.port_stride=%d is too small: a CARLA server listens on %d consecutive '
        'ports (port, port+1 streaming, port+2), so instances need a stride of at least %d'
        % (port_stride, SERVER_PORTS, SERVER_PORTS))
  port += instance * port_stride
  tm_port += instance * port_stride
  if 0 <= tm_port - port < SERVER_PORTS:
    raise ValueError(
        'CarlaEnv.tm_port=%d collides with the CARLA server ports %d-%d (CarlaEnv.port); '
        'choose a Traffic Manager port outside them, e.g. 8000'
        % (tm_port, port, port + SERVER_PORTS - 1))
  return port, tm_port


def connect(host, port, timeout_s, check_version=True):
  """Returns a carla.Client that has answered, raising our errors with remedies."""
  carla = import_carla()
  client = carla.Client(host, int(port))
  client.set_timeout(float(timeout_s))
  version = client_version(client)
  try:
    server_version = client.get_server_version()
  except RuntimeError as error:
    raise CarlaConnectionError(
        connection_error_message(host, port, version, timeout_s, error)) from error
  if check_version:
    check_versions(version, server_version)
  return client


def retry_with_backoff(attempt_fn, max_attempts=5, initial_delay_s=1.0,
                       max_delay_s=30.0, deadline_s=120.0, sleep=time.sleep,
                       clock=time.monotonic, what='CARLA server'):
  """Calls attempt_fn until it returns, sleeping 1, 2, 4, ... s between failures.

  A restarting server takes seconds to listen again; hammering it gains
  nothing. Version errors are not retried (waiting does not fix them). Gives up
  with CarlaConnectionError after max_attempts or once the next wait would pass
  deadline_s.
  """
  start = clock()
  delay = initial_delay_s
  last_error = None
  attempt = 0
  for attempt in range(1, max_attempts + 1):
    try:
      return attempt_fn()
    except CarlaVersionError:
      raise
    except (CarlaConnectionError,) + SIMULATOR_FAULTS as error:
      last_error = error
      logging.warning('%s not back (attempt %d/%d): %s', what, attempt,
                      max_attempts, error)
    if attempt == max_attempts or clock() - start + delay > deadline_s:
      break
    sleep(delay)
    delay = min(delay * 2.0, max_delay_s)
  raise CarlaConnectionError(
      '%s did not come back after %d attempt(s) in %.1fs (deadline %gs): %s' %
      (what, attempt, clock() - start, deadline_s, last_error)) from last_error


class SensorBuffer:
  """Hand-over from CARLA's sensor threads that keeps only the newest items.

  A queue.Queue would grow without bound whenever the world ticks while this
  env does not read (another client ticking, a long train phase with a live
  server); the frame a step waits for is always the newest, so older items
  can go. `get` raises queue.Empty after `timeout`, like Queue.get.
  """

  def __init__(self, capacity=4):
    self._items = collections.deque(maxlen=int(capacity))
    self._ready = threading.Condition()

  def put(self, data):
    with self._ready:
      self._items.append(data)
      self._ready.notify()

  def get(self, timeout=None):
    with self._ready:
      if not self._ready.wait_for(lambda: self._items, timeout):
        raise queue.Empty
      return self._items.popleft()

  def clear(self):
    with self._ready:
      self._items.clear()

  def __len__(self):
    return len(self._items)


def wait_for_frame(sensor_queue, frame, timeout_s, clock=time.monotonic):
  """Returns the item of `sensor_queue` whose .frame is `frame`.

  Sensor callbacks run on CARLA's threads and may still hold data of earlier
  ticks (e.g. the intermediate ticks of an action repeat); those are dropped.
  """
  deadline = clock() + timeout_s
  while True:
    remaining = deadline - clock()
    try:
      if remaining <= 0:
        raise queue.Empty
      data = sensor_queue.get(timeout=remaining)
    except queue.Empty:
      raise SensorTimeout('no sensor data for frame %d within %gs' %
                          (frame, timeout_s)) from None
    if data.frame == frame:
      return data
    if data.frame > frame:
      logging.warning('sensor skipped frame %d, using frame %d', frame, data.frame)
      return data


# -------------------------------------------------------------- geometry ---


BirdeyeGeometry = collections.namedtuple(
    'BirdeyeGeometry', ['image_size', 'meters_per_pixel', 'ego_row', 'ego_col'])


def birdeye_geometry(image_size=64, meters_per_pixel=0.5, ego_position=(0.75, 0.5)):
  """Ego pixel from fractions of the image; the default sees 24 m ahead and 8 m behind."""
  return BirdeyeGeometry(image_size, float(meters_per_pixel),
                         int(ego_position[0] * image_size),
                         int(ego_position[1] * image_size))


def world_to_ego(points_xy, ego_xy, ego_yaw_deg):
  """World xy [N, 2] -> ego frame [N, 2] as (forward, right) metres."""
  yaw = math.radians(ego_yaw_deg)
  delta = np.asarray(points_xy, np.float64).reshape(-1, 2) - np.asarray(ego_xy, np.float64)
  forward = delta[:, 0] * math.cos(yaw) + delta[:, 1] * math.sin(yaw)
  right = -delta[:, 0] * math.sin(yaw) + delta[:, 1] * math.cos(yaw)
  return np.stack([forward, right], axis=-1)


def ego_to_pixel(forward_right, geometry):
  """Ego frame [N, 2] -> continuous (row, col); pixel (r, c) spans [r, r+1) x [c, c+1)."""
  forward_right = np.asarray(forward_right, np.float64).reshape(-1, 2)
  rows = geometry.ego_row + 0.5 - forward_right[:, 0] / geometry.meters_per_pixel
  cols = geometry.ego_col + 0.5 + forward_right[:, 1] / geometry.meters_per_pixel
  return np.stack([rows, cols], axis=-1)


def rasterize_polygons(mask, polygons_rc, value, chunk=256):
  """Sets mask pixels whose centre lies inside any polygon (even-odd rule), in place.

  polygons_rc: [N, K, 2] continuous (row, col) vertices, any winding. All
  polygons are tested at once (a Python loop per lane quad cost ~50 us each);
  a pixel is inside one when an odd number of its edges cross the pixel's row
  to the right of the pixel centre.
  """
  polygons = np.asarray(polygons_rc, np.float64)
  polygons = polygons.reshape((-1,) + polygons.shape[-2:])
  height, width = mask.shape[:2]
  low, high = polygons.min(axis=1), polygons.max(axis=1)
  polygons = polygons[(high[:, 0] > 0) & (low[:, 0] < height)
                      & (high[:, 1] > 0) & (low[:, 1] < width)]
  centre_rows = np.arange(height) + 0.5
  centre_cols = np.arange(width) + 0.5
  covered = np.zeros((height, width), bool)
  for first in range(0, len(polygons), chunk):
    start = polygons[first:first + chunk]
    end = np.roll(start, -1, axis=1)
    r_a, c_a, r_b, c_b = start[..., 0], start[..., 1], end[..., 0], end[..., 1]
    crosses = (r_a[..., None] > centre_rows) != (r_b[..., None] > centre_rows)  # [N, K, H]
    with np.errstate(divide='ignore', invalid='ignore'):
      # Horizontal edges never cross a row of centres; their NaNs stay masked.
      col_at_row = c_a[..., None] + (centre_rows - r_a[..., None]) * (
          (c_b - c_a) / (r_b - r_a))[..., None]
    right_of_centre = crosses[..., None] & (centre_cols < col_at_row[..., None])  # [N,K,H,W]
    covered |= (np.count_nonzero(right_of_centre, axis=1) % 2 == 1).any(axis=0)
  mask[covered] = value
  return mask


def rasterize_polygon(mask, polygon_rc, value):
  """One polygon [K, 2]: see rasterize_polygons."""
  return rasterize_polygons(mask, np.asarray(polygon_rc, np.float64)[None], value)


def box_polygon(center_xy, yaw_deg, half_length, half_width):
  """World corners [4, 2] of a yawed box: front-left, front-right, rear-right, rear-left."""
  yaw = math.radians(yaw_deg)
  forward = np.array([math.cos(yaw), math.sin(yaw)])
  right = np.array([-math.sin(yaw), math.cos(yaw)])
  signs = np.array([[1, -1], [1, 1], [-1, 1], [-1, -1]], np.float64)
  return (np.asarray(center_xy, np.float64) + signs[:, :1] * half_length * forward
          + signs[:, 1:] * half_width * right)


def lane_segment_quads(start_xy, start_yaw_deg, start_width, end_xy, end_yaw_deg,
                       end_width):
  """Quads [N, 4, 2] covering lane segments between centre points of given widths."""
  def edges(xy, yaw_deg, width):
    yaw = np.radians(np.asarray(yaw_deg, np.float64))
    right = np.stack([-np.sin(yaw), np.cos(yaw)], axis=-1)
    half = 0.5 * np.asarray(width, np.float64)[:, None]
    xy = np.asarray(xy, np.float64)
    return xy - half * right, xy + half * right
  start_left, start_right = edges(start_xy, start_yaw_deg, start_width)
  end_left, end_right = edges(end_xy, end_yaw_deg, end_width)
  return np.stack([start_left, start_right, end_right, end_left], axis=1)


class PolygonIndex:
  """Polygons [N, K, 2] with their centres and radii, built once (per map, per route).

  `near(xy, radius)` keeps every polygon that may reach within `radius` of xy:
  one distance per polygon per step instead of one per vertex.
  """

  def __init__(self, polygons):
    polygons = np.asarray(polygons, np.float64)
    self.polygons = polygons.reshape((-1,) + (polygons.shape[-2:] if polygons.size else (4, 2)))
    self.centres = self.polygons.mean(axis=1)
    self.radii = np.linalg.norm(self.polygons - self.centres[:, None], axis=-1).max(
        axis=1, initial=0.0)

  def near(self, xy, radius):
    distance = np.linalg.norm(self.centres - np.asarray(xy, np.float64), axis=-1)
    return self.polygons[distance <= radius + self.radii]


def cull_polygons(polygons, ego_xy, radius):
  """Keeps polygons [N, K, 2] that may reach within `radius` of the ego (see PolygonIndex)."""
  return PolygonIndex(polygons).near(ego_xy, radius)


def view_radius(geometry):
  """Distance from the ego to the farthest image corner, in metres.

  Nothing farther can land in the image (the ego sits off-centre, so this is
  about 29 m at the defaults, not the 55 m a centred square bound would give).
  """
  corners = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]) * geometry.image_size
  ego = np.array([geometry.ego_row + 0.5, geometry.ego_col + 0.5])
  return float(np.linalg.norm(corners - ego, axis=-1).max() * geometry.meters_per_pixel)


def render_semantic_birdeye(geometry, ego_xy, ego_yaw_deg, road_polygons=(),
                            route_polygons=(), vehicle_polygons=(), ego_polygon=None):
  """World-frame polygons -> uint8 [S, S, 3] mask in the ego frame.

  Channel 0: road (ROAD_VALUE), overdrawn by the planned route (ROUTE_VALUE).
  Channel 1: other vehicles' boxes. Channel 2: the ego's box.
  """
  size = geometry.image_size
  mask = np.zeros((size, size, 3), np.uint8)
  layers = ((0, road_polygons, ROAD_VALUE), (0, route_polygons, ROUTE_VALUE),
            (1, vehicle_polygons, VEHICLE_VALUE),
            (2, [] if ego_polygon is None else [ego_polygon], EGO_VALUE))
  for channel, polygons, value in layers:
    polygons = np.asarray(polygons, np.float64)
    if not polygons.size:
      continue
    polygons_rc = ego_to_pixel(world_to_ego(polygons.reshape(-1, 2), ego_xy, ego_yaw_deg),
                               geometry).reshape(polygons.shape)
    plane = mask[:, :, channel]
    rasterize_polygons(plane, polygons_rc, value)
  return mask


def lidar_to_birdeye(points, geometry, lidar_range=32.0, lidar_height=2.4,
                     ground_tolerance=0.4, max_height=4.0, exclude_half_extent=None):
  """CARLA lidar points [N, 4] (x fwd, y right, z up, intensity) -> uint8 [S, S, 3].

  Channel 0: obstacle points (more than ground_tolerance above the ground and
  at most max_height above it). Channel 1: ground points. Channel 2: the
  brightest intensity in the pixel, scaled to 0..255. Heights are relative to
  the ground below the sensor (sensor z + lidar_height). Points farther than
  lidar_range (horizontally), outside the image, or inside the ego's own box
  (exclude_half_extent = (half_length, half_width)) are dropped.
  """
  size = geometry.image_size
  image = np.zeros((size, size, 3), np.uint8)
  points = np.asarray(points, np.float32).reshape(-1, 4)
  x, y, z, intensity = (points[:, i].astype(np.float64) for i in range(4))
  height = z + lidar_height
  keep = np.isfinite(points).all(axis=1) & (np.hypot(x, y) <= lidar_range)
  keep &= height <= max_height
  if exclude_half_extent is not None:
    half_length, half_width = exclude_half_extent
    keep &= ~((np.abs(x) <= half_length) & (np.abs(y) <= half_width))
  rows_cols = np.floor(ego_to_pixel(np.stack([x, y], -1), geometry)).astype(np.int64)
  rows, cols = rows_cols[:, 0], rows_cols[:, 1]
  keep &= (rows >= 0) & (rows < size) & (cols >= 0) & (cols < size)
  ground = keep & (height <= ground_tolerance)
  obstacle = keep & (height > ground_tolerance)
  image[rows[obstacle], cols[obstacle], 0] = 255
  image[rows[ground], cols[ground], 1] = 255
  brightness = np.round(np.clip(intensity[keep], 0.0, 1.0) * 255.0).astype(np.uint8)
  np.maximum.at(image[:, :, 2], (rows[keep], cols[keep]), brightness)
  return image


def camera_to_rgb(bgra, image_size):
  """CARLA BGRA [H, W, 4] -> RGB uint8 [S, S, 3] (resized only if the camera differs)."""
  rgb = np.ascontiguousarray(np.asarray(bgra, np.uint8)[:, :, 2::-1])
  if rgb.shape[:2] != (image_size, image_size):
    rgb = np.asarray(Image.fromarray(rgb).resize((image_size, image_size),
                                                 Image.BILINEAR))
  return rgb


def image_to_bgra(image):
  """carla.Image -> BGRA array view of its raw buffer."""
  return np.frombuffer(image.raw_data, np.uint8).reshape(image.height, image.width, 4)


def lidar_to_points(measurement):
  """carla.LidarMeasurement -> float32 [N, 4] (x, y, z, intensity), sensor frame."""
  return np.frombuffer(measurement.raw_data, np.float32).reshape(-1, 4)


# ----------------------------------------------------------- route / state ---


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
  forward_right = world_to_ego(others_xy, ego_xy, ego_yaw_deg)
  ahead = ((forward_right[:, 0] > 0.0) & (forward_right[:, 0] <= max_distance)
           & (np.abs(forward_right[:, 1]) <= corridor_half_width))
  return float(forward_right[ahead, 0].min()) if ahead.any() else float(max_distance)


def state_vector(lateral_offset, heading_error_rad, speed, front_distance):
  return np.array([lateral_offset, heading_error_rad, speed, front_distance], np.float32)


# ------------------------------------------------------ reward / ending ---


def reward_terms(progress_m, speed, collided, lateral_offset, steer, previous_steer,
                 target_speed=8.0, step_seconds=0.1, lane_threshold=1.0,
                 collision_penalty=50.0, lane_departure_weight=1.0, jerk_weight=0.5,
                 overspeed_weight=1.0):
  """Reward components of one env step; see compute_reward.

  progress: metres gained along the route, capped at what target_speed covers
    in the step and divided by it, so driving at the target earns 1 per step
    and speeding earns nothing extra; reversing along the route costs.
  overspeed: -(speed above target) / target.
  collision: -collision_penalty when the collision sensor fired this step.
  lane_departure: -weight * metres of |lateral offset| beyond lane_threshold.
  steering_jerk: -weight * |steer_t - steer_{t-1}|; smooth steering helps
    the learnt model and the passengers.
  """
  max_progress = target_speed * step_seconds
  return collections.OrderedDict(
      progress=float(np.clip(progress_m, -max_progress, max_progress) / max_progress),
      overspeed=-overspeed_weight * max(speed - target_speed, 0.0) / target_speed,
      collision=-float(collision_penalty) if collided else 0.0,
      lane_departure=-lane_departure_weight * max(abs(lateral_offset) - lane_threshold, 0.0),
      steering_jerk=-jerk_weight * abs(steer - previous_steer))


def compute_reward(*args, **kwargs):
  """Sum of reward_terms(...) (same arguments)."""
  return float(sum(reward_terms(*args, **kwargs).values()))


def update_slow_steps(slow_steps, speed, stuck_speed):
  """Counts consecutive steps slower than stuck_speed (0 once moving again)."""
  return slow_steps + 1 if speed < stuck_speed else 0


def is_off_road(lateral_offset, off_road_distance, on_driving_lane=True):
  return (not on_driving_lane) or abs(lateral_offset) > off_road_distance


def termination_reason(collided, off_road, slow_steps, step_count, stuck_steps=100,
                       max_steps=1000):
  """Why the episode ends now: None, 'collision', 'off_road', 'stuck' or 'time_limit'.

  Checked in that order, so a crash on the last step is still a crash.
  stuck_steps / max_steps of 0 or None disable that rule.
  """
  if collided:
    return COLLISION
  if off_road:
    return OFF_ROAD
  if stuck_steps and slow_steps >= stuck_steps:
    return STUCK
  if max_steps and step_count >= max_steps:
    return TIME_LIMIT
  return None


def make_time_step(observation, reward, reason, terminal_reasons=TERMINAL_REASONS):
  """MID for no reason; LAST with discount 0 for terminal reasons, else discount 1.

  Truncations (time limit, stuck, simulator error) keep discount 1 so the
  critic bootstraps instead of learning a false terminal value.
  """
  reward = np.asarray(reward, np.float32)
  if reason is None:
    return ts.transition(observation, reward, discount=1.0)
  if reason in terminal_reasons:
    return ts.termination(observation, reward)
  return ts.truncation(observation, reward, discount=1.0)


# ----------------------------------------------------------- environment ---


@gin.configurable
class CarlaEnv(py_environment.PyEnvironment):
  """Ego vehicle in synchronous CARLA with Traffic-Manager traffic; one tick per repeat.

  Connects in the constructor (fails fast with CarlaConnectionError). A
  simulator fault mid-episode ends the episode as a truncation with reason
  'simulator_error'; the next reset reconnects with exponential backoff.

  One env owns one server's world: it ticks it, and on connect it destroys
  every actor tagged with ROLE_PREFIX (what a crashed run of this adapter
  left) and sets the world settings explicitly. Close it (or use it as a
  context manager) to put the world back in asynchronous mode: a synchronous
  server left without its ticking client freezes every later client.

  `instance` K (a collector's number) moves both the simulator port and the
  Traffic Manager port up by K * port_stride, so N processes on one host talk
  to N servers without colliding.
  """

  def __init__(self,
               host='localhost',
               port=2000,
               timeout_s=10.0,
               load_world_timeout_s=120.0,
               tm_port=8000,
               instance=0,
               port_stride=10,
               no_rendering_mode=False,
               town='Town03',
               weather='ClearNoon',
               seed=0,
               num_vehicles=20,
               ego_blueprint='vehicle.tesla.model3',
               fixed_delta_seconds=0.05,
               action_repeat=2,
               max_steps=1000,
               image_size=64,
               camera_fov=90.0,
               meters_per_pixel=0.5,
               ego_position=(0.75, 0.5),
               lidar_range=32.0,
               lidar_height=2.4,
               lidar_channels=32,
               lidar_points_per_second=100000,
               lidar_upper_fov=10.0,
               lidar_lower_fov=-30.0,
               lidar_dropoff_general_rate=0.0,
               lidar_dropoff_intensity_limit=1.0,
               lidar_dropoff_zero_intensity=0.0,
               lidar_noise_stddev=0.0,
               ground_tolerance=0.4,
               max_obstacle_height=4.0,
               target_speed=8.0,
               lane_threshold=1.0,
               off_road_distance=3.0,
               collision_penalty=50.0,
               lane_departure_weight=1.0,
               jerk_weight=0.5,
               overspeed_weight=1.0,
               stuck_speed=0.5,
               stuck_steps=100,
               terminal_reasons=TERMINAL_REASONS,
               route_spacing=2.0,
               route_lookahead=100.0,
               route_replan_distance=1.75,
               road_spacing=2.0,
               front_max_distance=50.0,
               spawn_retries=20,
               sensor_timeout_s=10.0,
               sensor_buffer_size=4,
               reconnect_attempts=6,
               reconnect_initial_delay_s=1.0,
               reconnect_max_delay_s=30.0,
               reconnect_deadline_s=180.0,
               check_version=True):
    super().__init__(handle_auto_reset=True)
    self._port, self._tm_port = instance_ports(port, tm_port, instance, port_stride)
    self._host, self._timeout_s = host, float(timeout_s)
    self._load_world_timeout_s = float(load_world_timeout_s)
    self._town, self._weather, self._seed = town, weather, seed
    self._no_rendering_mode = bool(no_rendering_mode)
    self._num_vehicles, self._ego_blueprint = int(num_vehicles), ego_blueprint
    self._dt, self._action_repeat = float(fixed_delta_seconds), int(action_repeat)
    self._max_steps, self._image_size, self._camera_fov = max_steps, image_size, camera_fov
    self._geometry = birdeye_geometry(image_size, meters_per_pixel, ego_position)
    self._lidar = dict(range=lidar_range, height=lidar_height, channels=lidar_channels,
                       points_per_second=lidar_points_per_second,
                       upper_fov=lidar_upper_fov, lower_fov=lidar_lower_fov,
                       ground_tolerance=ground_tolerance, max_height=max_obstacle_height)
    # CARLA's defaults drop ~45% of the points at random; the adapter asks for a
    # full, deterministic sweep unless gin says otherwise.
    self._lidar_blueprint = dict(
        dropoff_general_rate=lidar_dropoff_general_rate,
        dropoff_intensity_limit=lidar_dropoff_intensity_limit,
        dropoff_zero_intensity=lidar_dropoff_zero_intensity,
        noise_stddev=lidar_noise_stddev)
    self._reward_kwargs = dict(
        target_speed=target_speed, step_seconds=self._dt * self._action_repeat,
        lane_threshold=lane_threshold, collision_penalty=collision_penalty,
        lane_departure_weight=lane_departure_weight, jerk_weight=jerk_weight,
        overspeed_weight=overspeed_weight)
    self._off_road_distance, self._stuck_speed = off_road_distance, stuck_speed
    self._stuck_steps, self._terminal_reasons = stuck_steps, tuple(terminal_reasons)
    self._route_spacing, self._route_lookahead = route_spacing, route_lookahead
    self._route_replan_distance = float(route_replan_distance)
    self._sensor_buffer_size = int(sensor_buffer_size)
    self._road_spacing, self._front_max_distance = road_spacing, front_max_distance
    self._spawn_retries, self._sensor_timeout_s = spawn_retries, sensor_timeout_s
    self._reconnect = dict(max_attempts=reconnect_attempts,
                           initial_delay_s=reconnect_initial_delay_s,
                           max_delay_s=reconnect_max_delay_s,
                           deadline_s=reconnect_deadline_s)
    self._check_version = check_version
    self._observation_spec = observation_spec(image_size, STATE_SIZE)
    self._action_spec = action_spec()
    self._rng = np.random.default_rng(seed)

    self._carla = None
    self._client = self._world = self._map = self._traffic_manager = None
    self._road_quads_by_map = {}
    self._needs_reconnect = False
    self._clear_episode_state()
    self._info = {'reason': None}
    try:
      self._connect_and_configure()
    except BaseException:
      self.close()
      raise

  # ---- specs / info ----

  @property
  def action_repeat(self):
    """Simulator ticks per agent step: the environment steps of `schedule`."""
    return self._action_repeat

  def observation_spec(self):
    return self._observation_spec

  def action_spec(self):
    return self._action_spec

  def get_info(self):
    """{'reason': None | 'collision' | ... | 'simulator_error', reward terms, ...}."""
    return dict(self._info)

  def render(self, mode='rgb_array'):
    if mode != 'rgb_array':
      raise NotImplementedError('only rgb_array rendering is supported')
    return None if self._last_observation is None else self._last_observation['camera']

  # ---- connection / world ----

  def _connect_and_configure(self):
    """Connects, loads the town, clears our leftovers, sets synchronous mode (world and TM)."""
    self._carla = import_carla()
    self._client = connect(self._host, self._port, self._timeout_s, self._check_version)
    world = self._client.get_world()
    self._world, self._map = world, world.get_map()
    if self._town and self._map.name.split('/')[-1] != self._town:
      self._client.set_timeout(self._load_world_timeout_s)
      try:
        self._world = self._client.load_world(self._town)
      finally:
        self._client.set_timeout(self._timeout_s)
      self._map = self._world.get_map()
    self._destroy_leftovers()
    # Every setting this env relies on is set, none inherited from whoever
    # used the server before (a crashed run leaves it synchronous).
    settings = self._world.get_settings()
    settings.synchronous_mode = True
    settings.fixed_delta_seconds = self._dt
    settings.no_rendering_mode = self._no_rendering_mode
    self._world.apply_settings(settings)
    try:
      self._traffic_manager = self._client.get_trafficmanager(self._tm_port)
    except RuntimeError as error:
      if not self._server_alive():
        raise
      raise CarlaPortError(
          'the Traffic Manager port %d is not free for the CARLA server at %s:%d: %s. '
          'Each process on a host needs its own server and TM port: set CarlaEnv.instance '
          '(collectors do) or CarlaEnv.tm_port.' % (self._tm_port, self._host, self._port,
                                                    error)) from error
    self._traffic_manager.set_synchronous_mode(True)
    if self._seed is not None:
      self._traffic_manager.set_random_device_seed(int(self._seed))
    if self._weather:
      weather = getattr(self._carla.WeatherParameters, self._weather, None)
      if not isinstance(weather, self._carla.WeatherParameters):
        raise ValueError('unknown CARLA weather preset %r (e.g. ClearNoon, WetCloudySunset)'
                         % self._weather)
      self._world.set_weather(weather)
    self._world.tick(self._timeout_s)

  def _destroy_leftovers(self):
    """Destroys actors tagged ROLE_PREFIX: a crashed run's, or ours before a fault."""
    leftovers = [actor for actor in self._world.get_actors()
                 if actor.attributes.get('role_name', '').startswith(ROLE_PREFIX)]
    if not leftovers:
      return
    logging.warning('destroying %d actor(s) an earlier run of this adapter left in the '
                    'world', len(leftovers))
    # Sensors first: their streams must not outlive the vehicles they ride on.
    leftovers.sort(key=lambda actor: not actor.type_id.startswith('sensor.'))
    self._client.apply_batch_sync(
        [self._carla.command.DestroyActor(actor.id) for actor in leftovers], False)

  def _reconnect_with_backoff(self):
    """After a fault: reconnect with backoff, giving up with CarlaConnectionError.

    The old actors are forgotten without RPCs (each would wait a full timeout
    on a dead server); connecting destroys them by their role_name tag, unless
    the server restarted and took them with it.
    """
    logging.warning('reconnecting to CARLA at %s:%s', self._host, self._port)
    for sensor in self._sensors:
      try:
        sensor.stop()
      except RuntimeError:
        pass
    self._clear_episode_state()
    self._client = self._world = self._map = self._traffic_manager = None
    retry_with_backoff(self._connect_and_configure,
                       what='CARLA server at %s:%s' % (self._host, self._port),
                       **self._reconnect)
    self._needs_reconnect = False

  def _server_alive(self):
    try:
      self._client.get_server_version()
      return True
    except RuntimeError:
      return False

  def _restore_world(self):
    """Leaves the world asynchronous with a variable time step, CARLA's default.

    Not "the settings found on connect": those may be a crashed run's
    synchronous ones, which would freeze the server for every later client.
    """
    if self._traffic_manager is not None:
      try:
        self._traffic_manager.set_synchronous_mode(False)
      except RuntimeError as error:
        logging.warning('could not release the traffic manager: %s', error)
    if self._world is not None:
      try:
        settings = self._world.get_settings()
        settings.synchronous_mode = False
        settings.fixed_delta_seconds = None
        settings.no_rendering_mode = False
        self._world.apply_settings(settings)
      except RuntimeError as error:
        logging.warning('could not restore the CARLA world settings: %s', error)

  def close(self):
    """Destroys sensors and actors, then restores the world settings (even if that fails).

    After a fault, a server that no longer answers is not cleaned up: every
    call would wait a full timeout for nothing.
    """
    if self._client is None or (self._needs_reconnect and not self._server_alive()):
      self._clear_episode_state()
      self._client = self._world = self._map = self._traffic_manager = None
      return
    try:
      self._destroy_actors()
    finally:
      self._restore_world()
      self._client = self._world = self._map = self._traffic_manager = None

  # ---- actors ----

  def _clear_episode_state(self):
    self._ego = None
    self._sensors = []
    self._traffic = []
    self._camera_queue = SensorBuffer(self._sensor_buffer_size)
    self._lidar_queue = SensorBuffer(self._sensor_buffer_size)
    self._collision_frames = []
    self._route_waypoints = []
    self._route_xy = np.zeros((0, 2))
    self._route_arc = np.zeros((0,))
    self._route_quads = PolygonIndex(np.zeros((0, 4, 2)))
    self._route_segment = 0
    self._route_replans = 0
    self._route_arc_origin = 0.0
    self._arc_length = 0.0
    self._step_count = 0
    self._slow_steps = 0
    self._previous_steer = 0.0
    self._last_observation = None

  def _destroy_actors(self):
    """Stops and destroys sensors first (their callbacks must not outlive them), then vehicles."""
    for sensor in self._sensors:
      try:
        sensor.stop()
        sensor.destroy()
      except RuntimeError as error:
        logging.warning('could not destroy sensor: %s', error)
    vehicle_ids = [actor.id for actor in self._traffic]
    if self._ego is not None:
      vehicle_ids.append(self._ego.id)
    if vehicle_ids and self._client is not None and self._carla is not None:
      try:
        self._client.apply_batch_sync(
            [self._carla.command.DestroyActor(i) for i in vehicle_ids], False)
      except RuntimeError as error:
        logging.warning('could not destroy vehicles: %s', error)
    self._clear_episode_state()

  def _spawn_ego(self, spawn_points):
    blueprint = self._world.get_blueprint_library().find(self._ego_blueprint)
    blueprint.set_attribute('role_name', ROLE_PREFIX + '_hero')
    order = self._rng.permutation(len(spawn_points))
    for index in order[:self._spawn_retries]:
      lane = self._map.get_waypoint(spawn_points[index].location)
      if lane is None or not lane.next(self._route_spacing):
        continue  # A dead end leaves no route to follow.
      ego = self._world.try_spawn_actor(blueprint, spawn_points[index])
      if ego is not None:
        return ego, int(index)
    raise CarlaSpawnError('could not spawn %s at any of %d random spawn points of %s'
                          % (self._ego_blueprint, min(self._spawn_retries,
                                                      len(spawn_points)), self._town))

  def _spawn_sensors(self):
    carla, library = self._carla, self._world.get_blueprint_library()
    camera_bp = library.find('sensor.camera.rgb')
    camera_bp.set_attribute('image_size_x', str(self._image_size))
    camera_bp.set_attribute('image_size_y', str(self._image_size))
    camera_bp.set_attribute('fov', str(self._camera_fov))
    lidar_bp = library.find('sensor.lidar.ray_cast')
    for key, value in self._lidar_blueprint.items():
      lidar_bp.set_attribute(key, str(value))
    # One full turn per tick, so every tick's sweep covers 360 degrees.
    for key, value in (('range', self._lidar['range']),
                       ('channels', self._lidar['channels']),
                       ('points_per_second', self._lidar['points_per_second']),
                       ('rotation_frequency', 1.0 / self._dt),
                       ('upper_fov', self._lidar['upper_fov']),
                       ('lower_fov', self._lidar['lower_fov'])):
      lidar_bp.set_attribute(key, str(value))
    collision_bp = library.find('sensor.other.collision')
    for blueprint, name in ((camera_bp, 'camera'), (lidar_bp, 'lidar'),
                            (collision_bp, 'collision')):
      blueprint.set_attribute('role_name', '%s_%s' % (ROLE_PREFIX, name))
    camera = self._world.spawn_actor(
        camera_bp, carla.Transform(carla.Location(x=1.5, z=2.0)), attach_to=self._ego)
    self._sensors.append(camera)
    lidar = self._world.spawn_actor(
        lidar_bp, carla.Transform(carla.Location(z=self._lidar['height'])),
        attach_to=self._ego)
    self._sensors.append(lidar)
    collision = self._world.spawn_actor(collision_bp, carla.Transform(),
                                        attach_to=self._ego)
    self._sensors.append(collision)
    camera.listen(self._camera_queue.put)
    lidar.listen(self._lidar_queue.put)
    frames = self._collision_frames  # No reference to self inside CARLA's thread.
    collision.listen(lambda event: frames.append(event.frame))

  def _spawn_traffic(self, spawn_points, ego_index):
    if self._num_vehicles <= 0:
      return
    command = self._carla.command
    blueprints = [bp for bp in self._world.get_blueprint_library().filter('vehicle.*')
                  if not bp.has_attribute('number_of_wheels')
                  or int(bp.get_attribute('number_of_wheels')) == 4]
    free = [i for i in self._rng.permutation(len(spawn_points)) if i != ego_index]
    batch = []
    for index in free[:self._num_vehicles]:
      blueprint = blueprints[self._rng.integers(len(blueprints))]
      blueprint.set_attribute('role_name', ROLE_PREFIX + '_traffic')
      batch.append(command.SpawnActor(blueprint, spawn_points[index]).then(
          command.SetAutopilot(command.FutureActor, True, self._tm_port)))
    responses = self._client.apply_batch_sync(batch, True)
    ids = [response.actor_id for response in responses if not response.error]
    self._traffic = list(self._world.get_actors(ids))

  # ---- route ----

  def _extend_route(self):
    """Follows lanes ahead (random branch at junctions) until route_lookahead is covered."""
    waypoint = self._route_waypoints[-1]
    covered = self._route_arc[-1] if len(self._route_arc) else self._route_arc_origin
    length = covered - self._arc_length
    added = []
    while length < self._route_lookahead:
      choices = waypoint.next(self._route_spacing)
      if not choices:
        break
      waypoint = choices[self._rng.integers(len(choices))]
      added.append(waypoint)
      length += self._route_spacing
    if not added and len(self._route_arc):
      return
    self._route_waypoints.extend(added)
    waypoints = self._route_waypoints
    self._route_xy = np.array([[w.transform.location.x, w.transform.location.y]
                               for w in waypoints])
    yaws = np.array([w.transform.rotation.yaw for w in waypoints])
    widths = np.array([w.lane_width for w in waypoints])
    self._route_arc = route_arc_lengths(self._route_xy) + self._route_arc_origin
    self._route_quads = PolygonIndex(lane_segment_quads(
        self._route_xy[:-1], yaws[:-1], widths[:-1], self._route_xy[1:], yaws[1:],
        widths[1:]))

  def _replan_from(self, waypoint, ego_xy):
    """Restarts the route at `waypoint`, keeping the arc length continuous.

    The new route's arc length at the ego equals the last step's, so the step
    that re-plans earns no progress rather than a jump of either sign.
    """
    self._route_waypoints = [waypoint]
    self._route_arc = np.zeros((0,))
    self._route_arc_origin = self._arc_length
    self._extend_route()
    start = project_onto_route(self._route_xy, ego_xy, 0, 25, self._route_arc)
    shift = self._arc_length - start.arc_length
    self._route_arc_origin += shift
    self._route_arc = self._route_arc + shift
    self._route_segment = 0
    self._route_replans += 1

  def _road_quads(self):
    """Lane quads of every driving lane of the map, built once per map."""
    name = self._map.name
    if name not in self._road_quads_by_map:
      starts, ends = [], []
      for waypoint in self._map.generate_waypoints(self._road_spacing):
        for successor in waypoint.next(self._road_spacing):
          starts.append(waypoint)
          ends.append(successor)
      def arrays(waypoints):
        xy = np.array([[w.transform.location.x, w.transform.location.y]
                       for w in waypoints]).reshape(-1, 2)
        return (xy, np.array([w.transform.rotation.yaw for w in waypoints]),
                np.array([w.lane_width for w in waypoints]))
      self._road_quads_by_map[name] = PolygonIndex(
          lane_segment_quads(*arrays(starts), *arrays(ends)))
    return self._road_quads_by_map[name]

  # ---- episode ----

  def _reset(self):
    if self._needs_reconnect:
      self._reconnect_with_backoff()
    try:
      return self._start_episode()
    except SIMULATOR_FAULTS as error:
      logging.error('CARLA fault while resetting (%s); reconnecting once', error)
      self._reconnect_with_backoff()
      return self._start_episode()

  def _start_episode(self):
    self._destroy_actors()
    self._info = {'reason': None}
    spawn_points = self._map.get_spawn_points()
    self._ego, ego_index = self._spawn_ego(spawn_points)
    self._spawn_sensors()
    self._spawn_traffic(spawn_points, ego_index)
    # A new actor reports the origin until a tick; the spawn point is exact.
    start = self._map.get_waypoint(spawn_points[ego_index].location)
    self._route_waypoints = [start]
    self._extend_route()
    frame = self._world.tick(self._timeout_s)
    self._collision_frames.clear()  # Spawning can touch the ground hard.
    observation, _ = self._observe(frame)
    self._last_observation = observation
    return ts.restart(observation)

  def _step(self, action):
    throttle, brake, steer = action_to_control(action)
    try:
      self._collision_frames.clear()
      self._ego.apply_control(self._carla.VehicleControl(
          throttle=throttle, brake=brake, steer=steer))
      for _ in range(self._action_repeat):
        frame = self._world.tick(self._timeout_s)
      observation, measurements = self._observe(frame)
    except SIMULATOR_FAULTS as error:
      # Not the agent's fault: a truncation, so no false terminal is learnt.
      logging.error('CARLA fault mid-episode, ending it as %s: %s', SIMULATOR_ERROR, error)
      self._needs_reconnect = True
      self._info = {'reason': SIMULATOR_ERROR, 'error': str(error)}
      return ts.truncation(self._last_observation, np.float32(0.0), discount=1.0)

    self._step_count += 1
    collided = bool(self._collision_frames)
    progress = measurements['arc_length'] - self._arc_length
    self._arc_length = measurements['arc_length']
    terms = reward_terms(progress, measurements['speed'], collided,
                         measurements['lateral_offset'], steer, self._previous_steer,
                         **self._reward_kwargs)
    self._previous_steer = steer
    self._slow_steps = update_slow_steps(self._slow_steps, measurements['speed'],
                                         self._stuck_speed)
    off_road = is_off_road(measurements['lateral_offset'], self._off_road_distance,
                           measurements['on_driving_lane'])
    reason = termination_reason(collided, off_road, self._slow_steps, self._step_count,
                                self._stuck_steps, self._max_steps)
    self._info = {'reason': reason, 'reward_terms': terms, 'step': self._step_count,
                  'arc_length': self._arc_length, 'route_replans': self._route_replans}
    if reason is not None:
      logging.info('CARLA episode ended after %d steps: %s', self._step_count, reason)
    self._last_observation = observation
    if self._route_arc[-1] - self._arc_length < 0.5 * self._route_lookahead:
      self._extend_route()
    return make_time_step(observation, sum(terms.values()), reason,
                          self._terminal_reasons)

  def _observe(self, frame):
    """Sensor data of `frame` plus the ego's pose -> (observation dict, measurements)."""
    camera = wait_for_frame(self._camera_queue, frame, self._sensor_timeout_s)
    lidar = wait_for_frame(self._lidar_queue, frame, self._sensor_timeout_s)
    transform = self._ego.get_transform()
    ego_xy = np.array([transform.location.x, transform.location.y])
    ego_yaw = transform.rotation.yaw
    velocity = self._ego.get_velocity()
    speed = math.sqrt(velocity.x**2 + velocity.y**2 + velocity.z**2)
    box = self._ego.bounding_box

    window_start = max(self._route_segment - 2, 0)
    projection = project_onto_route(self._route_xy, ego_xy, window_start, 25,
                                    self._route_arc)
    lane = self._map.get_waypoint(transform.location, project_to_road=False,
                                  lane_type=self._carla.LaneType.Driving)
    if (lane is not None and abs(projection.lateral_offset) > self._route_replan_distance
        and abs(heading_error(ego_yaw, lane.transform.rotation.yaw)) < math.pi / 2):
      # The ego left the planned branch for another legal lane (the other
      # turn at a junction, a lane change): the sensors cannot show which
      # branch was planned, so follow the lane it took instead of punishing it.
      self._replan_from(lane, ego_xy)
      projection = project_onto_route(self._route_xy, ego_xy, 0, 25, self._route_arc)
    self._route_segment = projection.segment
    on_lane = lane is not None

    others_xy, others_boxes = [], []
    for actor in self._traffic:
      other = actor.get_transform()
      other_box = actor.bounding_box
      centre = other.transform(other_box.location)
      others_xy.append([centre.x, centre.y])
      others_boxes.append(box_polygon([centre.x, centre.y], other.rotation.yaw,
                                      other_box.extent.x, other_box.extent.y))
    ego_centre = transform.transform(box.location)
    radius = view_radius(self._geometry)
    birdeye = render_semantic_birdeye(
        self._geometry, ego_xy, ego_yaw,
        road_polygons=self._road_quads().near(ego_xy, radius),
        route_polygons=self._route_quads.near(ego_xy, radius),
        vehicle_polygons=cull_polygons(np.reshape(others_boxes, (-1, 4, 2)), ego_xy,
                                       radius),
        ego_polygon=box_polygon([ego_centre.x, ego_centre.y], ego_yaw, box.extent.x,
                                box.extent.y))
    lidar_image = lidar_to_birdeye(
        lidar_to_points(lidar), self._geometry, lidar_range=self._lidar['range'],
        lidar_height=self._lidar['height'],
        ground_tolerance=self._lidar['ground_tolerance'],
        max_height=self._lidar['max_height'],
        exclude_half_extent=(box.extent.x + 0.2, box.extent.y + 0.2))
    state = state_vector(
        projection.lateral_offset, heading_error(ego_yaw, projection.yaw_deg), speed,
        front_vehicle_distance(ego_xy, ego_yaw, others_xy,
                               max_distance=self._front_max_distance))
    observation = collections.OrderedDict(
        camera=camera_to_rgb(image_to_bgra(camera), self._image_size),
        lidar=lidar_image, birdeye=birdeye, state=state)
    measurements = dict(arc_length=projection.arc_length, speed=speed,
                        lateral_offset=projection.lateral_offset,
                        on_driving_lane=on_lane)
    return observation, measurements

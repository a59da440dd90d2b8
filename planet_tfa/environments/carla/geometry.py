"""Bird's-eye images from world geometry and sensor data, all numpy (tested without a server).

Frames: CARLA is left-handed with z up. Seen from above, yaw turns +x towards
+y; a vehicle with yaw psi faces (cos psi, sin psi) and its right-hand side is
(-sin psi, cos psi). Sensor-frame lidar points are x forward, y right, z up.
Bird's-eye images put forward up (smaller row) and right to the right (larger
column); the ego sits at the centre of pixel (ego_row, ego_col).
"""
import collections
import math

import numpy as np
from PIL import Image

# Semantic bird's-eye channel values.
ROAD_VALUE = 128
ROUTE_VALUE = 255
VEHICLE_VALUE = 255
EGO_VALUE = 255
# A traffic light's stop line, in the vehicles' channel (under the vehicles),
# by carla.TrafficLightState name; drawn unless the lights are frozen green.
TRAFFIC_LIGHT_VALUES = {'Red': 192, 'Yellow': 128, 'Green': 64}
STOP_LINE_LENGTH = 1.0  # metres along the lane


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

  def near_mask(self, xy, radius):
    distance = np.linalg.norm(self.centres - np.asarray(xy, np.float64), axis=-1)
    return distance <= radius + self.radii

  def near(self, xy, radius):
    return self.polygons[self.near_mask(xy, radius)]


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
                            route_polygons=(), vehicle_polygons=(), ego_polygon=None,
                            stop_lines=()):
  """World-frame polygons -> uint8 [S, S, 3] mask in the ego frame.

  Channel 0: road (ROAD_VALUE), overdrawn by the planned route (ROUTE_VALUE).
  Channel 1: traffic lights' stop lines, `stop_lines` = [(polygons, value)]
  (TRAFFIC_LIGHT_VALUES), overdrawn by other vehicles' boxes. Channel 2: the
  ego's box.
  """
  size = geometry.image_size
  mask = np.zeros((size, size, 3), np.uint8)
  layers = ((0, road_polygons, ROAD_VALUE), (0, route_polygons, ROUTE_VALUE))
  layers += tuple((1, polygons, value) for polygons, value in stop_lines)
  layers += ((1, vehicle_polygons, VEHICLE_VALUE),
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

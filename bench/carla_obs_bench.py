"""Cost of building one CARLA observation (bird's-eye mask + lidar image), no server.

    python -m bench.carla_obs_bench [--quick] [--repeats 60] [--min_time_s 2]

A synthetic town of CARLA's shape: a 4 x 4 grid of 400 m roads, two lanes each
way (3.5 m), cut into 2 m lane quads as `carla.env.CarlaEnv._road_quads` does (about
13k quads, Town03's order), a 100 m route, 20 vehicles around the ego, and a
full lidar sweep of 100k points/s at 20 Hz (5,000 points). Times the
bird's-eye mask as it was built before issue 12 (polygons culled by vertex at
a 55 m radius, sqrt(2) x image extent + 10 m, one rasterize call per polygon)
and now (a polygon index culled at the farthest image corner, ~29 m, all
polygons rasterized at once), checks both give the same mask, and times
`lidar_to_birdeye` on a full sweep and on CARLA's default 45 % drop-off.
"""
import argparse
import math

import numpy as np

from bench import common
from planet_tfa.environments.carla import geometry as carla_geometry


def synthetic_town(rng, blocks=4, road_length=400.0, spacing=2.0, lane_width=3.5):
  """Lane quads [N, 4, 2] of a grid of straight roads with two lanes each way."""
  starts, ends, yaws = [], [], []
  offsets = lane_width * np.array([-1.5, -0.5, 0.5, 1.5])
  along = np.arange(0.0, road_length, spacing)
  for k in range(blocks + 1):
    at = k * road_length / blocks
    for offset in offsets:
      heading = 0.0 if offset > 0 else 180.0
      starts.append(np.stack([along, np.full_like(along, at + offset)], -1))
      ends.append(np.stack([along + spacing, np.full_like(along, at + offset)], -1))
      yaws.append(np.full_like(along, heading))
      starts.append(np.stack([np.full_like(along, at + offset), along], -1))
      ends.append(np.stack([np.full_like(along, at + offset), along + spacing], -1))
      yaws.append(np.full_like(along, heading + 90.0))
  starts, ends, yaws = np.concatenate(starts), np.concatenate(ends), np.concatenate(yaws)
  widths = np.full(len(starts), lane_width)
  del rng
  return carla_geometry.lane_segment_quads(starts, yaws, widths, ends, yaws, widths)


def old_view_radius(geometry):
  """The radius before issue 12: sqrt(2) x the image's side in metres, plus 10 m."""
  return math.sqrt(2.0) * geometry.image_size * geometry.meters_per_pixel + 10.0


def old_cull(polygons, ego_xy, radius):
  distance = np.linalg.norm(polygons - np.asarray(ego_xy), axis=-1).min(-1)
  return polygons[distance <= radius]


def old_render(geometry, ego_xy, ego_yaw, layers):
  """The mask before issue 12: one rasterize call per polygon."""
  mask = np.zeros((geometry.image_size, geometry.image_size, 3), np.uint8)
  for channel, polygons, value in layers:
    for polygon in polygons:
      polygon_rc = carla_geometry.ego_to_pixel(
          carla_geometry.world_to_ego(polygon, ego_xy, ego_yaw), geometry)
      carla_geometry.rasterize_polygon(mask[:, :, channel], polygon_rc, value)
  return mask


def lidar_sweep(rng, points=5000, drop_rate=0.0):
  azimuth = rng.uniform(0, 2 * np.pi, points)
  distance = rng.uniform(2.0, 32.0, points)
  z = rng.uniform(-2.4, 1.0, points)
  sweep = np.stack([distance * np.cos(azimuth), distance * np.sin(azimuth), z,
                    rng.uniform(0, 1, points)], -1).astype(np.float32)
  return sweep[rng.random(points) >= drop_rate]


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true')
  parser.add_argument('--repeats', type=int, default=60, help='at least this many timed calls')
  parser.add_argument('--warmup', type=int, default=5)
  parser.add_argument('--min_time_s', type=float, default=2.0,
                      help='time calls until at least this much is spent per figure')
  args = parser.parse_args(argv)
  if args.quick:
    args.repeats, args.warmup, args.min_time_s = 5, 1, 0.0
  return args


def main(argv=None):
  args = parse_args(argv)
  rng = np.random.default_rng(0)
  geometry = carla_geometry.birdeye_geometry(64, 0.5, (0.75, 0.5))
  road = synthetic_town(rng)
  ego_xy, ego_yaw = np.array([150.0, 1.75]), 0.0
  route = road[(np.abs(road[:, 0, 1] - 1.75) < 1.0) & (road[:, 0, 0] >= 150.0)
               & (road[:, 0, 0] < 250.0) & (road[:, 0, 0] < road[:, 1, 0] + 1.0)]
  vehicles = np.stack([carla_geometry.box_polygon(ego_xy + rng.uniform(-40, 40, 2),
                                                  rng.uniform(-180, 180), 2.4, 1.0)
                       for _ in range(20)])
  ego_box = carla_geometry.box_polygon(ego_xy, ego_yaw, 2.4, 1.0)

  def before():
    radius = old_view_radius(geometry)
    return old_render(geometry, ego_xy, ego_yaw, (
        (0, old_cull(road, ego_xy, radius), carla_geometry.ROAD_VALUE),
        (0, old_cull(route, ego_xy, radius), carla_geometry.ROUTE_VALUE),
        (1, old_cull(vehicles, ego_xy, radius), carla_geometry.VEHICLE_VALUE),
        (2, [ego_box], carla_geometry.EGO_VALUE)))

  # As CarlaEnv does: indexes built once per map / route, culled every step.
  road_index, route_index = carla_geometry.PolygonIndex(road), carla_geometry.PolygonIndex(route)

  def after():
    radius = carla_geometry.view_radius(geometry)
    return carla_geometry.render_semantic_birdeye(
        geometry, ego_xy, ego_yaw, road_polygons=road_index.near(ego_xy, radius),
        route_polygons=route_index.near(ego_xy, radius),
        vehicle_polygons=carla_geometry.cull_polygons(vehicles, ego_xy, radius),
        ego_polygon=ego_box)

  # The faster cull must not lose a pixel.
  assert np.array_equal(before(), after()), 'the derived radius changed the mask'
  info = common.machine_info()
  for label, function, radius in (('before', before, old_view_radius(geometry)),
                                  ('after', after, carla_geometry.view_radius(geometry))):
    times = common.timed(function, args.repeats, args.warmup, args.min_time_s)
    common.emit(f'carla_birdeye_ms_{label}', round(1e3 * np.median(times), 2), 'ms',
                radius_m=round(radius, 1), road_quads=len(road),
                quads_drawn=len(old_cull(road, ego_xy, radius)) if label == 'before'
                else len(road_index.near(ego_xy, radius)),
                **common.summarize_ms(times), **info)
  for label, drop in (('full_sweep', 0.0), ('default_dropoff', 0.45)):
    sweep = lidar_sweep(rng, drop_rate=drop)
    times = common.timed(lambda s=sweep: carla_geometry.lidar_to_birdeye(s, geometry),
                         args.repeats, args.warmup, args.min_time_s)
    common.emit(f'carla_lidar_image_ms_{label}', round(1e3 * np.median(times), 2),
                'ms', points=len(sweep), **common.summarize_ms(times))


if __name__ == '__main__':
  main()

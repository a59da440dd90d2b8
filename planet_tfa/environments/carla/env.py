"""CarlaEnv: the ego vehicle in a synchronous CARLA 0.9.16 world as a TF-Agents PyEnvironment.

The array work (specs, bird's-eye rendering, route projection, reward) lives
in the sibling modules as numpy functions; this module spawns actors, ticks
the world and hands simulator data to them.
"""
import collections
import logging
import math

import gin
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.trajectories import time_step as ts

from planet_tfa.environments.carla import client
from planet_tfa.environments.carla import errors
from planet_tfa.environments.carla import geometry
from planet_tfa.environments.carla import reward
from planet_tfa.environments.carla import route
from planet_tfa.environments.carla import specs


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
               terminal_reasons=reward.TERMINAL_REASONS,
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
    self._port, self._tm_port = client.instance_ports(port, tm_port, instance, port_stride)
    self._host, self._timeout_s = host, float(timeout_s)
    self._load_world_timeout_s = float(load_world_timeout_s)
    self._town, self._weather, self._seed = town, weather, seed
    self._no_rendering_mode = bool(no_rendering_mode)
    self._num_vehicles, self._ego_blueprint = int(num_vehicles), ego_blueprint
    self._dt, self._action_repeat = float(fixed_delta_seconds), int(action_repeat)
    self._max_steps, self._image_size, self._camera_fov = max_steps, image_size, camera_fov
    self._geometry = geometry.birdeye_geometry(image_size, meters_per_pixel, ego_position)
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
    self._observation_spec = specs.observation_spec(image_size, specs.STATE_SIZE)
    self._action_spec = specs.action_spec()
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
    self._carla = client.import_carla()
    self._client = client.connect(self._host, self._port, self._timeout_s, self._check_version)
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
      raise errors.CarlaPortError(
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
                 if actor.attributes.get('role_name', '').startswith(client.ROLE_PREFIX)]
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
    client.retry_with_backoff(self._connect_and_configure,
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
    self._camera_queue = client.SensorBuffer(self._sensor_buffer_size)
    self._lidar_queue = client.SensorBuffer(self._sensor_buffer_size)
    self._collision_frames = []
    self._route_waypoints = []
    self._route_xy = np.zeros((0, 2))
    self._route_arc = np.zeros((0,))
    self._route_quads = geometry.PolygonIndex(np.zeros((0, 4, 2)))
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
    blueprint.set_attribute('role_name', client.ROLE_PREFIX + '_hero')
    order = self._rng.permutation(len(spawn_points))
    for index in order[:self._spawn_retries]:
      lane = self._map.get_waypoint(spawn_points[index].location)
      if lane is None or not lane.next(self._route_spacing):
        continue  # A dead end leaves no route to follow.
      ego = self._world.try_spawn_actor(blueprint, spawn_points[index])
      if ego is not None:
        return ego, int(index)
    raise errors.CarlaSpawnError('could not spawn %s at any of %d random spawn points of %s'
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
      blueprint.set_attribute('role_name', '%s_%s' % (client.ROLE_PREFIX, name))
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
      blueprint.set_attribute('role_name', client.ROLE_PREFIX + '_traffic')
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
    self._route_arc = route.route_arc_lengths(self._route_xy) + self._route_arc_origin
    self._route_quads = geometry.PolygonIndex(geometry.lane_segment_quads(
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
    start = route.project_onto_route(self._route_xy, ego_xy, 0, 25, self._route_arc)
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
      self._road_quads_by_map[name] = geometry.PolygonIndex(
          geometry.lane_segment_quads(*arrays(starts), *arrays(ends)))
    return self._road_quads_by_map[name]

  # ---- episode ----

  def _reset(self):
    if self._needs_reconnect:
      self._reconnect_with_backoff()
    try:
      return self._start_episode()
    except errors.SIMULATOR_FAULTS as error:
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
    throttle, brake, steer = specs.action_to_control(action)
    try:
      self._collision_frames.clear()
      self._ego.apply_control(self._carla.VehicleControl(
          throttle=throttle, brake=brake, steer=steer))
      for _ in range(self._action_repeat):
        frame = self._world.tick(self._timeout_s)
      observation, measurements = self._observe(frame)
    except errors.SIMULATOR_FAULTS as error:
      # Not the agent's fault: a truncation, so no false terminal is learnt.
      logging.error('CARLA fault mid-episode, ending it as %s: %s', reward.SIMULATOR_ERROR, error)
      self._needs_reconnect = True
      self._info = {'reason': reward.SIMULATOR_ERROR, 'error': str(error)}
      return ts.truncation(self._last_observation, np.float32(0.0), discount=1.0)

    self._step_count += 1
    collided = bool(self._collision_frames)
    progress = measurements['arc_length'] - self._arc_length
    self._arc_length = measurements['arc_length']
    terms = reward.reward_terms(progress, measurements['speed'], collided,
                                measurements['lateral_offset'], steer, self._previous_steer,
                                **self._reward_kwargs)
    self._previous_steer = steer
    self._slow_steps = reward.update_slow_steps(self._slow_steps, measurements['speed'],
                                                self._stuck_speed)
    off_road = reward.is_off_road(measurements['lateral_offset'], self._off_road_distance,
                                  measurements['on_driving_lane'])
    reason = reward.termination_reason(collided, off_road, self._slow_steps, self._step_count,
                                       self._stuck_steps, self._max_steps)
    self._info = {'reason': reason, 'reward_terms': terms, 'step': self._step_count,
                  'arc_length': self._arc_length, 'route_replans': self._route_replans}
    if reason is not None:
      logging.info('CARLA episode ended after %d steps: %s', self._step_count, reason)
    self._last_observation = observation
    if self._route_arc[-1] - self._arc_length < 0.5 * self._route_lookahead:
      self._extend_route()
    return reward.make_time_step(observation, sum(terms.values()), reason,
                                 self._terminal_reasons)

  def _observe(self, frame):
    """Sensor data of `frame` plus the ego's pose -> (observation dict, measurements)."""
    camera = client.wait_for_frame(self._camera_queue, frame, self._sensor_timeout_s)
    lidar = client.wait_for_frame(self._lidar_queue, frame, self._sensor_timeout_s)
    transform = self._ego.get_transform()
    ego_xy = np.array([transform.location.x, transform.location.y])
    ego_yaw = transform.rotation.yaw
    velocity = self._ego.get_velocity()
    speed = math.sqrt(velocity.x**2 + velocity.y**2 + velocity.z**2)
    box = self._ego.bounding_box

    window_start = max(self._route_segment - 2, 0)
    projection = route.project_onto_route(self._route_xy, ego_xy, window_start, 25,
                                          self._route_arc)
    lane = self._map.get_waypoint(transform.location, project_to_road=False,
                                  lane_type=self._carla.LaneType.Driving)
    if (lane is not None and abs(projection.lateral_offset) > self._route_replan_distance
        and abs(route.heading_error(ego_yaw, lane.transform.rotation.yaw)) < math.pi / 2):
      # The ego left the planned branch for another legal lane (the other
      # turn at a junction, a lane change): the sensors cannot show which
      # branch was planned, so follow the lane it took instead of punishing it.
      self._replan_from(lane, ego_xy)
      projection = route.project_onto_route(self._route_xy, ego_xy, 0, 25, self._route_arc)
    self._route_segment = projection.segment
    on_lane = lane is not None

    others_xy, others_boxes = [], []
    for actor in self._traffic:
      other = actor.get_transform()
      other_box = actor.bounding_box
      centre = other.transform(other_box.location)
      others_xy.append([centre.x, centre.y])
      others_boxes.append(geometry.box_polygon([centre.x, centre.y], other.rotation.yaw,
                                               other_box.extent.x, other_box.extent.y))
    ego_centre = transform.transform(box.location)
    radius = geometry.view_radius(self._geometry)
    birdeye = geometry.render_semantic_birdeye(
        self._geometry, ego_xy, ego_yaw,
        road_polygons=self._road_quads().near(ego_xy, radius),
        route_polygons=self._route_quads.near(ego_xy, radius),
        vehicle_polygons=geometry.cull_polygons(np.reshape(others_boxes, (-1, 4, 2)), ego_xy,
                                                radius),
        ego_polygon=geometry.box_polygon([ego_centre.x, ego_centre.y], ego_yaw, box.extent.x,
                                         box.extent.y))
    lidar_image = geometry.lidar_to_birdeye(
        geometry.lidar_to_points(lidar), self._geometry, lidar_range=self._lidar['range'],
        lidar_height=self._lidar['height'],
        ground_tolerance=self._lidar['ground_tolerance'],
        max_height=self._lidar['max_height'],
        exclude_half_extent=(box.extent.x + 0.2, box.extent.y + 0.2))
    state = route.state_vector(
        projection.lateral_offset, route.heading_error(ego_yaw, projection.yaw_deg), speed,
        route.front_vehicle_distance(ego_xy, ego_yaw, others_xy,
                                     max_distance=self._front_max_distance))
    observation = collections.OrderedDict(
        camera=geometry.camera_to_rgb(geometry.image_to_bgra(camera), self._image_size),
        lidar=lidar_image, birdeye=birdeye, state=state)
    measurements = dict(arc_length=projection.arc_length, speed=speed,
                        lateral_offset=projection.lateral_offset,
                        on_driving_lane=on_lane)
    return observation, measurements

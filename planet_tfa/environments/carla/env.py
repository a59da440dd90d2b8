"""CarlaEnv: the ego vehicle in a synchronous CARLA 0.9.16 world as a TF-Agents PyEnvironment.

The array work (specs, bird's-eye rendering, route projection, reward) lives
in the sibling modules as numpy functions; this module spawns actors, ticks
the world and hands simulator data to them.
"""
import collections
import dataclasses
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
from planet_tfa.environments.carla import settings
from planet_tfa.environments.carla import specs


@gin.configurable
class CarlaEnv(py_environment.PyEnvironment):
  """Ego vehicle in synchronous CARLA with Traffic-Manager traffic; one tick per repeat.

  Connects in the constructor (fails fast with CarlaConnectionError). A
  simulator fault mid-episode cuts the episode at its last real step: the
  step reconnects with exponential backoff and returns the FIRST step of a
  new episode (get_info()['cut_short'] == 'simulator_error'), never a made-up
  last step; the replay's episode writer (replay/observers.py) ends the cut
  episode at the last observation it has, as a truncation. A server that does
  not come back fails the step with CarlaConnectionError.

  One env owns one server's world: it ticks it, and on connect it destroys
  what an earlier env of its instance left (actors tagged
  client.instance_tag(instance), and the `hero` ego their sensors ride) and
  sets the world settings explicitly. Close it (or use it as a context
  manager) to put the world back in asynchronous mode: a synchronous server
  left without its ticking client freezes every later client.

  `set_autopilot(True)` hands the ego to CARLA's Traffic Manager (the expert
  of train_eval.expert='autopilot'): from then on every episode's ego drives
  the planned route under the TM, the action passed to `step` is ignored, and
  `applied_action()` is the control the TM applied in that step (the mean of
  `ego.get_control()` over its ticks, mapped back into the action range): what
  the replay records as the step's action.

  Its settings come in groups (settings.py: CarlaServer, CarlaWorld,
  CarlaSensors, CarlaLidar, CarlaRoute, CarlaReward, CarlaEpisode,
  CarlaAutopilot). `instance`
  K (a collector's number) moves both the simulator port and the Traffic
  Manager port up by K * CarlaServer.port_stride, so N processes on one host
  talk to N servers without colliding.
  """

  def __init__(self, server=None, world=None, sensors=None, lidar=None, route=None,
               reward=None, episode=None, autopilot=None, seed=0, instance=0):
    """Groups left None take their gin-configured settings (CarlaServer, ...; settings.py).

    `seed` (spawn points, traffic, route branches, Traffic Manager; None: random)
    and `instance` are per env, so they stay here: the run passes them.
    """
    super().__init__(handle_auto_reset=True)
    self._server_settings = server = server or settings.ServerSettings()
    self._world_settings = world = world or settings.WorldSettings()
    self._sensor_settings = sensors = sensors or settings.SensorSettings()
    self._lidar_settings = lidar or settings.LidarSettings()
    self._route_settings = route or settings.RouteSettings()
    self._reward_settings = reward or settings.RewardSettings()
    self._episode_settings = episode or settings.EpisodeSettings()
    self._autopilot_settings = autopilot or settings.AutopilotSettings()
    self._autopilot = False
    self._applied_action = np.zeros(specs.action_spec().shape, np.float32)
    self._port, self._tm_port = client.instance_ports(server.port, server.tm_port, instance,
                                                      server.port_stride)
    self._tag = client.instance_tag(instance)
    self._dt = world.fixed_delta_seconds
    self._step_seconds = self._dt * self._episode_settings.action_repeat
    self._geometry = geometry.birdeye_geometry(sensors.image_size, sensors.meters_per_pixel,
                                               sensors.ego_position)
    self._observation_spec = specs.observation_spec(sensors.image_size, specs.STATE_SIZE)
    self._action_spec = specs.action_spec()
    self._seed = seed
    self._rng = np.random.default_rng(seed)

    self._carla = None
    self._client = self._world = self._map = self._traffic_manager = None
    self._world_id = None
    self._lost_ego = None  # (world id, actor id) of an ego a fault made this env forget
    self._stop_lines = None  # (PolygonIndex, light per polygon) unless lights are frozen
    self._light_values = {}
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
    return self._episode_settings.action_repeat

  def observation_spec(self):
    return self._observation_spec

  def action_spec(self):
    return self._action_spec

  def control_ranges(self):
    """What the action's [-1, 1] does physically here (specs.ControlRanges), limits included."""
    episode = self._episode_settings
    return specs.ControlRanges(steer_rad=math.radians(episode.max_steer_deg) * episode.steer_limit,
                               accel_mps2=episode.full_throttle_mps2,
                               decel_mps2=episode.full_brake_mps2 * episode.brake_limit)

  def get_info(self):
    """{'reason': None | 'collision' | ..., reward terms, ...}; after a fault also 'cut_short'."""
    return dict(self._info)

  # ---- the Traffic Manager as the expert ----

  def set_autopilot(self, enabled):
    """Hands the ego to the Traffic Manager (or takes it back), now and in every new episode."""
    self._autopilot = bool(enabled)
    if self._ego is None:
      return
    try:
      if self._autopilot:
        self._engage_autopilot()
      else:
        self._ego.set_autopilot(False, self._tm_port)
    except errors.SIMULATOR_FAULTS as error:
      # The next step meets the fault too and cuts the episode there.
      logging.error('CARLA fault while %s the autopilot: %s',
                    'engaging' if enabled else 'releasing', error)

  def applied_action(self):
    """The action the last step applied: the Traffic Manager's under the autopilot."""
    return self._applied_action.copy()

  def _perturbing(self):
    """Whether this autopilot step is one of a perturbation (DART-style exploration).

    At random (CarlaAutopilot.perturb_probability per step) the Traffic Manager
    hands the ego over for `perturb_steps` steps to its own last action plus one
    offset drawn with `perturb_std`, then takes back: the replay then holds the
    offsets and near misses a perfect driver never shows, and the expert's
    recovery from them. Those steps record the perturbed action, the one applied.
    """
    autopilot = self._autopilot_settings
    if not self._perturbation_steps_left:
      if not (autopilot.perturb_probability
              and self._rng.random() < autopilot.perturb_probability):
        return False
      self._perturbation_steps_left = autopilot.perturb_steps
      # The expert's last action, pushed off by one offset held for the whole hand-over.
      self._perturbed_action = (self._applied_action + self._rng.normal(
          0.0, autopilot.perturb_std, self._applied_action.shape)).astype(np.float32)
      self._ego.set_autopilot(False, self._tm_port)
    return True

  def _engage_autopilot(self):
    autopilot = self._autopilot_settings
    self._ego.set_autopilot(True, self._tm_port)
    tm = self._traffic_manager
    tm.auto_lane_change(self._ego, autopilot.lane_changes)
    tm.ignore_lights_percentage(self._ego, 100.0 if autopilot.ignore_lights else 0.0)
    if autopilot.speed is not None:
      tm.set_desired_speed(self._ego, autopilot.speed * 3.6)  # km/h
    self._send_route_to_autopilot()

  def _send_route_to_autopilot(self):
    """The planned route ahead as the Traffic Manager's path, so it takes the planned branches."""
    if not (self._autopilot and self._ego is not None
            and self._autopilot_settings.follow_route):
      return
    ahead = self._route_waypoints[self._route_segment + 1:]
    if ahead:
      self._traffic_manager.set_path(self._ego, [w.transform.location for w in ahead])

  def render(self, mode='rgb_array'):
    if mode != 'rgb_array':
      raise NotImplementedError('only rgb_array rendering is supported')
    return None if self._last_observation is None else self._last_observation['camera']

  # ---- connection / world ----

  def _connect_and_configure(self):
    """Connects, loads the town, clears our leftovers, sets synchronous mode (world and TM)."""
    server, world = self._server_settings, self._world_settings
    self._carla = client.import_carla()
    self._client = client.connect(server.host, self._port, server.timeout_s,
                                  server.check_version)
    self._world = self._client.get_world()  # what close() restores if loading fails
    self._world, self._map = client.load_town(self._client, self._world, world.town,
                                              server.timeout_s, server.load_world_timeout_s)
    self._world_id = self._world.id
    lost = self._lost_ego
    client.destroy_leftovers(self._client, self._world, self._tag,
                             [lost[1]] if lost and lost[0] == self._world_id else [])
    self._lost_ego = None
    client.set_synchronous(self._world, self._dt, world.no_rendering_mode)
    self._traffic_manager = client.synchronous_traffic_manager(
        self._client, self._tm_port, server.host, self._port, self._seed)
    client.set_weather(self._world, world.weather)
    self._set_up_traffic_lights()
    self._world.tick(server.timeout_s)

  def _set_up_traffic_lights(self):
    """Freezes the lights green (CarlaWorld.freeze_traffic_lights), else indexes their stop lines."""
    lights = client.traffic_lights(self._world)
    self._stop_lines = None
    if self._world_settings.freeze_traffic_lights:
      client.freeze_traffic_lights_green(self._carla, lights)
      return
    self._light_values = {int(getattr(self._carla.TrafficLightState, name)): value
                          for name, value in geometry.TRAFFIC_LIGHT_VALUES.items()}
    polygons, owners = [], []
    for light in lights:
      for stop in light.get_stop_waypoints():  # one per lane the light controls
        location = stop.transform.location
        polygons.append(geometry.box_polygon(
            [location.x, location.y], stop.transform.rotation.yaw,
            0.5 * geometry.STOP_LINE_LENGTH, 0.5 * stop.lane_width))
        owners.append(light)
    self._stop_lines = (geometry.PolygonIndex(np.reshape(polygons, (-1, 4, 2))), owners)

  def _reconnect_with_backoff(self):
    """After a fault: reconnect with backoff, giving up with CarlaConnectionError.

    The old actors are forgotten without RPCs (each would wait a full timeout
    on a dead server); connecting destroys them by their role_name tag, unless
    the server restarted and took them with it.
    """
    where = '%s:%s' % (self._server_settings.host, self._port)
    logging.warning('reconnecting to CARLA at %s', where)
    if self._ego is not None:
      # Its sensors may not be on it yet: remember it, for the same world only.
      self._lost_ego = (self._world_id, self._ego.id)
    for sensor in self._sensors:
      try:
        sensor.stop()
      except RuntimeError:
        pass
    self._clear_episode_state()
    self._client = self._world = self._map = self._traffic_manager = None
    client.retry_with_backoff(self._connect_and_configure, what='CARLA server at ' + where,
                              **self._server_settings.reconnect_kwargs())
    self._needs_reconnect = False

  def close(self):
    """Destroys sensors and actors, then restores the world settings (even if that fails).

    After a fault, a server that no longer answers is not cleaned up: every
    call would wait a full timeout for nothing.
    """
    if self._client is None or (self._needs_reconnect
                                and not client.server_alive(self._client)):
      self._clear_episode_state()
      self._client = self._world = self._map = self._traffic_manager = None
      return
    try:
      self._destroy_actors()
    finally:
      if self._world is not None and self._world_settings.freeze_traffic_lights:
        client.unfreeze_traffic_lights(self._world)
      client.restore_asynchronous(self._world, self._traffic_manager)
      self._client = self._world = self._map = self._traffic_manager = None

  # ---- actors ----

  def _clear_episode_state(self):
    self._ego = None
    self._sensors = []
    self._traffic = []
    self._camera_queue = client.SensorBuffer(self._sensor_settings.buffer_size)
    self._lidar_queue = client.SensorBuffer(self._sensor_settings.buffer_size)
    self._collisions = client.FrameEvents()
    self._first_frame = 0  # the episode's first observed frame: contacts up to it are the spawn's
    self._route_waypoints = []
    self._route_xy = np.zeros((0, 2))
    self._route_yaws = np.zeros((0,))
    self._route_in_junction = np.zeros((0,), bool)
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
    self._perturbation_steps_left = 0
    self._perturbed_action = None

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
    blueprint = self._world.get_blueprint_library().find(self._world_settings.ego_blueprint)
    blueprint.set_attribute('role_name', client.EGO_ROLE)
    order = self._rng.permutation(len(spawn_points))
    for index in order[:self._world_settings.spawn_retries]:
      lane = self._map.get_waypoint(spawn_points[index].location)
      if lane is None or not lane.next(self._route_settings.spacing):
        continue  # A dead end leaves no route to follow.
      ego = self._world.try_spawn_actor(blueprint, spawn_points[index])
      if ego is not None:
        return ego, int(index)
    world = self._world_settings
    raise errors.CarlaSpawnError('could not spawn %s at any of %d random spawn points of %s'
                                 % (world.ego_blueprint,
                                    min(world.spawn_retries, len(spawn_points)), world.town))

  def _spawn_sensors(self):
    carla, library = self._carla, self._world.get_blueprint_library()
    camera_bp = library.find('sensor.camera.rgb')
    for key, value in self._sensor_settings.camera_attributes().items():
      camera_bp.set_attribute(key, value)
    lidar_bp = library.find('sensor.lidar.ray_cast')
    # One full turn per tick, so every tick's sweep covers 360 degrees.
    for key, value in self._lidar_settings.blueprint_attributes(self._dt).items():
      lidar_bp.set_attribute(key, value)
    collision_bp = library.find('sensor.other.collision')
    for blueprint, name in ((camera_bp, 'camera'), (lidar_bp, 'lidar'),
                            (collision_bp, 'collision')):
      blueprint.set_attribute('role_name', '%s_%s' % (self._tag, name))
    camera = self._world.spawn_actor(
        camera_bp, carla.Transform(carla.Location(x=1.5, z=2.0)), attach_to=self._ego)
    self._sensors.append(camera)
    lidar = self._world.spawn_actor(
        lidar_bp, carla.Transform(carla.Location(z=self._lidar_settings.height)),
        attach_to=self._ego)
    self._sensors.append(lidar)
    collision = self._world.spawn_actor(collision_bp, carla.Transform(),
                                        attach_to=self._ego)
    self._sensors.append(collision)
    camera.listen(self._camera_queue.put)
    lidar.listen(self._lidar_queue.put)
    events = self._collisions  # No reference to self inside CARLA's thread.
    collision.listen(lambda event: events.add(event.frame))

  def _spawn_traffic(self, spawn_points, ego_index):
    if self._world_settings.num_vehicles <= 0:
      return
    command = self._carla.command
    blueprints = [bp for bp in self._world.get_blueprint_library().filter('vehicle.*')
                  if not bp.has_attribute('number_of_wheels')
                  or int(bp.get_attribute('number_of_wheels')) == 4]
    free = [i for i in self._rng.permutation(len(spawn_points)) if i != ego_index]
    batch = []
    for index in free[:self._world_settings.num_vehicles]:
      blueprint = blueprints[self._rng.integers(len(blueprints))]
      blueprint.set_attribute('role_name', self._tag + '_traffic')
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
    while length < self._route_settings.lookahead:
      choices = waypoint.next(self._route_settings.spacing)
      if not choices:
        break
      waypoint = choices[self._rng.integers(len(choices))]
      added.append(waypoint)
      length += self._route_settings.spacing
    if not added and len(self._route_arc):
      return
    self._route_waypoints.extend(added)
    waypoints = self._route_waypoints
    self._route_xy = np.array([[w.transform.location.x, w.transform.location.y]
                               for w in waypoints])
    yaws = np.array([w.transform.rotation.yaw for w in waypoints])
    self._route_yaws = yaws
    self._route_in_junction = np.array([bool(w.is_junction) for w in waypoints])
    widths = np.array([w.lane_width for w in waypoints])
    self._route_arc = route.route_arc_lengths(self._route_xy) + self._route_arc_origin
    self._route_quads = geometry.PolygonIndex(geometry.lane_segment_quads(
        self._route_xy[:-1], yaws[:-1], widths[:-1], self._route_xy[1:], yaws[1:],
        widths[1:]))
    self._send_route_to_autopilot()

  def _replan_from(self, waypoint, ego_xy):
    """Restarts the route at `waypoint`, keeping the arc length continuous; False: kept the plan.

    The new route's arc length at the ego equals the last step's, so the step
    that re-plans earns no progress rather than a jump of either sign.
    """
    waypoints = [waypoint]
    if not waypoint.next(self._route_settings.spacing):
      # No lane follows (a dead end): start one spacing back, so the route
      # has a segment under the ego; a lane too short for that is not followed.
      behind = waypoint.previous(self._route_settings.spacing)
      if not behind:
        return False
      waypoints = [behind[0], waypoint]
    self._route_waypoints = waypoints
    self._route_arc = np.zeros((0,))
    self._route_arc_origin = self._arc_length
    # Before extending: the extension sends the Traffic Manager the route from this segment
    # on, and the old segment index would cut the new route short (or send nothing).
    self._route_segment = 0
    self._extend_route()
    start = route.project_onto_route(self._route_xy, ego_xy, 0, 25, self._route_arc)
    shift = self._arc_length - start.arc_length
    self._route_arc_origin += shift
    self._route_arc = self._route_arc + shift
    self._route_replans += 1
    return True

  def _road_quads(self):
    """Lane quads of every driving lane of the map, built once per map."""
    name = self._map.name
    if name not in self._road_quads_by_map:
      starts, ends = [], []
      for waypoint in self._map.generate_waypoints(self._route_settings.road_spacing):
        for successor in waypoint.next(self._route_settings.road_spacing):
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
    # The ego drops from the spawn point, lands and settles, braked, before
    # the first observation: no landing, no start-up frame reaches the agent.
    self._ego.apply_control(self._carla.VehicleControl(brake=1.0))
    for _ in range(1 + max(self._episode_settings.settle_ticks, 0)):
      frame = self._world.tick(self._server_settings.timeout_s)
    observation, _ = self._observe(frame)
    self._first_frame = frame
    self._collisions.consume(frame)  # Landing can touch the ground hard.
    self._last_observation = observation
    self._applied_action = np.zeros_like(self._applied_action)
    if self._autopilot:
      self._engage_autopilot()  # The new ego, settled: the TM drives from the first step.
    return ts.restart(observation)

  def _step(self, action):
    episode = self._episode_settings
    replans = self._route_replans
    perturbed = False
    try:
      if self._autopilot:
        perturbed = self._perturbing()
      if self._autopilot and not perturbed:
        # The Traffic Manager drives; what it applied is the step's action.
        applied = []
        for _ in range(episode.action_repeat):
          frame = self._world.tick(self._server_settings.timeout_s)
          control = self._ego.get_control()
          applied.append(specs.control_to_action(control.throttle, control.brake,
                                                 control.steer, episode.steer_limit,
                                                 episode.brake_limit))
        self._applied_action = np.mean(applied, axis=0).astype(np.float32)
        steer = float(self._applied_action[1]) * episode.steer_limit
      else:
        if perturbed:
          action = self._perturbed_action
        self._applied_action = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        throttle, brake, steer = specs.action_to_control(self._applied_action,
                                                         episode.steer_limit,
                                                         episode.brake_limit)
        self._ego.apply_control(self._carla.VehicleControl(
            throttle=throttle, brake=brake, steer=steer))
        for _ in range(episode.action_repeat):
          frame = self._world.tick(self._server_settings.timeout_s)
        if perturbed:
          self._perturbation_steps_left -= 1
          if not self._perturbation_steps_left:
            self._engage_autopilot()  # the expert takes back, on the route from here
      observation, measurements = self._observe(frame)
    except errors.SIMULATOR_FAULTS as error:
      return self._restart_after_fault(error)

    self._step_count += 1
    # Every contact up to the observed frame, also one that arrived late; a
    # spawn's late one (up to the first frame) does not count.
    collided = any(f > self._first_frame for f in self._collisions.consume(frame))
    progress = measurements['arc_length'] - self._arc_length
    self._arc_length = measurements['arc_length']
    blocked = reward.is_blocked(measurements['front_distance'],
                                measurements['red_light_distance'], episode.wait_distance)
    terms = reward.reward_terms(progress, measurements['speed'], collided,
                                measurements['lateral_offset'], steer, self._previous_steer,
                                step_seconds=self._step_seconds, blocked=blocked,
                                **dataclasses.asdict(self._reward_settings))
    self._previous_steer = steer
    self._slow_steps = reward.update_slow_steps(self._slow_steps, measurements['speed'],
                                                episode.stuck_speed, blocked)
    off_road = reward.is_off_road(measurements['lateral_offset'], episode.off_road_distance,
                                  measurements['on_driving_lane'])
    reason = reward.termination_reason(collided, off_road, self._slow_steps, self._step_count,
                                       episode.stuck_steps, episode.max_steps)
    terms['stuck'] = reward.stuck_term(reason, self._reward_settings.stuck_penalty)
    terms['replan'] = reward.replan_term(self._route_replans > replans,
                                         self._reward_settings.replan_penalty)
    self._info = {'reason': reason, 'reward_terms': terms, 'step': self._step_count,
                  'arc_length': self._arc_length, 'route_replans': self._route_replans,
                  'blocked': blocked, 'expert_perturbed': perturbed}
    if reason is not None:
      logging.info('CARLA episode ended after %d steps: %s', self._step_count, reason)
    self._last_observation = observation
    if self._route_arc[-1] - self._arc_length < 0.5 * self._route_settings.lookahead:
      self._extend_route()
    return reward.make_time_step(observation, sum(terms.values()), reason,
                                 episode.terminal_reasons)

  def _restart_after_fault(self, error):
    """Cuts the episode at its last real step: reconnects and returns a new episode's FIRST step.

    Not the agent's fault, so no terminal; and no made-up last step either
    (the last observation again with reward 0 would be a transition the
    simulator never produced). The FIRST step right after a MID one tells the
    replay's episode writer that the episode ended at the observation it has.
    """
    logging.error('CARLA fault after %d steps of the episode (%s): cutting it at its last '
                  'real step and reconnecting', self._step_count, error)
    self._needs_reconnect = True
    time_step = self._reset()
    self._info = dict(self._info, cut_short=reward.SIMULATOR_ERROR, error=str(error))
    return time_step

  def _observe(self, frame):
    """Sensor data of `frame` plus the ego's pose -> (observation dict, measurements)."""
    camera = client.wait_for_frame(self._camera_queue, frame, self._sensor_settings.timeout_s)
    lidar = client.wait_for_frame(self._lidar_queue, frame, self._sensor_settings.timeout_s)
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
    if (lane is not None and abs(projection.lateral_offset) > self._route_settings.replan_distance
        and abs(route.heading_error(ego_yaw, lane.transform.rotation.yaw)) < math.pi / 2):
      # The ego left the planned branch for another legal lane (the other
      # turn at a junction, a lane change): the sensors cannot show which
      # branch was planned, so follow the lane it took instead of punishing it.
      if self._replan_from(lane, ego_xy):
        projection = route.project_onto_route(self._route_xy, ego_xy, 0, 25, self._route_arc)
    self._route_segment = projection.segment
    on_lane = lane is not None

    others_xy, others_boxes = [], []
    # Every vehicle in the world, not only the traffic this env spawned: a parked car or
    # another client's car blocks the lane as much (the gap ahead, the bird's-eye).
    for actor in self._world.get_actors().filter('vehicle.*'):
      if actor.id == self._ego.id:
        continue
      other = actor.get_transform()
      other_box = actor.bounding_box
      centre = other.transform(other_box.location)
      others_xy.append([centre.x, centre.y])
      others_boxes.append(geometry.box_polygon([centre.x, centre.y], other.rotation.yaw,
                                               other_box.extent.x, other_box.extent.y))
    ego_centre = transform.transform(box.location)
    radius = geometry.view_radius(self._geometry)
    stop_lines = collections.defaultdict(list)
    if self._stop_lines is not None:
      index, lights = self._stop_lines
      for k in np.flatnonzero(index.near_mask(ego_xy, radius)):
        value = self._light_values.get(int(lights[k].get_state()))
        if value:
          stop_lines[value].append(index.polygons[k])
    # A red stop line in the ego's corridor is a wall, as a car ahead is.
    red_lines = np.reshape(stop_lines.get(geometry.TRAFFIC_LIGHT_VALUES['Red'], []), (-1, 4, 2))
    red_light_distance = route.front_vehicle_distance(
        ego_xy, ego_yaw, red_lines.mean(axis=1),
        max_distance=self._sensor_settings.front_max_distance)
    birdeye = geometry.render_semantic_birdeye(
        self._geometry, ego_xy, ego_yaw,
        road_polygons=self._road_quads().near(ego_xy, radius),
        route_polygons=self._route_quads.near(ego_xy, radius),
        vehicle_polygons=geometry.cull_polygons(np.reshape(others_boxes, (-1, 4, 2)), ego_xy,
                                                radius),
        ego_polygon=geometry.box_polygon([ego_centre.x, ego_centre.y], ego_yaw, box.extent.x,
                                         box.extent.y),
        stop_lines=[(np.array(polygons), value) for value, polygons in stop_lines.items()])
    lidar_settings = self._lidar_settings
    lidar_image = geometry.lidar_to_birdeye(
        geometry.lidar_to_points(lidar), self._geometry, lidar_range=lidar_settings.range,
        lidar_height=lidar_settings.height, ground_tolerance=lidar_settings.ground_tolerance,
        max_height=lidar_settings.max_obstacle_height,
        exclude_half_extent=(box.extent.x + 0.2, box.extent.y + 0.2))
    front_distance = route.front_vehicle_distance(
        ego_xy, ego_yaw, others_xy, max_distance=self._sensor_settings.front_max_distance)
    state = route.state_vector(
        projection.lateral_offset, route.heading_error(ego_yaw, projection.yaw_deg), speed,
        front_distance)
    command = route.junction_command(self._route_arc, self._route_yaws,
                                     self._route_in_junction, projection.arc_length,
                                     self._route_settings.command_distance)
    observation = collections.OrderedDict(
        camera=geometry.camera_to_rgb(geometry.image_to_bgra(camera),
                                      self._sensor_settings.image_size),
        lidar=lidar_image, birdeye=birdeye, state=state,
        route=route.route_vector(
            command, route.route_points_ahead(self._route_xy, self._route_arc,
                                              projection.arc_length), ego_xy, ego_yaw))
    measurements = dict(arc_length=projection.arc_length, speed=speed,
                        lateral_offset=projection.lateral_offset,
                        on_driving_lane=on_lane, front_distance=front_distance,
                        red_light_distance=red_light_distance)
    return observation, measurements

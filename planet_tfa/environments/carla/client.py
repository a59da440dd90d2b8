"""Talking to a CARLA server: the lazily imported client, versions, ports, retries, sensor data.

`carla` is imported only inside `import_carla`, so this package (and its specs)
import without the CARLA wheel.
"""
import collections
import importlib.metadata
import logging
import queue
import re
import threading
import time

from planet_tfa.environments.carla import errors

CARLA_VERSION = '0.9.16'
INSTALL_HINT = "pip install -e '.[carla]'   (installs carla==%s)" % CARLA_VERSION

# Every actor this adapter spawns but the ego carries a role_name starting
# with its instance's tag, ROLE_PREFIX + '_<instance>' (instance_tag), so a new
# process can find and destroy what a crashed one of the same instance left in
# the world, and nothing of another instance on the same server.
ROLE_PREFIX = 'planet_tfa'
# The ego's role_name: CARLA streams the tiles of large maps around the
# vehicle called 'hero'. Leftover egos are found by the tagged sensors on them.
EGO_ROLE = 'hero'
# CARLA's server listens on port, port + 1 (streaming) and port + 2.
SERVER_PORTS = 3


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
    raise errors.CarlaVersionError(
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
      'environment at a running one with gin: CarlaServer.host = "..." and '
      'CarlaServer.port = ....' % (host, port, timeout_s, version, cause, version,
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
        'CarlaServer.port_stride=%d is too small: a CARLA server listens on %d consecutive '
        'ports (port, port+1 streaming, port+2), so instances need a stride of at least %d'
        % (port_stride, SERVER_PORTS, SERVER_PORTS))
  port += instance * port_stride
  tm_port += instance * port_stride
  if 0 <= tm_port - port < SERVER_PORTS:
    raise ValueError(
        'CarlaServer.tm_port=%d collides with the CARLA server ports %d-%d (CarlaServer.port); '
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
    raise errors.CarlaConnectionError(
        connection_error_message(host, port, version, timeout_s, error)) from error
  if check_version:
    check_versions(version, server_version)
  return client


def server_alive(client):
  try:
    client.get_server_version()
    return True
  except RuntimeError:
    return False


def load_town(client, world, town, timeout_s, load_world_timeout_s):
  """(world, map): the server's `world`, or `town` loaded if another one is (town None: any)."""
  town_map = world.get_map()
  if town and town_map.name.split('/')[-1] != town:
    client.set_timeout(load_world_timeout_s)
    try:
      world = client.load_world(town)
    finally:
      client.set_timeout(timeout_s)
    town_map = world.get_map()
  return world, town_map


def instance_tag(instance):
  """'planet_tfa_<instance>': the role_name prefix of env instance K's actors."""
  return '%s_%d' % (ROLE_PREFIX, int(instance))


def destroy_leftovers(client, world, tag, ego_ids=()):
  """Destroys what an earlier env with this tag left: a crashed run's, or ours before a fault.

  Actors whose role_name starts with `tag` + '_' are its, and so is the ego
  (role_name 'hero') that its sensors ride. `ego_ids`: egos of this world this
  process spawned and lost track of in a fault (before any sensor was on them).
  """
  carla = import_carla()
  actors = list(world.get_actors())
  tagged = [actor for actor in actors
            if actor.attributes.get('role_name', '').startswith(tag + '_')]
  ego_ids = set(ego_ids)
  for actor in tagged:
    parent = actor.parent
    if parent is not None:
      ego_ids.add(parent.id)
  tagged_ids = {actor.id for actor in tagged}
  leftovers = tagged + [actor for actor in actors
                        if actor.id in ego_ids and actor.id not in tagged_ids]
  if not leftovers:
    return
  logging.warning('destroying %d actor(s) an earlier run of this adapter (%s) left in the '
                  'world', len(leftovers), tag)
  # Sensors first: their streams must not outlive the vehicles they ride on.
  leftovers.sort(key=lambda actor: not actor.type_id.startswith('sensor.'))
  client.apply_batch_sync([carla.command.DestroyActor(actor.id) for actor in leftovers],
                          False)


def traffic_lights(world):
  return list(world.get_actors().filter('traffic.traffic_light*'))


def freeze_traffic_lights_green(carla, lights):
  for light in lights:
    light.set_state(carla.TrafficLightState.Green)
    light.freeze(True)


def unfreeze_traffic_lights(world):
  """Hands the lights back to their cycle; failures are logged, not raised."""
  try:
    world.freeze_all_traffic_lights(False)
  except RuntimeError as error:
    logging.warning('could not unfreeze the traffic lights: %s', error)


def set_synchronous(world, fixed_delta_seconds, no_rendering_mode):
  """Synchronous mode with a fixed tick, every setting explicit.

  None is inherited from whoever used the server before (a crashed run leaves
  it synchronous).
  """
  settings = world.get_settings()
  settings.synchronous_mode = True
  settings.fixed_delta_seconds = fixed_delta_seconds
  settings.no_rendering_mode = no_rendering_mode
  world.apply_settings(settings)


def synchronous_traffic_manager(client, tm_port, host, port, seed):
  """The Traffic Manager on tm_port, synchronous and seeded; CarlaPortError if the port is taken."""
  try:
    traffic_manager = client.get_trafficmanager(tm_port)
  except RuntimeError as error:
    if not server_alive(client):
      raise
    raise errors.CarlaPortError(
        'the Traffic Manager port %d is not free for the CARLA server at %s:%d: %s. '
        'Each process on a host needs its own server and TM port: set CarlaEnv.instance '
        '(collectors do) or CarlaServer.tm_port.' % (tm_port, host, port, error)) from error
  traffic_manager.set_synchronous_mode(True)
  if seed is not None:
    traffic_manager.set_random_device_seed(int(seed))
  return traffic_manager


def set_weather(world, preset):
  """Applies a carla.WeatherParameters preset by name (None or '': leaves the weather)."""
  if not preset:
    return
  carla = import_carla()
  weather = getattr(carla.WeatherParameters, preset, None)
  if not isinstance(weather, carla.WeatherParameters):
    raise ValueError('unknown CARLA weather preset %r (e.g. ClearNoon, WetCloudySunset)'
                     % preset)
  world.set_weather(weather)


def restore_asynchronous(world, traffic_manager):
  """Leaves the world asynchronous with a variable time step, CARLA's default.

  Not "the settings found on connect": those may be a crashed run's
  synchronous ones, which would freeze the server for every later client.
  Either may be None (never reached); failures are logged, not raised.
  """
  if traffic_manager is not None:
    try:
      traffic_manager.set_synchronous_mode(False)
    except RuntimeError as error:
      logging.warning('could not release the traffic manager: %s', error)
  if world is not None:
    try:
      settings = world.get_settings()
      settings.synchronous_mode = False
      settings.fixed_delta_seconds = None
      settings.no_rendering_mode = False
      world.apply_settings(settings)
    except RuntimeError as error:
      logging.warning('could not restore the CARLA world settings: %s', error)


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
    except errors.CarlaVersionError:
      raise
    except (errors.CarlaConnectionError,) + errors.SIMULATOR_FAULTS as error:
      last_error = error
      logging.warning('%s not back (attempt %d/%d): %s', what, attempt,
                      max_attempts, error)
    if attempt == max_attempts or clock() - start + delay > deadline_s:
      break
    sleep(delay)
    delay = min(delay * 2.0, max_delay_s)
  raise errors.CarlaConnectionError(
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


class FrameEvents:
  """Frames of events (collisions) from a sensor thread, consumed up to an observed frame.

  Streams of different sensors arrive in no fixed order: the collision of frame
  N may come before the step that first observes frame N starts (another
  client ticked), or after that step has read its camera image. Kept with
  their frame, events count at the first step that observes their frame or a
  later one: never lost, never early.
  """

  def __init__(self):
    self._frames = []
    self._lock = threading.Lock()

  def add(self, frame):
    with self._lock:
      self._frames.append(int(frame))

  def consume(self, frame):
    """Removes and returns the frames up to `frame`, in order; later ones stay."""
    with self._lock:
      due = sorted(f for f in self._frames if f <= frame)
      self._frames = [f for f in self._frames if f > frame]
    return due

  def __len__(self):
    return len(self._frames)


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
      raise errors.SensorTimeout('no sensor data for frame %d within %gs' %
                                 (frame, timeout_s)) from None
    if data.frame == frame:
      return data
    if data.frame > frame:
      logging.warning('sensor skipped frame %d, using frame %d', frame, data.frame)
      return data

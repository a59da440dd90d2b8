"""The CARLA server double offers nothing the real 0.9.16 client lacks.

Every public name of tests/carla_double.py (except its DOUBLE_ONLY server
controls) must exist in the installed `carla` wheel: module names, class
members, and the attributes of instances the double hands out while it runs.
Signatures are compared with the Boost.Python docstrings of the real client
("name( (Type)arg1, (Type)param [, (Type)opt=default]) -> Ret"): every way of
calling a double method positionally must be a way of calling the real one,
with the same parameter names (so keyword calls agree too).
"""
import inspect
import re

import numpy as np
import pytest

import carla_double

real_carla = pytest.importorskip(
    'carla', reason="the CARLA client is not installed: pip install -e '.[carla]'")

# Classes whose instances only the server makes; the client never calls
# their constructors (the real ones raise "cannot be instantiated").
SERVER_MADE = {'World', 'Map', 'Waypoint', 'Actor', 'Vehicle', 'Sensor', 'TrafficLight',
               'ActorList', 'BlueprintLibrary', 'ActorBlueprint', 'ActorAttribute',
               'TrafficManager', 'SensorData', 'Image', 'LidarMeasurement', 'CollisionEvent'}
OVERLOAD = re.compile(r'^\s*(\w+)\((.*)\)\s*->')
PARAM = re.compile(r'\(\w+\)(\w+)(=)?')


def real_overloads(function):
  """[(names, num_required)] of a Boost.Python function's overloads, without self."""
  overloads = []
  for line in (function.__doc__ or '').splitlines():
    match = OVERLOAD.match(line)
    if not match:
      continue
    params = PARAM.findall(match.group(2))
    required = len([p for p in params if not p[1]])
    names = [name for name, _ in params]
    if names and names[0] == 'arg1':  # self
      names, required = names[1:], required - 1
    overloads.append((names, required))
  return overloads


def double_params(function):
  params = list(inspect.signature(function).parameters.values())[1:]  # drop self
  names = [p.name for p in params]
  required = len([p for p in params if p.default is inspect.Parameter.empty])
  return names, required


def check_signature(where, double_function, real_function):
  overloads = real_overloads(real_function)
  assert overloads, f'{where}: no signature in the real docstring'
  names, required = double_params(double_function)
  for count in range(required, len(names) + 1):
    shape = names[:count]
    assert any(real_names[:count] == shape and real_required <= count <= len(real_names)
               for real_names, real_required in overloads), (
                   f'{where}{tuple(shape)} is not a real call shape; real: {overloads}')


def public(names):
  return [n for n in names if not n.startswith('_')]


def double_classes():
  return {name: value for name, value in vars(carla_double).items()
          if inspect.isclass(value) and not name.startswith('_')
          and name not in carla_double.DOUBLE_ONLY}


def test_signature_parser_reads_boost_docstrings():
  # The parser itself must work, or every signature check passes vacuously.
  assert real_overloads(real_carla.World.tick) == [(['seconds'], 0)]
  assert real_overloads(real_carla.Client.apply_batch_sync) == [(['commands', 'do_tick'], 1)]
  shapes = real_overloads(real_carla.command.SpawnActor.__init__)
  assert (['blueprint', 'transform', 'parent'], 3) in shapes
  with pytest.raises(AssertionError, match='not a real call shape'):
    check_signature('tick', lambda self, timeout=0.0: None, real_carla.World.tick)


def test_module_names_exist_in_the_real_client():
  for name in public(vars(carla_double)):
    if name in carla_double.DOUBLE_ONLY:
      continue
    assert hasattr(real_carla, name), f'carla.{name} does not exist in the real client'
  for name in public(vars(carla_double.command)):
    assert hasattr(real_carla.command, name), f'carla.command.{name} does not exist'
  assert carla_double.command.FutureActor == real_carla.command.FutureActor
  assert carla_double.LaneType.Driving == int(real_carla.LaneType.Driving)


def test_class_members_and_signatures_match_the_real_client():
  checked = 0
  for name, cls in double_classes().items():
    real_cls = getattr(real_carla, name)
    for member in public(vars(cls)):
      assert hasattr(real_cls, member), f'carla.{name}.{member} does not exist'
      value = vars(cls)[member]
      if inspect.isfunction(value):
        check_signature(f'carla.{name}.{member}', value, getattr(real_cls, member))
        checked += 1
      elif isinstance(value, carla_double.WeatherParameters):
        assert isinstance(getattr(real_cls, member), real_carla.WeatherParameters)
    if name not in SERVER_MADE and '__init__' in vars(cls):
      check_signature(f'carla.{name}.__init__', cls.__init__, real_cls.__init__)
      checked += 1
  for name in ('SpawnActor', 'SetAutopilot', 'DestroyActor'):
    double_cls = getattr(carla_double.command, name)
    check_signature(f'carla.command.{name}.__init__', double_cls.__init__,
                    getattr(real_carla.command, name).__init__)
    for member in public(vars(double_cls)):
      assert hasattr(getattr(real_carla.command, name), member), (name, member)
  assert public(vars(carla_double.command.Response)) == ['has_error']
  assert checked > 40


@pytest.fixture
def synchronous_world():
  """(server, client, world) of a fresh double server in synchronous mode, 10 Hz."""
  carla_double.stop_all()
  server = carla_double.start_server(2000)
  client = carla_double.Client('localhost', 2000)
  world = client.get_world()
  settings = world.get_settings()
  settings.synchronous_mode, settings.fixed_delta_seconds = True, 0.1
  world.apply_settings(settings)
  yield server, client, world
  carla_double.stop_all()


def test_instance_attributes_the_double_hands_out_exist_in_the_real_client(synchronous_world):
  """Runs a small scenario and checks every object that comes out of the double."""
  server, client, world = synchronous_world
  settings = world.get_settings()
  library = world.get_blueprint_library()
  blueprint = library.find('vehicle.tesla.model3')
  world_map = world.get_map()
  waypoint = world_map.get_waypoint(world_map.get_spawn_points()[0].location)
  vehicle = world.spawn_actor(blueprint, world_map.get_spawn_points()[0])
  received = []
  for sensor_id in ('sensor.camera.rgb', 'sensor.lidar.ray_cast'):
    sensor = world.spawn_actor(library.find(sensor_id), carla_double.Transform(),
                               attach_to=vehicle)
    sensor.listen(received.append)
  world.spawn_actor(blueprint, world_map.get_spawn_points()[1])
  collision = world.spawn_actor(library.find('sensor.other.collision'),
                                carla_double.Transform(), attach_to=vehicle)
  collision.listen(received.append)
  response = client.apply_batch_sync([carla_double.command.DestroyActor(10_000)])[0]
  world.tick()
  manager = client.get_trafficmanager(8000)
  light = next(iter(world.get_actors().filter('traffic.traffic_light*')))
  objects = [light, light.get_stop_waypoints()[0], world, settings, world_map, waypoint,
             waypoint.transform,
             waypoint.transform.location, waypoint.transform.rotation, vehicle.bounding_box,
             vehicle.get_velocity(), library, blueprint, blueprint.get_attribute('role_name'),
             vehicle, world.get_actors(), manager, response, carla_double.VehicleControl(),
             carla_double.WeatherParameters.ClearNoon]
  deadline = 100
  while len(received) < 2 and deadline:
    deadline -= 1
    world.tick()
  objects += received
  for obj in objects:
    real_cls = getattr(real_carla, type(obj).__name__.lstrip('_'), None) or getattr(
        real_carla.command, type(obj).__name__.lstrip('_'))
    for attribute in public(vars(obj)):
      assert hasattr(real_cls, attribute), (
          f'{type(obj).__name__}.{attribute} does not exist in the real client')
  assert response.has_error() and not server.actors('planet_tfa')


def test_the_double_keeps_carla_semantics_the_adapter_relies_on(synchronous_world):
  """Synchronous ticks return frames, data carry them, controls move vehicles."""
  server, client, world = synchronous_world
  spawn = world.get_map().get_spawn_points()[0]
  vehicle = world.spawn_actor(world.get_blueprint_library().find('vehicle.audi.a2'), spawn)
  assert world.try_spawn_actor(world.get_blueprint_library().find('vehicle.audi.a2'),
                               spawn) is None  # occupied
  frames = [world.tick() for _ in range(3)]
  assert frames == [frames[0], frames[0] + 1, frames[0] + 2]
  for _ in range(10):
    world.tick()  # spawn points are 0.5 m up: it drops and lands before the wheels grip
  vehicle.apply_control(carla_double.VehicleControl(throttle=1.0))
  for _ in range(20):
    world.tick()
  moved = vehicle.get_transform().location.distance(spawn.location)
  assert 5.0 < moved < 9.0  # ~4 m/s^2 for 2 s
  server.hang()
  with pytest.raises(RuntimeError, match='time-out'):
    world.tick()
  server.resume()
  assert len(world.get_actors().filter('vehicle.*')) == 1
  server.restart()
  with pytest.raises(RuntimeError):
    world.tick()  # the old world is gone
  assert len(client.get_world().get_actors().filter('vehicle.*')) == 0
  assert not client.get_world().get_settings().synchronous_mode
  with pytest.raises(OSError, match='taken'):
    carla_double.start_server(2001)
  with pytest.raises(RuntimeError, match='taken by the CARLA server'):
    client.get_trafficmanager(2002)
  assert np.isfinite(moved)

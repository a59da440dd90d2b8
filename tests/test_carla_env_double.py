"""The whole CarlaEnv (connect, reset, step, observe, fault, reconnect, close)
against the server double of tests/carla_double.py.

The double replaces the CARLA server only; the adapter's client code is the
one users run. A straight eastbound road (lane centre y = 1.75 m) forks at
x = 100 m into straight on and a right turn; tests choose the ego's spawn
point by setting carla_double.SPAWN_POINTS to (lane index, arc length).
"""
import sys

import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

import carla_double
from planet_tfa.environments.carla import client as carla_client
from planet_tfa.environments.carla import env as carla_env
from planet_tfa.environments.carla import errors as carla_errors
from planet_tfa.environments.carla import reward as carla_reward
from planet_tfa.environments.carla import settings as carla_settings
from planet_tfa.environments.carla import specs as carla_specs

THROTTLE, BRAKE = np.array([1.0, 0.0], np.float32), np.array([-1.0, 0.0], np.float32)


@pytest.fixture
def server(monkeypatch):
  carla_double.stop_all()
  monkeypatch.setitem(sys.modules, 'carla', carla_double)
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 100.0)])  # x = -20 m
  yield carla_double.start_server(2000)
  carla_double.stop_all()


SETTINGS = dict(server=carla_settings.ServerSettings, world=carla_settings.WorldSettings,
                sensors=carla_settings.SensorSettings, lidar=carla_settings.LidarSettings,
                route=carla_settings.RouteSettings, reward=carla_settings.RewardSettings,
                episode=carla_settings.EpisodeSettings)


def make_env(seed=0, instance=0, **overrides):
  """CarlaEnv on the double with short time-outs; overrides per group, e.g. episode={...}."""
  groups = dict(server=dict(timeout_s=1.0, reconnect_attempts=3, reconnect_initial_delay_s=0.01,
                            reconnect_deadline_s=5.0),
                world=dict(num_vehicles=0), sensors=dict(timeout_s=2.0),
                episode=dict(action_repeat=2, max_steps=60, stuck_steps=0))
  for group, values in overrides.items():
    groups.setdefault(group, {}).update(values)
  settings = {group: SETTINGS[group](**values) for group, values in groups.items()}
  return carla_env.CarlaEnv(seed=seed, instance=instance, **settings)


def camera_frame(observation):
  """The frame number the double wrote into pixel (0, 0) (BGRA -> RGB)."""
  return int(observation['camera'][0, 0, 2]) + 256 * int(observation['camera'][0, 0, 1])


def drive(env, action, max_steps=200):
  time_step = env.reset()
  for _ in range(max_steps):
    time_step = env.step(action)
    if time_step.is_last():
      return time_step
  raise AssertionError('the episode did not end')


def ours(server):
  return server.actors(carla_client.ROLE_PREFIX)


def test_ticks_per_reset_and_step_and_sensor_data_of_the_ticked_frame(server):
  env = make_env(episode=dict(action_repeat=3))
  settings = server.settings
  assert settings.synchronous_mode and settings.fixed_delta_seconds == 0.05
  assert server.tm_synchronous == {8000: True}
  start = server.frame
  time_step = env.reset()
  assert time_step.is_first() and server.frame == start + 1
  assert camera_frame(time_step.observation) == server.frame
  for k in range(1, 4):
    time_step = env.step(THROTTLE)
    assert server.frame == start + 1 + 3 * k
    assert camera_frame(time_step.observation) == server.frame
  spec = carla_specs.observation_spec()
  for key, value in time_step.observation.items():
    assert value.shape == spec[key].shape and value.dtype == spec[key].dtype
  assert time_step.observation['state'][2] > 0.5  # speed after 0.45 s of throttle
  assert len(server.ticking_clients) == 1
  env.close()


def test_collision_with_a_parked_vehicle_is_terminal(server):
  world = carla_double.Client('localhost', 2000).get_world()
  parked = world.spawn_actor(world.get_blueprint_library().find('vehicle.audi.a2'),
                             carla_double.Transform(carla_double.Location(-8.0, 1.75, 0.5)))
  env = make_env()
  time_step = drive(env, THROTTLE)
  assert env.get_info()['reason'] == carla_reward.COLLISION
  assert time_step.discount == 0.0 and time_step.reward < -10.0
  assert parked.is_alive  # not ours: never destroyed by the adapter
  env.close()


def test_leaving_the_road_is_terminal(server):
  env = make_env()
  time_step = drive(env, np.array([1.0, 1.0], np.float32))  # full right lock
  assert env.get_info()['reason'] == carla_reward.OFF_ROAD and time_step.discount == 0.0
  env.close()


@pytest.mark.parametrize('overrides, reason', [
    (dict(episode=dict(max_steps=5)), carla_reward.TIME_LIMIT),
    (dict(episode=dict(stuck_steps=3, stuck_speed=0.5)), carla_reward.STUCK)])
def test_time_limit_and_stuck_are_truncations(server, overrides, reason):
  env = make_env(**overrides)
  time_step = drive(env, BRAKE)
  assert env.get_info()['reason'] == reason
  assert time_step.step_type == ts.StepType.LAST and time_step.discount == 1.0
  env.close()


def test_taking_the_unplanned_branch_at_a_junction_keeps_driving(server, monkeypatch):
  """The route picks a branch at random; going straight must not end as off-road."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 200.0)])  # 20 m before the fork
  replans = 0
  for seed in range(4):
    env = make_env(seed=seed, episode=dict(max_steps=70), reward=dict(target_speed=20.0))
    time_step = env.reset()
    progress = []
    while not time_step.is_last():
      time_step = env.step(np.array([0.6, 0.0], np.float32))
      progress.append(env.get_info()['reward_terms']['progress'])
    info = env.get_info()
    assert info['reason'] == carla_reward.TIME_LIMIT, (seed, info)
    assert min(progress) >= 0.0 and info['arc_length'] > 40.0
    replans += info['route_replans']
    env.close()
  assert replans > 0  # some seeds planned the right turn


def test_a_stalled_server_truncates_then_reconnect_destroys_the_stale_actors(
    server, monkeypatch):
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 100.0), (1, 40.0), (2, 60.0)])
  env = make_env(world=dict(num_vehicles=2))
  env.reset()
  assert len(ours(server)) == 1 + 3 + 2
  server.hang()
  time_step = env.step(THROTTLE)
  assert time_step.is_last() and time_step.discount == 1.0
  assert env.get_info()['reason'] == carla_reward.SIMULATOR_ERROR
  server.resume()
  time_step = env.reset()
  assert time_step.is_first()
  assert len(ours(server)) == 1 + 3 + 2
  assert len([a for a in ours(server) if a.type_id.startswith('vehicle.')]) == 3
  env.close()


def test_a_restarted_server_is_reconnected_and_resynchronised(server):
  env = make_env()
  env.reset()
  server.kill()
  assert env.step(THROTTLE).discount == 1.0
  server.restart()
  time_step = env.reset()
  assert camera_frame(time_step.observation) == server.frame
  assert server.settings.synchronous_mode and len(ours(server)) == 4
  env.close()


def test_close_leaves_no_actor_of_ours_and_an_asynchronous_world(server, monkeypatch):
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 100.0), (1, 40.0), (2, 60.0)])
  env = make_env(world=dict(num_vehicles=2))
  env.reset()
  env.step(THROTTLE)
  env.close()
  assert not ours(server)
  assert not server.settings.synchronous_mode
  assert server.settings.fixed_delta_seconds is None
  assert server.tm_synchronous[8000] is False


def test_a_crashed_runs_actors_and_settings_are_cleaned_on_connect(server, monkeypatch):
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 100.0), (1, 40.0), (2, 60.0)])
  crashed = make_env(world=dict(num_vehicles=2))
  crashed.reset()  # then the process "dies": no close()
  server.settings.no_rendering_mode = True
  env = make_env()
  assert not ours(server)
  assert not server.settings.no_rendering_mode and server.settings.synchronous_mode
  env.reset()
  assert len(ours(server)) == 4
  env.close()
  assert not server.settings.synchronous_mode


def test_an_idle_env_accumulates_no_sensor_data(server):
  env = make_env()
  env.reset()
  other = carla_double.Client('localhost', 2000).get_world()
  for _ in range(300):
    other.tick()  # someone else ticks the world while this env trains
  time_step = env.step(BRAKE)
  assert camera_frame(time_step.observation) == server.frame
  buffer = carla_client.SensorBuffer(capacity=4)
  for item in range(1000):
    buffer.put(item)
  assert len(buffer) == 4 and buffer.get(timeout=0.1) == 996
  env.close()


def test_lidar_is_a_full_deterministic_sweep_by_default(server):
  world = carla_double.Client('localhost', 2000).get_world()
  world.spawn_actor(world.get_blueprint_library().find('vehicle.audi.a2'),
                    carla_double.Transform(carla_double.Location(-5.0, 1.75, 0.5)))
  for overrides, deterministic in ((dict(), True),
                                   (dict(lidar=dict(dropoff_general_rate=0.45)), False)):
    env = make_env(**overrides)
    env.reset()
    images = [env.step(BRAKE).observation['lidar'] for _ in range(3)]
    same = all(np.array_equal(images[0], image) for image in images[1:])
    assert same == deterministic
    assert images[0][:, :, 0].sum() > 0  # the parked car's side
    env.close()


def test_instances_use_their_own_simulator_and_traffic_manager_ports(server):
  second = carla_double.start_server(2010)
  first_env, second_env = make_env(), make_env(instance=1)
  first_env.reset()
  second_env.reset()
  assert len(ours(server)) == 4 and len(ours(second)) == 4
  assert second.tm_synchronous == {8010: True}
  assert len(server.ticking_clients) == 1 and len(second.ticking_clients) == 1
  first_env.close()
  second_env.close()
  with pytest.raises(carla_errors.CarlaPortError, match='CarlaEnv.instance'):
    make_env(server=dict(port=2010, tm_port=8000), instance=0)  # TM 8000 serves the server on 2000?
  assert carla_client.instance_ports(2000, 8000, 3, 10) == (2030, 8030)
  with pytest.raises(ValueError, match='port_stride'):
    carla_client.instance_ports(2000, 8000, 1, 2)
  with pytest.raises(ValueError, match='CarlaServer.tm_port=2002'):
    carla_client.instance_ports(2000, 2002)

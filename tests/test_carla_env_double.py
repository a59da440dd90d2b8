"""The whole CarlaEnv (connect, reset, step, observe, fault, reconnect, close)
against the server double of tests/carla_double.py.

The double replaces the CARLA server only; the adapter's client code is the
one users run. A straight eastbound road (lane centre y = 1.75 m) forks at
x = 100 m into straight on and a right turn; tests choose the ego's spawn
point by setting carla_double.SPAWN_POINTS to (lane index, arc length). Spawn
points are 0.5 m up: a vehicle drops and lands before its wheels grip.
"""
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.environments import tf_py_environment
from tf_agents.policies import random_tf_policy
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

import carla_double
import counting_env
from planet_tfa import episodes
from planet_tfa.agents import autopilot_expert
from planet_tfa.environments.carla import client as carla_client
from planet_tfa.environments.carla import env as carla_env
from planet_tfa.environments.carla import errors as carla_errors
from planet_tfa.environments.carla import geometry as carla_geometry
from planet_tfa.environments.carla import reward as carla_reward
from planet_tfa.environments.carla import route as carla_route
from planet_tfa.environments.carla import settings as carla_settings
from planet_tfa.environments.carla import specs as carla_specs
from planet_tfa.programs import gin_files
from planet_tfa.replay import observers

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
                episode=carla_settings.EpisodeSettings, autopilot=carla_settings.AutopilotSettings)


def make_env(seed=0, instance=0, **overrides):
  """CarlaEnv on the double with short time-outs; overrides per group, e.g. episode={...}."""
  groups = dict(server=dict(timeout_s=1.0, reconnect_attempts=20, reconnect_initial_delay_s=0.01,
                            reconnect_max_delay_s=0.05, reconnect_deadline_s=5.0),
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


def ours(server, instance=0):
  """Actors of env instance `instance`: tagged with its number, and the egos its sensors ride."""
  tagged = server.actors('%s_%d_' % (carla_client.ROLE_PREFIX, instance))
  egos = {a.parent_id for a in tagged if a.parent_id is not None}
  return tagged + [server.actor_states[i] for i in egos if i in server.actor_states]


def hero(server):
  """The server's state of the one ego vehicle: the one the camera rides."""
  cameras = [a for a in server.actor_states.values() if a.type_id == 'sensor.camera.rgb']
  assert len(cameras) == 1, cameras
  return server.actor_states[cameras[0].parent_id]


def place(actor_id, x, y, yaw=0.0):
  """Moves an actor as another client would (Actor.set_transform)."""
  world = carla_double.Client('localhost', 2000).get_world()
  world.get_actors().find(actor_id).set_transform(carla_double.Transform(
      carla_double.Location(x, y, 0.0), carla_double.Rotation(yaw=yaw)))


def test_ticks_per_reset_and_step_and_sensor_data_of_the_ticked_frame(server):
  env = make_env(episode=dict(action_repeat=3))
  settings = server.settings
  assert settings.synchronous_mode and settings.fixed_delta_seconds == 0.05
  assert server.tm_synchronous == {8000: True}
  start = server.frame
  time_step = env.reset()
  settle = carla_settings.EpisodeSettings().settle_ticks
  assert time_step.is_first() and server.frame == start + 1 + settle
  assert camera_frame(time_step.observation) == server.frame
  for k in range(1, 4):
    time_step = env.step(THROTTLE)
    assert server.frame == start + 1 + settle + 3 * k
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


def test_a_stalled_server_cuts_the_episode_and_reconnect_destroys_the_stale_actors(
    server, monkeypatch):
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 100.0), (1, 40.0), (2, 60.0)])
  env = make_env(world=dict(num_vehicles=2))
  env.reset()
  stale = {a.id for a in ours(server)}
  assert len(stale) == 1 + 3 + 2
  server.hang(seconds=0.2)
  time_step = env.step(THROTTLE)
  # No made-up last step: the step reconnected and started a fresh episode.
  assert time_step.is_first() and camera_frame(time_step.observation) == server.frame
  assert env.get_info()['cut_short'] == carla_reward.SIMULATOR_ERROR
  assert len(ours(server)) == 1 + 3 + 2 and not stale & {a.id for a in ours(server)}
  assert len([a for a in ours(server) if a.type_id.startswith('vehicle.')]) == 3
  # A server that does not come back within the reconnect budget fails the step.
  server.hang()
  with pytest.raises(carla_errors.CarlaConnectionError, match='did not come back'):
    env.step(THROTTLE)
  server.resume()
  assert env.reset().is_first() and len(ours(server)) == 1 + 3 + 2
  env.close()


def test_a_restarted_server_is_reconnected_and_resynchronised(server):
  env = make_env()
  env.reset()
  server.kill(restart_after_s=0.2)
  time_step = env.step(THROTTLE)
  assert time_step.is_first() and camera_frame(time_step.observation) == server.frame
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
  assert len(ours(server)) == 4 and len(ours(second, 1)) == 4
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


# ---- issue 22: the review's fixes, each through the double ----


def test_collision_events_count_at_the_step_that_observes_their_frame(server):
  """Sensor streams arrive in no fixed order across sensors: a collision event is
  kept with its frame and counted by the first step that observes that frame,
  however early or late it arrives; never wiped at the start of a step."""
  env = make_env(episode=dict(action_repeat=1))
  world = carla_double.Client('localhost', 2000).get_world()
  bump = world.spawn_actor(world.get_blueprint_library().find('vehicle.audi.a2'),
                           carla_double.Transform(carla_double.Location(-100.0, 1.75, 0.0)))

  def touch_for_one_tick(tick):
    ego = hero(server)
    place(bump.id, ego.xy[0] + 4.0, ego.xy[1])  # overlaps the ego's front
    result = tick()
    place(bump.id, -100.0, 1.75)
    return result

  # A frame ticked between two steps (by another client): its event arrives
  # before the step that first observes that frame.
  env.reset()
  touch_for_one_tick(world.tick)
  server.drain()
  assert env.step(BRAKE).is_last() and env.get_info()['reason'] == carla_reward.COLLISION

  # The event of a step's own frame arrives after that step observed it:
  # counted one step late, not lost.
  env.reset()
  server.hold('sensor.other.collision')
  assert not touch_for_one_tick(lambda: env.step(BRAKE)).is_last()
  server.release('sensor.other.collision')
  assert env.step(BRAKE).is_last() and env.get_info()['reason'] == carla_reward.COLLISION

  # One for a later frame than the observed one waits for that frame.
  events = carla_client.FrameEvents()
  for frame in (7, 9):
    events.add(frame)
  assert events.consume(8) == [7] and events.consume(8) == [] and events.consume(9) == [9]
  env.close()


class _RecordingWriter:
  """Stands in for TF-Agents' Reverb writer: records the steps it is given."""

  def __init__(self, steps):
    self.steps = steps

  def __call__(self, step):
    self.steps.append(step)

  def set_priority(self, priority):
    pass  # the sampling priority of the next window: not what this test is about

  def flush(self):
    pass

  def close(self):
    pass


def test_a_fault_mid_episode_writes_no_made_up_transition(server, monkeypatch):
  """The episode observer (the replay's writer) gets what TF-Agents' drivers give
  it; a stall mid-episode must not put a repeated observation or an invented
  reward into the replay: the cut episode ends at its last real step."""
  written = []
  monkeypatch.setattr(observers, '_PrioritisedWindowWriter',
                      lambda *args, **kwargs: _RecordingWriter(written))
  writer = observers.ReverbEpisodeObserver(None, 9)
  env = make_env(episode=dict(max_steps=8))
  real = {}  # camera frame of a real observation -> the reward of the step taken from it
  time_step = env.reset()
  for step in range(30):
    if step == 4:
      server.hang(seconds=0.2)
    next_time_step = env.step(THROTTLE)
    # What DynamicEpisodeDriver hands its observers.
    writer(trajectory.from_transition(time_step, policy_step.PolicyStep(THROTTLE),
                                      next_time_step))
    if not time_step.is_last() and not next_time_step.is_first() and (
        env.get_info()['reason'] != carla_reward.SIMULATOR_ERROR):
      real[camera_frame(time_step.observation)] = float(next_time_step.reward)
    time_step = next_time_step
    if writer.episodes_written == 2:
      break
  assert writer.episodes_written == 2 and writer.pending_steps == 0
  episodes, episode = [], []
  for item in written:
    episode.append(item)
    if item.is_boundary():
      episodes.append(episode)
      episode = []
  assert [len(e) for e in episodes] == [4 + 1, 8 + 1]  # cut after 4 real steps; then 8
  for episode in episodes:
    frames = [camera_frame(item.observation) for item in episode]
    assert all(b > a for a, b in zip(frames, frames[1:])), frames  # nothing repeated
    for item in episode[:-1]:
      assert float(item.reward) == real[camera_frame(item.observation)]  # nothing invented
    assert episode[-2].is_last() and episode[-2].discount == 1.0  # a truncation
    assert episode[-1].is_boundary()
  # A fault at an episode's first step leaves no transition: nothing is written.
  time_step = env.reset()
  server.hang(seconds=0.2)
  next_time_step = env.step(THROTTLE)
  assert next_time_step.is_first()
  writer(trajectory.from_transition(time_step, policy_step.PolicyStep(THROTTLE), next_time_step))
  assert writer.episodes_written == 2 and writer.pending_steps == 0
  env.close()


def test_replanning_onto_a_lane_with_no_successor(server, monkeypatch):
  """A bay beside the approach ends at x = -44 with no successor lane."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 65.0)])  # x = -55
  env = make_env(episode=dict(action_repeat=1))
  env.reset()
  place(hero(server).id, -45.0, carla_double.LANE_WIDTH * 1.5)  # 1 m before the bay's end
  time_step = env.step(BRAKE)
  info = env.get_info()
  assert info['route_replans'] == 1 and info['reason'] is None
  assert abs(time_step.observation['state'][0]) < 0.5  # the bay is the route now
  for _ in range(40):
    if env.step(np.array([0.5, 0.0], np.float32)).is_last():
      break
  assert env.get_info()['reason'] == carla_reward.OFF_ROAD  # past its end
  env.close()


def test_two_envs_on_one_server_never_destroy_each_others_actors(server, monkeypatch):
  """The ego is `hero` (large maps stream tiles around it); the other actors'
  tag holds the env's instance number, and a connect destroys only its own."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 100.0), (0, 140.0)])
  first = make_env()
  first.reset()
  # Instance 1 on the same server: its port setting undoes the instance shift.
  second = make_env(instance=1, server=dict(port=1990, tm_port=7995))
  assert len(ours(server, 0)) == 4  # connecting did not touch instance 0's actors
  second.reset()
  assert len(ours(server, 1)) == 4
  egos = [a for a in server.actor_states.values() if a.is_vehicle]
  assert [a.attributes['role_name'] for a in egos] == ['hero', 'hero']
  assert {a.id for a in egos} == {a.parent_id for a in server.actors('planet_tfa')}
  for env in (first, second):
    env.step(BRAKE)
    assert env.get_info()['reason'] is None
  # Instance 0 crashes (no close): the next instance 0 cleans up after it, and only it.
  successor = make_env()
  assert not ours(server, 0) and len(ours(server, 1)) == 4
  second.step(BRAKE)
  assert second.get_info()['reason'] is None
  successor.close()
  second.close()
  assert not [a for a in server.actor_states.values() if a.type_id != 'traffic.traffic_light']


def test_traffic_lights_frozen_green_or_their_state_drawn_in_the_birdeye(server, monkeypatch):
  # x = 80.2: the stop line (x = 96, 1 m long, a lane wide) lies 15.3-16.3 m ahead,
  # rows 16-17 and columns 29-35 of the bird's-eye image.
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 200.2)])
  light = next(a for a in server.actor_states.values() if a.type_id == 'traffic.traffic_light')
  stop_line = (slice(16, 18), slice(29, 36), 1)
  env = make_env()  # CarlaWorld.freeze_traffic_lights defaults to True
  time_step = env.reset()
  for _ in range(3):
    time_step = env.step(BRAKE)
  assert light.light_state == carla_double.TrafficLightState.Green and light.light_frozen
  assert not time_step.observation['birdeye'][stop_line].any()
  env.close()
  assert not light.light_frozen  # close hands the lights back to their cycle

  env = make_env(world=dict(freeze_traffic_lights=False))
  env.reset()
  handle = next(iter(carla_double.Client('localhost', 2000).get_world().get_actors().filter(
      'traffic.traffic_light*')))
  for state in ('Red', 'Yellow', 'Green'):
    handle.set_state(getattr(carla_double.TrafficLightState, state))
    birdeye = env.step(BRAKE).observation['birdeye']
    assert (birdeye[stop_line] == carla_geometry.TRAFFIC_LIGHT_VALUES[state]).all(), state
    lit = np.argwhere(birdeye[:, :, 1] > 0)
    assert lit[:, 0].min() == 16 and lit[:, 0].max() == 17  # nothing else in that channel
  env.close()


def test_the_first_observation_comes_after_the_spawn_settles_with_a_fixed_exposure(server):
  """Auto-exposure adapts over the first frames and a spawned car drops 0.5 m and
  settles before its wheels grip: neither reaches the agent."""
  env = make_env(episode=dict(stuck_steps=3, stuck_speed=0.5, max_steps=12))
  time_step = env.reset()
  camera = next(a for a in server.actor_states.values() if a.type_id == 'sensor.camera.rgb')
  assert camera.attributes['exposure_mode'] == 'manual'
  assert time_step.observation['state'][2] == 0.0  # landed and at rest
  images = [time_step.observation['camera']]
  while not time_step.is_last():
    time_step = env.step(THROTTLE)
    images.append(time_step.observation['camera'])
  assert env.get_info()['reason'] == carla_reward.TIME_LIMIT  # the drop never counts as stuck
  for image in images[1:]:
    np.testing.assert_array_equal(image[1:], images[0][1:])  # row 0 carries the frame number


def test_with_carla_sac_gins_reward_a_stopped_car_pays_every_step_and_stuck_is_terminal(server):
  env = make_env(reward=dict(step_cost=0.1, stuck_penalty=20.0),
                 episode=dict(stuck_steps=3, stuck_speed=0.5,
                              terminal_reasons=('collision', 'off_road', 'stuck')))
  rewards, time_step = [], env.reset()
  while not time_step.is_last():
    time_step = env.step(BRAKE)
    rewards.append(float(time_step.reward))
  info = env.get_info()
  assert info['reason'] == carla_reward.STUCK
  assert time_step.step_type == ts.StepType.LAST and time_step.discount == 0.0
  assert info['reward_terms']['step_cost'] == pytest.approx(-0.1)
  assert info['reward_terms']['stuck'] == pytest.approx(-20.0)
  assert all(r < 0 for r in rewards) and rewards[-1] < -20.0  # no safe stop
  env.close()


def test_steer_and_brake_limits_scale_the_control_sent_to_the_ego():
  assert carla_specs.action_to_control([-1.0, 1.0], steer_limit=0.5, brake_limit=0.375) == (
      0.0, pytest.approx(0.375), pytest.approx(0.5))
  assert carla_specs.action_to_control([0.8, -0.4], steer_limit=0.5) == (
      pytest.approx(0.8), 0.0, pytest.approx(-0.2))
  with pytest.raises(ValueError, match='steer_limit'):
    carla_settings.EpisodeSettings(steer_limit=0.0)


def test_the_route_input_names_the_planned_branch_before_the_fork(server, monkeypatch):
  """20 m before the fork the command says which branch the route takes (seeded at
  random): a car that goes straight leaves a planned right turn (a re-plan) and
  follows a planned straight one."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 200.0)])
  replans = {}
  for seed in range(6):
    env = make_env(seed=seed, episode=dict(max_steps=70), reward=dict(target_speed=20.0))
    time_step = env.reset()
    route_input = time_step.observation['route']
    assert route_input[:4].sum() == 1.0
    command = carla_route.COMMANDS[int(np.argmax(route_input[:4]))]
    # The ego sits on the route, facing along it: the points lie straight ahead.
    np.testing.assert_allclose(route_input[4:].reshape(4, 2),
                               [[5.0, 0.0], [10.0, 0.0], [15.0, 0.0], [20.0, 0.0]], atol=0.5)
    while not time_step.is_last():
      time_step = env.step(np.array([0.6, 0.0], np.float32))
    replans.setdefault(command, []).append(env.get_info()['route_replans'])
    env.close()
  assert set(replans) == {'right', 'straight'}, replans
  assert all(r > 0 for r in replans['right']) and not any(replans['straight']), replans


def test_far_from_a_junction_the_route_command_is_follow_lane(server, monkeypatch):
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 60.0)])
  env = make_env(seed=0)
  time_step = env.reset()
  np.testing.assert_array_equal(time_step.observation['route'][:4], [1, 0, 0, 0])
  env.close()


# --------------------------------------- the Traffic Manager as the expert ---


def test_control_to_action_inverts_action_to_control_and_clips_what_the_limits_cannot_send():
  for action in ([0.7, -0.4], [-0.6, 0.9], [0.0, 0.0]):
    control = carla_specs.action_to_control(action, steer_limit=0.5, brake_limit=0.5)
    np.testing.assert_allclose(carla_specs.control_to_action(*control, steer_limit=0.5,
                                                             brake_limit=0.5), action, atol=1e-6)
  # A full brake and full lock are beyond limits of 0.5: the bound, not 2.
  np.testing.assert_array_equal(carla_specs.control_to_action(0.0, 1.0, -1.0, 0.5, 0.5),
                                [-1.0, -1.0])


def test_the_autopilot_drives_the_planned_branch_and_reports_the_controls_it_applied(
    server, monkeypatch):
  """Under the Traffic Manager the action passed in is ignored (full brake here), the
  ego takes the planned branch at the fork (no re-plan either way), and the step's
  applied action is the TM's control mapped into the action range."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 190.0)])  # x = 70 m, 30 m before
  commands = set()
  for seed in range(6):
    env = make_env(seed=seed, episode=dict(max_steps=100, steer_limit=0.5, brake_limit=0.5),
                   autopilot=dict(speed=6.0), reward=dict(replan_penalty=5.0))
    env.set_autopilot(True)
    time_step = env.reset()
    command, steers = None, []
    while not time_step.is_last():
      if command is None and time_step.observation['route'][0] == 0.0:  # a junction ahead
        command = carla_route.COMMANDS[int(np.argmax(time_step.observation['route'][:4]))]
      time_step = env.step(BRAKE)
      applied = env.applied_action()
      control = hero(server).control
      # The mean over the step's two ticks; the last tick's control is the server's.
      assert -1.0 <= applied.min() and applied.max() <= 1.0
      steers.append(applied[1])
      assert control.throttle > 0.0 or control.brake > 0.0 or control.steer != 0.0
    info = env.get_info()
    assert info['reason'] == 'time_limit', info
    assert info['route_replans'] == 0 and info['reward_terms']['replan'] == 0.0
    assert info["arc_length"] > 45.0  # it drove, through the brake it was given
    # The right branch needs right steering (+); straight on needs none to speak of.
    assert (max(steers) > 0.2) == (command == 'right'), (command, max(steers))
    commands.add(command)
    env.close()
  assert commands == {'right', 'straight'}


def test_the_agent_gets_the_car_back_and_leaving_the_plan_costs_the_replan_penalty(
    server, monkeypatch):
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 200.0)])
  for seed in range(6):
    env = make_env(seed=seed, episode=dict(max_steps=70), reward=dict(replan_penalty=5.0,
                                                                      target_speed=20.0))
    env.set_autopilot(True)
    env.reset()
    env.set_autopilot(False)  # the agent drives from here: straight on, whatever the plan
    time_step, replan_terms = env.reset(), []
    np.testing.assert_array_equal(env.applied_action(), [0.0, 0.0])
    while not time_step.is_last():
      time_step = env.step(np.array([0.6, 0.0], np.float32))
      np.testing.assert_allclose(env.applied_action(), [0.6, 0.0])
      replan_terms.append(env.get_info()['reward_terms']['replan'])
    # A planned right turn is left once (-5 on that step only); straight costs nothing.
    assert sorted(replan_terms)[:2] in ([-5.0, 0.0], [0.0, 0.0]), replan_terms
    assert sum(replan_terms) == -5.0 * env.get_info()['route_replans']
    env.close()


def test_autopilot_episodes_reach_the_replay_with_the_controls_it_applied(server):
  """Through the real episode driver (in a tf.function): each trajectory the replay
  observer gets carries the step's applied control, never the policy's placeholder,
  and the agent has the car back once the expert's episodes end."""
  env = make_env(episode=dict(max_steps=15, steer_limit=0.5, brake_limit=0.5))
  applied = []
  read = env.applied_action
  env.applied_action = lambda: applied.append(read()) or applied[-1]
  tf_env = tf_py_environment.TFPyEnvironment(env)
  recorded = []

  def replay_observer(traj):
    return tf.numpy_function(lambda a, s: recorded.append((a[0].copy(), int(s[0]))) or np.int64(0),
                             [traj.action, traj.step_type], tf.int64, stateful=True)

  policy = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
  collection = episodes.Collection(tf_env, None, policy, policy, replay_observer,
                                   autopilot_expert=autopilot_expert.AutopilotExpert(tf_env))
  collection.warmup(1, by_expert=True)
  assert len(recorded) == 16 and len(applied) == 16  # 15 steps and the boundary to the next
  for (action, _), expected in zip(recorded, applied):
    np.testing.assert_array_equal(action, expected)
  assert max(action[0] for action, _ in recorded) > 0.0  # the TM's throttle, not zeros
  assert hero(server).autopilot_port is None  # handed back at the episode boundary
  with pytest.raises(Exception, match="expert='autopilot'.*has none.*expert='controller'"):
    autopilot_expert.autopilot_envs(tf_py_environment.TFPyEnvironment(
        counting_env.CountingEnv()))
  env.close()


# ------------------------------- faithful expert data, routes that hold (issue 57) ---


def carla_sac_episode_settings():
  """CarlaEpisode and CarlaAutopilot as gin/carla_sac.gin sets them."""
  gin.clear_config()
  gin_files.parse(['carla_sac.gin'])
  try:
    return carla_settings.EpisodeSettings(), carla_settings.AutopilotSettings()
  finally:
    gin.clear_config()


def test_the_autopilots_full_brake_reaches_the_replay_as_applied_under_carla_sac_gin(server):
  """The TM brakes up to 1.0; the recorded action must send the same brake back.
  (Limits of 0.5 recorded -1 for it, which sends 0.5: half the braking applied.)"""
  episode, _ = carla_sac_episode_settings()
  limits = dict(steer_limit=episode.steer_limit, brake_limit=episode.brake_limit)
  env = make_env(episode=dict(max_steps=60, **limits), autopilot=dict(speed=2.0))
  env.reset()
  for _ in range(25):  # the agent drives up to ~10 m/s
    env.step(THROTTLE)
  env.set_autopilot(True)  # the TM, wanting 2 m/s, brakes hard
  brakes = []
  for _ in range(3):
    env.step(THROTTLE)
    control = hero(server).control
    applied = env.applied_action()
    _, brake, _ = carla_specs.action_to_control(applied, **limits)
    brakes.append((control.brake, brake))
  assert brakes[0][0] == pytest.approx(1.0)  # the double's TM did brake fully
  for applied_brake, recorded_brake in brakes:
    assert recorded_brake == pytest.approx(applied_brake, abs=1e-6), brakes
  env.close()


def test_the_autopilot_hands_over_to_perturbed_controls_and_takes_back(server):
  """DART-style exploration: for perturb_steps steps the ego receives the TM's last action
  plus an offset (the recorded action is the one applied), then the TM drives again."""
  steps = 3
  env = make_env(episode=dict(max_steps=60), autopilot=dict(
      speed=6.0, perturb_probability=1.0, perturb_steps=steps, perturb_std=0.4))
  env.set_autopilot(True)
  env.reset()
  for step in range(steps):
    env.step(BRAKE)
    state, applied = hero(server), env.applied_action()
    assert env.get_info()['expert_perturbed']
    control = carla_specs.action_to_control(applied)
    assert (state.control.throttle, state.control.brake, state.control.steer) == pytest.approx(
        control, abs=1e-6)  # the ego got exactly the recorded action
    if step < steps - 1:
      assert state.autopilot_port is None  # handed over to the perturbation
  assert not np.allclose(applied, [0.0, 0.0])  # an offset was applied
  state = hero(server)
  assert state.driven and state.autopilot_port is not None and len(state.path)  # took back
  env.close()
  # Off by default: the TM drives every step.
  env = make_env(episode=dict(max_steps=60), autopilot=dict(speed=6.0))
  env.set_autopilot(True)
  env.reset()
  for _ in range(10):
    env.step(BRAKE)
    assert not env.get_info()['expert_perturbed'] and hero(server).driven
  env.close()


def test_a_replan_under_the_autopilot_sends_the_new_route_from_its_start(server, monkeypatch):
  """The old segment index cut the new route's path short by as many waypoints as the ego
  had passed (after ~100 m: to nothing), so the TM drove on from a point far ahead or kept
  the abandoned plan."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 20.0)])  # x = -100 m
  env = make_env(episode=dict(max_steps=200), autopilot=dict(speed=8.0))
  env.set_autopilot(True)
  env.reset()
  for _ in range(75):  # ~50 m along the approach
    env.step(BRAKE)
  assert env._route_segment > 15  # pylint: disable=protected-access
  state = hero(server)
  ego_xy = np.array(state.xy)
  lane = env._map.get_waypoint(carla_double.Location(*ego_xy))  # pylint: disable=protected-access
  assert env._replan_from(lane, ego_xy)  # pylint: disable=protected-access
  path = hero(server).path
  assert len(path) > 10
  # The path starts where the new route starts (at the ego), not ~100 m further on.
  assert np.linalg.norm(path[0] - ego_xy) < 5.0, (path[0], ego_xy)
  env.close()


def test_waiting_behind_a_car_is_neither_stuck_nor_penalised(server):
  """A stopped car 9 m ahead: braking there is waiting (no step cost, no 'stuck'); the
  same stop on an empty road still ends 'stuck' with the step cost paid."""
  world = carla_double.Client('localhost', 2000).get_world()
  parked = world.spawn_actor(world.get_blueprint_library().find('vehicle.audi.a2'),
                             carla_double.Transform(carla_double.Location(-11.0, 1.75, 0.5)))
  settings = dict(reward=dict(step_cost=0.1, stuck_penalty=20.0),
                  episode=dict(stuck_steps=3, stuck_speed=0.5, max_steps=10,
                               terminal_reasons=('collision', 'off_road', 'stuck')))
  env = make_env(**settings)
  time_step, costs = env.reset(), []
  while not time_step.is_last():
    time_step = env.step(BRAKE)
    costs.append(env.get_info()['reward_terms']['step_cost'])
    assert env.get_info()['blocked']
  assert env.get_info()['reason'] == carla_reward.TIME_LIMIT and set(costs) == {0.0}
  env.close()
  parked.destroy()
  env = make_env(**settings)
  drive(env, BRAKE)
  assert env.get_info()['reason'] == carla_reward.STUCK
  assert env.get_info()['reward_terms']['step_cost'] == pytest.approx(-0.1)
  env.close()


def test_waiting_at_a_red_light_is_neither_stuck_nor_penalised(server, monkeypatch):
  """The stop line lies ~11 m ahead (x = 96): red, the ego may wait there; green, the same
  stop is being stuck."""
  monkeypatch.setattr(carla_double, 'SPAWN_POINTS', [(0, 205.0)])  # x = 85 m
  settings = dict(world=dict(freeze_traffic_lights=False),
                  reward=dict(step_cost=0.1, stuck_penalty=20.0),
                  episode=dict(stuck_steps=3, stuck_speed=0.5, max_steps=8,
                               terminal_reasons=('collision', 'off_road', 'stuck')))
  light = carla_double.Client('localhost', 2000).get_world().get_actors().filter(
      'traffic.traffic_light*')
  handle = next(iter(light))
  for state, blocked in (('Red', True), ('Green', False)):
    env = make_env(**settings)
    time_step = env.reset()
    handle.set_state(getattr(carla_double.TrafficLightState, state))
    handle.freeze(True)
    while not time_step.is_last():
      time_step = env.step(BRAKE)
      assert env.get_info()['blocked'] == blocked, state
    reason = env.get_info()['reason']
    assert reason == (carla_reward.TIME_LIMIT if blocked else carla_reward.STUCK), (state, reason)
    env.close()
    handle.freeze(False)


def test_carlas_control_ranges_follow_its_limits_and_vehicle_physics(server):
  env = make_env(episode=dict(steer_limit=0.5, brake_limit=0.5, max_steer_deg=70.0,
                              full_throttle_mps2=4.0, full_brake_mps2=8.0))
  ranges = env.control_ranges()
  assert ranges.steer_rad == pytest.approx(np.radians(70.0) * 0.5)
  assert (ranges.accel_mps2, ranges.decel_mps2) == (4.0, pytest.approx(4.0))
  env.close()

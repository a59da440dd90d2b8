"""The highway-env driving task: real highway-env episodes in CarlaEnv's observation layout."""
import json
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from planet_tfa import errors
from planet_tfa.programs import gin_files
from planet_tfa.environments.carla import geometry as carla_geometry
from planet_tfa.environments.carla import specs as carla_specs
from planet_tfa.environments import highway

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip('highway_env', reason="needs pip install -e '.[highway]'")


def drive(env, action, max_steps=400):
  """Steps `action` until the episode ends; returns the time steps, FIRST included."""
  steps = [env.reset()]
  while not steps[-1].is_last() and len(steps) <= max_steps:
    steps.append(env.step(np.asarray(action, np.float32)))
  return steps


def assert_not_black(image, what):
  # A black frame (pygame's dummy video driver) has no contrast at all.
  assert image.max() > 40 and image.std() > 5, f'{what} is (nearly) black: max {image.max()}'


@pytest.mark.parametrize('scenario', ['racetrack', 'highway-fast'])
def test_real_episode_has_carla_layout_and_rendered_frames(scenario):
  env = highway.load_highway(scenario, seed=0, episode_seconds=3.0)
  try:
    assert env.observation_spec() == carla_specs.observation_spec()
    assert env.action_spec() == carla_specs.action_spec()
    rng = np.random.default_rng(0)
    time_step = env.reset()
    steps = [time_step]
    for _ in range(12):
      steps.append(env.step(rng.uniform(-0.3, 0.3, 2).astype(np.float32)))
    for step in steps:
      for key, spec in carla_specs.observation_spec().items():
        value = step.observation[key]
        assert value.shape == spec.shape and value.dtype == spec.dtype, key
      assert_not_black(step.observation['camera'], 'camera')
    first = steps[0].observation
    geometry = carla_geometry.birdeye_geometry()
    # The ego starts on the road: its pixel is road (channel 0) and ego (channel 2).
    assert first['birdeye'][geometry.ego_row, geometry.ego_col, 0] == carla_geometry.ROAD_VALUE
    assert first['birdeye'][geometry.ego_row, geometry.ego_col, 2] == carla_geometry.EGO_VALUE
    assert first['birdeye'][..., 1].max() in (0, carla_geometry.VEHICLE_VALUE)
    # Lidar: ground returns around the ego, nothing inside its own box.
    assert first['lidar'][..., 1].mean() > 50
    assert first['lidar'][geometry.ego_row, geometry.ego_col].max() == 0
    # State: [lateral offset, heading error, speed, front distance].
    lateral, heading_error, speed, front = first['state']
    assert abs(lateral) < 5.0 and abs(heading_error) < np.pi / 2
    assert speed > 0.0
    assert steps[-1].observation['state'][2] == pytest.approx(env.simulator.vehicle.speed)
    assert 0.0 < front <= 50.0
    # The frames change as the car drives.
    assert np.abs(steps[-1].observation['camera'].astype(int) - first['camera']).mean() > 0.5
  finally:
    env.close()


@pytest.mark.parametrize('scenario', ['highway-fast', 'racetrack'])
def test_the_route_input_is_the_lane_ahead_in_the_ego_frame(scenario):
  # No junctions: the command is always follow_lane; the points are the ego
  # lane's centre 5..20 m ahead, each on that lane, in CARLA's (forward, right).
  env = highway.load_highway(scenario, seed=0)
  try:
    time_step = env.reset()
    for _ in range(30):
      route_input = time_step.observation['route']
      np.testing.assert_array_equal(route_input[:4], [1, 0, 0, 0])
      vehicle = env.simulator.vehicle
      forward_right = route_input[4:].reshape(4, 2).astype(np.float64)
      yaw = vehicle.heading
      world = vehicle.position + (forward_right[:, :1] * [np.cos(yaw), np.sin(yaw)]
                                  + forward_right[:, 1:] * [-np.sin(yaw), np.cos(yaw)])
      lanes = env.simulator.road.network
      for point in world:  # on a lane centre of the road
        lane = lanes.get_lane(lanes.get_closest_lane_index(point, yaw))
        assert abs(lane.local_coordinates(point)[1]) < 0.05, (scenario, point)
      # Spaced 5 m along the lane (chords of a curve are a little shorter).
      gaps = np.linalg.norm(np.diff(world, axis=0), axis=-1)
      assert ((gaps > 4.5) & (gaps < 5.01)).all(), gaps
      lateral = time_step.observation['state'][0]
      if abs(time_step.observation['state'][1]) < 0.02 and scenario == 'highway-fast':
        # Facing along a straight lane: the points are |offset| to the other side.
        np.testing.assert_allclose(forward_right[:, 1], -lateral, atol=0.2)
      time_step = env.step(np.array([0.2, 0.05], np.float32))
      if time_step.is_last():
        break
  finally:
    env.close()


def test_lidar_sees_the_car_ahead_in_the_obstacle_channel():
  env = highway.load_highway('highway-fast', seed=0)
  try:
    env.reset()
    sim = env.simulator
    ego = sim.vehicle
    other = next(v for v in sim.road.vehicles if v is not ego)
    other.position = ego.position + np.array([10.0, 0.0])  # 10 m straight ahead
    other.heading = ego.heading
    observation = env.step(np.zeros(2, np.float32)).observation
    geometry = carla_geometry.birdeye_geometry()
    obstacle_rows, obstacle_cols = np.nonzero(observation['lidar'][..., 0])
    ahead = obstacle_rows < geometry.ego_row
    assert ahead.any(), 'no lidar hit ahead of the ego'
    # Its nearest face is ~7.5 m ahead: 15 px above the ego at 0.5 m/px.
    nearest_row = obstacle_rows[ahead].max()
    assert geometry.ego_row - 20 < nearest_row < geometry.ego_row - 8
    assert np.all(np.abs(obstacle_cols[ahead] - geometry.ego_col) < 8)
    assert observation['state'][3] == pytest.approx(
        np.linalg.norm(other.position - ego.position), abs=0.5)
    # And the bird's-eye mask draws its box there (channel 1).
    assert observation['birdeye'][nearest_row - 2:nearest_row + 6, geometry.ego_col, 1].max() > 0
  finally:
    env.close()


def test_crash_is_a_terminal_step_with_discount_zero():
  env = highway.load_highway('highway-fast', seed=0)
  try:
    env.reset()
    sim = env.simulator
    ego = sim.vehicle
    blocker = next(v for v in sim.road.vehicles if v is not ego)
    blocker.position = ego.position + np.array([6.0, 0.0])
    blocker.heading, blocker.speed = ego.heading, 0.0
    time_step = env.step(np.array([1.0, 0.0], np.float32))
    assert time_step.step_type == ts.StepType.LAST
    assert float(time_step.discount) == 0.0
    assert env.get_info()['reason'] == highway.COLLISION
    assert env.get_info()['crashed']
    # The next step starts a new episode (TF-Agents' auto reset).
    assert env.step(np.zeros(2, np.float32)).step_type == ts.StepType.FIRST
  finally:
    env.close()


def test_leaving_the_track_is_terminal():
  env = highway.load_highway('racetrack', seed=0)
  try:
    steps = drive(env, [0.0, 1.0])  # full right lock
    assert steps[-1].is_last() and len(steps) < 50
    assert float(steps[-1].discount) == 0.0
    assert env.get_info()['reason'] == highway.OFF_ROAD
    assert all(float(s.discount) == 1.0 for s in steps[1:-1])
  finally:
    env.close()


def test_time_limit_is_a_truncation_with_discount_one():
  env = highway.load_highway('racetrack', seed=0, episode_seconds=2.0)
  try:
    steps = drive(env, [0.0, 0.0])
    assert steps[-1].is_last()
    assert float(steps[-1].discount) == 1.0
    info = env.get_info()
    assert info['reason'] == highway.TIME_LIMIT
    # 2 s at 5 Hz; the odometer counts the distance actually driven (10 m/s).
    assert 10 <= len(steps) - 1 <= 11
    assert info['distance_m'] == pytest.approx(10.0 * (len(steps) - 1) / 5.0, rel=0.05)
  finally:
    env.close()


def test_actions_are_acceleration_then_steering():
  def after(action, steps=5):
    env = highway.load_highway('racetrack', seed=0)  # starts at 10 m/s on a straight
    try:
      env.reset()
      for _ in range(steps):
        time_step = env.step(np.asarray(action, np.float32))
      return time_step.observation['state'], env.get_info()
    finally:
      env.close()
  (_, _, v_gas, _), _ = after([1.0, 0.0])
  (_, _, v_brake, _), _ = after([-1.0, 0.0])
  (_, _, v_coast, _), _ = after([0.0, 0.0])
  assert v_gas > v_coast > v_brake >= 0.0  # never reverses
  (_, heading_right, _, _), _ = after([0.0, 0.2], steps=2)
  (_, heading_left, _, _), _ = after([0.0, -0.2], steps=2)
  assert heading_right > 0.0 > heading_left  # + steers right, as in CARLA


def test_unknown_scenario_lists_the_valid_ones():
  with pytest.raises(highway.HighwayEnvError) as error:
    highway.load_highway('racetrak')
  message = str(error.value)
  assert 'racetrak' in message
  for name in highway.SCENARIOS:
    assert name in message


def test_missing_highway_env_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, 'highway_env', None)  # makes `import highway_env` fail
  with pytest.raises(ImportError) as error:
    highway.load_highway('racetrack')
  assert "pip install -e '.[highway]'" in str(error.value)
  assert 'highway-env 1.11' in str(error.value)


def test_dummy_video_driver_does_not_give_black_frames():
  # pygame reads SDL_VIDEODRIVER once per process: check it in a fresh one.
  script = ('import json, numpy as np\n'
            'from planet_tfa.environments import highway\n'
            'env = highway.load_highway("racetrack", seed=0)\n'
            'camera = env.reset().observation["camera"]\n'
            'print(json.dumps({"max": int(camera.max()), "std": float(camera.std())}))\n')
  env = dict(os.environ, SDL_VIDEODRIVER='dummy', PYTHONPATH=REPO)
  result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  stats = json.loads(result.stdout.strip().splitlines()[-1])
  assert stats['max'] > 40 and stats['std'] > 5


def test_lidar_sectors_become_points_in_the_ego_frame():
  cells = 8
  distances = np.full(cells, 32.0)
  distances[2] = 10.0  # world angle 90 degrees: +y
  points = highway.lidar_sectors_to_points(distances, ego_heading_rad=np.pi / 2,
                                           lidar_range=32.0)
  obstacle = points[points[:, 2] > -2.0]
  # Facing +y, that sector is straight ahead.
  np.testing.assert_allclose(obstacle[:, :2], [[10.0, 0.0]], atol=1e-5)
  ground = points[points[:, 2] <= -2.0]
  ahead = ground[np.abs(ground[:, 1]) < 1e-5]
  ahead = ahead[ahead[:, 0] > 0]
  assert ahead[:, 0].max() < 10.0  # ground returns stop at the hit


def test_driving_gin_files_share_the_model_and_differ_only_in_the_environment():
  def bindings(gin_file):
    gin_files.parse([gin_file])
    try:
      return {name: gin.query_parameter(name) for name in SHARED}
    finally:
      gin.clear_config()
  carla, highway_bindings = bindings('carla_sac.gin'), bindings('highway_sac.gin')
  assert carla == highway_bindings
  gin_files.parse(['highway_sac.gin'])
  try:
    assert gin.query_parameter('load_environment.loader').selector == 'load_highway'
    assert gin.query_parameter('WorldModel.encoder_keys') == ['camera', 'lidar', 'state', 'route']
  finally:
    gin.clear_config()


SHARED = ['WorldModel.encoder_keys', 'WorldModel.decoder_keys', 'WorldModel.image_depth',
          'RSSM.deter_size', 'RSSM.stoch_size', 'LatentSacAgent.target_entropy',
          'LatentSacAgent.actor_fc_layers', 'train_eval.batch_size',
          'Experiment.sequence_length', 'train_eval.train_steps_per_iteration']


def event_tags(directory):
  tags = set()
  for path in tf.io.gfile.glob(os.path.join(directory, 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        tags.add(value.tag)
  return tags


@pytest.mark.slow  # train_eval in another process
def test_train_eval_on_highway_sac_gin_writes_eval_videos_and_exports(tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  # tiny.gin sets the ratio form; driving.gin the per-iteration one: keep tiny's.
  params = ['train_eval.num_iterations = 2', 'load_highway.episode_seconds = 3.0',
            'train_eval.train_steps_per_iteration = None']
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={tmp_path}',
       '--gin_file=highway_sac.gin', '--gin_file=tiny.gin']
      + [f'--gin_param={p}' for p in params],
      capture_output=True, text=True, timeout=600, cwd=REPO,
      env=dict(os.environ, PYTHONUNBUFFERED='1'))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  summary = json.loads((tmp_path / 'run_summary.json').read_text())
  assert summary['iterations'] == 2 and summary['last_eval_return'] is not None
  videos = sorted((tmp_path / 'eval' / 'videos').glob('eval_*.gif'))
  assert [v.name for v in videos] == [f'eval_{summary["train_steps"]}.gif']
  gif = Image.open(videos[0])
  # Rows camera, lidar, birdeye (64 px + 2 px gaps), real | model, scaled 2x.
  assert gif.size == (2 * (2 * 64 + 2), 2 * (3 * 64 + 2 * 2))
  assert 2 <= gif.n_frames <= 17  # FIRST .. LAST of a <= 3 s episode at 5 Hz
  assert 'eval/video_real_left_model_right' in event_tags(str(tmp_path / 'eval'))
  loaded = tf.saved_model.load(str(tmp_path / 'policies' / 'greedy_policy'))
  names = {s.name for s in loaded.signatures['action'].structured_input_signature[1].values()}
  # driving.gin encodes camera, lidar, the ego state and the route; the mask is decode-only.
  assert {'0/observation/camera', '0/observation/lidar', '0/observation/state',
          '0/observation/route'} <= names
  assert not any('birdeye' in n for n in names)
  # bench.driving_eval drives the exported policy and reads the env's info.
  from bench import driving_eval  # pylint: disable=g-import-not-at-top
  env = highway.load_highway('racetrack', seed=1, episode_seconds=2.0)
  try:
    results = driving_eval.run_episodes(
        env, driving_eval.SavedPolicy(str(tmp_path / 'policies' / 'greedy_policy')), 2)
  finally:
    env.close()
  assert len(results) == 2
  assert all(r['reason'] in ('collision', 'off_road', 'time_limit') for r in results)
  assert all(r['steps'] <= 11 and r['distance_m'] >= 0 for r in results)


def test_driving_eval_counts_crashes_and_distance():
  from bench import driving_eval  # pylint: disable=g-import-not-at-top
  env = highway.load_highway('racetrack', seed=0, episode_seconds=2.0)
  try:
    # Straight ahead on the first straight: 2 s at 10 m/s, no crash.
    coast = driving_eval.summarize(
        driving_eval.run_episodes(env, driving_eval.ConstantPolicy(0.0), 2))
    # Full right lock leaves the track at once.
    steer = driving_eval.summarize(
        driving_eval.run_episodes(env, _SteerRight(), 2))
  finally:
    env.close()
  assert coast['crash_rate'] == 0.0 and coast['time_limit_rate'] == 1.0
  assert coast['distance_m_mean'] == pytest.approx(20.0, rel=0.15)
  assert steer['crash_rate'] == 1.0 and steer['off_road_rate'] == 1.0
  assert steer['distance_m_mean'] < coast['distance_m_mean']


class _SteerRight:
  def reset(self):
    pass

  def __call__(self, time_step):
    return np.array([0.0, 1.0], np.float32)


def _expert_episode(env, target_speed=5.0, seed=0, **gains):
  """One episode of the expert controller (noise-free) through TF-Agents' TFPyEnvironment."""
  from tf_agents.environments import tf_py_environment  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import expert_policy  # pylint: disable=g-import-not-at-top
  tf_env = tf_py_environment.TFPyEnvironment(env)
  policy = expert_policy.ExpertDrivingPolicy(tf_env.time_step_spec(), tf_env.action_spec(),
                                             target_speed=target_speed, noise_std=0.0, **gains)
  step, total, speeds = tf_env.reset(), 0.0, []
  while not step.is_last():
    step = tf_env.step(policy.action(step).action)
    total += float(step.reward[0])
    speeds.append(float(step.observation['state'][0, 2]))
  return total, speeds, env.get_info()


def test_track_speed_reward_makes_stopping_costly_and_pays_driving_at_the_target():
  kw = dict(seed=0, episode_seconds=8.0, reward_shape='track_speed', target_speed=5.0,
            config={'other_vehicles': 0})
  env = highway.load_highway('racetrack', **kw)
  try:
    # Full brake: the car stops (speeds clip at 0) and then pays the step cost every step.
    steps = drive(env, [-1.0, 0.0])
    assert steps[-1].step_type == ts.StepType.LAST and float(steps[-1].discount) == 1.0
    late = [float(s.reward) for s in steps[-10:]]
    assert max(late) < 0 and abs(late[-1] + 0.1) < 1e-3, late
    # The expert at the target speed in its lane earns most of the 1.5 per step.
    total, speeds, info = _expert_episode(env, target_speed=5.0)
    assert info['reason'] == 'time_limit' and abs(speeds[-1] - 5.0) < 0.2
    assert total / len(speeds) > 1.0
  finally:
    env.close()


def test_expert_drives_the_racetrack_at_5_m_s_without_leaving_it():
  env = highway.load_highway('racetrack', seed=0, config={'other_vehicles': 1})
  try:
    total, speeds, info = _expert_episode(env, target_speed=5.0)
  finally:
    env.close()
  # The whole 40 s (200 steps), near the set speed; the reference
  # controller returned 80.8 +- 1.1 at 5 m/s with this reward.
  assert info['reason'] == 'time_limit' and len(speeds) == 200
  assert total > 75 and info['distance_m'] > 180


def test_the_expert_steers_into_the_routes_curve_and_slows_before_it():
  from tf_agents.specs import tensor_spec  # pylint: disable=g-import-not-at-top
  from tf_agents.trajectories import time_step as ts_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import expert_policy  # pylint: disable=g-import-not-at-top
  spec = ts_lib.time_step_spec(tensor_spec.from_spec(carla_specs.observation_spec()))
  action_spec = tensor_spec.from_spec(carla_specs.action_spec())
  state = np.array([[0.0, 0.0, 8.0, 50.0]], np.float32)  # centred, aligned, 8 m/s, road clear
  route = np.zeros([1, 12], np.float32)
  route[0, 0] = 1.0
  route[0, 4:] = [5.0, 0.75, 10.0, 3.0, 15.0, 6.75, 20.0, 12.0]  # a right curve: 2r/(f^2+r^2)
  curvature = 2 * 3.0 / (10.0**2 + 3.0**2)                        # at the 10 m point
  on_state = expert_policy.ExpertDrivingPolicy(spec, action_spec, target_speed=10.0)
  on_route = expert_policy.ExpertDrivingPolicy(spec, action_spec, target_speed=10.0,
                                               k_route=6.0, max_lateral_accel=3.0)
  blind = on_state.controls(state, route).numpy()[0]
  seeing = on_route.controls(state, route).numpy()[0]
  np.testing.assert_allclose(blind, [0.3 * (10.0 - 8.0), 0.0], atol=1e-6)  # route unused
  np.testing.assert_allclose(seeing[1], 6.0 * curvature, rtol=1e-5)         # steers right
  # Slows to the speed at which the curve's lateral acceleration is 3 m/s^2 (7.4 m/s).
  assert np.sqrt(3.0 / curvature) < 8.0
  np.testing.assert_allclose(seeing[0], 0.3 * (np.sqrt(3.0 / curvature) - 8.0), rtol=1e-5)
  with pytest.raises(errors.ConfigError, match='max_lateral_accel=0'):
    expert_policy.ExpertDrivingPolicy(spec, action_spec, max_lateral_accel=0)


def test_with_the_route_the_expert_drives_the_racetrack_at_10_m_s_without_crashing():
  # On `state` alone it crashes in 75 % of episodes at 10 m/s (docs/driving.md).
  env = highway.load_highway('racetrack', seed=1, config={'other_vehicles': 1})
  try:
    total, speeds, info = _expert_episode(env, target_speed=10.0, k_route=6.0,
                                          max_lateral_accel=3.0)
  finally:
    env.close()
  assert info['reason'] == 'time_limit' and len(speeds) == 200
  assert total > 100 and info['distance_m'] > 220, (total, info)  # 5 m/s covers ~200 m


def test_steer_and_brake_limits_narrow_what_the_action_commands():
  full = highway.load_highway('racetrack', seed=0, episode_seconds=3.0,
                              config={'other_vehicles': 0})
  narrow = highway.load_highway('racetrack', seed=0, episode_seconds=3.0,
                                config={'other_vehicles': 0}, steer_limit=0.25, brake_limit=0.5)
  try:
    # Same start, full left lock and full brake for 4 steps: the narrowed car
    # turns and slows less.
    ends = []
    for env in (full, narrow):
      env.reset()
      for _ in range(4):
        step = env.step(np.array([-1.0, -1.0], np.float32))
      ends.append((abs(float(step.observation['state'][1])), float(step.observation['state'][2])))
    (full_heading, full_speed), (narrow_heading, narrow_speed) = ends
    assert narrow_heading < full_heading and narrow_speed > full_speed
  finally:
    full.close()
    narrow.close()
  with pytest.raises(highway.HighwayEnvError, match='steer_limit'):
    highway.load_highway('racetrack', steer_limit=0.0)


def test_camera_is_turned_with_the_egos_heading():
  frame = np.zeros((100, 100, 3), np.uint8)
  frame[40:60, 50:90] = 255          # a bar pointing along +x (screen right) from the centre
  up = highway.heading_up_frame(frame, 0.0)     # heading 0 = +x: the bar must point up
  side = up.shape[0]
  column = up[:, side // 2 - 3:side // 2 + 3].mean(axis=(1, 2))
  assert column[:side // 2 - 5].mean() > 100 and column[side // 2 + 5:].mean() < 20
  # Heading pi/2 (screen down, y grows downwards): the bar along +x is on the ego's left.
  turned = highway.heading_up_frame(frame, np.pi / 2)
  row = turned[side // 2 - 3:side // 2 + 3].mean(axis=(0, 2))
  assert row[:side // 2 - 5].mean() > 100 and row[side // 2 + 5:].mean() < 20


def test_the_experts_gains_are_physical_so_each_env_limit_turns_the_wheels_the_same():
  """The same gains give the same wheel angle and acceleration under any steer and brake
  limits: the action scales by the env's control ranges (in action units, a steer limit of 0.5
  halved every wheel angle)."""
  from tf_agents.environments import tf_py_environment  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import expert_policy  # pylint: disable=g-import-not-at-top
  state = np.array([[0.5, 0.05, 8.0, 50.0]], np.float32)  # 0.5 m right, 8 m/s, road clear
  angles, pedals = {}, {}
  for limit in (0.5, 1.0):
    env = highway.load_highway('racetrack', seed=0, steer_limit=limit, brake_limit=limit,
                               config={'other_vehicles': 0})
    try:
      ranges = env.control_ranges()
      tf_env = tf_py_environment.TFPyEnvironment(env)
      assert expert_policy.env_control_ranges(tf_env) == ranges
      policy = expert_policy.ExpertDrivingPolicy(
          tf_env.time_step_spec(), tf_env.action_spec(), target_speed=7.0, noise_std=0.0,
          control_ranges=ranges)
      pedal, steer = policy.controls(state).numpy()[0]
    finally:
      env.close()
    assert ranges.steer_rad == pytest.approx(np.pi / 4 * limit)  # highway-env's +-45 degrees
    assert ranges.decel_mps2 == pytest.approx(5.0 * limit) and ranges.accel_mps2 == 5.0
    angles[limit], pedals[limit] = steer * ranges.steer_rad, pedal * ranges.decel_mps2
  # -(0.24 * 0.5 + 1.2 * 0.05) rad at the wheels (the defaults), -1.5 * 1 m/s^2 of braking.
  assert angles[0.5] == pytest.approx(angles[1.0], rel=1e-5)
  assert angles[0.5] == pytest.approx(-(0.24 * 0.5 + 1.2 * 0.05), rel=1e-5)
  assert pedals[0.5] == pytest.approx(pedals[1.0], rel=1e-5)
  assert pedals[0.5] == pytest.approx(-1.5, rel=1e-5)

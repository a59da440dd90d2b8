"""Junctions, a scenario mix and the held-out suite on the real highway-env 1.11."""
import json
import math
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import reverb
import tensorflow as tf
from tf_agents.policies import random_tf_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa import experiment as experiment_lib
from planet_tfa import validation
from planet_tfa.environments import highway
from planet_tfa.environments.carla import route as carla_route
from planet_tfa.environments.carla import specs as carla_specs
from planet_tfa.programs import gin_files
from planet_tfa.replay import tables

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip('highway_env', reason="needs pip install -e '.[highway]'")

# The training mix's steering range and the route expert's gains (gin/driving_mix.gin, driving.gin).
MIX_ENV = dict(steer_limit=0.75, brake_limit=0.5, reward_shape='track_speed',
               episode_seconds=30.0)
# gin/driving_mix.gin's gains (physical units, turned into actions with the env's control ranges).
EXPERT_GAINS = dict(k_offset_rad_per_m=0.118, k_heading_rad_per_rad=0.59, k_route_m=3.53,
                    max_lateral_accel=3.0)
QUIET = {'initial_vehicle_count': 1, 'spawn_probability': 0.0}  # the challenger only


def _expert(env, target_speed=8.0):
  from planet_tfa.agents import expert_policy  # pylint: disable=g-import-not-at-top
  time_step_spec = ts.time_step_spec(tensor_spec.from_spec(env.observation_spec()))
  return expert_policy.ExpertDrivingPolicy(
      time_step_spec, tensor_spec.from_spec(env.action_spec()), target_speed=target_speed,
      noise_std=0.0, control_ranges=env.control_ranges(), **EXPERT_GAINS)


def _drive(env, act, max_steps=400):
  """Steps act(time_step) until the episode ends; returns the time steps, FIRST included."""
  steps = [env.reset()]
  while not steps[-1].is_last() and len(steps) <= max_steps:
    steps.append(env.step(np.asarray(act(steps[-1]), np.float32)))
  return steps


def _expert_act(policy):
  return lambda step: policy.controls(step.observation['state'][None],
                                      step.observation['route'][None]).numpy()[0]


def _command(step):
  return carla_route.COMMANDS[int(np.argmax(step.observation['route'][:4]))]


@pytest.mark.parametrize('turn, heading_change_deg', [('left', -90.0), ('right', 90.0),
                                                      ('straight', 0.0)])
def test_junction_command_matches_the_planned_exit(turn, heading_change_deg):
  # highway-env's headings grow clockwise on the screen (y points down), as CARLA's
  # yaw: a right turn adds 90 degrees. The command must name the exit the ego then drives.
  env = highway.load_highway('intersection', seed=3, destinations=[turn], config=QUIET,
                             **MIX_ENV)
  try:
    steps = _drive(env, _expert_act(_expert(env)))
    info = env.get_info()
    sim = env.simulator
    start_heading = steps[0].observation['state'][1]  # ~0: aligned with the route
    final_heading = sim.vehicle.heading
  finally:
    env.close()
  commands = [_command(s) for s in steps]
  # Far from the junction: follow the lane; then the turn; after the junction: follow the lane.
  assert commands[0] == 'follow_lane'
  turn_steps = [k for k, c in enumerate(commands) if c != 'follow_lane']
  assert turn_steps and {commands[k] for k in turn_steps} == {turn}, commands
  assert turn_steps == list(range(turn_steps[0], turn_steps[-1] + 1))  # one stretch
  assert commands[-1] == 'follow_lane'
  assert info['junction_command'] == turn
  # The ego drove the planned exit to the route's end.
  assert info['reason'] == highway.ROUTE_COMPLETE and info['exit'] == highway.COMMANDED_EXIT
  assert float(steps[-1].discount) == 1.0  # the road goes on: a truncation
  assert info['route_completion'] == pytest.approx(1.0, abs=0.05)
  south = -math.pi / 2  # the ego starts on the south arm, driving up the screen (-y)
  change = math.degrees(highway.wrap_angle(final_heading - south - start_heading))
  assert change == pytest.approx(heading_change_deg, abs=15.0), (turn, change)


def test_route_points_lie_on_the_planned_lanes_through_the_junction():
  env = highway.load_highway('intersection', seed=5, destinations=['left'], config=QUIET,
                             **MIX_ENV)
  try:
    act = _expert_act(_expert(env))
    step = env.reset()
    # Until 6 m before the junction (it starts 11 m south of the centre; south is +y):
    # the points 10-20 m ahead are in the turn.
    while env.simulator.vehicle.position[1] > 17.0:
      step = env.step(np.asarray(act(step), np.float32))
      assert not step.is_last()
    network = env.simulator.road.network
    planned = [network.get_lane(('ir0', 'il1', 0)), network.get_lane(('il1', 'o1', 0)),
               network.get_lane(('o0', 'ir0', 0))]
    other_branches = [network.get_lane(('ir0', 'il2', 0)), network.get_lane(('ir0', 'il3', 0))]
    vehicle = env.simulator.vehicle
    assert _command(step) == 'left'
    ahead = step.observation['route'][4:].reshape(4, 2).astype(np.float64)
    yaw = vehicle.heading
    world = vehicle.position + (ahead[:, :1] * [np.cos(yaw), np.sin(yaw)]
                                + ahead[:, 1:] * [-np.sin(yaw), np.cos(yaw)])
  finally:
    env.close()
  for point in world:
    on_plan = min(abs(lane.local_coordinates(point)[1]) for lane in planned
                  if -1 <= lane.local_coordinates(point)[0] <= lane.length + 1)
    assert on_plan < 0.1, point
  far = world[-1]  # 20 m ahead: ~14 m into the left turn, far from the other branches
  assert min(lane.distance(far) for lane in other_branches) > 2.0


def test_taking_the_wrong_exit_ends_the_episode_off_route():
  # Planned right; the car holds its lane's heading straight across the junction.
  env = highway.load_highway('intersection', seed=2, destinations=['right'], config=QUIET,
                             **MIX_ENV)
  try:
    steps = _drive(env, lambda step: [0.0, 0.0])
    info = env.get_info()
  finally:
    env.close()
  assert steps[-1].step_type == ts.StepType.LAST
  assert float(steps[-1].discount) == 0.0  # a terminal, as leaving the road
  assert info['reason'] == highway.OFF_ROUTE and info['exit'] == highway.WRONG_EXIT
  assert 0.2 < info['route_completion'] < 0.8
  assert float(steps[-1].reward) < -10  # the crash penalty


def test_destinations_are_drawn_per_episode_from_the_seeded_list():
  def commands(seed):
    env = highway.load_highway('intersection', seed=seed, config=QUIET, command_distance=80.0,
                               **MIX_ENV)
    try:
      # With the command named 80 m out, the first step already names the exit.
      return [_command(env.reset()) for _ in range(8)]
    finally:
      env.close()
  first = commands(7)
  assert first == commands(7)
  assert set(first) == {'left', 'right', 'straight'}


@pytest.mark.parametrize('scenario', ['roundabout', 'merge'])
def test_roundabout_and_merge_take_continuous_actions(scenario):
  # highway-env 1.11's own rewards raise on a continuous action (`action in [0, 2]`).
  env = highway.load_highway(scenario, seed=0, **MIX_ENV)
  try:
    assert env.observation_spec() == carla_specs.observation_spec()
    steps = _drive(env, _expert_act(_expert(env)), max_steps=60)
    info = env.get_info()
  finally:
    env.close()
  assert len(steps) > 30 and info['reason'] in (None, highway.ROUTE_COMPLETE)
  assert info['route_completion'] > 0.2


def test_the_roundabouts_exits_are_commanded_as_turns():
  seen = {}
  for turn in ('left', 'right', 'straight'):
    env = highway.load_highway('roundabout', seed=0, destinations=[turn], **MIX_ENV)
    try:
      env.reset()
      seen[turn] = env.get_info()['junction_command']
    finally:
      env.close()
  assert seen == {'left': 'left', 'right': 'right', 'straight': 'straight'}


MIX = ['racetrack', {'scenario': 'intersection', 'config': QUIET, 'episode_seconds': 4.0,
                     'command_distance': 80.0}]


def test_a_mix_draws_each_episodes_scenario_and_seed_from_its_own_seed():
  def scenarios(seed):
    env = highway.load_highway(seed=seed, scenario_mix=MIX, episode_seconds=2.0)
    try:
      assert env.observation_spec() == carla_specs.observation_spec()
      labels = []
      for _ in range(8):
        first = env.reset()
        labels.append((env.get_info()['scenario'], _command(first),
                       round(float(first.observation['state'][2]), 3)))
      return labels
    finally:
      env.close()
  drawn = scenarios(11)
  assert drawn == scenarios(11)
  assert {label for label, _, _ in drawn} == {'racetrack', 'intersection'}
  # Each draw is the scenario it says: the intersection names its turn from the start.
  assert all((command != 'follow_lane') == (label == 'intersection')
             for label, command, _ in drawn)


def test_a_mix_of_scenarios_with_other_specs_is_refused_naming_it():
  with pytest.raises(ValueError, match="scenario 'small' has other specs than 'racetrack'"):
    highway.load_highway(scenario_mix=['racetrack', {'scenario': 'racetrack', 'label': 'small',
                                                     'image_size': 32}])


@pytest.mark.parametrize('scenario_mix, named', [
    (['racetrack', 'nope'], "'nope'"),
    ([{'scenario': 'intersection', 'destinations': ['up']}], "destinations=['up']"),
    ([{'scenario': 'racetrack', 'speed': 3}], "unknown key(s) ['speed']"),
    ('racetrack', 'a non-empty list'),
])
def test_a_bad_scenario_mix_is_named_before_any_env(scenario_mix, named):
  gin.bind_parameter('load_highway.scenario_mix', scenario_mix)
  try:
    with pytest.raises(validation.SettingError) as error:
      validation.check_experiment(experiment_lib.Experiment())
  finally:
    gin.clear_config()
  assert named in str(error.value) and 'load_highway.' in str(error.value)


def test_driving_mix_gin_trains_racetrack_and_intersection_with_the_driving_model():
  gin_files.parse(['driving_mix.gin'])
  try:
    mix = highway.mix_entries(gin.query_parameter('load_highway.scenario_mix'))
    assert {e['scenario'] for e in mix} == {'racetrack', 'intersection'}
    assert gin.query_parameter('WorldModel.encoder_keys') == ['camera', 'lidar', 'state',
                                                              'route']
    assert gin.query_parameter('WorldModel.reward_terminal_weight') == 30.0  # highway_drive.gin
  finally:
    gin.clear_config()
  from bench import driving_eval  # pylint: disable=g-import-not-at-top
  assert not {label for label, _ in driving_eval.HELDOUT_SUITE} & {e['label'] for e in mix}


def _replay_windows(root):
  """Every window of a finished run's replay (its checkpoint under ROOT/replay)."""
  env = highway.load_highway('racetrack', seed=0)
  try:
    time_step_spec = ts.time_step_spec(tensor_spec.from_spec(env.observation_spec()))
    action_spec = tensor_spec.from_spec(env.action_spec())
  finally:
    env.close()
  data_spec = random_tf_policy.RandomTFPolicy(time_step_spec, action_spec).trajectory_spec
  server = tables.ReplayServer([tables.make_experience_table(data_spec)], root_dir=str(root))
  try:
    size = server.table_size()
    assert size > 0
    sampler = tables.ReplaySampler(data_spec, server.address, 9, batch_size=size * 20,
                                   timeout_s=20)
    return tf.nest.map_structure(lambda x: x.numpy(), next(sampler)), size
  finally:
    server.stop()


@pytest.mark.slow  # train_eval in another process
def test_a_mixed_runs_replay_holds_episodes_of_every_scenario(tmp_path):
  # The intersection names its turn 80 m out, so each of its episodes starts
  # with a turn command; the racetrack's never has one.
  mix = ("load_highway.scenario_mix = ['racetrack', {'scenario': 'intersection', "
         "'config': {'initial_vehicle_count': 1, 'spawn_probability': 0.0}, "
         "'command_distance': 80.0}]")
  params = [mix, 'load_highway.episode_seconds = 3.0', 'train_eval.num_iterations = 2',
            'train_eval.initial_collect_episodes = 6', 'train_eval.model_pretrain_steps = 2',
            'train_eval.train_steps_per_iteration = 2', 'train_eval.eval_interval = 0',
            'train_eval.train_steps_per_env_step = None']
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={tmp_path}',
       '--gin_file=driving_mix.gin', '--gin_file=tiny.gin']
      + [f'--gin_param={p}' for p in params],
      capture_output=True, text=True, timeout=600, cwd=REPO,
      env=dict(os.environ, PYTHONUNBUFFERED='1'))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  windows, size = _replay_windows(tmp_path)
  firsts = windows.step_type[:, 0] == int(ts.StepType.FIRST)
  commands = windows.observation['route'][firsts, 0, :4].argmax(-1)
  intersection_episodes = int((commands != 0).sum())
  racetrack_episodes = int((commands == 0).sum())
  assert intersection_episodes >= 1 and racetrack_episodes >= 1, (size, commands)


@pytest.mark.slow  # drives every held-out scenario in another process
def test_heldout_suite_prints_every_field_for_the_expert(tmp_path):
  out = tmp_path / 'heldout.jsonl'
  result = subprocess.run(
      [sys.executable, '-m', 'bench.driving_eval', '--suite=heldout', '--policy=expert',
       '--episodes=1', f'--out={out}'],
      capture_output=True, text=True, timeout=600, cwd=REPO,
      env=dict(os.environ, PYTHONUNBUFFERED='1'))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  from bench import driving_eval  # pylint: disable=g-import-not-at-top
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  assert [l['scenario'] for l in lines] == [label for label, _ in driving_eval.HELDOUT_SUITE]
  for line in lines:
    for field in ('return_mean', 'crash_rate', 'route_completion', 'commanded_exit_rate',
                  'expert_return_mean', 'expert_crash_rate', 'expert_route_completion',
                  'expert_commanded_exit_rate', 'episodes'):
      assert field in line, (line['scenario'], field)
    assert line['episodes'] == 1 and line['return_mean'] == line['expert_return_mean']
    assert 0.0 <= line['route_completion'] <= 1.0
    junction = line['scenario'].startswith(('intersection', 'roundabout'))
    assert (line['commanded_exit_rate'] is not None) == junction, line['scenario']

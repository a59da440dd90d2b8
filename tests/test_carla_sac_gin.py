"""gin/carla_sac.gin: it parses, and agent, policy and export build from CARLA's specs.

No CARLA server runs here; the specs come from carla_specs.observation_spec(),
the same function the environment uses.
"""
import json
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa.programs import gin_files
from planet_tfa import saved_policies
from planet_tfa.agents import latent_sac_agent
from planet_tfa.environments.carla import client as carla_client
from planet_tfa.environments.carla import specs as carla_specs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def carla_agent(tiny_model_bindings):
  gin_files.parse(['carla_sac.gin'], tiny_model_bindings)
  try:
    observation_spec = tensor_spec.from_spec(carla_specs.observation_spec())
    action_spec = tensor_spec.from_spec(carla_specs.action_spec())
    agent = latent_sac_agent.LatentSacAgent(ts.time_step_spec(observation_spec), action_spec)
    yield agent
  finally:
    gin.clear_config()


def test_carla_gin_binds_the_simulator_and_sensor_keys():
  gin_files.parse(['carla_sac.gin'])
  try:
    assert gin.query_parameter('load_environment.loader').selector == 'CarlaEnv'
    assert gin.query_parameter('CarlaServer.port') == 2000
    assert gin.query_parameter('WorldModel.encoder_keys') == ['camera', 'lidar', 'state', 'route']
    assert 'birdeye' in gin.query_parameter('WorldModel.decoder_keys')
    assert gin.query_parameter('LatentSacAgent.target_entropy') == -2.0
  finally:
    gin.clear_config()


def test_world_model_trains_on_carla_windows_including_the_birdeye_target(carla_agent):
  spec = carla_agent.collect_data_spec
  rng = np.random.default_rng(0)
  def sample(s):
    shape = [2, 9] + list(s.shape)
    if s.dtype == tf.uint8:
      return tf.constant(rng.integers(0, 256, shape), tf.uint8)
    return tf.constant(rng.uniform(-1, 1, shape), s.dtype)
  sample = tf.nest.map_structure(sample, spec)
  sample = sample._replace(step_type=tf.ones([2, 9], tf.int32),
                           next_step_type=tf.ones([2, 9], tf.int32))
  info = carla_agent.train(sample)
  assert 'birdeye_log_prob' in info.extra and 'camera_log_prob' in info.extra
  assert 'lidar_log_prob' in info.extra
  assert np.isfinite(info.loss.numpy())


def test_exported_carla_policy_takes_camera_lidar_state_and_route_not_the_birdeye(carla_agent, tmp_path):
  policy = carla_agent.export_policy()
  assert sorted(policy.time_step_spec.observation) == ['camera', 'lidar', 'route', 'state']
  paths = saved_policies.export_policies(carla_agent, str(tmp_path), carla_agent.train_step_counter)
  loaded = tf.saved_model.load(paths['greedy_policy'])
  action_fn = loaded.signatures['action']
  input_names = {spec.name for spec in action_fn.structured_input_signature[1].values()}
  assert {'0/observation/camera', '0/observation/lidar', '0/observation/state',
          '0/observation/route'} <= input_names
  assert not any('birdeye' in name for name in input_names)
  state = loaded.get_initial_state(2)
  step = ts.TimeStep(step_type=tf.zeros([2], tf.int32), reward=tf.zeros([2]),
                     discount=tf.ones([2]),
                     observation={'camera': tf.zeros([2, 64, 64, 3], tf.uint8),
                                  'lidar': tf.zeros([2, 64, 64, 3], tf.uint8),
                                  'state': tf.constant([[0.5, 0.1, 5.0, 50.0]] * 2),
                                  'route': tf.constant([[1.0, 0, 0, 0, 5, 0, 10, 0, 15, 0,
                                                         20, 0]] * 2)})
  out = loaded.action(step, state)
  assert out.action.shape == (2, 2)
  assert np.all(np.abs(out.action.numpy()) <= 1.0)


@pytest.mark.skipif(
    not os.environ.get('CARLA_HOST'),
    reason='no CARLA server here: start CarlaUE4.sh (0.9.16) -carla-rpc-port=2000 and set '
           'CARLA_HOST=<host> [CARLA_PORT=2000 CARLA_TM_PORT=8000] to run train_eval on it')
@pytest.mark.slow  # train_eval in another process on a real CARLA server
def test_train_eval_runs_a_few_iterations_on_a_carla_server(tmp_path, tiny_model_bindings):
  host = os.environ['CARLA_HOST']
  port = int(os.environ.get('CARLA_PORT', '2000'))
  tm_port = int(os.environ.get('CARLA_TM_PORT', '8000'))
  params = tiny_model_bindings + [f'CarlaServer.host = "{host}"', f'CarlaServer.port = {port}',
                   f'CarlaServer.tm_port = {tm_port}', 'CarlaEpisode.max_steps = 40',
                   'CarlaWorld.num_vehicles = 5', 'train_eval.num_iterations = 2',
                   'train_eval.initial_collect_episodes = 1',
                   'train_eval.train_steps_per_iteration = 2', 'train_eval.batch_size = 4',
                   'train_eval.eval_interval = 2', 'train_eval.checkpoint_interval = 1']
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={tmp_path}',
       '--gin_file=carla_sac.gin'] + [f'--gin_param={p}' for p in params],
      capture_output=True, text=True, timeout=1800, cwd=REPO)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  summary = json.loads((tmp_path / 'run_summary.json').read_text())
  assert summary['iterations'] == 2 and summary['train_steps'] == 4
  loaded = tf.saved_model.load(str(tmp_path / 'policies' / 'greedy_policy'))
  names = {s.name for s in loaded.signatures['action'].structured_input_signature[1].values()}
  assert not any('birdeye' in n for n in names)
  # The run left the server as it should: nothing of ours, asynchronous.
  carla = carla_client.import_carla()
  client = carla.Client(host, port)
  client.set_timeout(30.0)
  world = client.get_world()
  # Ours: tagged planet_tfa_0_..., and the ego ('hero'; on a server of its own, the only one).
  assert not [a for a in world.get_actors()
              if a.attributes.get('role_name', '').startswith(carla_client.instance_tag(0) + '_')
              or a.attributes.get('role_name') == carla_client.EGO_ROLE]
  assert not world.get_settings().synchronous_mode

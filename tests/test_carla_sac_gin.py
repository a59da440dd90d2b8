"""gin/carla_sac.gin: it parses, and agent, policy and export build from CARLA's specs.

No CARLA server runs here; the specs come from carla_env.observation_spec(),
the same function the environment uses.
"""
import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa import config
from planet_tfa import export
from planet_tfa.agents import latent_sac_agent
from planet_tfa.environments import carla_env

TINY = ['RSSM.deter_size = 16', 'RSSM.stoch_size = 4', 'RSSM.hidden_size = 16',
        'WorldModel.image_depth = 4', 'LatentSacAgent.actor_fc_layers = (16,)',
        'LatentSacAgent.critic_fc_layers = (16,)']


@pytest.fixture
def carla_agent():
  config.parse(['carla_sac.gin'], TINY)
  try:
    observation_spec = tensor_spec.from_spec(carla_env.observation_spec())
    action_spec = tensor_spec.from_spec(carla_env.action_spec())
    agent = latent_sac_agent.LatentSacAgent(ts.time_step_spec(observation_spec), action_spec)
    yield agent
  finally:
    gin.clear_config()


def test_carla_gin_binds_the_simulator_and_sensor_keys():
  config.parse(['carla_sac.gin'])
  try:
    assert gin.query_parameter('load_environment.loader').selector == 'CarlaEnv'
    assert gin.query_parameter('CarlaEnv.port') == 2000
    assert gin.query_parameter('WorldModel.encoder_keys') == ['camera', 'lidar']
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


def test_exported_carla_policy_needs_only_camera_and_lidar(carla_agent, tmp_path):
  policy = carla_agent.export_policy()
  assert sorted(policy.time_step_spec.observation) == ['camera', 'lidar']
  paths = export.export_policies(carla_agent, str(tmp_path), carla_agent.train_step_counter)
  loaded = tf.saved_model.load(paths['greedy_policy'])
  action_fn = loaded.signatures['action']
  input_names = {spec.name for spec in action_fn.structured_input_signature[1].values()}
  assert '0/observation/camera' in input_names and '0/observation/lidar' in input_names
  assert not any('birdeye' in name or 'state' in name.split('/')[-1] for name in input_names)
  state = loaded.get_initial_state(2)
  step = ts.TimeStep(step_type=tf.zeros([2], tf.int32), reward=tf.zeros([2]),
                     discount=tf.ones([2]),
                     observation={'camera': tf.zeros([2, 64, 64, 3], tf.uint8),
                                  'lidar': tf.zeros([2, 64, 64, 3], tf.uint8)})
  out = loaded.action(step, state)
  assert out.action.shape == (2, 2)
  assert np.all(np.abs(out.action.numpy()) <= 1.0)

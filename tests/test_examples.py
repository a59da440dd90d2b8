"""The user guide's worked example (examples/gymnasium_pendulum.py) meets the loader
contract: its gin file parses and picks the loader, its env passes TF-Agents' checks,
and the world model builds on its specs and encodes its observations."""
import os

import gin
import numpy as np
import tensorflow as tf
from tf_agents.environments import utils as env_utils
from tf_agents.specs import tensor_spec

from examples import gymnasium_pendulum
from planet_tfa import experiment as experiment_lib
from planet_tfa import schedule
from planet_tfa.environments import suites
from planet_tfa.programs import gin_files
import tiny_model

EXAMPLE_GIN = os.path.join(tiny_model.REPO, 'examples', 'gymnasium_pendulum.gin')


def test_the_example_gin_file_picks_the_example_loader(clean_gin):  # pylint: disable=unused-argument
  gin_files.parse([EXAMPLE_GIN])
  loader = experiment_lib.Experiment().env_loader
  assert loader.__name__ == 'load_gymnasium_pixels'
  assert gin.query_parameter('load_gymnasium_pixels.name') == 'Pendulum-v1'


def test_the_example_env_meets_the_loader_contract():
  env = suites.call_loader(gymnasium_pendulum.load_gymnasium_pixels, seed=0)
  try:
    assert env.observation_spec()['pixels'].shape == (64, 64, 3)
    assert env.observation_spec()['pixels'].dtype == np.uint8
    assert schedule.action_repeat_of(env) == 2
    env_utils.validate_py_environment(env, episodes=1)
    first = env.reset()
    observation_spec = tensor_spec.from_spec(env.observation_spec())
    action_spec = tensor_spec.from_spec(env.action_spec())
    model = tiny_model.world_model(observation_spec, action_spec)
    # The model's own observation checks (keys, dtype, shape), then a filter step.
    observation = tf.nest.map_structure(lambda x: tf.constant(x[None, None]), first.observation)
    action = tf.zeros([1, 1] + list(action_spec.shape), tf.float32)
    step_type = tf.constant([[first.step_type]])
    posterior, _ = model.observe(observation, action, step_type)
    assert all(np.isfinite(v.numpy()).all() for v in tf.nest.flatten(posterior))
  finally:
    env.close()

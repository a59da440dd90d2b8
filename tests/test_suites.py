"""The DeepMind Control pixel loader, on the real dm_control cartpole."""
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

from planet_tfa.environments.carla import env as carla_env
from planet_tfa.environments import suites

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize('user_value, expected', [(None, 'egl'), ('osmesa', 'osmesa')])
def test_importing_suites_sets_mujoco_gl_unless_the_user_did(user_value, expected):
  # In a fresh interpreter: this one had MUJOCO_GL set by other test modules
  # and by its own import of suites.
  env = {k: v for k, v in os.environ.items() if k != 'MUJOCO_GL'}
  if user_value is not None:
    env['MUJOCO_GL'] = user_value
  env['PYTHONPATH'] = REPO  # this checkout's planet_tfa
  code = ('import os\n'
          'before = os.environ.get("MUJOCO_GL", "unset")\n'
          'from planet_tfa.environments import suites\n'
          'print(suites.__file__)\n'
          'print(f"MUJOCO_GL {before} -> {os.environ.get(\'MUJOCO_GL\', \'unset\')}")\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=env, timeout=300,
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines()[0] == suites.__file__
  assert f'MUJOCO_GL {user_value or "unset"} -> {expected}' in result.stdout.splitlines(), (
      result.stdout[-2000:])


def test_pixels_spec_dtype_and_frames_are_not_blank():
  env = suites.load_dmc_pixels('cartpole-swingup', seed=0)
  try:
    spec = env.observation_spec()
    assert isinstance(spec, dict) and list(spec) == ['pixels']
    assert spec['pixels'].shape == (64, 64, 3) and spec['pixels'].dtype == np.uint8
    assert env.action_spec().shape == (1,) and env.action_spec().dtype == np.float32
    time_step = env.reset()
    frames = [time_step.observation['pixels']]
    for _ in range(5):
      time_step = env.step(np.array([1.0], np.float32))
      frames.append(time_step.observation['pixels'])
    frames = np.stack(frames)
    assert frames.dtype == np.uint8
    assert frames.std() > 10, 'rendered frames are blank'
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean() > 0.5, \
        'frames do not change while the cart moves'
  finally:
    env.close()


def test_action_repeat_sums_rewards_of_the_inner_steps():
  from dm_control import suite  # pylint: disable=g-import-not-at-top
  repeat = 4
  env = suites.load_dmc_pixels('cartpole-swingup', action_repeat=repeat, seed=3)
  raw = suite.load('cartpole', 'swingup', task_kwargs={'random': 3})
  try:
    env.reset()
    raw.reset()
    rng = np.random.default_rng(0)
    for _ in range(6):
      action = rng.uniform(-1, 1, size=(1,)).astype(np.float32)
      reward = env.step(action).reward
      expected = sum(raw.step(action).reward for _ in range(repeat))
      assert reward == np.float32(expected)
      assert expected > 0
  finally:
    env.close()


def test_paper_action_repeats_are_the_default():
  env = suites.load_dmc_pixels('cartpole-swingup', seed=0)
  try:
    first = env.reset()
    steps = 0
    time_step = first
    while not time_step.is_last():
      time_step = env.step(np.zeros(1, np.float32))
      steps += 1
    assert steps == 1000 // 8  # 1000 physics steps at action repeat 8
  finally:
    env.close()


def test_the_step_after_last_starts_a_new_episode_with_first():
  env = suites.load_dmc_pixels('cartpole-swingup', seed=0, time_limit=0.4)
  try:
    time_step = env.reset()
    assert time_step.is_first()
    step_types = []
    for _ in range(12):
      time_step = env.step(np.zeros(1, np.float32))
      step_types.append(int(time_step.step_type))
    # 0.4 s at action repeat 8 = 5 agent steps: MID x4, LAST, then FIRST again.
    assert step_types[:6] == [1, 1, 1, 1, 2, 0]
    assert step_types[6:11] == [1, 1, 1, 1, 2]
  finally:
    env.close()


def test_collector_instance_reaches_only_loaders_that_take_one():
  calls = []
  def simulator_loader(seed=None, instance=0):
    calls.append((seed, instance))
  def plain_loader(seed=None):
    calls.append((seed,))
  suites.call_loader(simulator_loader, 7, instance=3)
  suites.call_loader(plain_loader, 7, instance=3)
  suites.call_loader(simulator_loader, 7)  # no instance: the gin binding stays in force
  assert calls == [(7, 3), (7,), (7, 0)]
  assert 'instance' in inspect.signature(carla_env.CarlaEnv).parameters
  suites.load_environment(loader=simulator_loader, seed=1, instance=2)
  assert calls[-1] == (1, 2)


def _run_episode(env, action, max_steps=10_000):
  time_step = env.reset()
  steps = 0
  while not time_step.is_last() and steps < max_steps:
    time_step = env.step(action)
    steps += 1
  return steps, time_step


def test_gym_time_limit_end_keeps_discount_one():
  # Pendulum never terminates: its end is gym's 200-step TimeLimit, a truncation.
  env = suites.load_gym('Pendulum-v1', seed=0)
  try:
    steps, last = _run_episode(env, np.zeros(1, np.float32))
    assert steps == 200 and last.is_last()
    assert float(last.discount) == 1.0, 'a time-limit end is not a terminal'
  finally:
    env.close()


def test_gym_max_episode_steps_replaces_the_registered_limit():
  # Longer than Pendulum's registered 200: gym's own TimeLimit must not cut it.
  env = suites.load_gym('Pendulum-v1', max_episode_steps=230, seed=0)
  try:
    steps, last = _run_episode(env, np.zeros(1, np.float32))
    assert steps == 230 and float(last.discount) == 1.0
  finally:
    env.close()


def test_gym_real_termination_keeps_discount_zero():
  # CartPole pushed one way falls over long before its limit: a true terminal.
  env = suites.load_gym('CartPole-v1', seed=0)
  try:
    steps, last = _run_episode(env, np.array(0, np.int64))
    assert steps < 100 and last.is_last()
    assert float(last.discount) == 0.0
    assert isinstance(env.observation_spec(), dict) and 'state' in env.observation_spec()
  finally:
    env.close()


def test_dmc_loader_states_its_action_repeat_through_a_tf_env():
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa import schedule  # pylint: disable=g-import-not-at-top
  tf_env = experiment_lib.make_env(experiment_lib.Experiment(
      env_loader=lambda seed: suites.load_dmc_pixels('walker-walk', seed=seed)))
  try:
    assert schedule.action_repeat_of(tf_env) == 2  # PlaNet's repeat for walker
  finally:
    experiment_lib.close_env(tf_env)
  assert schedule.action_repeat_of(suites.load_gym('Pendulum-v1')) == 1

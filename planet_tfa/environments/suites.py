"""Environment loaders returning TF-Agents `PyEnvironment`s with dict observations.

DeepMind Control from pixels repeats actions *inside* the dm_env, below the
pixels wrapper, so only the frame the agent sees is rendered (TF-Agents'
`ActionRepeat` wrapper would render every inner step).
"""
import inspect
import os

# MuJoCo picks its GL backend when dm_control is imported: set it first.
os.environ.setdefault('MUJOCO_GL', 'egl')

import dm_env  # pylint: disable=g-import-not-at-top,wrong-import-position
import gin  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
from tf_agents.environments import py_environment  # pylint: disable=wrong-import-position
from tf_agents.environments import wrappers  # pylint: disable=wrong-import-position
from tf_agents.trajectories import time_step as ts  # pylint: disable=wrong-import-position

from planet_tfa import errors  # pylint: disable=wrong-import-position

# PlaNet paper action repeats for the DeepMind Control tasks.
PLANET_ACTION_REPEAT = {
    'cartpole-swingup': 8, 'reacher-easy': 4, 'cheetah-run': 4,
    'finger-spin': 2, 'ball_in_cup-catch': 4, 'walker-walk': 2,
}


class DmEnvActionRepeat(dm_env.Environment):
  """Steps the wrapped dm_env `repeat` times per action and sums the rewards."""

  def __init__(self, env, repeat):
    if repeat < 1:
      raise ValueError(f'action repeat must be >= 1, got {repeat}')
    self._env = env
    self._repeat = repeat

  @property
  def physics(self):
    return self._env.physics

  def reset(self):
    return self._env.reset()

  def step(self, action):
    total_reward = 0.0
    for _ in range(self._repeat):
      time_step = self._env.step(action)
      if time_step.first():
        # The step after LAST resets the episode: return that FIRST step
        # instead of stepping on into the new episode.
        return time_step
      total_reward += time_step.reward or 0.0
      if time_step.last():
        break
    return time_step._replace(reward=total_reward)

  def observation_spec(self):
    return self._env.observation_spec()

  def action_spec(self):
    return self._env.action_spec()

  def close(self):
    self._env.close()


class PlainDictObservation(wrappers.PyEnvironmentBaseWrapper):
  """Makes the observation a plain `dict` (wrapping non-dicts as {key: obs}).

  TF-Agents, Reverb signatures and gin bindings all key observations by name;
  one container type everywhere keeps nest structures comparable.
  """

  def __init__(self, env, key='state', on_close=None, action_repeat=1):
    super().__init__(env)
    self._action_repeat = action_repeat
    self._key = key
    self._wrap = not isinstance(env.observation_spec(), dict)
    self._on_close = on_close

  @property
  def action_repeat(self):
    """Environment (physics) steps per agent step (see `planet_tfa.schedule`)."""
    return self._action_repeat

  def close(self):
    if self._on_close is not None:
      self._on_close()
      self._on_close = None
    super().close()

  def _convert(self, observation):
    return {self._key: observation} if self._wrap else dict(observation)

  def observation_spec(self):
    return self._convert(self._env.observation_spec())

  def _reset(self):
    time_step = self._env.reset()
    return time_step._replace(observation=self._convert(time_step.observation))

  def _step(self, action):
    time_step = self._env.step(action)
    return time_step._replace(observation=self._convert(time_step.observation))


def dmc_task_names():
  """Every DeepMind Control task as 'domain-task' (what `domain_task` takes)."""
  from dm_control import suite  # pylint: disable=g-import-not-at-top
  return [f'{domain}-{task}' for domain, task in suite.ALL_TASKS]


def check_dmc_task(domain_task):
  """Raises `errors.ConfigError` naming the binding and the valid tasks."""
  names = dmc_task_names()
  if domain_task not in names:
    raise errors.ConfigError(
        f'load_dmc_pixels.domain_task={domain_task!r} is not a DeepMind Control task. '
        f'Valid tasks (domain-task): {", ".join(names)}')


@gin.configurable
def load_dmc_pixels(domain_task='cartpole-swingup', action_repeat=None, image_size=64,
                    camera_id=0, fast_render=True, seed=None, time_limit=None):
  """DeepMind Control task from pixels: observation {'pixels': uint8 [S, S, 3]}.

  Args:
    domain_task: 'domain-task', e.g. 'cartpole-swingup', 'walker-walk'.
    action_repeat: None uses the PlaNet paper's value for the task (else 2).
    image_size: rendered frame side in pixels.
    camera_id: MuJoCo camera.
    fast_render: turn shadows and MSAA off (about 5x faster rendering).
    seed: task random seed (None: random).
    time_limit: episode length in seconds of simulation (None: task default).
  """
  from dm_control import suite  # pylint: disable=g-import-not-at-top
  from dm_control.suite.wrappers import pixels  # pylint: disable=g-import-not-at-top
  from tf_agents.environments import dm_control_wrapper  # pylint: disable=g-import-not-at-top

  check_dmc_task(domain_task)  # else dm_control's "Domain 'no' does not exist"
  domain, task = domain_task.split('-', 1)
  if action_repeat is None:
    action_repeat = PLANET_ACTION_REPEAT.get(domain_task, 2)
  task_kwargs = {'random': seed}
  if time_limit is not None:
    task_kwargs['time_limit'] = time_limit
  env = suite.load(domain, task, task_kwargs=task_kwargs)
  if fast_render:
    env.physics.model.vis.quality.shadowsize = 0
    env.physics.model.vis.quality.offsamples = 0
  env = DmEnvActionRepeat(env, action_repeat)
  render_kwargs = {'height': image_size, 'width': image_size, 'camera_id': camera_id}
  env = pixels.Wrapper(env, pixels_only=True, render_kwargs=render_kwargs)
  # Free the OpenGL context on close, in the thread that rendered with it;
  # otherwise it is freed at exit from another thread and EGL refuses.
  return PlainDictObservation(dm_control_wrapper.DmControlWrapper(env, render_kwargs),
                              on_close=env.physics.free, action_repeat=action_repeat)


@gin.configurable
def load_gym(name, max_episode_steps=None, seed=None):
  """A gym task; a non-dict observation becomes {'state': obs}.

  Episodes cut by the step limit (`max_episode_steps`, else the one gym
  registered for the task) end with LAST and discount 1 (a truncation, so
  SAC bootstraps); only the task's own `done` is a terminal (discount 0).
  """
  import gym  # pylint: disable=g-import-not-at-top
  from tf_agents.environments import suite_gym  # pylint: disable=g-import-not-at-top
  gym_spec = gym.spec(name)
  env = gym_spec.make()
  # gym 0.23's make() adds its own TimeLimit, whose done=True TF-Agents'
  # GymWrapper turns into a termination (discount 0). Drop it and let
  # TF-Agents' TimeLimit end the episode as a truncation instead.
  while isinstance(env, gym.wrappers.TimeLimit):
    env = env.env
  if max_episode_steps is None:
    max_episode_steps = gym_spec.max_episode_steps
  env = suite_gym.wrap_env(env, max_episode_steps=max_episode_steps or 0)
  if seed is not None:
    env.seed(seed)
  return PlainDictObservation(env)


@gin.configurable
def load_environment(loader=load_dmc_pixels, seed=None, instance=None):
  """The environment the run trains on; `loader` is chosen in gin.

  `seed` offsets the loader's own seed, so train and eval envs differ.
  `instance` (a collector's number) goes to loaders that take one, such as
  CarlaEnv (its own simulator and Traffic Manager ports); others ignore it.
  """
  return call_loader(loader, seed, instance)


# Mean return of uniform random actions (10 episodes each, bench.dmc_table's
# random scores in docs/dmc_table.csv): what an evaluation must beat to show learning.
RANDOM_POLICY_RETURNS = {'cartpole-swingup': 116.7, 'cheetah-run': 10.4, 'walker-walk': 40.8}


def random_policy_return(env_loader):
  """The random policy's return on the configured DMC task, if measured; else None."""
  if env_loader is not load_environment:
    return None
  loader = _bound('load_environment', 'loader', load_dmc_pixels)
  # A gin binding is a reference (@load_dmc_pixels), a default the function.
  name = getattr(loader, 'selector', None) or getattr(loader, '__name__', None)
  if name is None or name.rsplit('.', 1)[-1] != 'load_dmc_pixels':
    return None
  return RANDOM_POLICY_RETURNS.get(_bound('load_dmc_pixels', 'domain_task', 'cartpole-swingup'))


def _bound(configurable, parameter, default):
  try:
    return gin.query_parameter(f'{configurable}.{parameter}')
  except ValueError:
    return default


def call_loader(loader, seed, instance=None):
  """loader(seed=seed), plus instance=... when given and the loader takes one."""
  if instance is not None and 'instance' in inspect.signature(loader).parameters:
    return loader(seed=seed, instance=instance)
  return loader(seed=seed)

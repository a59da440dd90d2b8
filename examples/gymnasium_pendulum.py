"""A gymnasium task from pixels as a planet_tfa environment (docs/guide/own-environment.md).

The loader contract (`Experiment.env_loader`): a callable taking `seed=` that returns a
TF-Agents `PyEnvironment` whose observation is a dict of 64x64x3 uint8 images and/or
float vectors, with a bounded float action. `action_repeat` (an attribute) tells the
learner how many environment steps one agent step is, for the budgets and the data ratio.

Use it from gin (examples/gymnasium_pendulum.gin):

  import examples.gymnasium_pendulum
  Experiment.env_loader = @load_gymnasium_pixels
  load_gymnasium_pixels.name = 'Pendulum-v1'
"""
import gin
import gymnasium
import numpy as np
from PIL import Image
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


class GymnasiumPixels(py_environment.PyEnvironment):
  """A gymnasium env with a Box action, observed as {'pixels': uint8 [S, S, 3]}.

  Each agent step repeats the action `action_repeat` times and sums the rewards.
  A gymnasium `terminated` ends the episode as a terminal (discount 0); `truncated`
  (the time limit) as a truncation (discount 1, so SAC bootstraps past it).
  """

  def __init__(self, name, seed=None, image_size=64, action_repeat=2):
    super().__init__()
    self._env = gymnasium.make(name, render_mode='rgb_array')
    space = self._env.action_space
    if not isinstance(space, gymnasium.spaces.Box):
      raise ValueError(f'{name}: planet_tfa needs a continuous (Box) action space, got {space}')
    self._action_spec = array_spec.BoundedArraySpec(
        space.shape, np.float32, minimum=space.low, maximum=space.high, name='action')
    self._observation_spec = {'pixels': array_spec.ArraySpec(
        (image_size, image_size, 3), np.uint8, name='pixels')}
    self._image_size = image_size
    self._action_repeat = action_repeat
    self._seed = seed
    self._done = True

  @property
  def action_repeat(self):
    return self._action_repeat

  def observation_spec(self):
    return self._observation_spec

  def action_spec(self):
    return self._action_spec

  def _pixels(self):
    frame = Image.fromarray(self._env.render())
    frame = frame.resize((self._image_size, self._image_size), Image.BILINEAR)
    return {'pixels': np.asarray(frame, np.uint8)}

  def _reset(self):
    self._env.reset(seed=self._seed)
    self._seed = None  # seeded once; later episodes continue the generator
    self._done = False
    return ts.restart(self._pixels())

  def _step(self, action):
    if self._done:
      return self.reset()
    reward = 0.0
    terminated = truncated = False
    for _ in range(self._action_repeat):
      _, r, terminated, truncated, _ = self._env.step(np.asarray(action, np.float32))
      reward += float(r)
      if terminated or truncated:
        break
    self._done = terminated or truncated
    observation = self._pixels()
    reward = np.float32(reward)
    if terminated:
      return ts.termination(observation, reward)
    if truncated:
      return ts.truncation(observation, reward)
    return ts.transition(observation, reward)

  def close(self):
    self._env.close()


@gin.configurable
def load_gymnasium_pixels(name='Pendulum-v1', seed=None, image_size=64, action_repeat=2):
  """The loader `Experiment.env_loader` calls with `seed=`."""
  return GymnasiumPixels(name, seed=seed, image_size=image_size, action_repeat=action_repeat)

"""A real PyEnvironment whose observations say where they come from.

observation['state'] = [episode_id, step_index, previous_action]; episode
lengths cycle through `episode_lengths`, so tests can check that replay
windows never mix episodes and that obs[t+1] followed action[t]. Episodes
end by termination (discount 0), those whose id is in `truncated_episodes`
by truncation (discount 1).
"""
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


class CountingEnv(py_environment.PyEnvironment):

  def __init__(self, episode_lengths=(5, 12, 3, 20), first_episode_id=0, image=False,
               truncated_episodes=()):
    super().__init__()
    self._truncated = set(truncated_episodes)
    self._lengths = list(episode_lengths)
    self._episode_id = first_episode_id - 1
    self._episodes_started = 0
    self._t = 0
    self._length = None
    self._image = image
    self._action_spec = array_spec.BoundedArraySpec((1,), np.float32, -1.0, 1.0, 'action')
    spec = {'state': array_spec.ArraySpec((3,), np.float32, 'state')}
    if image:
      spec['pixels'] = array_spec.ArraySpec((64, 64, 3), np.uint8, 'pixels')
    self._observation_spec = spec

  def action_spec(self):
    return self._action_spec

  def observation_spec(self):
    return self._observation_spec

  def _observation(self, previous_action):
    obs = {'state': np.array([self._episode_id, self._t, previous_action], np.float32)}
    if self._image:
      obs['pixels'] = np.full((64, 64, 3), (self._t * 10) % 256, np.uint8)
    return obs

  def _reset(self):
    self._episode_id += 1
    self._length = self._lengths[self._episodes_started % len(self._lengths)]
    self._episodes_started += 1
    self._t = 0
    return ts.restart(self._observation(0.0))

  def _step(self, action):
    if self._current_time_step is None or self._current_time_step.is_last():
      return self.reset()
    self._t += 1
    obs = self._observation(float(np.asarray(action).reshape(-1)[0]))
    reward = np.float32(self._t)
    if self._t >= self._length:
      if self._episode_id in self._truncated:
        return ts.truncation(obs, reward)
      return ts.termination(obs, reward)
    return ts.transition(obs, reward)

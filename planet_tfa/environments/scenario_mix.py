"""One environment that drives a scenario drawn per episode from a list: training on a mix.

Every scenario of the list is its own environment with the same observation
and action specs; each reset draws which one runs the episode, and the seed it
starts from, from one seeded stream, so a run's sequence of scenarios and
episodes is fixed by its seed. `load_highway(scenario_mix=...)` builds it.
"""
import numpy as np
from tf_agents.environments import py_environment


class ScenarioMixEnv(py_environment.PyEnvironment):
  """Draws each episode's environment (`envs`, by `weights`) and its seed from `seed`.

  Each env must have a `reseed(seed)` method: the seed its next reset starts from.
  """

  def __init__(self, envs, labels, weights=None, seed=None):
    if not envs or len(envs) != len(labels):
      raise ValueError(f'a scenario mix needs one label per environment, got {len(envs)} '
                       f'environments and labels {labels!r}')
    first = envs[0]
    for env, label in zip(envs[1:], labels[1:]):
      if (env.observation_spec() != first.observation_spec()
          or env.action_spec() != first.action_spec()):
        for built in envs:
          built.close()
        raise ValueError(f'scenario {label!r} has other specs than {labels[0]!r}: one agent '
                         'drives every scenario of a mix, so their observations and actions '
                         'must match (same image_size).')
    weights = np.ones(len(envs)) if weights is None else np.asarray(weights, np.float64)
    super().__init__(handle_auto_reset=True)
    self._envs = list(envs)
    self._labels = list(labels)
    self._probabilities = weights / weights.sum()
    self._rng = np.random.default_rng(seed)
    self._current = 0

  @property
  def labels(self):
    return list(self._labels)

  @property
  def scenario(self):
    """The label of the scenario driving the current episode."""
    return self._labels[self._current]

  @property
  def current_env(self):
    return self._envs[self._current]

  @property
  def simulator(self):
    return self.current_env.simulator

  def control_ranges(self):
    """The current scenario's (carla.specs.ControlRanges): its steer and brake limits."""
    return self.current_env.control_ranges()

  def observation_spec(self):
    return self._envs[0].observation_spec()

  def action_spec(self):
    return self._envs[0].action_spec()

  def get_info(self):
    """The current scenario's info, with `scenario` (its label) added."""
    return dict(self.current_env.get_info(), scenario=self.scenario)

  def render(self, mode='rgb_array'):
    return self.current_env.render(mode)

  def close(self):
    for env in self._envs:
      env.close()

  def _reset(self):
    self._current = int(self._rng.choice(len(self._envs), p=self._probabilities))
    env = self.current_env
    env.reseed(int(self._rng.integers(2**31 - 1)))
    return env.reset()

  def _step(self, action):
    return self.current_env.step(action)

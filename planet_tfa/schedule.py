"""How much the learner trains per unit of data, and how much data a run gets.

An *environment step* here is a physics step: one agent step is `action
repeat` environment steps. That is the unit of the papers' budgets ("100k
environment steps" on DeepMind Control) and of Dreamer's train ratio.
(`env_steps` in summaries and progress lines counts agent steps.)
"""
import math

from planet_tfa import env_unwrap

# The credit left after taking whole steps is below 1; the tolerance keeps a
# product like 0.1 * 1000 = 100.00000000000001 or 99.99999999999999 at 100.
_TOLERANCE = 1e-9


def action_repeat_of(env):
  """Environment steps per agent step of a (TF)PyEnvironment; 1 if it does not say.

  Loaders state it as an `action_repeat` attribute (TF-Agents wrappers forward
  attribute reads to the env they wrap).
  """
  repeat = getattr(env_unwrap.python_envs(env)[0], 'action_repeat', 1)
  return int(repeat) if repeat else 1


class TrainSchedule:
  """The train steps each iteration owes for the data it collected.

  With `train_steps_per_env_step` (the data ratio): that many train steps per
  environment step collected by the policy (the random warm-up earns none);
  fractions carry over to the next iteration, so over a run the count is the
  ratio times the data whatever the episode length. SLAC's one update per
  agent step is 1 / action_repeat here; Dreamer's 100 updates per 1000
  environment steps are 0.1, which is also what 100 steps per DeepMind
  Control episode (1000 physics steps) gave before.

  With `train_steps_per_iteration` instead: a fixed number per iteration (for
  a learner whose data comes from remote collectors it cannot count).
  Exactly one of the two is set (`validation` checks that at start).
  """

  def __init__(self, train_steps_per_iteration=None, train_steps_per_env_step=None,
               action_repeat=1):
    self.per_iteration = train_steps_per_iteration
    self.per_env_step = train_steps_per_env_step
    self.action_repeat = action_repeat
    self._credit = 0.0

  @property
  def credit(self):
    """Train steps earned but not yet taken (fractions and steps a stop cut
    short); the learner checkpoints it so a resumed run owes them still."""
    return self._credit

  @credit.setter
  def credit(self, value):
    self._credit = float(value)

  def owe(self, train_steps):
    """Steps of an iteration that a stop cut short: due at the next one."""
    self._credit += max(0, int(train_steps))

  def train_steps(self, agent_steps_collected):
    """Train steps to do now, after `agent_steps_collected` new agent steps."""
    if self.per_iteration is not None:
      owed = math.floor(self._credit + _TOLERANCE)  # steps a stop cut short
      self._credit -= owed
      return int(self.per_iteration) + owed
    self._credit += self.per_env_step * agent_steps_collected * self.action_repeat
    due = max(0, math.floor(self._credit + _TOLERANCE))
    self._credit -= due
    return due

"""Whole episodes on an env: TF-Agents episode drivers for warm-up, collection and evaluation.

Warm-up and collection write to the replay and count into the training
metrics; evaluation uses its own environment and metrics and writes nothing,
so evaluation episodes (PlaNet's test episodes) never reach the training table.
Every counter is a `tf.Variable` inside the metrics, so a checkpoint of
`Collection.checkpoint_objects()` resumes them.
"""
import contextlib

import gin
import tensorflow as tf
from tf_agents.drivers import dynamic_episode_driver
from tf_agents.metrics import tf_metrics
from tf_agents.policies import random_tf_policy
from tf_agents.utils import common


def make_metrics(prefix, buffer_size=10):
  return {
      'episodes': tf_metrics.NumberOfEpisodes(name=f'{prefix}Episodes'),
      'env_steps': tf_metrics.EnvironmentSteps(name=f'{prefix}EnvSteps'),
      'return': tf_metrics.AverageReturnMetric(name=f'{prefix}AverageReturn',
                                               buffer_size=buffer_size),
      'episode_length': tf_metrics.AverageEpisodeLengthMetric(
          name=f'{prefix}AverageEpisodeLength', buffer_size=buffer_size),
  }


class EpisodeDriver:
  """Whole episodes of any of several policies on one env, each continuing where the last stopped.

  `policies`: name -> (policy, observers). The env is reset only on the first
  run (or after `restart()`); every later run, of whichever policy, starts
  from the FIRST step the previous one ended on, and the policies reset their
  own state at FIRST. So warm-up, collection and (on a shared simulator)
  evaluation hand one env to each other without resets or lost steps.
  """

  def __init__(self, tf_env, policies, use_tf_function=True):
    self._env = tf_env
    self._policies = {name: policy for name, (policy, _) in policies.items()}
    self._runs = {}
    for name, (policy, observers) in policies.items():
      run = dynamic_episode_driver.DynamicEpisodeDriver(
          tf_env, policy, observers=list(observers), num_episodes=1).run
      self._runs[name] = common.function(run) if use_tf_function else run
    self._time_step = None
    self._policy_states = {}

  @property
  def time_step(self):
    """Where the next run starts (None: it resets the env)."""
    return self._time_step

  def restart(self):
    """Makes the next run reset the env (fresh episodes, e.g. per evaluation)."""
    self._time_step = None

  def run(self, num_episodes, policy=None):
    """Runs `num_episodes` whole episodes of `policy` (a name; None: the only one)."""
    if num_episodes <= 0:
      return
    if policy is None:
      if len(self._runs) != 1:
        raise ValueError(f'name the policy to run: one of {sorted(self._runs)}')
      policy = next(iter(self._runs))
    if self._time_step is None:
      self._time_step = self._env.reset()
    state = self._policy_states.get(policy)
    if state is None:
      state = self._policies[policy].get_initial_state(self._env.batch_size)
    self._time_step, self._policy_states[policy] = self._runs[policy](
        self._time_step, state, num_episodes=int(num_episodes))


@gin.configurable
class Collection:
  """The three drivers of a run and their metrics.

  Args:
    train_env: TFPyEnvironment for warm-up and collection.
    eval_env: the TFPyEnvironment for evaluation (None: no evaluation). It
      may be train_env itself: evaluation then runs between collection
      episodes, continuing the env where collection stopped and handing it
      back where evaluation stopped.
    collect_policy: stochastic policy for training episodes.
    eval_policy: greedy policy for evaluation episodes.
    replay_observer: callable that writes batched trajectories to the replay.
    metrics_buffer: episodes averaged in the return / length metrics.
    random_collect: collect with the random policy too (world-model-only runs).
    eval_observers: extra observers of evaluation steps (e.g. a video recorder).
    eval_stochastic_policy: the stochastic policy evaluated next to the
      greedy one (SLAC's published curves are of it); None: greedy only.
    expert_policy: a controller whose episodes may fill the replay like any
      other (warm-up by expert, demonstrations per iteration); None: none.
    autopilot_expert: instead of `expert_policy`, the simulator's own
      autopilot (`autopilot_expert.AutopilotExpert` on train_env): its
      episodes reach the replay with the controls it applied as actions.
  """

  def __init__(self, train_env, eval_env, collect_policy, eval_policy,
               replay_observer, metrics_buffer=10, use_tf_function=True,
               random_collect=False, eval_observers=(), eval_stochastic_policy=None,
               expert_policy=None, autopilot_expert=None):
    self.train_metrics = make_metrics('Train', metrics_buffer)
    self.eval_metrics = make_metrics('Eval', metrics_buffer)
    # Not in checkpoint_objects: reset at every evaluation, and runs that
    # predate them must still restore.
    self.eval_stochastic_metrics = make_metrics('EvalStochastic', metrics_buffer)
    eval_roles = {'eval': (eval_policy, None)}
    if eval_stochastic_policy is not None:
      eval_roles['eval_stochastic'] = (eval_stochastic_policy,
                                       list(self.eval_stochastic_metrics.values()))
    train_observers = [replay_observer] + list(self.train_metrics.values())
    eval_observers = list(self.eval_metrics.values()) + list(eval_observers)
    random_policy = random_tf_policy.RandomTFPolicy(
        train_env.time_step_spec(), train_env.action_spec(),
        info_spec=collect_policy.info_spec)
    acting = {'warmup': (random_policy, train_observers),
              'collect': (random_policy if random_collect else collect_policy,
                          train_observers)}
    if expert_policy is not None and autopilot_expert is not None:
      raise ValueError('one expert: a policy or the simulator autopilot, not both')
    if expert_policy is not None:
      acting['expert'] = (expert_policy, train_observers)
    self._autopilot = autopilot_expert
    if autopilot_expert is not None:
      acting['expert'] = (autopilot_expert.policy,
                          [autopilot_expert.recording(replay_observer)]
                          + list(self.train_metrics.values()))
    self.has_expert = 'expert' in acting
    eval_roles['eval'] = (eval_policy, eval_observers)
    self._shares_env = eval_env is train_env
    if self._shares_env:
      acting.update(eval_roles)
    self.train_driver = EpisodeDriver(train_env, acting, use_tf_function)
    self.eval_driver = None
    if self._shares_env:
      self.eval_driver = self.train_driver
    elif eval_env is not None:
      self.eval_driver = EpisodeDriver(eval_env, eval_roles, use_tf_function)
    self.has_stochastic_eval = eval_stochastic_policy is not None

  def warmup(self, num_episodes, by_expert=False):
    """Warm-up episodes of the random policy, or of the expert (`by_expert`)."""
    if by_expert:
      self.demonstrate(num_episodes)
    else:
      self.train_driver.run(num_episodes, 'warmup')

  def demonstrate(self, num_episodes):
    """Expert episodes into the replay (marked no differently from the agent's)."""
    if num_episodes <= 0:
      return
    with (self._autopilot.driving() if self._autopilot is not None
          else contextlib.nullcontext()):
      self.train_driver.run(num_episodes, 'expert')

  def collect(self, num_episodes):
    self.train_driver.run(num_episodes, 'collect')

  def count_remote(self, num_episodes, env_steps):
    """Counts episodes other processes collected (remote collectors) as this run's."""
    self.train_metrics['episodes'].number_episodes.assign_add(num_episodes)
    self.train_metrics['env_steps'].environment_steps.assign_add(env_steps)

  def evaluate(self, num_episodes, stochastic=False):
    """Runs `num_episodes` greedy (or, with `stochastic`, stochastic-policy)
    episodes; returns their average return."""
    if self.eval_driver is None or num_episodes <= 0:
      return None
    if stochastic and not self.has_stochastic_eval:
      return None
    metrics = self.eval_stochastic_metrics if stochastic else self.eval_metrics
    for metric in metrics.values():
      if not isinstance(metric, (tf_metrics.NumberOfEpisodes, tf_metrics.EnvironmentSteps)):
        metric.reset()
    # On a shared env the drivers stop right after an episode ends, so it
    # stands at the FIRST step of a fresh episode: no reset, none wasted.
    if not self._shares_env:
      self.eval_driver.restart()  # each evaluation starts fresh episodes
    self.eval_driver.run(num_episodes, 'eval_stochastic' if stochastic else 'eval')
    return float(metrics['return'].result())

  def checkpoint_objects(self):
    """Metric variables (counters, return buffers) for tf.train.Checkpoint."""
    objects = {}
    for prefix, metrics in (('train', self.train_metrics), ('eval', self.eval_metrics)):
      for name, metric in metrics.items():
        objects[f'{prefix}_{name}'] = metric
        # The averaged episodes live in a TFDeque, which is not trackable
        # itself: checkpoint its table and head so averages survive a resume.
        deque = getattr(metric, '_buffer', None)
        if isinstance(deque, tf_metrics.TFDeque):
          objects[f'{prefix}_{name}_episodes'] = tf.train.Checkpoint(
              table=deque._buffer, head=deque._head)  # pylint: disable=protected-access
    return objects

"""TF-Agents dynamic episode drivers for warm-up, collection and evaluation.

Warm-up and collection write to the replay and count into the training
metrics; evaluation uses its own environment and metrics and writes nothing,
so evaluation episodes (PlaNet's test episodes) never reach the training table.
Every counter is a `tf.Variable` inside the metrics, so a checkpoint of
`Collection.checkpoint_objects()` resumes them.
"""
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
  """Runs whole episodes of `policy` in `tf_env`, continuing where it stopped.

  The environment is reset only on the first run; later runs continue from the
  returned FIRST time step, and the policy resets its own state at FIRST.
  """

  def __init__(self, tf_env, policy, observers, use_tf_function=True):
    self._env = tf_env
    self._policy = policy
    self._driver = dynamic_episode_driver.DynamicEpisodeDriver(
        tf_env, policy, observers=observers, num_episodes=1)
    self._run = common.function(self._driver.run) if use_tf_function else self._driver.run
    self._time_step = None
    self._policy_state = None

  @property
  def time_step(self):
    """Where the next run starts (None: it resets the env)."""
    return self._time_step

  def continue_from(self, time_step):
    """Makes the next run start at `time_step`, e.g. where another driver of the same env stopped."""
    self._time_step = time_step

  def run(self, num_episodes):
    if num_episodes <= 0:
      return
    if self._time_step is None:
      self._time_step = self._env.reset()
    if self._policy_state is None:
      self._policy_state = self._policy.get_initial_state(self._env.batch_size)
    self._time_step, self._policy_state = self._run(
        self._time_step, self._policy_state, num_episodes=int(num_episodes))


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
  """

  def __init__(self, train_env, eval_env, collect_policy, eval_policy,
               replay_observer, metrics_buffer=10, use_tf_function=True,
               random_collect=False, eval_observers=()):
    self.train_metrics = make_metrics('Train', metrics_buffer)
    self.eval_metrics = make_metrics('Eval', metrics_buffer)
    train_observers = [replay_observer] + list(self.train_metrics.values())
    random_policy = random_tf_policy.RandomTFPolicy(
        train_env.time_step_spec(), train_env.action_spec(),
        info_spec=collect_policy.info_spec)
    self.warmup_driver = EpisodeDriver(train_env, random_policy, train_observers,
                                       use_tf_function)
    self.collect_driver = EpisodeDriver(
        train_env, random_policy if random_collect else collect_policy, train_observers,
        use_tf_function)
    self._eval_env = eval_env
    self._shares_env = eval_env is train_env
    self._eval_policy = eval_policy
    self._use_tf_function = use_tf_function
    self.eval_driver = None
    if eval_env is not None:
      self.eval_driver = EpisodeDriver(
          eval_env, eval_policy, list(self.eval_metrics.values()) + list(eval_observers),
          use_tf_function)

  def warmup(self, num_episodes):
    # Random episodes and policy episodes share the env: continue its episode.
    self.warmup_driver.run(num_episodes)
    self.collect_driver.continue_from(self.warmup_driver.time_step)

  def collect(self, num_episodes):
    self.collect_driver.run(num_episodes)

  def evaluate(self, num_episodes):
    """Runs `num_episodes` greedy episodes; returns their average return."""
    if self.eval_driver is None or num_episodes <= 0:
      return None
    for metric in self.eval_metrics.values():
      if not isinstance(metric, (tf_metrics.NumberOfEpisodes, tf_metrics.EnvironmentSteps)):
        metric.reset()
    if self._shares_env:
      # Drivers stop right after an episode ends, so the shared env stands at
      # the FIRST step of a fresh episode: no reset needed, none wasted.
      self.eval_driver.continue_from(self.collect_driver.time_step)
    else:
      self.eval_driver.continue_from(None)  # each evaluation starts fresh episodes
    self.eval_driver.run(num_episodes)
    if self._shares_env:
      self.collect_driver.continue_from(self.eval_driver.time_step)
    return float(self.eval_metrics['return'].result())

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

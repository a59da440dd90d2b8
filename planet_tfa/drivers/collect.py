"""One collector process: one environment, whole episodes into a standalone Reverb server.

    python -m planet_tfa.drivers.collect --replay_server=HOST:PORT --collector_id=K \
        --root_dir=ROOT --gin_file=FILE [--gin_param=...] [--max_episodes=N]

Builds the agent from the gin config and its own env's specs (it never
trains), and before every episode pulls the newest policy variables the
learner published to the server's `variables` table. While the learner has
published nothing yet it acts randomly: that is the distributed warm-up.
Episodes reach the `experience` table only once they end
(`observers.ReverbEpisodeObserver`), so a collector killed mid-episode leaves
nothing of that episode behind. SIGTERM/SIGINT finish the running episode,
then exit (a second signal aborts it).

Seed: train_eval.seed + 1000 * (K + 1) + L, where L counts the earlier
launches of collector K under ROOT (ROOT/collector_K/state.json): collectors
differ from each other and from the learner's eval env (seed + 1), and a
restarted collector does not replay the episodes of its previous launch.

Per episode it logs return, length, env steps/s and the policy version (the
learner's train step of the variables used; 'none' while random) to stdout
and to TensorBoard in ROOT/collector_K/.
"""
import json
import os
import signal
import sys
import threading
import time
import traceback

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_agents.drivers import dynamic_episode_driver  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_agents.policies import random_tf_policy  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_agents.utils import common  # pylint: disable=g-import-not-at-top,wrong-import-position

from planet_tfa import stop_signals  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa import summaries  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import episode_drivers  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import observers  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import replay  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import reverb_server  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import variables  # pylint: disable=g-import-not-at-top,wrong-import-position

STATE_FILE = 'state.json'
SEED_STRIDE = 1000


class CollectorError(RuntimeError):
  """The collector lost its server or cannot go on."""


def collector_dir(root_dir, collector_id):
  return os.path.join(root_dir, f'collector_{collector_id}')


def collector_seed(base_seed, collector_id, launch):
  """Distinct per collector and per launch (see the module doc)."""
  return base_seed + SEED_STRIDE * (collector_id + 1) + launch


def _load_state(directory):
  path = os.path.join(directory, STATE_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  return {'launches': 0, 'episodes': 0, 'env_steps': 0}


def _save_state(directory, state):
  """Atomic, so a kill never leaves a half-written file."""
  path = os.path.join(directory, STATE_FILE)
  with open(path + '.tmp', 'w') as f:
    json.dump(state, f)
  os.replace(path + '.tmp', path)


class EpisodeLoop:
  """Whole episodes of any of several policies on one env.

  The env is reset once; each episode starts from the FIRST step the previous
  one (of whichever policy) ended on, and the policies reset their own state
  at FIRST.
  """

  def __init__(self, tf_env, policies, episode_observers):
    self._env = tf_env
    self._policies = policies
    self._runs = {
        name: common.function(dynamic_episode_driver.DynamicEpisodeDriver(
            tf_env, policy, observers=episode_observers, num_episodes=1).run)
        for name, policy in policies.items()}
    self._time_step = None
    self._policy_states = {}

  def run_episode(self, name):
    if self._time_step is None:
      self._time_step = self._env.reset()
    state = self._policy_states.get(name)
    if state is None:
      state = self._policies[name].get_initial_state(self._env.batch_size)
    self._time_step, self._policy_states[name] = self._runs[name](self._time_step, state)


def run_watched(fn, client, address, deadline_s, check_every_s=5.0):
  """Runs `fn` in a worker thread while this (main) thread watches the server.

  The episode runs inside TF ops, where Python signal handlers cannot run and
  a write to a vanished server blocks forever. Waiting here keeps SIGTERM
  responsive and turns a server gone for `deadline_s` into CollectorError.
  """
  outcome = {}

  def target():
    try:
      outcome['value'] = fn()
    except BaseException as error:  # pylint: disable=broad-except
      outcome['error'] = error

  worker = threading.Thread(target=target, name='episode', daemon=True)
  worker.start()
  last_ok = last_check = time.time()
  while worker.is_alive():
    worker.join(0.2)
    now = time.time()
    if worker.is_alive() and now - last_check >= check_every_s:
      last_check = now
      try:
        client.server_info(timeout=max(1, int(check_every_s)))
        last_ok = time.time()
      except Exception as error:  # pylint: disable=broad-except
        if time.time() - last_ok > deadline_s:
          raise CollectorError(
              f'the Reverb server at {address} has not answered for '
              f'{time.time() - last_ok:.0f}s ({type(error).__name__}); the running '
              'episode was not written. Restart this collector once the server is '
              'back (a supervisor can simply restart it).') from None
  if 'error' in outcome:
    raise outcome['error']
  return outcome.get('value')


def run_collector(replay_server, collector_id, root_dir, server_deadline_s=60.0,
                  max_episodes=0):
  """Collects episodes until `max_episodes` (0: forever) or a signal; returns a summary."""
  settings = reverb_server.train_eval_settings()
  root_dir = os.path.abspath(os.path.expanduser(root_dir))
  out_dir = collector_dir(root_dir, collector_id)
  os.makedirs(out_dir, exist_ok=True)
  state = _load_state(out_dir)
  launch = state['launches']
  state['launches'] += 1
  _save_state(out_dir, state)
  seed = collector_seed(settings['seed'], collector_id, launch)
  tf.random.set_seed(seed)
  np.random.seed(seed % 2**32)
  tag = f'[collector {collector_id}]'
  print(f'{tag} launch={launch} seed={seed} server={replay_server}', flush=True)

  client = replay.wait_for_server(replay_server, deadline_s=server_deadline_s)
  from planet_tfa import run  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import latent_sac_agent  # pylint: disable=g-import-not-at-top
  # Collector K drives its own simulator instance (CarlaEnv: ports + K * stride).
  tf_env = run.make_tf_env(settings['env_loader'], seed, instance=collector_id)
  try:
    train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
    agent = latent_sac_agent.LatentSacAgent(
        tf_env.time_step_spec(), tf_env.action_spec(), train_step_counter=train_step)
    variables.check_table(client.server_info(), replay.EXPERIENCE_TABLE,
                          variables.experience_signature(agent.collect_data_spec),
                          replay_server)
    policy_variables = variables.PolicyVariables(
        replay_server, agent.collect_policy, train_step, client=client)
    writer = observers.TFReverbObserver(
        lambda: observers.ReverbEpisodeObserver(client, settings['sequence_length']),
        batch_size=tf_env.batch_size)
    metrics = episode_drivers.make_metrics('Collector', buffer_size=1)
    random_policy = random_tf_policy.RandomTFPolicy(
        tf_env.time_step_spec(), tf_env.action_spec(),
        info_spec=agent.collect_policy.info_spec)
    loop = EpisodeLoop(tf_env, {'random': random_policy, 'collect': agent.collect_policy},
                       [writer] + list(metrics.values()))
    summary_writer = tf.summary.create_file_writer(out_dir)
    stop = stop_signals.StopRequested(
        'finishing this episode, then exiting (send it again to abort and lose it).',
        second_handler=signal.SIG_DFL).install()
    print(f'{tag} ready: writing whole episodes of {settings["sequence_length"]}-step '
          f'windows to {replay_server}', flush=True)

    def one_episode():
      version = policy_variables.pull()  # None: nothing published yet
      start = time.time()
      loop.run_episode('random' if version is None else 'collect')
      return version, time.time() - start

    episodes = 0
    while stop.signal is None and (not max_episodes or episodes < max_episodes):
      steps_before = int(metrics['env_steps'].result())
      try:
        version, elapsed = run_watched(one_episode, client, replay_server,
                                       server_deadline_s)
      except (tf.errors.OpError, ConnectionError) as error:
        first_line = (str(error).strip().splitlines() or [''])[0][:300]
        raise CollectorError(
            f'the episode failed ({type(error).__name__}: {first_line}) and was not '
            f'written. If the Reverb server at {replay_server} went away, restart this '
            'collector once it is back (a supervisor can simply restart it).') from error
      name = 'random' if version is None else 'collect'
      steps = int(metrics['env_steps'].result()) - steps_before
      episodes += 1
      state['episodes'] += 1
      state['env_steps'] += steps
      _save_state(out_dir, state)
      record = {
          'return': float(metrics['return'].result()),
          'length': int(metrics['episode_length'].result()),
          'steps_per_s': steps / max(elapsed, 1e-9),
          'policy_version': -1 if version is None else version,
      }
      print(f'{tag} episode={episodes} policy={name} '
            f'policy_version={"none" if version is None else version} '
            f'return={record["return"]:.3f} length={record["length"]} '
            f'steps_per_s={record["steps_per_s"]:.1f} total_env_steps={state["env_steps"]}',
            flush=True)
      with summary_writer.as_default():
        summaries.write_scalars({f'collector/{k}': v for k, v in record.items()},
                                tf.constant(state['env_steps'], tf.int64))
    summary_writer.flush()
  finally:
    run.close_tf_env(tf_env)
  return {'collector_id': collector_id, 'episodes': episodes, 'seed': seed,
          'stopped_by': stop.signal}


def main(argv):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from planet_tfa import config  # pylint: disable=g-import-not-at-top
  del argv
  flag_values = flags.FLAGS
  config.parse_or_exit(flag_values.gin_file, flag_values.gin_param)
  try:
    result = run_collector(flag_values.replay_server, flag_values.collector_id,
                           flag_values.root_dir, flag_values.server_deadline_s,
                           flag_values.max_episodes)
  except replay.ReplayUnavailableError as error:
    print(f'error: collector {flag_values.collector_id}: {error}', file=sys.stderr)
    sys.exit(1)
  except CollectorError as error:
    if error.__cause__ is not None:  # e.g. a simulator error inside the episode
      traceback.print_exception(error.__cause__, file=sys.stderr)
    print(f'error: collector {flag_values.collector_id}: {error}', file=sys.stderr,
          flush=True)
    sys.stdout.flush()
    os._exit(1)  # the episode thread may be stuck inside a Reverb write
  except variables.ServerMismatchError as error:
    print(f'error: collector {flag_values.collector_id}: {error}', file=sys.stderr)
    sys.exit(2)
  print(f'[collector {result["collector_id"]}] done: {result["episodes"]} episodes'
        + (f' (stopped by {result["stopped_by"]})' if result['stopped_by'] else ''),
        flush=True)


if __name__ == '__main__':
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('replay_server', None, 'HOST:PORT of the reverb_server.')
  flags.DEFINE_integer('collector_id', None, 'This collector\'s number K (0, 1, ...): '
                       'seeds its env and names ROOT/collector_K/.')
  flags.DEFINE_string('root_dir', None, 'Where ROOT/collector_K/ (TensorBoard, launch '
                      'counter) goes; may be the learner\'s root or a local one.')
  flags.DEFINE_multi_string('gin_file', [], 'The same gin files as the learner.')
  flags.DEFINE_multi_string('gin_param', [], 'The same gin bindings as the learner.')
  flags.DEFINE_float('server_deadline_s', 60.0, 'Give up (exit 1, naming the address) '
                     'when the server does not answer for this many seconds, at start '
                     'or while collecting.')
  flags.DEFINE_integer('max_episodes', 0, 'Stop after this many episodes (0: never).')
  flags.mark_flags_as_required(['replay_server', 'collector_id', 'root_dir'])
  app.run(main)

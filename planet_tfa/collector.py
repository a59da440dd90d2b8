"""A collector: one environment, whole episodes into a standalone Reverb server.

Run as `python -m planet_tfa.programs.collect --replay_server=HOST:PORT
--collector_id=K --root_dir=ROOT --gin_file=FILE`. Builds the agent from the gin config and its own env's specs (it never
trains), and before every episode pulls the newest policy variables the
learner published to the server's `variables` table. While the learner has
published nothing yet it acts randomly: that is the distributed warm-up.
Episodes reach the `experience` table only once they end
(`observers.ReverbEpisodeObserver`), so a collector killed mid-episode leaves
nothing of that episode behind. SIGTERM/SIGINT finish the running episode,
then exit (a second signal aborts it).

Seed: Experiment.seed + 1000 * (K + 1) + L, where L counts the earlier
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
import threading
import time

import numpy as np
import tensorflow as tf
from tf_agents.policies import random_tf_policy

from planet_tfa import episodes
from planet_tfa import errors
from planet_tfa import experiment as experiment_lib
from planet_tfa import layout
from planet_tfa import stop_signals
from planet_tfa import summaries
from planet_tfa.replay import tables
from planet_tfa.replay import variables

SEED_STRIDE = 1000


class CollectorError(errors.UserError, RuntimeError):
  """The collector lost its server or cannot go on."""


def collector_seed(base_seed, collector_id, launch):
  """Distinct per collector and per launch (see the module doc)."""
  return base_seed + SEED_STRIDE * (collector_id + 1) + launch


def _load_state(directory):
  path = os.path.join(directory, layout.COLLECTOR_STATE)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  return {'launches': 0, 'episodes': 0, 'env_steps': 0}


def _save_state(directory, state):
  """Atomic, so a kill never leaves a half-written file."""
  path = os.path.join(directory, layout.COLLECTOR_STATE)
  with open(path + '.tmp', 'w') as f:
    json.dump(state, f)
  os.replace(path + '.tmp', path)


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
                  max_episodes=0, experiment=None):
  """Collects episodes until `max_episodes` (0: forever) or a signal; returns a summary.

  `experiment`: the run's `Experiment` (None: the gin-configured one).
  """
  experiment = experiment or experiment_lib.Experiment()
  root_dir = os.path.abspath(os.path.expanduser(root_dir))
  out_dir = layout.collector_dir(root_dir, collector_id)
  os.makedirs(out_dir, exist_ok=True)
  state = _load_state(out_dir)
  launch = state['launches']
  state['launches'] += 1
  _save_state(out_dir, state)
  seed = collector_seed(experiment.seed, collector_id, launch)
  tf.random.set_seed(seed)
  np.random.seed(seed % 2**32)
  tag = f'[collector {collector_id}]'
  print(f'{tag} launch={launch} seed={seed} server={replay_server}', flush=True)

  client = tables.wait_for_server(replay_server, deadline_s=server_deadline_s)
  # Collector K drives its own simulator instance (CarlaEnv: ports + K * stride).
  tf_env = experiment_lib.make_env(experiment, seed=seed, instance=collector_id)
  try:
    agent = experiment_lib.make_agent(tf_env.time_step_spec(), tf_env.action_spec())
    train_step = agent.train_step_counter
    variables.check_table(client.server_info(), tables.EXPERIENCE_TABLE,
                          tables.experience_signature(agent.collect_data_spec),
                          replay_server)
    policy_variables = variables.PolicyVariables(
        replay_server, agent.collect_policy, train_step, client=client)
    writer = experiment_lib.make_episode_observer(experiment, client, tf_env.batch_size)
    reports_steps = tables.COLLECTED_STEPS_TABLE in client.server_info()  # older servers: not
    metrics = episodes.make_metrics('Collector', buffer_size=1)
    random_policy = random_tf_policy.RandomTFPolicy(
        tf_env.time_step_spec(), tf_env.action_spec(),
        info_spec=agent.collect_policy.info_spec)
    observers = [writer] + list(metrics.values())
    driver = episodes.EpisodeDriver(
        tf_env, {'random': (random_policy, observers),
                 'collect': (agent.collect_policy, observers)})
    summary_writer = tf.summary.create_file_writer(out_dir)
    stop = stop_signals.StopRequested(
        'finishing this episode, then exiting (send it again to abort and lose it).',
        second_handler=signal.SIG_DFL).install()
    print(f'{tag} ready: writing whole episodes of {experiment.sequence_length}-step '
          f'windows to {replay_server}', flush=True)

    def one_episode():
      version = policy_variables.pull()  # None: nothing published yet
      start = time.time()
      driver.run(1, 'random' if version is None else 'collect')
      return version, time.time() - start

    episodes_done = 0
    while stop.signal is None and (not max_episodes or episodes_done < max_episodes):
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
      if reports_steps:  # after the episode's windows: the learner may train on them now
        tables.report_collected_steps(client, steps)
      episodes_done += 1
      state['episodes'] += 1
      state['env_steps'] += steps
      _save_state(out_dir, state)
      record = {
          'return': float(metrics['return'].result()),
          'length': int(metrics['episode_length'].result()),
          'steps_per_s': steps / max(elapsed, 1e-9),
          'policy_version': -1 if version is None else version,
      }
      print(f'{tag} episode={episodes_done} policy={name} '
            f'policy_version={"none" if version is None else version} '
            f'return={record["return"]:.3f} length={record["length"]} '
            f'steps_per_s={record["steps_per_s"]:.1f} total_env_steps={state["env_steps"]}',
            flush=True)
      with summary_writer.as_default():
        summaries.write_scalars({f'collector/{k}': v for k, v in record.items()},
                                tf.constant(state['env_steps'], tf.int64))
    summary_writer.flush()
  finally:
    experiment_lib.close_env(tf_env)
  return {'collector_id': collector_id, 'episodes': episodes_done, 'seed': seed,
          'stopped_by': stop.signal}

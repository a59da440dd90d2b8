"""A standalone Reverb server for many collectors and one learner.

    python -m planet_tfa.drivers.reverb_server --root_dir=ROOT --gin_file=FILE \
        [--gin_param=...] --port=PORT [--replay_checkpoint_interval_s=600] [--allow_remote]

Serves two tables built from the same gin config as the learner:
  experience  T+1-step windows (`replay.make_experience_table`, signature =
              the agent's collect_data_spec); PlaNet's "train episodes".
  variables   one item: the collect policy's variables + the train step,
              published by the learner and pulled by collectors.
The env specs come from ROOT/specs.pbtxt; without it the env is built once
to read them (and they are saved, so later roles need no simulator).

The tables persist to ROOT/replay/: restored on start, written every
`--replay_checkpoint_interval_s` and on SIGTERM/SIGINT.

Security: Reverb's C++ server listens on every network interface and has no
bind-address option and no authentication or encryption. Anyone who can
reach the port can read and overwrite the replay and the policy variables.
Keep the port on a trusted network or firewall it (docs/distributed.md).

This module also holds the learner's side of such a server (`RemoteReplay`).
"""
import os
import signal
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_agents.environments import tf_environment  # pylint: disable=g-import-not-at-top,wrong-import-position

from planet_tfa import export  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa import stop_signals  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import replay  # pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.drivers import variables  # pylint: disable=g-import-not-at-top,wrong-import-position

SECURITY_WARNING = (
    'WARNING: the Reverb server listens on port {port} of EVERY network interface '
    '(Reverb has no bind-address option) and has NO authentication: any host that can '
    'reach this port can read the replay and overwrite the policy variables. Firewall '
    'the port or keep it on a trusted network. Pass --allow_remote to acknowledge '
    'this when collectors run on other hosts.')
REMOTE_NOTE = (
    'NOTE: --allow_remote: port {port} is meant to be reached from other hosts. Reverb '
    'has no authentication or encryption: keep it on a trusted network / behind a '
    'firewall that admits only the collector and learner hosts.')


def train_eval_settings():
  """The learner's `train_eval` parameters (gin bindings over the defaults).

  Server and collectors read env_loader, sequence_length and seed from here,
  so one gin config describes every role.
  """
  import inspect  # pylint: disable=g-import-not-at-top
  import gin  # pylint: disable=g-import-not-at-top
  from planet_tfa import run  # pylint: disable=g-import-not-at-top
  settings = {name: p.default for name, p in
              inspect.signature(run.train_eval).parameters.items()
              if p.default is not inspect.Parameter.empty}
  settings.update(gin.get_bindings(run.train_eval))
  return settings


def env_specs(root_dir, env_loader, seed=0, tf_env=None):
  """(time_step_spec, action_spec) of `tf_env`, else ROOT/specs.pbtxt, else one env.

  Building the env (a simulator connection, for CARLA) is the fallback only;
  its specs are then written to ROOT/specs.pbtxt atomically for the next role.
  """
  if tf_env is not None:
    return tf_env.time_step_spec(), tf_env.action_spec()
  path = os.path.join(root_dir, export.SPECS_FILE)
  if os.path.exists(path):
    return export.load_specs(root_dir)
  from planet_tfa import run  # pylint: disable=g-import-not-at-top
  print(f'{path} not found: building the environment once to read its specs.',
        flush=True)
  tf_env = run.make_tf_env(env_loader, seed)
  try:
    specs = tf_env.time_step_spec(), tf_env.action_spec()
  finally:
    run.close_tf_env(tf_env)
  os.makedirs(root_dir, exist_ok=True)
  staging = tempfile.mkdtemp(prefix='.specs-', dir=root_dir)
  export.save_specs(staging, *specs)
  os.replace(os.path.join(staging, export.SPECS_FILE), path)
  os.rmdir(staging)
  return specs


class SpecsOnlyEnv(tf_environment.TFEnvironment):
  """The env specs without an env: the learner's stand-in train env when
  remote collectors gather all data. Stepping it is a configuration error."""

  def _refuse(self, *unused):
    raise RuntimeError(
        'this learner has no training environment: with --replay_server the '
        'collectors gather the data. Set train_eval.remote_collect_episodes_per_iteration '
        '> 0 to also collect in the learner.')

  _current_time_step = _reset = _step = _refuse


class RemoteReplay:
  """The learner's handle on a standalone server; quacks like `replay.ReplayServer`.

  Connects at construction (retrying until `deadline_s`, then raising
  `replay.ReplayUnavailableError` naming the address). The server owns its
  checkpoints and its lifetime, so `checkpoint()` and `stop()` do nothing.
  """

  def __init__(self, address, deadline_s=60.0):
    self.address = address
    self.client = replay.wait_for_server(address, deadline_s=deadline_s)
    self._variables = None

  def attach(self, agent, train_step):
    """Checks both tables fit `agent`; enables `publish()` of its collect policy."""
    info = self.client.server_info()
    variables.check_table(info, replay.EXPERIENCE_TABLE,
                          variables.experience_signature(agent.collect_data_spec),
                          self.address)
    self._variables = variables.PolicyVariables(
        self.address, agent.collect_policy, train_step, client=self.client)

  def publish(self):
    """Pushes the policy variables + train step to the `variables` table."""
    try:
      self._variables.publish()
    except tf.errors.OpError as error:
      raise replay.ReplayUnavailableError(
          f'lost the Reverb server at {self.address} while publishing the policy '
          f'({type(error).__name__}: {error.message.strip().splitlines()[0][:200]}). '
          'This learner checkpoints on the way out; restart it once the server is '
          'back and it resumes.') from None

  def wait_for_data(self, deadline_s=600.0, log_every_s=30.0):
    """Blocks until the table allows sampling (its rate limiter's min size).

    Raises `replay.ReplayEmptyError` naming the address after `deadline_s`
    (None: wait forever).
    """
    start = last_log = time.time()
    while True:
      info = self.client.server_info()[replay.EXPERIENCE_TABLE]
      needed = max(1, info.rate_limiter_info.min_size_to_sample)
      if info.current_size >= needed:
        return info.current_size
      waited = time.time() - start
      if deadline_s is not None and waited > deadline_s:
        raise replay.ReplayEmptyError(
            f"replay table '{replay.EXPERIENCE_TABLE}' at {self.address} still holds "
            f'{info.current_size} of the {needed} windows needed to sample after '
            f'{waited:.0f}s: no collector is writing to it. Start collectors with '
            f'`python -m planet_tfa.drivers.collect --replay_server={self.address} '
            '--collector_id=K ...` or raise train_eval.remote_wait_for_data_s.')
      if time.time() - last_log >= log_every_s or waited == 0:
        print(f'Waiting for collectors: {self.address} holds {info.current_size}/'
              f'{needed} windows ...', flush=True)
        last_log = time.time()
      time.sleep(1.0)

  def table_size(self, table=replay.EXPERIENCE_TABLE):
    try:
      return self.client.server_info(timeout=10)[table].current_size
    except Exception:  # pylint: disable=broad-except
      return None  # the server is gone; callers only report this number

  def checkpoint(self):
    return None

  def stop(self):
    pass


def build_tables(root_dir):
  """The experience and variables tables for the gin-configured agent."""
  from planet_tfa.agents import latent_sac_agent  # pylint: disable=g-import-not-at-top
  settings = train_eval_settings()
  time_step_spec, action_spec = env_specs(root_dir, settings['env_loader'],
                                          settings['seed'])
  train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
  agent = latent_sac_agent.LatentSacAgent(time_step_spec, action_spec,
                                          train_step_counter=train_step)
  experience = replay.make_experience_table(agent.collect_data_spec)
  policy_variables = replay.make_variables_table(
      variables.variables_signature(agent.collect_policy, train_step))
  return [experience, policy_variables]


def serve(root_dir, port, checkpoint_interval_s=600.0, allow_remote=False):
  """Runs the server until SIGTERM/SIGINT; returns the last checkpoint path."""
  root_dir = os.path.abspath(os.path.expanduser(root_dir))
  os.makedirs(root_dir, exist_ok=True)
  tables = build_tables(root_dir)
  try:
    server = replay.ReplayServer(tables, root_dir=root_dir, port=port)
  except (RuntimeError, ValueError) as error:
    raise RuntimeError(
        f'could not start the Reverb server on port {port}: {error}\nIf the port is '
        f'taken pick another --port; if restoring {os.path.join(root_dir, replay.REPLAY_DIR)} '
        'failed, it was written by another config: use a fresh --root_dir or move the '
        'replay directory away.') from error
  print((REMOTE_NOTE if allow_remote else SECURITY_WARNING).format(port=server.port),
        file=sys.stderr, flush=True)
  info = server.client.server_info()
  print(f'Reverb server ready on port {server.port} (root {root_dir}): '
        f'experience holds {info[replay.EXPERIENCE_TABLE].current_size} windows, '
        f'variables {info[replay.VARIABLES_TABLE].current_size} item(s). '
        f'Checkpoints to {server.checkpoint_dir} '
        + (f'every {checkpoint_interval_s:.0f}s and ' if checkpoint_interval_s else '')
        + 'on SIGTERM/SIGINT.', flush=True)
  signals = stop_signals.StopRequested(second_handler=signal.SIG_DFL).install()
  last_checkpoint = time.time()
  path = None
  try:
    while signals.signal is None:
      time.sleep(0.5)
      if checkpoint_interval_s and time.time() - last_checkpoint >= checkpoint_interval_s:
        path = _checkpoint(server)
        last_checkpoint = time.time()
  finally:
    if signals.signal:
      print(f'{signals.signal} received: checkpointing the replay, then stopping.',
            flush=True)
    path = _checkpoint(server) or path
    server.stop()
  return path


def _checkpoint(server):
  start = time.time()
  info = server.client.server_info()
  path = server.checkpoint()
  print(f'replay checkpoint: {info[replay.EXPERIENCE_TABLE].current_size} windows -> '
        f'{path} ({time.time() - start:.1f}s)', flush=True)
  return path


def main(argv):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from planet_tfa import config  # pylint: disable=g-import-not-at-top
  del argv
  flag_values = flags.FLAGS
  config.parse_or_exit(flag_values.gin_file, flag_values.gin_param)
  try:
    serve(flag_values.root_dir, flag_values.port, flag_values.replay_checkpoint_interval_s,
          flag_values.allow_remote)
  except RuntimeError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('root_dir', None, 'Run root: specs.pbtxt is read from (or written '
                      'to) it, the replay is checkpointed to ROOT/replay/.')
  flags.DEFINE_multi_string('gin_file', [], 'The same gin files as the learner.')
  flags.DEFINE_multi_string('gin_param', [], 'The same gin bindings as the learner.')
  flags.DEFINE_integer('port', None, 'TCP port to serve on (all interfaces).')
  flags.DEFINE_float('replay_checkpoint_interval_s', 600.0, 'Seconds between replay '
                     'checkpoints (0: only on SIGTERM/SIGINT).')
  flags.DEFINE_bool('allow_remote', False, 'Acknowledge that the port is reachable from '
                    'other hosts and unauthenticated (needed for multi-host setups; '
                    'without it a warning is printed).')
  flags.mark_flags_as_required(['root_dir', 'port'])
  app.run(main)

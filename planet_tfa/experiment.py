"""The composition root: what every role of a run builds, built one way.

The learner (`learner.train_eval`), the standalone server, the collectors,
export and `bench/` all build their environments, agent, replay tables,
observers, samplers and handles here, from one gin-configured `Experiment`:
the settings every role must agree on (the task, the seed, the replay
window). A role never learns another role's settings from its function
signature; it reads the `Experiment`.
"""
import dataclasses
from multiprocessing import pool as pool_lib
import os
from typing import Any, Callable

import gin
import tensorflow as tf
from tf_agents.environments import tf_environment
from tf_agents.environments import tf_py_environment
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from planet_tfa import errors
from planet_tfa import layout
# Registers `export_policies` with gin: every program that parses a run's
# config (tiny.gin binds it) builds through this module.
from planet_tfa import saved_policies  # pylint: disable=unused-import
from planet_tfa.agents import latent_sac_agent
from planet_tfa.environments import suites
from planet_tfa.replay import handles
from planet_tfa.replay import observers
from planet_tfa.replay import tables
from planet_tfa.replay import variables


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Experiment:
  """The settings every role of a run shares.

  Attributes:
    env_loader: callable(seed=...) -> PyEnvironment; gin chooses the task
      (default `load_environment`, i.e. DeepMind Control from pixels).
    seed: seeds TF, NumPy and the environments; the eval env gets seed + 1,
      collector K seed + 1000 * (K + 1) + its launch number.
    sequence_length: steps per replay window (T+1): what the observers write,
      what the table holds and what the learner samples.
  """
  env_loader: Callable[..., Any] = suites.load_environment
  seed: int = 0
  sequence_length: int = 9


# ---- environments -----------------------------------------------------------

def make_env(experiment, seed=None, instance=None):
  """The task's env, built and stepped in one dedicated thread.

  OpenGL contexts (MuJoCo rendering) are per thread. `seed` defaults to the
  experiment's; `instance` (a collector's number) reaches loaders that take
  it, e.g. CarlaEnv, which then talks to its own simulator port.
  """
  seed = experiment.seed if seed is None else seed
  # Our own pool: TFPyEnvironment leaves the one it makes open when the loader
  # raises, and its threads then print a traceback at exit.
  thread = pool_lib.ThreadPool(1)
  try:
    return tf_py_environment.TFPyEnvironment(
        lambda: suites.call_loader(experiment.env_loader, seed, instance), isolation=thread)
  except BaseException:
    thread.close()
    thread.join()
    raise


def close_env(tf_env):
  """Closes the Python env inside its isolation thread, then the thread."""
  # pylint: disable=protected-access
  tf_env._execute(tf_env.pyenv.close)
  # TFPyEnvironment.close() joins the pool before closing it, which raises.
  if tf_env._pool is not None:
    tf_env._pool.close()
    tf_env._pool.join()
    tf_env._pool = None


def save_specs(root_dir, time_step_spec, action_spec):
  """ROOT/specs.pbtxt, so export, the server and restores work without the simulator.

  Written to a scratch name and renamed: roles that race (server,
  collectors) never read half a file.
  """
  os.makedirs(root_dir, exist_ok=True)
  staging = os.path.join(root_dir, f'.{layout.SPECS_FILE}.{os.getpid()}')
  tensor_spec.to_pbtxt_file(staging, (time_step_spec, action_spec))
  os.replace(staging, os.path.join(root_dir, layout.SPECS_FILE))


class NotARunRootError(errors.UserError, FileNotFoundError):
  """A directory given as a run root lacks what train_eval.py writes at start."""


def load_specs(root_dir):
  """(time_step_spec, action_spec) from ROOT/specs.pbtxt."""
  specs_path = os.path.join(root_dir, layout.SPECS_FILE)
  if not os.path.exists(specs_path):
    raise NotARunRootError(f'{specs_path} not found: {root_dir} is not a planet_tfa run '
                           'root (train_eval.py writes it at start).')
  time_step_spec, action_spec = tensor_spec.from_pbtxt_file(specs_path)
  # The file stores a generic namedtuple; TF-Agents wants its own TimeStep.
  return ts.TimeStep(*time_step_spec), action_spec


def env_specs(experiment, root_dir, tf_env=None):
  """(time_step_spec, action_spec) of `tf_env`, else ROOT/specs.pbtxt, else one env.

  Building the env (a simulator connection, for CARLA) is the fallback only;
  its specs are then saved to ROOT/specs.pbtxt for the next role.
  """
  if tf_env is not None:
    return tf_env.time_step_spec(), tf_env.action_spec()
  if layout.has_specs(root_dir):
    return load_specs(root_dir)
  print(f'{os.path.join(root_dir, layout.SPECS_FILE)} not found: building the environment '
        'once to read its specs.', flush=True)
  tf_env = make_env(experiment)
  try:
    specs = tf_env.time_step_spec(), tf_env.action_spec()
  finally:
    close_env(tf_env)
  save_specs(root_dir, *specs)
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


# ---- agent ------------------------------------------------------------------

def make_agent(time_step_spec, action_spec, train_step=None, **agent_args):
  """The gin-configured LatentSacAgent for these specs.

  `train_step`: the int64 counter variable (made when None); `agent_args`
  override gin, e.g. train_sac=False for a world-model-only run.
  """
  if train_step is None:
    train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
  return latent_sac_agent.LatentSacAgent(time_step_spec, action_spec,
                                         train_step_counter=train_step, **agent_args)


# ---- replay -----------------------------------------------------------------

def make_replay_tables(agent):
  """A standalone server's tables: experience windows, the policy variables and
  the collectors' env-step reports."""
  return [tables.make_experience_table(agent.collect_data_spec),
          tables.make_variables_table(
              variables.variables_signature(agent.collect_policy,
                                            agent.train_step_counter)),
          tables.make_collected_steps_table()]


def connect_replay(address, deadline_s=60.0):
  """A handle on a standalone server, connected now (a wrong address fails first)."""
  return handles.RemoteReplay(address, deadline_s=deadline_s)


def make_replay(agent, root_dir, remote=None):
  """The learner's replay handle: `remote` attached to `agent`, else a local server."""
  if remote is None:
    return handles.LocalReplay(agent.collect_data_spec, root_dir)
  remote.attach(agent, agent.train_step_counter)  # checks the server fits this agent
  return remote


def make_episode_observer(experiment, client, batch_size):
  """The TF-driver observer writing whole episodes as windows through `client`."""
  return observers.TFReverbObserver(
      lambda: observers.ReverbEpisodeObserver(client, experiment.sequence_length),
      batch_size=batch_size)


def make_sampler(experiment, agent, address, batch_size, timeout_s):
  """An iterator of [batch_size, T+1] windows from the experience table at `address`."""
  return tables.ReplaySampler(agent.collect_data_spec, address, experiment.sequence_length,
                              batch_size=batch_size, timeout_s=timeout_s)

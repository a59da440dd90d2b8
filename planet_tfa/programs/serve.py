"""The standalone Reverb server program, for many collectors and one learner.

    python -m planet_tfa.programs.serve --root_dir=ROOT --gin_file=FILE
        [--gin_param=...] --port=PORT [--replay_checkpoint_interval_s=600] [--allow_remote]

Builds the tables from the same gin config as the learner (the `Experiment`
and the agent's specs); the env specs come from ROOT/specs.pbtxt, else the
env is built once to read them. See `replay.server` for what it serves and
the security note. Logs: ROOT/logs/serve.log.
"""
from planet_tfa.programs import cli

if __name__ == '__main__':
  cli.capture_native_logs()  # before TensorFlow is imported

# pylint: disable=g-import-not-at-top,wrong-import-position
import os

from absl import flags

from planet_tfa import experiment as experiment_lib
from planet_tfa import validation
from planet_tfa.programs import gin_files
from planet_tfa.replay import server

FLAGS = flags.FLAGS


def define_flags():
  """The program's flags (defined only when it runs, so modules import side by side)."""
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



def build_tables(root_dir, experiment=None):
  """The experience and variables tables for the gin-configured experiment and agent."""
  experiment = experiment or experiment_lib.Experiment()
  agent = experiment_lib.make_agent(*experiment_lib.env_specs(experiment, root_dir))
  return experiment_lib.make_replay_tables(agent)


def main(argv):
  del argv
  root_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))

  def serve():
    gin_files.parse_program_config(FLAGS.gin_file, FLAGS.gin_param)
    validation.check_root_dir(root_dir)
    os.makedirs(root_dir, exist_ok=True)
    cli.attach_log(root_dir, 'serve')
    experiment = experiment_lib.Experiment()
    validation.check_experiment(experiment)
    server.serve(build_tables(root_dir, experiment), root_dir, FLAGS.port,
                 FLAGS.replay_checkpoint_interval_s, FLAGS.allow_remote)

  cli.run_program(serve)


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['root_dir', 'port'])
  cli.start(main)

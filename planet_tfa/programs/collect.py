"""The collector program: one environment, whole episodes into a standalone server.

    python -m planet_tfa.programs.collect --replay_server=HOST:PORT --collector_id=K
        --root_dir=ROOT --gin_file=FILE [--gin_param=...] [--max_episodes=N]

See `planet_tfa.collector` for what it does. Exit codes: 0 done or stopped by a
signal; 1 the server is gone or the episode failed; 2 a bad setting or a
server built for another config. Logs: ROOT/logs/collector_K.log.
"""
from planet_tfa.programs import cli

if __name__ == '__main__':
  cli.capture_native_logs()  # before TensorFlow is imported

# pylint: disable=g-import-not-at-top,wrong-import-position
import os
import sys
import traceback

from absl import flags

from planet_tfa import collector
from planet_tfa import experiment as experiment_lib
from planet_tfa import validation
from planet_tfa.programs import gin_files
from planet_tfa.replay import tables
from planet_tfa.replay import variables

FLAGS = flags.FLAGS


def define_flags():
  """The program's flags (defined only when it runs, so modules import side by side)."""
  flags.DEFINE_string('replay_server', None, 'HOST:PORT of the server (planet_tfa.programs.serve).')
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



def main(argv):
  del argv
  collector_id = FLAGS.collector_id
  root_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))

  def collect():
    gin_files.parse_program_config(FLAGS.gin_file, FLAGS.gin_param)
    validation.check_replay_server(FLAGS.replay_server)
    validation.check_root_dir(root_dir)
    cli.attach_log(root_dir, f'collector_{collector_id}')
    experiment = experiment_lib.Experiment()
    validation.check_experiment(experiment)
    try:
      return collector.run_collector(FLAGS.replay_server, collector_id, root_dir,
                                     FLAGS.server_deadline_s, FLAGS.max_episodes,
                                     experiment=experiment)
    except variables.ServerMismatchError as error:
      cli.exit_with(error, code=2, name=f'collector {collector_id}')
    except tables.ReplayUnavailableError as error:
      cli.exit_with(error, code=1, name=f'collector {collector_id}')
    except collector.CollectorError as error:
      if error.__cause__ is not None:  # e.g. a simulator error inside the episode
        traceback.print_exception(error.__cause__, file=sys.stderr)
      print(f'error: collector {collector_id}: {error}', file=sys.stderr, flush=True)
      sys.stdout.flush()
      os._exit(1)  # the episode thread may be stuck inside a Reverb write
    return None

  result = cli.run_program(collect)
  print(f'[collector {result["collector_id"]}] done: {result["episodes"]} episodes'
        + (f' (stopped by {result["stopped_by"]})' if result['stopped_by'] else ''),
        flush=True)


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['replay_server', 'collector_id', 'root_dir'])
  cli.start(main)

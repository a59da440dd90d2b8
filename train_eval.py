"""Trains latent SAC (PlaNet's RSSM + SAC) configured with gin.

  python train_eval.py --root_dir=runs/cartpole --gin_file=dmc_cartpole_swingup.gin
  python train_eval.py --root_dir=runs/carla --gin_file=carla_sac.gin \
      --gin_param='CarlaServer.host="10.0.0.5"'

With many collector processes on a standalone Reverb server (docs/distributed.md):
  python train_eval.py --root_dir=ROOT --gin_file=FILE --replay_server=HOST:PORT

A bare --gin_file name is looked up in ./gin/ too. Re-running with the same
--root_dir resumes the run.
"""
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')  # keep TF's C++ info lines out

from absl import app
from absl import flags

from planet_tfa import config

flags.DEFINE_string('root_dir', 'runs/default', 'Directory for checkpoints, replay, '
                    'summaries and the operative config (resumes if it exists).')
flags.DEFINE_multi_string('gin_file', [], 'Gin config files (repeatable); bare '
                          'names are looked up in gin/.')
flags.DEFINE_multi_string('gin_param', [], 'Gin bindings (repeatable), e.g. '
                          "'train_eval.num_iterations=10'.")
flags.DEFINE_string('replay_server', None, 'HOST:PORT of a standalone server '
                    '(python -m planet_tfa.drivers.reverb_server): learn from the data of '
                    'remote collectors instead of collecting in this process.')
FLAGS = flags.FLAGS


def _user_errors():
  """Errors whose message already names the cause and the fix: no traceback."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from planet_tfa import checkpoints
  from planet_tfa.drivers import replay
  from planet_tfa.drivers import variables
  from planet_tfa.networks import encoders
  errors = (replay.ReplayUnavailableError, replay.ReplayEmptyError,
            variables.ServerMismatchError, checkpoints.CheckpointError,
            checkpoints.WorldModelMismatchError, encoders.ObservationSpecError,
            ConnectionError, tf.errors.InvalidArgumentError)
  try:
    from planet_tfa.environments.carla import errors as carla_errors
    errors += (carla_errors.CarlaEnvError,)
  except ImportError:
    pass
  return errors


def main(argv):
  del argv
  config.parse_or_exit(FLAGS.gin_file, FLAGS.gin_param)
  from planet_tfa import run  # pylint: disable=g-import-not-at-top
  try:
    run.train_eval(FLAGS.root_dir, replay_server=FLAGS.replay_server)
  except config.ConfigError as error:  # a setting, found before anything started
    config.exit_with(error)
  except _user_errors() as error:
    message = str(error).splitlines()
    print(f'error: {type(error).__name__}: ' + '\n'.join(message[:40]), file=sys.stderr)
    print(f'(checkpoints and replay in {FLAGS.root_dir} were kept)', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)

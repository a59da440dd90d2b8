"""Trains latent SAC (PlaNet's RSSM + SAC) configured with gin.

  python train_eval.py --root_dir=runs/cartpole --gin_file=dmc_cartpole_swingup.gin
  python train_eval.py --root_dir=runs/carla --gin_file=carla_sac.gin \
      --gin_param='CarlaEnv.host="10.0.0.5"'

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


def main(argv):
  del argv
  try:
    config.parse(FLAGS.gin_file or [config.DEFAULT_GIN_FILE], FLAGS.gin_param)
  except config.ConfigError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  from planet_tfa import run  # pylint: disable=g-import-not-at-top
  if not FLAGS.replay_server:
    run.train_eval(FLAGS.root_dir)
    return
  from planet_tfa.drivers import replay  # pylint: disable=g-import-not-at-top
  from planet_tfa.drivers import variables  # pylint: disable=g-import-not-at-top
  try:
    run.train_eval(FLAGS.root_dir, replay_server=FLAGS.replay_server)
  except (replay.ReplayUnavailableError, replay.ReplayEmptyError,
          variables.ServerMismatchError) as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)

"""The learner program: trains latent SAC (PlaNet's RSSM + SAC) configured with gin.

  python train_eval.py --root_dir=runs/cartpole --gin_file=dmc_cartpole_swingup.gin
  python -m planet_tfa.programs.train ...        (the same program)

With many collector processes on a standalone server (docs/distributed.md):
  python train_eval.py --root_dir=ROOT --gin_file=FILE --replay_server=HOST:PORT

A bare --gin_file name is looked up in gin/. Re-running with the same
--root_dir resumes the run. TensorFlow's and Reverb's log lines go to
ROOT/logs/train.log.
"""
from planet_tfa.programs import cli

if __name__ == '__main__':
  cli.capture_native_logs()  # before TensorFlow is imported

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
import tensorflow as tf

from planet_tfa import learner
from planet_tfa.agents import latent_sac_agent
from planet_tfa.programs import gin_files

FLAGS = flags.FLAGS
# The agent's NaN check raises InvalidArgumentError before any update: a setting
# to lower, so its message suffices. Any other one (e.g. a shape) is a bug and
# keeps its traceback.
USER_ERRORS = ((tf.errors.InvalidArgumentError, latent_sac_agent.NON_FINITE_LOSS),)


def define_flags():
  """The program's flags (defined only when it runs, so modules import side by side)."""
  flags.DEFINE_string('root_dir', 'runs/default', 'Directory for checkpoints, replay, '
                      'summaries, logs and the operative config (resumes if it exists).')
  flags.DEFINE_multi_string('gin_file', [], 'Gin config files (repeatable); bare '
                            'names are looked up in gin/.')
  flags.DEFINE_multi_string('gin_param', [], 'Gin bindings (repeatable), e.g. '
                            "'train_eval.num_iterations=10'.")
  flags.DEFINE_string('replay_server', None, 'HOST:PORT of a standalone server '
                      '(python -m planet_tfa.programs.serve): learn from the data of '
                      'remote collectors instead of collecting in this process.')



def main(argv):
  del argv
  root_dir = FLAGS.root_dir

  def train():
    gin_files.parse_program_config(FLAGS.gin_file, FLAGS.gin_param)
    learner.train_eval(root_dir, replay_server=FLAGS.replay_server,
                       on_start=lambda root: cli.attach_log(root, 'train'))

  cli.run_program(train, kept=f'checkpoints and replay in {root_dir} were kept',
                  user_errors=USER_ERRORS)


if __name__ == '__main__':
  define_flags()
  cli.start(main)

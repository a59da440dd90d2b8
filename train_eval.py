"""Trains latent SAC (PlaNet's RSSM + SAC) configured with gin.

  python train_eval.py --root_dir=runs/cartpole --gin_file=dmc_cartpole_swingup.gin
  python train_eval.py --root_dir=runs/carla --gin_file=carla_sac.gin \
      --gin_param='CarlaServer.host="10.0.0.5"'

With many collector processes on a standalone Reverb server (docs/distributed.md):
  python train_eval.py --root_dir=ROOT --gin_file=FILE --replay_server=HOST:PORT

A bare --gin_file name is looked up in ./gin/ too. Re-running with the same
--root_dir resumes the run. The program is planet_tfa/programs/train.py.
"""
from planet_tfa.programs import cli

if __name__ == '__main__':
  cli.capture_native_logs()  # before TensorFlow is imported

# pylint: disable=g-import-not-at-top,wrong-import-position
from planet_tfa.programs import train

if __name__ == '__main__':
  train.define_flags()
  cli.start(train.main)

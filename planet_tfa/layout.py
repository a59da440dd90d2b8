"""The one home of a run root's (ROOT's) layout: names only, no heavy imports
(the programs read it before TensorFlow loads).

  ROOT/operative_config.gin     the full gin configuration the run used
  ROOT/specs.pbtxt              env time_step and action specs (no simulator needed later)
  ROOT/train/, ROOT/eval/       TensorBoard events
  ROOT/train/checkpoints/       agent, optimizers, counters, metrics, iteration
  ROOT/world_model/             world-model-only checkpoints (for world_model_checkpoint)
  ROOT/replay/                  Reverb checkpoints of the tables
  ROOT/policies/                greedy_policy/ and collect_policy/ SavedModels
  ROOT/eval/videos/             GIFs of evaluation episodes, real next to model
  ROOT/eval_returns.csv         one line per evaluation
  ROOT/run_summary.json         what the last start of train_eval did
  ROOT/logs/                    TensorFlow, absl and Reverb log lines of every program
  ROOT/collector_K/             collector K's TensorBoard events and launch counter
"""
import os

OPERATIVE_CONFIG = 'operative_config.gin'
PREVIOUS_CONFIG = 'operative_config.previous.gin'
SPECS_FILE = 'specs.pbtxt'
TRAIN_DIR = 'train'
EVAL_DIR = 'eval'
CHECKPOINT_DIR = os.path.join(TRAIN_DIR, 'checkpoints')
WORLD_MODEL_DIR = 'world_model'
REPLAY_DIR = 'replay'
POLICIES_DIR = 'policies'
VIDEO_DIR = os.path.join(EVAL_DIR, 'videos')
EVAL_RECORDS = 'eval_returns.csv'
RUN_SUMMARY = 'run_summary.json'
LOG_DIR = 'logs'
COLLECTOR_STATE = 'state.json'


def collector_dir(root_dir, collector_id):
  return os.path.join(root_dir, f'collector_{collector_id}')


def has_specs(root_dir):
  return os.path.exists(os.path.join(root_dir, SPECS_FILE))

"""Policy SavedModels: the latent filter and the actor, runnable with TensorFlow alone.

    python -m planet_tfa.export --root_dir=ROOT [--output_dir=DIR] [--policy=sac|cem]

writes DIR/greedy_policy and DIR/collect_policy (default DIR = ROOT/policies)
from the newest checkpoint of a run: what acted in the run
(`LatentSacAgent.eval_with` / `collect_with`), or with --policy the latent
actor ('sac') or PlaNet's CEM planner ('cem') on the same world model.
Each SavedModel has the serving functions `get_initial_state(batch_size)`
and `action(time_step, policy_state)` for any batch size; its observation
spec holds only the policy's inputs (no decode-only targets). Metadata:
`train_step` and the run's gin config.

Every export writes a complete SavedModel into a temporary directory and
swaps it into place, so an export never mixes an old graph with new
variables and a crash mid-export leaves the previous one intact.
"""
import os
import shutil
import sys
import tempfile

import tensorflow as tf
from tf_agents.policies import policy_saver
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

POLICIES_DIR = 'policies'
SPECS_FILE = 'specs.pbtxt'
POLICY_NAMES = {'greedy_policy': True, 'collect_policy': False}


def save_specs(root_dir, time_step_spec, action_spec):
  """Stores the env specs, so export and restore work without the simulator."""
  tensor_spec.to_pbtxt_file(os.path.join(root_dir, SPECS_FILE),
                            (time_step_spec, action_spec))


def load_specs(root_dir):
  path = os.path.join(root_dir, SPECS_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: {root_dir} is not a planet_tfa run root '
                            '(train_eval.py writes it at start).')
  time_step_spec, action_spec = tensor_spec.from_pbtxt_file(path)
  # The file stores a generic namedtuple; TF-Agents wants its own TimeStep.
  return ts.TimeStep(*time_step_spec), action_spec


def _swap_into_place(staging_dir, final_dir):
  previous = final_dir + '.previous'
  if os.path.exists(previous):
    shutil.rmtree(previous)
  if os.path.exists(final_dir):
    os.rename(final_dir, previous)
  os.rename(staging_dir, final_dir)
  if os.path.exists(previous):
    shutil.rmtree(previous)


def export_policies(agent, output_dir, train_step, gin_config='', kind=None):
  """Writes greedy and collect SavedModels to output_dir; returns their paths.

  `kind`: 'sac' or 'cem'; None exports what acts in each role in the agent.
  """
  os.makedirs(output_dir, exist_ok=True)
  metadata = {'gin_config': tf.Variable(gin_config, dtype=tf.string, trainable=False)}
  paths = {}
  for name, greedy in POLICY_NAMES.items():
    policy = agent.export_policy(greedy=greedy, kind=kind)
    saver = policy_saver.PolicySaver(policy, batch_size=None, train_step=train_step,
                                     metadata=metadata)
    staging = tempfile.mkdtemp(prefix=f'.{name}-', dir=output_dir)
    saver.save(staging)
    final = os.path.join(output_dir, name)
    _swap_into_place(staging, final)
    paths[name] = final
  return paths


def load_agent_from_root(root_dir):
  """The run's agent, built from its operative config and restored from its
  newest checkpoint. Returns (agent, gin config text). Leaves gin cleared."""
  import gin  # pylint: disable=g-import-not-at-top
  from planet_tfa import checkpoints  # pylint: disable=g-import-not-at-top
  from planet_tfa import config  # pylint: disable=g-import-not-at-top
  from planet_tfa import run  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import latent_sac_agent  # pylint: disable=g-import-not-at-top

  root_dir = os.path.abspath(root_dir)
  config_path = os.path.join(root_dir, run.OPERATIVE_CONFIG)
  time_step_spec, action_spec = load_specs(root_dir)
  config.parse_run_config(config_path)
  try:
    train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
    agent = latent_sac_agent.LatentSacAgent(time_step_spec, action_spec,
                                            train_step_counter=train_step)
  finally:
    gin.clear_config()
  checkpoint_dir = os.path.join(root_dir, run.CHECKPOINT_DIR)
  if checkpoints.RunCheckpoints(checkpoint_dir, agent=agent).restore(partial=True) is None:
    raise checkpoints.CheckpointError(f'no checkpoint in {checkpoint_dir}: nothing to load')
  with open(config_path) as f:
    return agent, f.read()


def export_from_root(root_dir, output_dir=None, kind=None):
  """Rebuilds the run's agent from its config and checkpoint, then exports it."""
  agent, gin_config = load_agent_from_root(root_dir)
  output_dir = output_dir or os.path.join(os.path.abspath(root_dir), POLICIES_DIR)
  paths = export_policies(agent, output_dir, agent.train_step_counter, gin_config, kind)
  return paths, int(agent.train_step_counter.numpy())


def main(argv):
  from absl import flags  # pylint: disable=g-import-not-at-top
  del argv
  paths, step = export_from_root(flags.FLAGS.root_dir, flags.FLAGS.output_dir,
                                 flags.FLAGS.policy)
  for name, path in paths.items():
    print(f'{name}: {path} (train step {step})')


if __name__ == '__main__':
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('root_dir', None, 'Run root written by train_eval.py.')
  flags.DEFINE_string('output_dir', None, 'Where to write; default ROOT/policies.')
  flags.DEFINE_enum('policy', None, ['sac', 'cem'], 'What acts: the latent actor or '
                    "PlaNet's CEM planner; default: what acted in the run.")
  flags.mark_flag_as_required('root_dir')
  app.run(main)
  sys.exit(0)

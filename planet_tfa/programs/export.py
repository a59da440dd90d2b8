"""The export program: policy SavedModels from a run root.

    python -m planet_tfa.programs.export --root_dir=ROOT [--output_dir=DIR] [--policy=sac|cem]

writes DIR/greedy_policy and DIR/collect_policy (default DIR = ROOT/policies)
from the newest checkpoint of a run: what acted in the run, or with --policy
the latent actor ('sac') or PlaNet's CEM planner ('cem') on the same world
model (`saved_policies`). The agent is rebuilt from the run's own
operative_config.gin (older versions' names upgraded) and specs.pbtxt, so no
simulator is needed.
"""
from planet_tfa.programs import cli

if __name__ == '__main__':
  cli.capture_native_logs()  # before TensorFlow is imported

# pylint: disable=g-import-not-at-top,wrong-import-position
import os

from absl import flags
import gin

from planet_tfa import checkpoints
from planet_tfa import experiment as experiment_lib
from planet_tfa import layout
from planet_tfa import saved_policies
from planet_tfa.programs import gin_files

FLAGS = flags.FLAGS


def define_flags():
  """The program's flags (defined only when it runs, so modules import side by side)."""
  flags.DEFINE_string('root_dir', None, 'Run root written by train_eval.py.')
  flags.DEFINE_string('output_dir', None, 'Where to write; default ROOT/policies.')
  flags.DEFINE_enum('policy', None, ['sac', 'cem'], 'What acts: the latent actor or '
                    "PlaNet's CEM planner; default: what acted in the run.")



def load_agent_from_root(root_dir, bindings=()):
  """The run's agent, built from its operative config (with `bindings` over it)
  and restored from its newest checkpoint. Returns (agent, the run's gin config
  text). Leaves gin cleared; the
  agent read the run's planner settings while it was built, so the policies it
  makes later are the run's (LatentSacAgent.make_policy). A variable of the
  checkpoint's agent that the rebuilt agent lacks (a config that builds another
  agent) is a CheckpointError naming it, not a silent skip."""
  root_dir = os.path.abspath(root_dir)
  config_path = os.path.join(root_dir, layout.OPERATIVE_CONFIG)
  time_step_spec, action_spec = experiment_lib.load_specs(root_dir)
  if not os.path.exists(config_path):
    raise experiment_lib.NotARunRootError(
        f'{config_path} not found: the run in {root_dir} wrote no config yet (train_eval.py '
        'writes it once set up), so there is no agent to export.')
  gin_files.parse_run_config(config_path, bindings)
  try:
    agent = experiment_lib.make_agent(time_step_spec, action_spec)
  finally:
    gin.clear_config()
  checkpoint_dir = os.path.join(root_dir, layout.CHECKPOINT_DIR)
  if checkpoints.RunCheckpoints(checkpoint_dir, agent=agent).restore(partial=True) is None:
    raise checkpoints.CheckpointError(f'no checkpoint in {checkpoint_dir}: nothing to load')
  with open(config_path) as f:
    return agent, f.read()


def export_from_root(root_dir, output_dir=None, kind=None):
  """Rebuilds the run's agent from its config and checkpoint, then exports it."""
  agent, gin_config = load_agent_from_root(root_dir)
  output_dir = output_dir or os.path.join(os.path.abspath(root_dir), layout.POLICIES_DIR)
  paths = saved_policies.export_policies(agent, output_dir, agent.train_step_counter,
                                         gin_config, kind)
  return paths, int(agent.train_step_counter.numpy())


def main(argv):
  del argv

  def export():
    root_dir = os.path.abspath(FLAGS.root_dir)
    if os.path.isdir(root_dir):
      cli.attach_log(root_dir, 'export')
    paths, step = export_from_root(root_dir, FLAGS.output_dir, FLAGS.policy)
    for name, path in paths.items():
      print(f'{name}: {path} (train step {step})')

  # A root that is not a run is a NotARunRootError (a UserError); any other
  # missing file is a bug and keeps its traceback.
  cli.run_program(export)


if __name__ == '__main__':
  define_flags()
  flags.mark_flag_as_required('root_dir')
  cli.start(main)

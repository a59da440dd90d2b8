"""Policy SavedModels: the latent filter and the actor, runnable with TensorFlow alone.

`export_policies` writes DIR/greedy_policy and DIR/collect_policy: what acts
in the agent (`LatentSacAgent.eval_with` / `collect_with`), or with `kind` the
latent actor ('sac') or PlaNet's CEM planner ('cem') on the same world model
(`python -m planet_tfa.programs.export` does it for a run root). Each
SavedModel has the serving functions `get_initial_state(batch_size)` and
`action(time_step, policy_state)` for any batch size; its observation spec holds only the policy's inputs (no decode-only targets). Metadata:
`train_step` and the run's gin config. The greedy policy's directory also
holds `policy_batch1.tflite`, the same step as a batch-1 TFLite model for
acting at low latency (`lite_policy.TFLitePolicy.load(dir)`); TFLite has no
bf16, so a mixed_bfloat16 model's TFLite policy computes its images in fp32.

Every export writes a complete SavedModel into a temporary directory and
swaps it into place, so an export never mixes an old graph with new
variables and a crash mid-export leaves the previous one intact.
"""
import os
import shutil
import tempfile

import gin
import tensorflow as tf
from tf_agents.policies import policy_saver

from planet_tfa import lite_policy
from planet_tfa.networks import encoders

POLICY_NAMES = {'greedy_policy': True, 'collect_policy': False}


def _write_tflite(agent, kind, policy_dir, train_step, metadata):
  """The greedy policy's TFLite model into policy_dir. TFLite has no bf16, so
  a model whose images run in mixed_bfloat16 gets its TFLite policy from an
  fp32 trace of the same variables (actions differ by bf16 rounding only)."""
  with encoders.computing_in_float32(agent.world_model) as switched:
    if not switched:
      return lite_policy.write(policy_dir)
    fp32_dir = tempfile.mkdtemp(prefix='.fp32-', dir=os.path.dirname(policy_dir))
    try:
      policy = agent.export_policy(greedy=True, kind=kind)
      policy_saver.PolicySaver(policy, batch_size=None, train_step=train_step,
                               metadata=metadata).save(fp32_dir)
      path = lite_policy.write(fp32_dir)
      if path is None:
        return None
      final = os.path.join(policy_dir, lite_policy.TFLITE_NAME)
      shutil.move(path, final)
      return final
    finally:
      shutil.rmtree(fp32_dir, ignore_errors=True)


def _swap_into_place(staging_dir, final_dir):
  previous = final_dir + '.previous'
  if os.path.exists(previous):
    shutil.rmtree(previous)
  if os.path.exists(final_dir):
    os.rename(final_dir, previous)
  os.rename(staging_dir, final_dir)
  if os.path.exists(previous):
    shutil.rmtree(previous)


@gin.configurable(allowlist=['tflite'])
def export_policies(agent, output_dir, train_step, gin_config='', kind=None, tflite=True):
  """Writes greedy and collect SavedModels to output_dir; returns their paths.

  `kind`: 'sac' or 'cem'; None exports what acts in each role in the agent.
  `tflite`: also write the greedy policy's batch-1 TFLite model (a few
  seconds per export; `lite_policy`).
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
    if greedy and tflite:
      _write_tflite(agent, kind, staging, train_step, metadata)
    final = os.path.join(output_dir, name)
    _swap_into_place(staging, final)
    paths[name] = final
  return paths

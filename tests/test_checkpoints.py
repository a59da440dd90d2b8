"""Crash-safe resume and selective world-model restore, on real train_eval runs."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import gin
import numpy as np
import pytest
import tensorflow as tf

from planet_tfa import checkpoints
from planet_tfa.programs import gin_files
from planet_tfa import experiment as experiment_lib
from planet_tfa.agents import latent_sac_agent
import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow  # every test runs train_eval.py in other processes
TINY = tiny_model.DMC_FLAGS
# tiny.gin: 20-step episodes -> 21 time steps -> 13 windows of 9 per episode.
WINDOWS_PER_EPISODE = 13


def command(root, *params):
  return [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root}', *TINY,
          *[f'--gin_param={p}' for p in params]]


def run(root, *params, timeout=300):
  result = subprocess.run(command(root, *params), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=dict(os.environ, PYTHONUNBUFFERED='1'))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return result.stdout


def start(root, *params):
  return subprocess.Popen(command(root, *params), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONUNBUFFERED='1'))


def wait_for_line(proc, pattern, timeout=240):
  deadline = time.time() + timeout
  lines = []
  while time.time() < deadline:
    line = proc.stdout.readline()
    if not line:
      break
    lines.append(line)
    if re.search(pattern, line):
      return lines
  raise AssertionError(f'{pattern!r} never printed:\n' + ''.join(lines[-20:]))


def checkpoint_value(prefix, name):
  return tf.train.load_checkpoint(prefix).get_tensor(f'{name}/.ATTRIBUTES/VARIABLE_VALUE')


def test_kill_9_then_rerun_continues_counters_and_replay_without_warmup(tmp_path):
  root = tmp_path / 'run'
  proc = start(root, 'train_eval.num_iterations=100', 'train_eval.checkpoint_interval=2',
               'train_eval.eval_interval=0')
  try:
    wait_for_line(proc, r'^iter 5/100')
  finally:
    proc.kill()  # SIGKILL: no handler, no final checkpoint
    proc.wait()
  prefix = tf.train.latest_checkpoint(str(root / 'train' / 'checkpoints'))
  iteration = int(checkpoint_value(prefix, 'iteration'))
  episodes = int(checkpoint_value(prefix, 'train_episodes/number_episodes'))
  train_step = int(checkpoint_value(prefix, 'agent/_train_step_counter'))
  assert iteration == 4 and train_step == 8

  stdout = run(root, f'train_eval.num_iterations={iteration + 2}',
               'train_eval.checkpoint_interval=2', 'train_eval.eval_interval=0')
  assert f'iteration {iteration}, train step {train_step}' in stdout
  assert 'Warm-up:' not in stdout
  assert f'Replay holds {episodes * WINDOWS_PER_EPISODE} windows: warm-up skipped.' in stdout
  summary = json.loads((root / 'run_summary.json').read_text())
  assert summary['iterations'] == iteration + 2
  assert summary['train_steps'] == train_step + 4
  assert summary['episodes'] == episodes + 2
  assert summary['replay_windows'] == (episodes + 2) * WINDOWS_PER_EPISODE


def test_sigterm_checkpoints_then_exits(tmp_path):
  root = tmp_path / 'run'
  proc = start(root, 'train_eval.num_iterations=100', 'train_eval.checkpoint_interval=50',
               'train_eval.eval_interval=0')
  wait_for_line(proc, r'^iter 2/100')
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=120)
  assert proc.returncode == 0
  assert 'SIGTERM received' in out and re.search(r'stopped_by +SIGTERM', out)
  prefix = tf.train.latest_checkpoint(str(root / 'train' / 'checkpoints'))
  assert int(checkpoint_value(prefix, 'iteration')) >= 2


def test_truncated_newest_checkpoint_falls_back_and_config_change_is_reported(tmp_path):
  root = tmp_path / 'run'
  run(root, 'train_eval.num_iterations=2', 'train_eval.checkpoint_interval=1')
  directory = root / 'train' / 'checkpoints'
  newest = tf.train.latest_checkpoint(str(directory))
  data = newest + '.data-00000-of-00001'
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)

  stdout = run(root, 'train_eval.num_iterations=3', 'train_eval.checkpoint_interval=1')
  assert f'checkpoint {newest} cannot be restored' in stdout
  assert 'Resumed' in stdout and 'ckpt-2' in stdout and 'iteration 1' in stdout
  assert '- train_eval.num_iterations = 2' in stdout
  assert '+ train_eval.num_iterations = 3' in stdout


def test_unreadable_checkpoints_never_restart_from_scratch(tmp_path):
  root = tmp_path / 'run'
  run(root, 'train_eval.num_iterations=1')
  for name in os.listdir(root / 'train' / 'checkpoints'):
    if '.data-' in name:
      with open(root / 'train' / 'checkpoints' / name, 'r+b') as f:
        f.truncate(10)
  result = subprocess.run(command(root, 'train_eval.num_iterations=2'), capture_output=True,
                          text=True, timeout=300, cwd=REPO)
  assert result.returncode != 0
  assert 'holds checkpoints but none can be restored' in result.stderr
  assert not (root / 'train' / 'checkpoints' / 'ckpt-4.index').exists()


@pytest.fixture(scope='module')
def world_model_run(tmp_path_factory):
  """A world-model-only run: random-policy data, SAC untouched."""
  root = tmp_path_factory.mktemp('wm_only')
  stdout = run(root, 'train_eval.num_iterations=2', 'train_eval.world_model_only=True')
  return root, stdout


def build_agent(root, seed, *params):
  gin_files.parse([os.path.join(str(root), 'operative_config.gin')], list(params))
  try:
    tf.keras.utils.set_random_seed(seed)  # Python, NumPy and TF (Keras initialisers)
    time_step_spec, action_spec = experiment_lib.load_specs(str(root))
    return latent_sac_agent.LatentSacAgent(time_step_spec, action_spec)
  finally:
    gin.clear_config()


def test_world_model_only_run_trains_the_model_not_sac_and_writes_its_checkpoint(
    world_model_run):
  root, _ = world_model_run
  prefix = tf.train.latest_checkpoint(str(root / 'world_model'))
  assert prefix and prefix.endswith('ckpt-4')
  # Run checkpoints after 2 and 4 train steps: the model moved, SAC did not.
  first = tf.train.load_checkpoint(str(root / 'train' / 'checkpoints' / 'ckpt-2'))
  last = tf.train.load_checkpoint(str(root / 'train' / 'checkpoints' / 'ckpt-4'))
  keys = [k for k in first.get_variable_to_shape_map() if k.endswith('VARIABLE_VALUE')]
  sac_keys = [k for k in keys if k.startswith(('agent/_actor_network', 'agent/_sac/_critic',
                                               'agent/_sac/_log_alpha'))]
  model_keys = [k for k in keys if k.startswith('agent/_world_model')]
  assert sac_keys and model_keys
  for key in sac_keys:
    np.testing.assert_array_equal(first.get_tensor(key), last.get_tensor(key), err_msg=key)
  assert any(not np.array_equal(first.get_tensor(k), last.get_tensor(k)) for k in model_keys)


def test_selective_restore_takes_world_model_and_leaves_sac_fresh(world_model_run):
  root, _ = world_model_run
  source = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(root / 'world_model')))
  messages = []
  agent = build_agent(root, seed=7)
  reference = build_agent(root, seed=7)
  checkpoints.restore_world_model(agent.world_model, str(root), log=messages.append)
  assert any('World model restored' in m for m in messages)
  # Every world-model variable now equals the source run's (same keys) ...
  scratch = checkpoints.world_model_checkpoint(agent.world_model).write(
      os.path.join(str(root), 'scratch', 'probe'))
  restored = tf.train.load_checkpoint(scratch)
  keys = [k for k in restored.get_variable_to_shape_map() if k.endswith('VARIABLE_VALUE')]
  assert len(keys) == len(agent.world_model.variables)
  for key in keys:
    np.testing.assert_array_equal(restored.get_tensor(key), source.get_tensor(key), err_msg=key)
  assert not all(np.array_equal(a.numpy(), b.numpy()) for a, b in
                 zip(agent.world_model.variables, reference.world_model.variables))
  # ... and SAC's equal a fresh agent's with the same seed.
  for mine, fresh in zip(agent.sac_variables(), reference.sac_variables()):
    np.testing.assert_array_equal(mine.numpy(), fresh.numpy())


def test_selective_restore_shape_mismatch_names_variable_and_shapes(world_model_run):
  root, _ = world_model_run
  agent = build_agent(root, 0, 'RSSM.deter_size = 24')
  with pytest.raises(checkpoints.WorldModelMismatchError) as error:
    checkpoints.restore_world_model(agent.world_model, str(root))
  message = str(error.value)
  assert 'rssm/_cell/recurrent_kernel: model [24, 72], checkpoint [16, 48]' in message


def test_run_with_world_model_checkpoint_restores_and_can_freeze(world_model_run, tmp_path):
  source, _ = world_model_run
  stdout = run(tmp_path / 'new', 'train_eval.num_iterations=1',
               f'train_eval.world_model_checkpoint="{source}"',
               'train_eval.freeze_world_model=True')
  assert 'World model restored from' in stdout and 'stay freshly initialised' in stdout
  source_values = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(source / 'world_model')))
  new_values = tf.train.load_checkpoint(
      tf.train.latest_checkpoint(str(tmp_path / 'new' / 'world_model')))
  keys = [k for k in source_values.get_variable_to_shape_map()
          if k.startswith('agent/_world_model') and k.endswith('VARIABLE_VALUE')]
  assert keys
  for key in keys:  # frozen: unchanged by the new run's training
    np.testing.assert_array_equal(source_values.get_tensor(key), new_values.get_tensor(key))

"""`train_eval.py --gin_file=carla_sac.gin` end to end, as users run it, against
the CARLA server double (tests/carla_double.py) in the training process.

Only the server is simulated: the adapter, drivers, Reverb, checkpoints and
export are the real ones. Warm-up, training, evaluation on the training env,
export, a kill -9 and the resume are all exercised; at a clean exit the double
reports what the server was left with.
"""
import json
import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
import tensorflow_probability  # noqa: F401  registers the distribution types the SavedModel uses

import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, 'tests')
TINY = tiny_model.BINDINGS + [
    'CarlaEpisode.max_steps = 12', 'CarlaWorld.num_vehicles = 2', 'CarlaServer.timeout_s = 2.0',
    'train_eval.initial_collect_episodes = 1', 'train_eval.train_steps_per_iteration = 2',
    'train_eval.train_steps_per_env_step = None',
    'train_eval.batch_size = 4', 'train_eval.eval_interval = 2',
    'train_eval.checkpoint_interval = 1', 'train_eval.image_summary_interval = 1',
    'train_eval.sample_timeout_s = 20.0']


def command(root, iterations):
  params = TINY + [f'train_eval.num_iterations = {iterations}']
  return ([sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root}',
           '--gin_file=carla_sac.gin'] + [f'--gin_param={p}' for p in params])


def double_env(report):
  return dict(os.environ, PYTHONUNBUFFERED='1',
              PYTHONPATH=os.pathsep.join([os.path.join(TESTS, 'carla_double_path'), TESTS,
                                          os.environ.get('PYTHONPATH', '')]),
              CARLA_DOUBLE_SERVERS='2000', CARLA_DOUBLE_REPORT=str(report))


@pytest.mark.slow
# Three train_eval processes, each allowed 600 s: the test's own limit covers
# them all, so a loaded machine fails on a real hang, not on pytest.ini's 600 s.
@pytest.mark.timeout(1800)
def test_carla_sac_gin_trains_evaluates_exports_and_resumes_after_kill(tmp_path):
  root, report = tmp_path / 'run', tmp_path / 'server.json'
  first = subprocess.run(command(root, 2), capture_output=True, text=True, timeout=600,
                         cwd=REPO, env=double_env(report))
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  summary = json.loads((root / 'run_summary.json').read_text())
  assert summary['iterations'] == 2 and summary['train_steps'] == 4
  # carla_sac.gin's warm-up is CARLA's own autopilot (the Traffic Manager).
  assert 'Warm-up: expert (autopilot) 1 episodes' in first.stdout, first.stdout[-3000:]
  # Warm-up + one episode per iteration; evaluation ran on the same env and
  # added nothing to the training counters.
  assert summary['episodes'] == 3 and summary['last_eval_return'] is not None
  assert len((root / 'eval_returns.csv').read_text().splitlines()) == 2
  server = json.loads(report.read_text())['2000']
  assert server == dict(server, adapter_actors=0, synchronous_mode=False,
                        fixed_delta_seconds=None, ticking_clients=1)
  loaded = tf.saved_model.load(str(root / 'policies' / 'greedy_policy'))
  names = {s.name for s in loaded.signatures['action'].structured_input_signature[1].values()}
  # The policy takes what driving.gin encodes (the ego state included), never the decode-only mask.
  assert all(any(n.endswith(k) for n in names) for k in ('camera', 'lidar', 'state', 'route'))
  assert not any('birdeye' in n for n in names)

  # A longer run of the same root, killed (-9) once its third iteration is
  # checkpointed; the rerun resumes there without a new warm-up.
  longer = subprocess.Popen(command(root, 5), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env=double_env(tmp_path / 'killed.json'))
  lines = []
  for line in longer.stdout:
    lines.append(line)
    if 'iter 3/5' in line:
      longer.send_signal(signal.SIGKILL)
      break
  longer.wait(timeout=60)
  assert longer.returncode == -signal.SIGKILL, ''.join(lines[-40:])
  resumed = subprocess.run(command(root, 5), capture_output=True, text=True, timeout=600,
                           cwd=REPO, env=double_env(report))
  assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
  assert 'iteration 3' in resumed.stdout and 'warm-up skipped' in resumed.stdout
  assert json.loads((root / 'run_summary.json').read_text())['iterations'] == 5
  assert json.loads(report.read_text())['2000']['adapter_actors'] == 0

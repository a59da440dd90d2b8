"""Env steps per second into a standalone Reverb server with 1, 2 and 4 collectors.

Each collector process (`python -m planet_tfa.programs.collect`) steps a
`TickEnv` whose step sleeps `--step_s` (default 50 ms: a 20 Hz simulator
tick), so N collectors can at best deliver N / step_s steps per second. One
JSON line per collector count:

  collectors              N
  ideal_steps_per_s       N / step_s
  env_steps_per_s         what the collectors report (sum of per-collector rates
                          between their first and last episode in the window)
  server_steps_per_s      table growth on the server, in env steps/s (windows/s
                          converted with the fixed episode length)
  server_windows_per_s    table growth in items/s
  efficiency              server_steps_per_s / ideal_steps_per_s

  python -m bench.collectors_bench [--collectors 1,2,4] [--measure_s 60] \
      [--policy latent|random] [--model tiny|full] [--image_size 64]

`--policy latent` publishes freshly initialised policy variables first, so
the collectors run the real RSSM filter + actor on every step (as they do
once a learner publishes); `random` measures the env and the writes alone.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import gin
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPISODE_LINE = re.compile(r'\[collector (\d+)\] episode=(\d+) .* total_env_steps=(\d+)')


class TickEnv(py_environment.PyEnvironment):
  """A simulator stand-in: every step sleeps `step_s`, episodes last `episode_steps`.

  Observations are 64x64 RGB frames (like dm_control from pixels) so the
  writes and the policy's encoder see a realistic payload.
  """

  def __init__(self, step_s=0.05, episode_steps=40, image_size=64, seed=None):
    super().__init__()
    self._step_s = step_s
    self._episode_steps = episode_steps
    self._rng = np.random.default_rng(seed)
    self._t = 0
    self._observation_spec = {
        'pixels': array_spec.ArraySpec((image_size, image_size, 3), np.uint8, 'pixels')}
    self._action_spec = array_spec.BoundedArraySpec((1,), np.float32, -1.0, 1.0, 'action')

  def observation_spec(self):
    return self._observation_spec

  def action_spec(self):
    return self._action_spec

  def _frame(self):
    shape = self._observation_spec['pixels'].shape
    return {'pixels': self._rng.integers(0, 256, shape, dtype=np.uint8)}

  def _reset(self):
    self._t = 0
    return ts.restart(self._frame())

  def _step(self, action):
    if self._current_time_step is None or self._current_time_step.is_last():
      return self.reset()
    time.sleep(self._step_s)
    self._t += 1
    reward = np.float32(-abs(float(np.asarray(action).reshape(-1)[0])))
    if self._t >= self._episode_steps:
      return ts.termination(self._frame(), reward)
    return ts.transition(self._frame(), reward)


@gin.configurable
def tick_env(seed=None, step_s=0.05, episode_steps=40, image_size=64):
  return TickEnv(step_s, episode_steps, image_size, seed)


def write_gin(path, args):
  """The shared config: gin imports this module (by its package name) for the env."""
  lines = ["import bench.collectors_bench", "include 'dmc_cartpole_swingup.gin'"]
  if args.model == 'tiny':
    lines.append("include 'tiny.gin'")
  lines += [
      'Experiment.env_loader = @bench.collectors_bench.tick_env',
      f'bench.collectors_bench.tick_env.step_s = {args.step_s}',
      f'bench.collectors_bench.tick_env.episode_steps = {args.episode_steps}',
      f'bench.collectors_bench.tick_env.image_size = {args.image_size}',
  ]
  with open(path, 'w') as f:
    f.write('\n'.join(lines) + '\n')


class Process:
  """A child process whose output lines are kept with their arrival times."""

  def __init__(self, args):
    env = dict(os.environ, PYTHONUNBUFFERED='1', TF_CPP_MIN_LOG_LEVEL='2',
               PYTHONPATH=os.pathsep.join([REPO, os.environ.get('PYTHONPATH', '')]))
    self.proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    self.lines = []
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in self.proc.stdout:
      self.lines.append((time.time(), line.rstrip('\n')))

  def wait_for(self, text, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
      if any(text in line for _, line in self.lines):
        return
      if self.proc.poll() is not None:
        break
      time.sleep(0.2)
    tail = '\n'.join(line for _, line in self.lines[-30:])
    raise RuntimeError(f'{text!r} not seen within {timeout}s:\n{tail}')

  def episodes(self):
    """[(time, total env steps)] of every logged episode."""
    return [(t, int(m[3])) for t, m in ((t, EPISODE_LINE.search(l)) for t, l in self.lines)
            if m]

  def kill(self):
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGKILL)
      self.proc.wait()


def publish_initial_variables(address):
  """Pushes a fresh agent's collect-policy variables, so collectors run the real policy."""
  from tf_agents.specs import tensor_spec  # pylint: disable=g-import-not-at-top
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  from planet_tfa.replay import variables  # pylint: disable=g-import-not-at-top
  env = experiment_lib.Experiment().env_loader(seed=0)
  agent = experiment_lib.make_agent(tensor_spec.from_spec(env.time_step_spec()),
                                    tensor_spec.from_spec(env.action_spec()))
  train_step = agent.train_step_counter
  client = tables.wait_for_server(address, deadline_s=60)
  variables.PolicyVariables(address, agent.collect_policy, train_step, client=client).publish()


def slope(points):
  """Least-squares rate of (time, value) points."""
  if len(points) < 2:
    return 0.0
  t, v = np.array(points, dtype=np.float64).T
  return float(np.polyfit(t - t[0], v, 1)[0])


def measure(num_collectors, args, gin_path, work_dir):
  import portpicker  # pylint: disable=g-import-not-at-top
  import reverb  # pylint: disable=g-import-not-at-top
  root = os.path.join(work_dir, f'n{num_collectors}')
  port = portpicker.pick_unused_port()
  address = f'localhost:{port}'
  server = Process(['-m', 'planet_tfa.programs.serve', f'--root_dir={root}',
                    f'--port={port}', '--replay_checkpoint_interval_s=0',
                    f'--gin_file={gin_path}'])
  collectors = []
  try:
    server.wait_for('ready on port', args.start_timeout_s)
    if args.policy == 'latent':
      publish_initial_variables(address)
    collectors = [Process(['-m', 'planet_tfa.programs.collect', f'--replay_server={address}',
                           f'--collector_id={k}', f'--root_dir={root}',
                           f'--gin_file={gin_path}']) for k in range(num_collectors)]
    for collector in collectors:  # every one has traced its policy and written once
      collector.wait_for('episode=1 ', args.start_timeout_s)
    client = reverb.Client(address)
    sizes = []
    start = time.time()
    while time.time() - start < args.measure_s:
      sizes.append((time.time(), client.server_info()['experience'].current_size))
      time.sleep(0.5)
    end = time.time()
  finally:
    for process in [*collectors, server]:
      process.kill()
  env_rate = 0.0
  for collector in collectors:
    in_window = [(t, s) for t, s in collector.episodes() if start <= t <= end]
    if len(in_window) >= 2:
      env_rate += (in_window[-1][1] - in_window[0][1]) / (in_window[-1][0] - in_window[0][0])
  windows_per_s = slope(sizes)
  # An episode of n steps has n + 1 time steps and gives n + 2 - L windows.
  windows_per_episode = args.episode_steps + 2 - args.sequence_length
  server_steps = windows_per_s * args.episode_steps / windows_per_episode
  ideal = num_collectors / args.step_s
  return {
      'bench': 'collectors', 'collectors': num_collectors, 'policy': args.policy,
      'model': args.model, 'step_s': args.step_s, 'image_size': args.image_size,
      'measure_s': round(end - start, 1),
      'ideal_steps_per_s': round(ideal, 2),
      'env_steps_per_s': round(env_rate, 2),
      'server_steps_per_s': round(server_steps, 2),
      'server_windows_per_s': round(windows_per_s, 2),
      'efficiency': round(server_steps / ideal, 3),
      'cores': len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else None,
  }


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--collectors', default='1,2,4')
  parser.add_argument('--measure_s', type=float, default=60.0)
  parser.add_argument('--step_s', type=float, default=0.05)
  parser.add_argument('--episode_steps', type=int, default=40)
  parser.add_argument('--image_size', type=int, default=64)
  parser.add_argument('--sequence_length', type=int, default=9,
                      help='must match Experiment.sequence_length of the config')
  parser.add_argument('--policy', choices=['latent', 'random'], default='latent')
  parser.add_argument('--model', choices=['tiny', 'full'], default='full')
  parser.add_argument('--start_timeout_s', type=float, default=300.0)
  return parser.parse_args(argv)


def main():
  args = parse_args()

  work_dir = tempfile.mkdtemp(prefix='collectors_bench_')
  try:
    gin_path = os.path.join(work_dir, 'bench.gin')
    write_gin(gin_path, args)
    if args.policy == 'latent':
      from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
      gin_files.parse([gin_path])
    for n in [int(x) for x in args.collectors.split(',')]:
      print(json.dumps(measure(n, args, gin_path, work_dir)), flush=True)
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == '__main__':
  main()

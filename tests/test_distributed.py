"""Many collectors on a standalone Reverb server: real processes on localhost.

One server, two collectors and one learner run as separate processes on a
CountingEnv whose episode ids start at seed * 1000, so every stored window
says which collector (and which launch of it) wrote it:
  collector K, launch L -> seed 1000 * (K + 1) + L -> ids (K + 1) * 1e6 + L * 1000 + n.
The learner's eval env (seed 1) has ids 1000 + n; those must never be stored.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import gin
import numpy as np
import pytest
from tf_agents.specs import array_spec

from counting_env import CountingEnv
import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, 'tests')
pytestmark = pytest.mark.slow  # every test runs the server, collectors and learner as processes
GIN = tiny_model.DMC_FLAGS + [f'--gin_file={os.path.join(TESTS, "distributed_counting.gin")}']
EPISODE_LENGTH = 30  # distributed_counting.gin
EPISODE_LINE = re.compile(
    r'\[collector (\d+)\] episode=(\d+) policy=(\w+) policy_version=(\w+) ')
TRAIN_STEP = re.compile(r'^iter (\d+)/\d+ \| train step (\d+)')
PROGRESS = re.compile(r'^iter \d+/\d+ \| train step (\d+) \| env steps (\d+) ')
COLLECTORS_WARMUP = re.compile(r'^Warm-up by the collectors: (\d+) episodes, (\d+) env steps')
RATIO = 0.1  # distributed_counting.gin: train steps per env step


class _SlowCountingEnv(CountingEnv):
  """CountingEnv whose steps take `step_sleep_s` (a simulator tick).

  The world model sees only 'sensor' (small values; distributed_counting.gin
  sets the encoder keys): the ids in 'state' are bookkeeping for the tests.
  """

  def __init__(self, step_sleep_s, **kwargs):
    super().__init__(**kwargs)
    self._sleep = step_sleep_s
    self._observation_spec['sensor'] = array_spec.ArraySpec((2,), np.float32, 'sensor')

  def _observation(self, previous_action):
    observation = super()._observation(previous_action)
    observation['sensor'] = np.array([self._t / 30.0, previous_action], np.float32)
    return observation

  def _step(self, action):
    if self._sleep:
      time.sleep(self._sleep)
    time_step = super()._step(action)
    return time_step._replace(reward=np.float32(time_step.reward / 30.0))


@gin.configurable
def counting_env_loader(seed=None, episode_length=30, step_sleep_s=0.0):
  """Episode ids start at seed * 1000 (see the module doc)."""
  return _SlowCountingEnv(step_sleep_s, episode_lengths=(episode_length,),
                          first_episode_id=(seed or 0) * 1000)


class Role:
  """A process whose output lines are collected by a thread as they come."""

  def __init__(self, name, args):
    self.name = name
    env = dict(os.environ, PYTHONUNBUFFERED='1', TF_CPP_MIN_LOG_LEVEL='2',
               PYTHONPATH=os.pathsep.join([TESTS, REPO, os.environ.get('PYTHONPATH', '')]),
               CUDA_VISIBLE_DEVICES='')
    self.proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, bufsize=1)
    self.lines = []
    self._thread = threading.Thread(target=self._read, daemon=True)
    self._thread.start()

  def _read(self):
    for line in self.proc.stdout:
      self.lines.append(line.rstrip('\n'))

  def output(self, last=60):
    return f'--- {self.name} (rc {self.proc.poll()}) ---\n' + '\n'.join(self.lines[-last:])

  def matches(self, pattern, start=0):
    return [m for m in (pattern.search(line) for line in self.lines[start:]) if m]

  def wait_for(self, condition, timeout, what, others=()):
    """Polls `condition()` until truthy; on timeout or exit fails with the logs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
      value = condition()
      if value:
        return value
      if self.proc.poll() is not None:
        time.sleep(0.5)  # let the reader thread drain the pipe
        value = condition()
        if value:
          return value
        break
      time.sleep(0.2)
    logs = '\n'.join(r.output() for r in (self, *others))
    pytest.fail(f'{self.name}: {what} not seen within {timeout}s\n{logs}')

  def stop(self, sig=signal.SIGTERM, grace=20):
    if self.proc.poll() is None:
      self.proc.send_signal(sig)
      try:
        self.proc.wait(grace)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()


def collector_args(address, k, root, deadline_s=180):
  return ['-m', 'planet_tfa.programs.collect', f'--replay_server={address}',
          f'--collector_id={k}', f'--root_dir={root}', f'--server_deadline_s={deadline_s}',
          *GIN]


def episodes(role):
  """[(collector, episode, policy, version or None)] from a collector's log."""
  return [(int(m[1]), int(m[2]), m[3], None if m[4] == 'none' else int(m[4]))
          for m in role.matches(EPISODE_LINE)]


def train_steps(learner):
  return [int(m[2]) for m in learner.matches(TRAIN_STEP)]


def read_table(address, samples_per_item=20):
  """Every window in the table, as {episode id: set of valid step indices} and
  {episode id: whether its LAST step is stored}. Uniform sampling of
  `samples_per_item` x the table size misses a given window with probability
  e^-samples_per_item."""
  import reverb  # pylint: disable=g-import-not-at-top
  size = reverb.Client(address).server_info()['experience'].current_size
  assert size > 0
  dataset = reverb.TrajectoryDataset.from_table_signature(
      address, 'experience', max_in_flight_samples_per_worker=256,
      rate_limiter_timeout_ms=10_000).batch(size * samples_per_item)
  sample = next(iter(dataset))
  state = sample.data.observation['state'].numpy()      # [N, T, 3]
  step_type = sample.data.step_type.numpy()             # [N, T]
  steps, has_last = {}, {}
  for row in range(state.shape[0]):
    for t in range(state.shape[1]):
      episode_id, index = int(state[row, t, 0]), int(state[row, t, 1])
      steps.setdefault(episode_id, set()).add(index)
      if step_type[row, t] == 2:  # LAST: the steps after it are padding
        has_last[episode_id] = True
        break
    has_last.setdefault(int(state[row, 0, 0]), False)
  return steps, has_last


def source(episode_id):
  """(collector K, launch L) of an episode id (module doc)."""
  return episode_id // 1_000_000 - 1, (episode_id % 1_000_000) // 1000


# ---------------------------------------------------------------------------

def test_unreachable_server_fails_after_deadline_naming_the_address(tmp_path):
  import portpicker  # pylint: disable=g-import-not-at-top
  address = f'localhost:{portpicker.pick_unused_port()}'
  start = time.time()
  learner = Role('learner', ['train_eval.py', f'--root_dir={tmp_path / "learner"}', *GIN,
                             f'--replay_server={address}',
                             '--gin_param=train_eval.server_deadline_s=3'])
  collector = Role('collector', collector_args(address, 0, tmp_path / 'c', deadline_s=3))
  for role in (learner, collector):
    role.proc.wait(180)
    role._thread.join(5)  # pylint: disable=protected-access
    text = '\n'.join(role.lines)
    assert role.proc.returncode == 1, role.output()
    assert 'error: ' in text and address in text and 'within 3s' in text, role.output()
    assert 'planet_tfa.programs.serve' in text, role.output()  # says how to fix it
  assert time.time() - start >= 3
  # It failed before building anything: no checkpoints, no summaries.
  assert not (tmp_path / 'learner' / 'train').exists()


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
  import portpicker  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('distributed')
  port = portpicker.pick_unused_port()
  address = f'localhost:{port}'
  server = Role('server', ['-m', 'planet_tfa.programs.serve', f'--root_dir={root}',
                           f'--port={port}', '--replay_checkpoint_interval_s=0', *GIN])
  collectors = [Role(f'collector {k}', collector_args(address, k, root)) for k in (0, 1)]
  learner = Role('learner', ['train_eval.py', f'--root_dir={root}', *GIN,
                             f'--replay_server={address}',
                             '--gin_param=train_eval.num_iterations=100000',
                             '--gin_param=train_eval.server_deadline_s=180'])
  roles = {'server': server, 'collectors': collectors, 'learner': learner,
           'address': address, 'root': root}
  yield roles
  for role in [learner, *roles['collectors']]:
    role.stop(signal.SIGKILL)
  server.stop(signal.SIGTERM, grace=60)


def test_two_collectors_feed_a_learner_whose_policy_they_follow(cluster):
  server, learner = cluster['server'], cluster['learner']
  collectors = cluster['collectors']
  everyone = (server, *collectors)
  server.wait_for(lambda: any('ready on port' in l for l in server.lines), 180,
                  'server ready')
  assert any('NO authentication' in l for l in server.lines), server.output()
  learner.wait_for(lambda: len(train_steps(learner)) >= 4, 240, '4 learner iterations',
                   everyone)
  steps = train_steps(learner)
  assert steps == sorted(steps) and steps[0] > 0 and steps[-1] > steps[0]
  # Each collector switches from random actions to the learner's published
  # policy and keeps pulling newer versions of it.
  target = steps[1]
  def follows(collector):
    versions = {e[3] for e in episodes(collector) if e[3] is not None}
    return len(versions) >= 2 and max(versions) >= target
  for collector in collectors:
    collector.wait_for(lambda c=collector: follows(c), 120,
                       f'two policy versions, one >= {target}', (learner,))
  logs = [episodes(c) for c in collectors]
  newest = max(e[3] for log in logs for e in log if e[3] is not None)
  # The learner publishes, then prints the step: wait for the print.
  learner.wait_for(lambda: max(train_steps(learner)) >= newest, 60,
                   f'the learner printing train step {newest}')
  published = set(train_steps(learner))
  # Before the learner's first publish there was only random data to learn from.
  assert any(log[0][2] == 'random' for log in logs), logs
  for k, (collector, log) in enumerate(zip(collectors, logs)):
    assert {e[0] for e in log} == {k}
    # Random only until the first publish, the published policy from then on.
    policies = [e[2] for e in log]
    assert policies == sorted(policies, key=['random', 'collect'].index), policies
    assert all((e[2] == 'random') == (e[3] is None) for e in log)
    versions = [e[3] for e in log if e[3] is not None]
    assert versions == sorted(versions), f'policy version went back: {versions}'
    assert set(versions) <= published, (versions, sorted(published))
    assert len(set(versions)) >= 2, f'collector {k} never saw a newer policy: {versions}'
  # The table holds windows of both collectors and nothing else (the learner
  # neither warms up nor collects; its eval episodes are never stored).
  stored, _ = read_table(cluster['address'])
  writers = {source(i)[0] for i in stored}
  assert writers == {0, 1}, sorted(stored)[:20]
  # The data ratio per env step holds on the collectors' reported steps: what
  # they wrote before the first train step was the warm-up, every episode
  # since earned 3 train steps (30 steps x 0.1), fractions carried over.
  (_, warmup_steps), = [(int(m[1]), int(m[2])) for m in learner.matches(COLLECTORS_WARMUP)]
  progress = [(int(m[1]), int(m[2])) for m in learner.matches(PROGRESS)]
  assert len(progress) >= 4 and all(e % EPISODE_LENGTH == 0 for _, e in progress), progress
  for train_step, env_steps in progress:
    assert abs(train_step - RATIO * (env_steps - warmup_steps)) < 1, (progress, warmup_steps)
  # Evaluation ran in the learner on its own env.
  assert any('eval return' in l for l in learner.lines), learner.output()


def test_killed_collector_leaves_no_partial_episode_and_a_restart_writes_again(cluster):
  learner, address = cluster['learner'], cluster['address']
  victim = cluster['collectors'][1]
  learner.wait_for(lambda: train_steps(learner), 240, 'a learner iteration',
                   (cluster['server'], victim))
  # Kill it about half-way through an episode (an episode takes ~1.2 s).
  seen = len(episodes(victim))
  victim.wait_for(lambda: len(episodes(victim)) > seen, 120, 'a new episode')
  time.sleep(0.6)
  victim.proc.send_signal(signal.SIGKILL)
  victim.proc.wait(10)
  time.sleep(0.5)
  seed = int(re.search(r'seed=(\d+)', '\n'.join(victim.lines))[1])
  killed_episode = seed * 1000 + len(episodes(victim))  # the one in progress
  step_at_kill = max(train_steps(learner))

  # The learner keeps training on what is there.
  learner.wait_for(lambda: max(train_steps(learner)) >= step_at_kill + 4, 120,
                   'train steps after the kill')

  # A restarted collector 1 (its second launch: new seed, new episode ids)
  # acts with the learner's policy at once and writes again.
  restarted = Role('collector 1 (restarted)', collector_args(address, 1, cluster['root']))
  cluster['collectors'].append(restarted)
  restarted.wait_for(lambda: episodes(restarted), 180, 'a first episode', (learner,))
  first = episodes(restarted)[0]
  assert first[2] == 'collect' and first[3] is not None, restarted.output()
  assert f'seed={seed + 1}' in '\n'.join(restarted.lines)

  # Stop the live collectors the graceful way (they finish their episode), so
  # no episode is being written while the table is read.
  for role in cluster['collectors']:
    if role is not victim:
      role.stop(signal.SIGTERM, grace=60)
  stored, has_last = read_table(address)
  assert killed_episode not in stored, (
      f'windows of the episode collector 1 was killed in ({killed_episode}) are stored')
  # Every stored episode is complete: all its steps, through LAST.
  for episode_id, indices in stored.items():
    assert has_last[episode_id], f'episode {episode_id} has no LAST step stored'
    assert indices == set(range(EPISODE_LENGTH + 1)), (episode_id, sorted(indices))
  launches = {source(i) for i in stored}
  assert (1, 1) in launches, sorted(launches)   # the restarted collector's data
  assert (1, 0) in launches and (0, 0) in launches

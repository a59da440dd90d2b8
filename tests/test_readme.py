"""Every command of the README's shell blocks names things that exist, and the
train_eval commands pass the run's settings checks as written (ROOT and FILE
placeholders filled in)."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_commands():
  with open(os.path.join(REPO, 'README.md')) as f:
    text = f.read()
  commands = []
  for block in re.findall(r'```sh\n(.*?)```', text, re.S):
    for line in block.splitlines():
      line = line.split('#', 1)[0].strip()
      if line:
        commands.append(line)
  return commands


def makefile_targets():
  with open(os.path.join(REPO, 'Makefile')) as f:
    return set(re.findall(r'^([\w-]+):', f.read(), re.M))


PROGRAMS = {'train_eval.py': 'planet_tfa.programs.train',
            'planet_tfa.programs.serve': 'planet_tfa.programs.serve',
            'planet_tfa.programs.collect': 'planet_tfa.programs.collect'}


def test_the_readme_has_the_two_commands_and_the_recipes():
  commands = readme_commands()
  assert commands[:2] == ['make train', 'make test']
  assert any('--gin_file=carla_sac.gin' in c for c in commands)
  assert any('--replay_server=localhost:9000' in c for c in commands)


@pytest.mark.parametrize('command', readme_commands())
def test_each_readme_command_names_what_exists(command):
  words = shlex.split(command)
  if words[0] == 'make':
    assert set(words[1:]) <= makefile_targets(), command
    return
  if words[0].startswith('./CarlaUE4.sh'):
    return  # the simulator's own launcher, not part of this project
  assert words[0] == 'python', command
  program = words[2] if words[1] == '-m' else words[1]
  assert program in PROGRAMS, command
  source_path = os.path.join(REPO, *PROGRAMS[program].split('.')) + '.py'
  with open(source_path) as f:
    defined = set(re.findall(r"DEFINE_\w+\(\s*'(\w+)'", f.read()))
  for word in words[2:]:
    if word.startswith('--'):
      name = word[2:].split('=', 1)[0]
      assert name in defined, f'{command}: {program} has no flag --{name}'
    if word.startswith('--gin_file=') and word != '--gin_file=FILE':
      assert os.path.exists(os.path.join(REPO, 'gin', word.split('=', 1)[1])), command


def assert_stops_at_the_settings_checks(words):
  """Runs train_eval `words` (after `python`) stopped right after the settings checks by an
  invalid budget of our own: any other error (a wrong gin file or binding) fails first."""
  result = subprocess.run(
      [sys.executable] + words[1:] + ['--gin_param=train_eval.time_budget_s=-1'],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PYTHONPATH=os.path.join(REPO, 'tests', 'carla_double_path')))
  assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'train_eval.time_budget_s=-1' in result.stderr, result.stderr[-2000:]


@pytest.mark.slow  # train_eval in other processes
@pytest.mark.parametrize('command', [c for c in readme_commands()
                                     if c.startswith('python train_eval.py')
                                     and '--replay_server' not in c])
def test_readme_train_commands_pass_the_settings_checks_as_written(command, tmp_path):
  # As written, but stopped right after the settings checks with an invalid
  # budget of our own: any other error (a wrong gin file or binding) fails first.
  words = shlex.split(command.replace('runs/', f'{tmp_path}/'))
  assert_stops_at_the_settings_checks(words)


def many_collectors_recipe():
  """The README's server, collector and learner commands, in order."""
  commands = [c for c in readme_commands() if '--replay_server' in c or 'programs.serve' in c]
  assert [shlex.split(c)[:3] for c in commands] == [
      ['python', '-m', 'planet_tfa.programs.serve'],
      ['python', '-m', 'planet_tfa.programs.collect'],
      ['python', 'train_eval.py', '--root_dir=ROOT']], commands
  return commands


# Every gin file a run starts from (the others are overlays included after one).
RUN_GIN_FILES = ['dmc_cartpole_swingup.gin', 'dmc_cheetah_run.gin', 'dmc_walker_walk.gin',
                 'dmc_ball_in_cup_catch.gin', 'highway_sac.gin', 'highway_fast.gin',
                 'highway_drive.gin', 'carla_sac.gin']


@pytest.mark.slow  # one train_eval process per gin file
@pytest.mark.parametrize('gin_file', RUN_GIN_FILES)
def test_the_readme_learner_of_many_collectors_passes_the_settings_checks(gin_file, tmp_path):
  # The same gin file as a single-process run: the data ratio per env step
  # counts the collectors' steps, so nothing in it must change.
  command = many_collectors_recipe()[2]
  words = shlex.split(command.replace('ROOT', str(tmp_path / 'run')).replace('FILE', gin_file))
  assert_stops_at_the_settings_checks(words)


def _wait_for(predicate, proc, timeout_s, what):
  deadline = time.time() + timeout_s
  while time.time() < deadline:
    if predicate():
      return
    if proc.poll() is not None:
      break
    time.sleep(0.5)
  pytest.fail(f'{what}: not seen within {timeout_s}s (rc {proc.poll()})')


@pytest.mark.slow  # a server, a collector and a learner, as processes
def test_the_readme_many_collectors_recipe_trains_as_written(tmp_path):
  # The three commands as written, with ROOT and FILE filled in and one change:
  # a free port for 9000 (a CI machine may use it). The tiny model and two
  # iterations are extra flags after them.
  import portpicker  # pylint: disable=g-import-not-at-top
  port = portpicker.pick_unused_port()
  root = tmp_path / 'run'
  extra = ['--gin_file=tiny.gin', '--gin_param=train_eval.num_iterations=2']
  procs, logs = [], []
  for k, command in enumerate(many_collectors_recipe()):
    words = shlex.split(command.replace('ROOT', str(root))
                        .replace('FILE', 'dmc_cartpole_swingup.gin')
                        .replace('9000', str(port)))
    log = open(tmp_path / f'process_{k}.log', 'w')  # pylint: disable=consider-using-with
    logs.append(log)
    procs.append(subprocess.Popen([sys.executable] + words[1:] + extra, cwd=REPO,
                                  stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, PYTHONUNBUFFERED='1')))
    if k == 0:
      _wait_for(lambda: 'ready on port' in (tmp_path / 'process_0.log').read_text(),
                procs[0], 180, 'the server ready')
  server, collector, learner = procs
  try:
    assert learner.wait(timeout=600) == 0, (tmp_path / 'process_2.log').read_text()[-3000:]
  finally:
    for proc in (collector, server):
      proc.send_signal(signal.SIGTERM)
      try:
        proc.wait(60)
      except subprocess.TimeoutExpired:
        proc.kill()
    for log in logs:
      log.close()
  summary = json.loads((root / 'run_summary.json').read_text())
  assert summary['iterations'] == 2 and summary['stopped_by'] == 'num_iterations'
  # Trained per env step on what the collector reported: 0.0125 x 8 x 20
  # = 2 train steps per 20-step episode after its warm-up episodes.
  learner_log = (tmp_path / 'process_2.log').read_text()
  warmup = int(re.search(r'Warm-up by the collectors: \d+ episodes, (\d+) env steps',
                         learner_log)[1])
  assert summary['env_steps'] > warmup and summary['train_steps'] > 0
  assert abs(summary['train_steps'] - 0.1 * (summary['env_steps'] - warmup)) < 1

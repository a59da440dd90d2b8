"""Every command of the README's shell blocks names things that exist, and the
train_eval commands pass the run's settings checks as written (ROOT and FILE
placeholders filled in)."""
import os
import re
import shlex
import subprocess
import sys

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


@pytest.mark.slow  # train_eval in other processes
@pytest.mark.parametrize('command', [c for c in readme_commands()
                                     if c.startswith('python train_eval.py')
                                     and '--replay_server' not in c])
def test_readme_train_commands_pass_the_settings_checks_as_written(command, tmp_path):
  # As written, but stopped right after the settings checks with an invalid
  # budget of our own: any other error (a wrong gin file or binding) fails first.
  words = shlex.split(command.replace('runs/', f'{tmp_path}/'))
  result = subprocess.run(
      [sys.executable] + words[1:] + ['--gin_param=train_eval.time_budget_s=-1'],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PYTHONPATH=os.path.join(REPO, 'tests', 'carla_double_path')))
  assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'train_eval.time_budget_s=-1' in result.stderr, result.stderr[-2000:]

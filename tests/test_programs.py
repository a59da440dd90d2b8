"""The programs: importable side by side, and the old commands name the new ones."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_all_programs_import_in_one_process_without_flag_clashes():
  # Tests and bench import several programs (e.g. export's loader) at once;
  # flags are defined only when a program runs.
  from planet_tfa.programs import collect, export, serve, train  # pylint: disable=g-import-not-at-top,unused-import
  from absl import flags  # pylint: disable=g-import-not-at-top
  assert 'replay_server' not in flags.FLAGS


@pytest.mark.parametrize('old, new', [
    ('planet_tfa.drivers.reverb_server', 'planet_tfa.programs.serve'),
    ('planet_tfa.drivers.collect', 'planet_tfa.programs.collect'),
    ('planet_tfa.export', 'planet_tfa.programs.export'),
])
def test_old_commands_exit_naming_the_new_command(old, new):
  result = subprocess.run([sys.executable, '-m', old, '--root_dir=/nonexistent'],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
  assert result.returncode == 2
  assert f'python -m {new}' in result.stderr and 'Traceback' not in result.stderr
  with pytest.raises(ImportError, match=new):
    __import__(old)


def test_programs_show_their_flags():
  result = subprocess.run([sys.executable, '-m', 'planet_tfa.programs.serve', '--helpfull'],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
  assert 'Traceback' not in result.stderr  # absl's help exits 1 by design
  assert '--port' in result.stdout and '--replay_checkpoint_interval_s' in result.stdout

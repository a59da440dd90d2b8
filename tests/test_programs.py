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


# ---- what run_program reports without a traceback ---------------------------

def _exit_of(main_fn, capsys, **kwargs):
  """(exit code, console stderr) of `cli.run_program(main_fn)`."""
  from planet_tfa.programs import cli  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit) as exited:
    cli.run_program(main_fn, **kwargs)
  return exited.value.code, capsys.readouterr().err


def test_the_agents_nan_check_is_reported_without_a_traceback(capsys):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import latent_sac_agent  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import train  # pylint: disable=g-import-not-at-top

  def nan_loss():  # the agent's check, as _model_update writes it
    tf.debugging.check_numerics(tf.constant(np.nan),
                                f'{latent_sac_agent.NON_FINITE_LOSS} (lower the rate)')

  code, err = _exit_of(nan_loss, capsys, user_errors=train.USER_ERRORS)
  assert code == 1
  assert err.startswith('error: InvalidArgumentError: ') and 'world-model loss is NaN or inf' in err
  assert 'Traceback' not in err


def test_any_other_invalid_argument_error_keeps_its_traceback():
  # A shape bug in the project's own code must not read as a setting.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import cli, train  # pylint: disable=g-import-not-at-top

  def shape_bug():
    return tf.zeros([2, 3]) + tf.zeros([4])

  with pytest.raises(tf.errors.InvalidArgumentError, match='Incompatible shapes'):
    cli.run_program(shape_bug, user_errors=train.USER_ERRORS)


@pytest.mark.slow  # another process
def test_a_shape_bug_in_train_eval_ends_with_a_traceback_and_a_non_zero_exit(tmp_path):
  script = tmp_path / 'shape_bug.py'
  script.write_text(
      'import tensorflow as tf\n'
      'from planet_tfa.programs import cli, train\n'
      'cli.run_program(lambda: tf.zeros([2, 3]) + tf.zeros([4]), user_errors=train.USER_ERRORS)\n')
  result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
  assert result.returncode != 0
  assert 'Traceback' in result.stderr and 'Incompatible shapes' in result.stderr


def test_gins_call_context_stays_off_the_console(capsys):
  import gin  # pylint: disable=g-import-not-at-top
  from planet_tfa import errors  # pylint: disable=g-import-not-at-top

  @gin.configurable('test_programs_probe', module='test_programs')
  def probe():
    raise errors.ConfigError('probe.value=3: must be 4.')

  with pytest.raises(errors.ConfigError, match="In call to configurable 'test_programs_probe'"):
    probe()  # what gin makes of it
  code, err = _exit_of(probe, capsys)
  assert code == 2
  assert err.strip() == 'error: probe.value=3: must be 4.', err


def test_export_of_a_directory_that_is_no_run_is_a_user_error(tmp_path, capsys):
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  code, err = _exit_of(lambda: export.export_from_root(str(tmp_path)), capsys)
  assert code == 1
  assert 'NotARunRootError' in err and 'is not a planet_tfa run root' in err
  assert 'Traceback' not in err

"""Bad settings fail at start, before any env, model or warm-up, naming the fix."""
import os
import subprocess
import sys

import gin
import pytest

from planet_tfa.programs import gin_files
from planet_tfa import experiment as experiment_lib
from planet_tfa import learner
from planet_tfa import validation
import tiny_model
from planet_tfa.renamed_bindings import RENAMED_BINDINGS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = tiny_model.DMC_FLAGS


class RecordingLoader:
  """An env loader that must never be called: validation comes first."""

  def __init__(self):
    self.calls = 0

  def __call__(self, seed=None):
    self.calls += 1
    raise AssertionError('an environment was built before the settings were checked')


pytestmark = pytest.mark.usefixtures('clean_gin')


def start_with(tmp_path, experiment_args=None, **kwargs):
  """learner.train_eval with `kwargs` (and Experiment `experiment_args`);
  returns the SettingError it must raise."""
  loader = RecordingLoader()
  root = tmp_path / 'root'
  experiment = experiment_lib.Experiment(env_loader=loader, **(experiment_args or {}))
  with pytest.raises(validation.SettingError) as raised:
    learner.train_eval(str(root), experiment=experiment, **kwargs)
  assert loader.calls == 0
  assert not root.exists(), 'nothing may be written for a bad setting'
  return str(raised.value)


def test_sac_burn_in_at_or_past_the_window_pairs_is_rejected_naming_both(tmp_path):
  gin.bind_parameter('LatentSacAgent.sac_burn_in', 8)
  message = start_with(tmp_path, {'sequence_length': 9})
  assert 'LatentSacAgent.sac_burn_in=8' in message
  assert 'Experiment.sequence_length=9' in message and 'sac_burn_in <= 7' in message


def test_sac_burn_in_below_the_window_pairs_passes_validation():
  gin.bind_parameter('LatentSacAgent.sac_burn_in', 7)
  validation.check_train_eval(_defaults(), experiment_lib.Experiment(sequence_length=9))


@pytest.mark.parametrize('td_steps, expected', [
    (9, ['LatentSacAgent.td_steps=9', 'Experiment.sequence_length=9', 'td_steps <= 8']),
    (0, ['LatentSacAgent.td_steps=0', 'whole number >= 1']),
    (2.5, ['LatentSacAgent.td_steps=2.5', 'whole number >= 1'])])
def test_td_steps_outside_one_to_the_window_pairs_is_rejected_naming_it(tmp_path, td_steps,
                                                                         expected):
  gin.bind_parameter('LatentSacAgent.td_steps', td_steps)
  message = start_with(tmp_path, {'sequence_length': 9})
  for part in expected:
    assert part in message


@pytest.mark.parametrize('setting, value', [
    ('target_pessimism', -0.5), ('target_pessimism', float('inf')), ('target_pessimism', 'high'),
    ('critic_priority_exponent', -0.6), ('critic_priority_exponent', float('nan')),
    ('critic_priority_exponent', 'strong')])
def test_a_negative_or_non_numeric_critic_setting_is_rejected_naming_it(tmp_path, setting, value):
  gin.bind_parameter(f'LatentSacAgent.{setting}', value)
  message = start_with(tmp_path)
  assert f'LatentSacAgent.{setting}={value!r}' in message
  assert 'finite number >= 0' in message


def test_agent_refuses_a_burn_in_that_leaves_no_pairs():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from test_latent_sac_agent import make_agent, fixed_windows  # pylint: disable=g-import-not-at-top
  agent = make_agent(sac_burn_in=8)  # windows of 9 steps: 8 pairs
  experience = fixed_windows()
  with pytest.raises(ValueError, match='sac_burn_in=8'):
    agent.sac_transitions(experience, tf.zeros([6, 9, 20]))


def test_freeze_world_model_without_a_checkpoint_is_an_error(tmp_path):
  message = start_with(tmp_path, freeze_world_model=True)
  assert 'train_eval.freeze_world_model=True' in message
  assert 'train_eval.world_model_checkpoint' in message


def test_old_stride_bindings_fail_naming_the_new_one():
  for old in ('make_experience_table.stride_length', 'ReverbEpisodeObserver.stride_length'):
    gin.clear_config()
    with pytest.raises(gin_files.ConfigError) as raised:
      gin_files.parse(['dmc_cartpole_swingup.gin'], [f'{old} = 4'])
    assert f'`{old}` is now `window_stride.stride_length`' in str(raised.value)


def test_stride_below_one_is_rejected():
  from planet_tfa.replay import tables  # pylint: disable=g-import-not-at-top
  gin.bind_parameter('window_stride.stride_length', 0)
  with pytest.raises(gin_files.ConfigError, match='window_stride.stride_length=0'):
    tables.window_stride()


def test_unknown_dmc_task_lists_the_valid_ones():
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  with pytest.raises(gin_files.ConfigError) as raised:
    suites.load_dmc_pixels('no-such-task')
  message = str(raised.value)
  assert "load_dmc_pixels.domain_task='no-such-task'" in message
  assert 'cheetah-run' in message and 'ball_in_cup-catch' in message


def _defaults():
  import inspect  # pylint: disable=g-import-not-at-top
  settings = {name: p.default for name, p in
              inspect.signature(learner.train_eval).parameters.items()
              if p.default is not inspect.Parameter.empty}
  settings['root_dir'] = '/tmp/not-created-by-validation'
  return settings


def run_train_eval(root_dir, *args):
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  return subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root_dir}', *args],
      capture_output=True, text=True, timeout=180, env=env, cwd=REPO)


@pytest.mark.parametrize('binding, expected', [
    ("train_eval.num_iterations='many'", ["train_eval.num_iterations='many'",
                                          'a whole number >= 0']),
    ('train_eval.batch_size=-4', ['train_eval.batch_size=-4', 'a whole number >= 1']),
    # Was a traceback (exit 1) from inside the model's constructor.
    ("WorldModel.image_precision='fp16'", ["WorldModel.image_precision='fp16' (str)",
                                           "'float32', 'mixed_bfloat16', 'auto'"]),
    ("load_dmc_pixels.domain_task='no-such-task'", [
        "load_dmc_pixels.domain_task='no-such-task'", 'cartpole-swingup', 'walker-walk']),
    # gin's tokenizer fails on an unclosed bracket with a TokenError, not a ValueError.
    ('train_eval.batch_size=(', ["--gin_param='train_eval.batch_size=('",
                                 'unclosed bracket or quote']),
    # Else a ValueError from inside the environment, after the root exists.
    ('load_dmc_pixels.action_repeat=0', ['load_dmc_pixels.action_repeat=0 (int)',
                                         'a whole number >= 1 or None']),
])
@pytest.mark.slow  # train_eval in another process
def test_train_eval_rejects_a_bad_binding_before_starting(tmp_path, binding, expected):
  root = tmp_path / 'run'
  result = run_train_eval(root, *TINY, f'--gin_param={binding}')
  assert_rejected_before_starting(result, root, expected)


def assert_rejected_before_starting(result, root, expected):
  """Exit 2, one named error without a traceback or gin's call context, nothing written."""
  assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert 'Exception ignored' not in result.stderr, result.stderr[-3000:]
  assert 'In call to configurable' not in result.stderr, result.stderr[-3000:]
  for text in expected:
    assert text in result.stderr, result.stderr[-3000:]
  assert 'Warm-up' not in result.stdout
  assert not root.exists(), 'nothing may be written for a bad setting'


@pytest.mark.slow  # train_eval in another process
def test_train_eval_rejects_an_unknown_highway_scenario_before_building_it(tmp_path):
  # The loader named it too, but only after the root existed, and the env's
  # isolation thread then printed a traceback at exit.
  root = tmp_path / 'run'
  result = run_train_eval(root, '--gin_file=highway_sac.gin',
                          "--gin_param=load_highway.scenario='nope'")
  assert_rejected_before_starting(result, root, [
      "load_highway.scenario='nope'", 'racetrack-oval', 'highway-fast'])


@pytest.mark.slow  # train_eval in another process
def test_train_eval_rejects_a_replay_server_without_a_port_at_once(tmp_path):
  # Else it waits train_eval.server_deadline_s for a server that cannot answer.
  root = tmp_path / 'run'
  result = run_train_eval(root, *TINY, '--replay_server=localhost:notaport')
  assert_rejected_before_starting(result, root, [
      "--replay_server='localhost:notaport'", 'HOST:PORT', '1-65535'])


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='needs Linux /proc')
@pytest.mark.slow  # train_eval in another process
def test_train_eval_rejects_a_root_dir_that_cannot_be_made(tmp_path):
  root = '/proc/planet_tfa-test-run'  # no one, root included, can make a directory there
  result = run_train_eval(root, *TINY)
  assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert f"--root_dir={root!r} cannot be made in '/proc'" in result.stderr, result.stderr
  assert not os.path.exists(root)
  assert not tmp_path.joinpath('run').exists()


@pytest.mark.parametrize('address', ['localhost:notaport', 'localhost', ':8000',
                                     'localhost:0', 'localhost:65536', 'localhost:-1'])
def test_a_replay_server_that_is_not_host_port_is_named(address):
  with pytest.raises(validation.SettingError, match='HOST:PORT') as raised:
    validation.check_replay_server(address)
  assert f'--replay_server={address!r}' in str(raised.value)


@pytest.mark.parametrize('address', ['localhost:8000', '10.0.0.5:1', '[::1]:65535'])
def test_a_host_port_replay_server_passes(address):
  validation.check_replay_server(address)


def test_a_bad_replay_server_is_refused_before_the_root_exists(tmp_path):
  message = start_with(tmp_path, replay_server='localhost:notaport')
  assert "--replay_server='localhost:notaport'" in message


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='needs Linux /proc')
def test_a_root_dir_under_proc_is_refused_naming_the_directory():
  with pytest.raises(validation.SettingError, match="cannot be made in '/proc'"):
    validation.check_root_dir('/proc/planet_tfa-test-run/deeper')


@pytest.mark.skipif(os.name != 'posix' or os.geteuid() == 0,
                    reason='root writes to read-only directories')
def test_a_root_dir_in_a_read_only_directory_is_refused(tmp_path):
  locked = tmp_path / 'locked'
  locked.mkdir()
  locked.chmod(0o500)
  try:
    with pytest.raises(validation.SettingError, match='cannot be made in'):
      validation.check_root_dir(str(locked / 'run'))
  finally:
    locked.chmod(0o700)


def test_checking_the_root_dir_leaves_its_parent_as_it_was(tmp_path):
  validation.check_root_dir(str(tmp_path / 'run'))
  validation.check_root_dir(str(tmp_path))  # an existing root: resumed
  assert not list(tmp_path.iterdir())


@pytest.mark.parametrize('binding, value, expected', [
    ('load_dmc_pixels.action_repeat', 0, 'load_dmc_pixels.action_repeat=0 (int)'),
    ('load_dmc_pixels.action_repeat', 2.5, 'load_dmc_pixels.action_repeat=2.5 (float)'),
    ('load_highway.scenario', 'nope', "load_highway.scenario='nope'"),
    ('load_highway.scenario_mix', ['racetrack', 'nope'],
     "load_highway.scenario_mix entry {'scenario': 'nope'}: unknown highway-env scenario"),
])
def test_env_bindings_are_checked_before_any_env(tmp_path, binding, value, expected):
  gin.bind_parameter(binding, value)
  message = start_with(tmp_path)
  assert message.startswith(expected), message


def test_env_bindings_are_checked_through_macros_and_references_left_to_the_loader(tmp_path):
  gin.parse_config('REPEAT = 0\nREPEAT_OF_RUN = %REPEAT\n'
                   'load_dmc_pixels.action_repeat = %REPEAT_OF_RUN')
  assert start_with(tmp_path).startswith('load_dmc_pixels.action_repeat=0 (int)')
  gin.clear_config()
  gin.parse_config('load_highway.scenario = @load_dmc_pixels')  # not a value: not checked
  validation.check_experiment(experiment_lib.Experiment())


def test_a_loader_that_raises_leaves_no_env_thread_running():
  # TFPyEnvironment's own isolation pool stayed open when the loader raised;
  # its threads then printed "Exception ignored in Pool.__del__" at exit.
  import threading  # pylint: disable=g-import-not-at-top

  def broken_loader(seed=None):
    raise validation.SettingError(f'no env for seed {seed}')

  before = set(threading.enumerate())
  with pytest.raises(validation.SettingError, match='no env for seed 0'):
    experiment_lib.make_env(experiment_lib.Experiment(env_loader=broken_loader))
  assert set(threading.enumerate()) <= before


@pytest.mark.slow  # train_eval in another process
def test_train_eval_rejects_a_root_dir_that_is_a_file(tmp_path):
  path = tmp_path / 'notes.txt'
  path.write_text('mine')
  result = run_train_eval(path, *TINY)
  assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert f'--root_dir={str(path)!r} is an existing file' in result.stderr
  assert 'Warm-up' not in result.stdout
  assert path.read_text() == 'mine'


def test_bad_greedy_filter_is_rejected_at_start(tmp_path):
  gin.bind_parameter('LatentSacAgent.greedy_filter', 'mode')
  message = start_with(tmp_path)
  assert "LatentSacAgent.greedy_filter='mode'" in message and "'sample'" in message


def test_a_run_config_of_an_older_version_upgrades_renamed_bindings():
  old = ('make_experience_table.stride_length = 2\n'
         'eval/ReverbEpisodeObserver.stride_length = 2\n'
         'make_experience_table.capacity_env_steps = 100\n')
  assert gin_files.upgrade_renamed(old) == ('window_stride.stride_length = 2\n'
                                         'eval/window_stride.stride_length = 2\n'
                                         'make_experience_table.capacity_env_steps = 100\n')


def test_old_flat_carla_bindings_fail_naming_their_settings_group():
  for old, new in (('CarlaEnv.lidar_range', 'CarlaLidar.range'),
                   ('CarlaEnv.max_steps', 'CarlaEpisode.max_steps'),
                   ('CarlaEnv.sensor_timeout_s', 'CarlaSensors.timeout_s')):
    gin.clear_config()
    with pytest.raises(gin_files.ConfigError) as raised:
      gin_files.parse(['carla_sac.gin'], [f'{old} = 4'])
    assert f'`{old}` is now `{new}`' in str(raised.value)


def test_an_old_carla_run_config_loads_under_the_settings_groups():
  """Every flat CarlaEnv parameter an old operative_config.gin holds names an existing one."""
  old = ''.join(f'{name} = None\n' for name in RENAMED_BINDINGS if name.startswith('CarlaEnv.'))
  upgraded = gin_files.upgrade_renamed(old + 'CarlaEnv.seed = 3\ncollect/CarlaEnv.instance = 1\n')
  lines = upgraded.splitlines()
  assert 'CarlaServer.port = None' in lines and 'CarlaServer.port_stride = None' in lines
  # seed and instance stay on the env, every other flat name moved to a group.
  assert [line for line in lines if 'CarlaEnv.' in line] == [
      'CarlaEnv.seed = 3', 'collect/CarlaEnv.instance = 1']
  gin.parse_config(upgraded)  # an unknown parameter would raise here


# One bad value per train_eval rule: each must be refused before anything
# starts, naming the binding and the value (exit code 2 in the programs).
_BAD_VALUES = {
    'num_iterations': -1, 'initial_collect_episodes': 1.5, 'collect_episodes_per_iteration': -2,
    'batch_size': 0, 'eval_interval': 'often', 'eval_episodes': -1, 'checkpoint_interval': 0.5,
    'summary_interval': -1, 'image_summary_interval': None, 'policy_export_interval': -3,
    'sample_timeout_s': 0, 'sac_batch_size': 0, 'train_steps_per_iteration': -1,
    'train_steps_per_env_step': -0.1, 'time_budget_s': 0, 'env_step_budget': 0,
    'freeze_world_model': 1, 'world_model_only': 'yes',
    'remote_collect_episodes_per_iteration': -1, 'server_deadline_s': -5,
    'remote_wait_for_data_s': 0, 'progress_interval_s': -1,
    'sac_updates_per_train_step': 0, 'model_pretrain_steps': -10,
    'initial_collect_env_steps': 0, 'eval_stochastic': 'no',
    'warmup_policy': 'autopilot', 'expert': 'pid', 'expert_episodes_per_iteration': -1,
}


def test_every_train_eval_rule_has_a_bad_value_here():
  assert set(_BAD_VALUES) == set(validation._TRAIN_EVAL_RULES)  # pylint: disable=protected-access


@pytest.mark.parametrize('name', sorted(_BAD_VALUES))
def test_each_train_eval_rule_names_the_binding_and_value(tmp_path, name):
  value = _BAD_VALUES[name]
  extra = {}
  if name == 'train_steps_per_iteration':
    extra['train_steps_per_env_step'] = None  # only one form of the data ratio
  message = start_with(tmp_path, **{name: value}, **extra)
  assert message.startswith(f'train_eval.{name}={value!r}'), message


@pytest.mark.parametrize('binding, value, expected', [
    ('LatentSacAgent.acting_window', 1, 'whole number >= 2'),
    ('LatentSacAgent.acting_window', 12, 'acting_window <= 8'),
    ('LatentSacAgent.initial_alpha', 0.0, 'a number > 0'),
])
def test_recipe_agent_settings_are_checked_at_start(tmp_path, binding, value, expected):
  gin.bind_parameter(binding, value)
  message = start_with(tmp_path, {'sequence_length': 9})
  assert f'{binding}={value!r}' in message and expected in message, message


def _fake_run_root(tmp_path, config_text):
  root = tmp_path / 'old_run'
  (root / 'train' / 'checkpoints').mkdir(parents=True)
  (root / 'train' / 'checkpoints' / 'ckpt-100.index').write_bytes(b'')
  (root / 'operative_config.gin').write_text(config_text)
  return root


def test_resuming_a_run_whose_model_had_other_inputs_names_the_spec_change(tmp_path):
  root = _fake_run_root(tmp_path, "WorldModel.encoder_keys = ['camera', 'lidar']\n"
                                  'RSSM.deter_size = 200\n')
  gin_files.parse(['highway_sac.gin'])
  with pytest.raises(validation.SettingError) as raised:
    validation.check_resume(str(root))
  message = str(raised.value)
  assert ("WorldModel.encoder_keys: run ['camera', 'lidar'], this config "
          "['camera', 'lidar', 'state', 'route']") in message
  assert 'feeds the ego state and the route to the encoders' in message
  # The fix is pasteable: gin's quotes inside the flag survive the shell.
  assert '"--gin_param=WorldModel.encoder_keys = [\'camera\', \'lidar\']"' in message
  # The run predates the continuation head: it had none, driving.gin trains one.
  assert 'WorldModel.continuation_scale: run 0.0, this config 1.0' in message
  assert 'trains a continuation head since' in message
  assert '"--gin_param=WorldModel.continuation_scale = 0.0"' in message
  # The run predates the scaled vector inputs: it took them raw.
  assert "WorldModel.vector_scales: run None, this config {'state'" in message
  assert 'scales the state and route inputs to unit size since' in message
  assert '"--gin_param=WorldModel.vector_scales = None"' in message
  # The same settings as the run: no error; a root without checkpoints: nothing to check.
  gin.bind_parameter('WorldModel.encoder_keys', ['camera', 'lidar'])
  gin.bind_parameter('WorldModel.continuation_scale', 0.0)
  gin.bind_parameter('WorldModel.vector_scales', None)
  validation.check_resume(str(root))
  validation.check_resume(str(tmp_path / 'new_run'))


def test_a_continuation_heads_weight_may_change_on_resume_but_not_its_presence(tmp_path):
  root = _fake_run_root(tmp_path, 'WorldModel.continuation_scale = 1.0\n')
  gin.bind_parameter('WorldModel.continuation_scale', 3.0)  # the same head, weighted more
  validation.check_resume(str(root))
  gin.clear_config()  # unbound: the default, no head
  with pytest.raises(validation.SettingError, match='continuation_scale: run 1.0, this config 0.0'):
    validation.check_resume(str(root))
  # A DMC run from before the head resumes with DMC's files as they are (no head either way).
  old_dmc = _fake_run_root(tmp_path / 'dmc', 'WorldModel.image_depth = 16\n')
  gin_files.parse(['dmc_cheetah_run.gin', 'dmc_cpu.gin'])
  validation.check_resume(str(old_dmc))


def test_an_unknown_image_precision_is_a_setting_error_before_anything_starts(tmp_path):
  gin.bind_parameter('WorldModel.image_precision', 'fp16')
  message = start_with(tmp_path)
  assert "WorldModel.image_precision='fp16' (str)" in message
  assert "'float32', 'mixed_bfloat16', 'auto'" in message and 'loss scaling' in message

"""End to end: train_eval.py as users run it, on the real dm_control cartpole."""
import glob
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow  # every test runs train_eval.py (or its exports) in other processes
TINY = tiny_model.DMC_FLAGS


def run_train_eval(root_dir, *args, timeout=300, extra_env=None):
  env = dict(os.environ, PYTHONUNBUFFERED='1', **(extra_env or {}))
  return subprocess.run(
      [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root_dir}',
       *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


# Lines that reach the process the way library log lines do, on any CPU and any
# library version: one written to file descriptor 2 (where TensorFlow's and
# Reverb's C++ logs go) and one through absl logging (TensorFlow's Python
# logger), both right after the program's main returns, with every
# redirection of the run in place.
LOG_PROBE = textwrap.dedent("""\
    import os
    from absl import app, logging
    _run = app.run
    def _probed_run(main, *args, **kwargs):
      def probed_main(argv):
        try:
          return main(argv)
        finally:
          os.write(2, b'PROBE-native-stderr-line\\n')
          logging.warning('PROBE-absl-log-line')
      return _run(probed_main, *args, **kwargs)
    app.run = _probed_run
    """)
PROBE_LINES = ('PROBE-native-stderr-line', 'PROBE-absl-log-line')


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  root = tmp_path_factory.mktemp('run')
  probe_dir = tmp_path_factory.mktemp('probe')
  (probe_dir / 'sitecustomize.py').write_text(LOG_PROBE)
  pythonpath = os.pathsep.join(p for p in (str(probe_dir), os.environ.get('PYTHONPATH')) if p)
  result = run_train_eval(root, *TINY, '--gin_param=train_eval.num_iterations=3',
                          extra_env={'PYTHONPATH': pythonpath})
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return root, result.stdout, result.stderr


def event_tags(directory):
  tags = set()
  for path in glob.glob(os.path.join(directory, 'events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        tags.add(value.tag)
  return tags


def test_library_log_lines_go_to_the_log_file_not_the_console(tiny_run):
  root, stdout, stderr = tiny_run
  console = stdout + stderr
  log = (root / 'logs' / 'train.log').read_text()
  # A native stderr line and an absl log line: in the file, not on the console.
  for line in PROBE_LINES:
    assert line in log, f'{line!r} missing from the log file'
    assert line not in console, f'{line!r} reached the console:\n{console[-2000:]}'
  assert 'iter 3/3' in stdout and re.search(r'logs +' + re.escape(str(root / 'logs')), stdout)


def test_run_writes_config_checkpoints_summaries_and_policies(tiny_run):
  root, stdout, _ = tiny_run
  config = (root / 'operative_config.gin').read_text()
  assert 'train_eval.num_iterations = 3' in config
  assert 'RSSM.deter_size = 16' in config
  assert glob.glob(str(root / 'train' / 'checkpoints' / 'ckpt-*.index'))
  assert glob.glob(str(root / 'replay' / '*'))
  train_tags = event_tags(str(root / 'train'))
  for tag in ('losses/model_loss', 'losses/pixels_log_prob', 'losses/kl', 'losses/critic_loss',
              'losses/actor_loss', 'losses/alpha', 'metrics/return', 'metrics/env_steps',
              'rates/env_steps_per_sec', 'rates/train_steps_per_sec',
              'open_loop/truth_top_model_bottom'):
    assert tag in train_tags, f'{tag} missing from {sorted(train_tags)}'
  eval_tags = event_tags(str(root / 'eval'))
  assert 'metrics/return' in eval_tags and 'eval/video_real_left_model_right' in eval_tags
  # Evaluations at iterations 2 and 3: each writes its first episode as a GIF.
  assert len(glob.glob(str(root / 'eval' / 'videos' / 'eval_*.gif'))) == 2
  # Progress lines with rates and ETA, then the summary.
  assert 'iter 3/3' in stdout and 'env steps/s' in stdout and 'ETA' in stdout
  assert 'image mse' in stdout and ' kl ' in stdout and 'reward mse' in stdout
  assert '=== run summary ===' in stdout
  assert re.search(r'stopped_by +num_iterations', stdout)
  for name in ('greedy_policy', 'collect_policy'):
    assert (root / 'policies' / name / 'saved_model.pb').exists()


def recorded_time_steps(num_steps=100, batch_size=3):
  """Real cartpole frames with episode starts at different steps in each row."""
  from planet_tfa.environments import suites  # pylint: disable=g-import-not-at-top
  env = suites.load_dmc_pixels('cartpole-swingup', seed=5, time_limit=1.6)
  rng = np.random.default_rng(0)
  frames, step_types = [], []
  time_step = env.reset()
  for _ in range(num_steps + 2 * batch_size):
    frames.append(time_step.observation['pixels'])
    step_types.append(int(time_step.step_type))
    time_step = env.step(rng.uniform(-1, 1, (1,)).astype(np.float32))
  env.close()
  frames, step_types = np.stack(frames), np.array(step_types, np.int32)
  rows = [slice(2 * i, 2 * i + num_steps) for i in range(batch_size)]
  pixels = np.stack([frames[r] for r in rows], 1)        # [T, B, 64, 64, 3]
  types = np.stack([step_types[r] for r in rows], 1)     # [T, B]
  types[0] = ts.StepType.FIRST  # every row starts an episode at step 0
  return pixels, types


STANDALONE_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability  # registers the distribution types
    policy_dir, data_path, out_path = sys.argv[1:]
    data = np.load(data_path)
    policy = tf.saved_model.load(policy_dir)
    action_fn = policy.signatures['action']
    names = {spec.name: key for key, spec in action_fn.structured_input_signature[1].items()}
    results = {}
    for batch_size in (1, 3):
      state = policy.signatures['get_initial_state'](batch_size=tf.constant(batch_size))
      actions = []
      for t in range(data['pixels'].shape[0]):
        inputs = {'0/step_type': data['step_type'][t, :batch_size],
                  '0/reward': np.zeros(batch_size, np.float32),
                  '0/discount': np.ones(batch_size, np.float32),
                  '0/observation/pixels': data['pixels'][t, :batch_size]}
        inputs.update({'1/' + k: v for k, v in state.items()})
        out = action_fn(**{names[k]: tf.constant(v) for k, v in inputs.items()})
        state = {k[len('state/'):]: v for k, v in out.items() if k.startswith('state/')}
        actions.append(out['action'].numpy())
      results[f'batch{batch_size}'] = np.stack(actions)
    results['train_step'] = policy.get_train_step().numpy()
    np.savez(out_path, **results)
    assert 'planet_tfa' not in sys.modules and 'tf_agents' not in sys.modules
''')


def test_exported_greedy_policy_runs_without_planet_tfa_and_matches(tiny_run, tmp_path):
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  root, _, _ = tiny_run
  pixels, step_types = recorded_time_steps()
  data_path, out_path = tmp_path / 'data.npz', tmp_path / 'out.npz'
  np.savez(data_path, pixels=pixels, step_type=step_types)
  result = subprocess.run(
      [sys.executable, '-c', STANDALONE_SCRIPT, str(root / 'policies' / 'greedy_policy'),
       str(data_path), str(out_path)], capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  exported = np.load(out_path)

  agent, _ = export.load_agent_from_root(str(root))
  policy = agent.export_policy(greedy=True)
  assert int(exported['train_step']) == int(agent.train_step_counter.numpy()) > 0
  for batch_size in (1, 3):
    state = policy.get_initial_state(batch_size)
    actions = []
    for t in range(pixels.shape[0]):
      time_step = ts.TimeStep(
          step_type=tf.constant(step_types[t, :batch_size]), reward=tf.zeros(batch_size),
          discount=tf.ones(batch_size),
          observation={'pixels': tf.constant(pixels[t, :batch_size])})
      out = policy.action(time_step, state)
      state = out.state
      actions.append(out.action.numpy())
    np.testing.assert_allclose(exported[f'batch{batch_size}'], np.stack(actions), atol=1e-5)
  # The rows restart at different steps, so their actions differ.
  assert not np.allclose(exported['batch3'][:, 0], exported['batch3'][:, 1])


def test_export_command_writes_policies_from_a_checkpoint(tiny_run, tmp_path):
  root, _, _ = tiny_run
  out = tmp_path / 'exported'
  result = subprocess.run(
      [sys.executable, '-m', 'planet_tfa.programs.export', f'--root_dir={root}', f'--output_dir={out}'],
      capture_output=True, text=True, timeout=300, cwd=REPO)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'greedy_policy' in result.stdout
  for name in ('greedy_policy', 'collect_policy'):
    loaded = tf.saved_model.load(str(out / name))
    state = loaded.get_initial_state(2)
    assert state['deter'].shape == (2, 16)
    np.testing.assert_array_equal(state['deter'].numpy(), 0)


def test_misspelled_gin_binding_fails_at_start_naming_it(tmp_path):
  result = run_train_eval(tmp_path / 'bad', *TINY,
                          '--gin_param=train_eval.num_iteratons=3', timeout=120)
  assert result.returncode != 0
  assert 'num_iteratons' in result.stderr
  assert not (tmp_path / 'bad' / 'train').exists(), 'nothing should be written'


def test_unknown_gin_file_is_named(tmp_path):
  result = run_train_eval(tmp_path / 'bad', '--gin_file=no_such_task.gin', timeout=120)
  assert result.returncode != 0
  assert 'no_such_task.gin' in result.stderr and 'dmc_cartpole_swingup.gin' in result.stderr


def test_time_budget_stops_the_run_evaluates_and_says_so(tmp_path):
  # 1 s is less than one iteration: the run must stop after the first one,
  # evaluate there (though off the eval interval) and name the budget.
  root = tmp_path / 'budget'
  result = run_train_eval(root, *TINY, '--gin_param=train_eval.num_iterations=50',
                          '--gin_param=train_eval.eval_interval=10',
                          '--gin_param=train_eval.time_budget_s=1')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert re.search(r'stopped_by +time_budget_s', result.stdout)
  assert re.search(r'iterations +1\n', result.stdout)
  with open(root / 'eval_returns.csv') as f:
    rows = f.read().splitlines()
  assert rows[0].startswith('iteration,') and [r.split(',')[0] for r in rows[1:]] == ['1']


def test_eval_filter_measures_both_filters_on_one_checkpoint(tiny_run, tmp_path):
  out = tmp_path / 'filters.json'
  result = subprocess.run(
      [sys.executable, '-m', 'bench.eval_filter', f'--root_dir={tiny_run[0]}',
       '--episodes=3', f'--out={out}'], capture_output=True, text=True, timeout=300, cwd=REPO)
  assert result.returncode == 0, result.stderr[-3000:]
  import json  # pylint: disable=g-import-not-at-top
  report = json.loads(out.read_text())
  assert report['configured_filter'] == 'mean' and report['train_step'] > 0
  assert sorted(report['filters']) == ['mean', 'sample']
  for name, scores in report['filters'].items():
    assert len(scores['returns']) == 3, name
    assert abs(scores['mean'] - np.mean(scores['returns'])) < 0.01
  # The mean filter is deterministic: the same env seed gives the same returns.
  from bench import eval_filter  # pylint: disable=g-import-not-at-top
  again = eval_filter.evaluate_root(str(tiny_run[0]), 3, ['mean'])
  assert again['filters']['mean']['returns'] == report['filters']['mean']['returns']


def test_a_run_is_evaluated_with_one_setting_changed_over_its_own_config(tiny_run):
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
  configured, _ = export.load_agent_from_root(str(tiny_run[0]))
  changed, _ = export.load_agent_from_root(
      str(tiny_run[0]), ['LatentSacAgent.acting_window = 5'])
  assert configured.filter_network.window != 5 and changed.filter_network.window == 5
  # The same checkpoint: the binding changes how the agent acts, not what it learned.
  for a, b in zip(configured.world_model.variables, changed.world_model.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  with pytest.raises(gin_files.ConfigError, match='LatentSacAgent.acting_windw'):
    export.load_agent_from_root(str(tiny_run[0]), ['LatentSacAgent.acting_windw = 5'])


def test_runs_of_the_previous_version_still_load_for_export(tiny_run, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  old_root = tmp_path / 'old_run'
  shutil.copytree(tiny_run[0], old_root)
  # What a run of the previous version recorded: the two stride settings.
  with open(old_root / 'operative_config.gin', 'a') as f:
    f.write('make_experience_table.stride_length = 1\nReverbEpisodeObserver.stride_length = 1\n')
  agent, _ = export.load_agent_from_root(str(old_root))
  assert int(agent.train_step_counter.numpy()) > 0


def test_diagnose_run_checks_model_critic_and_entropy_on_a_checkpoint(tiny_run):
  import json  # pylint: disable=g-import-not-at-top
  result = subprocess.run(
      [sys.executable, '-m', 'bench.diagnose_run', f'--root_dir={tiny_run[0]}', '--episodes=1',
       '--horizon=4', '--context=3', '--stride=4'],
      capture_output=True, text=True, timeout=300, cwd=REPO)
  assert result.returncode == 0, result.stderr[-3000:]
  checks = {line['name']: line for line in
            map(json.loads, filter(lambda l: l.startswith('{'), result.stdout.splitlines()))}
  # 20-step episodes: windows of 3 + 4 frames start at 0, 4, 8, 12.
  image = checks['open_loop_image_mse']
  assert image['windows'] == 4 and len(image['per_step']) == len(image['repeat_last_frame']) == 4
  # The cart moves between frames, so "nothing moves" is wrong.
  assert max(image['repeat_last_frame']) > 0
  assert image['ratio_to_repeat'] == pytest.approx(
      np.mean(image['per_step']) / np.mean(image['repeat_last_frame']), rel=0.02)
  assert checks['open_loop_reward']['windows'] == 5                      # starts 0..16
  critic = checks['critic_calibration']
  assert critic['steps'] == 10                                           # first half of 20
  assert critic['value'] == pytest.approx(critic['mean_q'] - critic['mean_return'], abs=0.02)
  entropy = checks['policy_entropy']
  assert entropy['target_entropy'] == -1.0 and entropy['action_dims'] == 1
  # No distribution on [-1, 1] has more entropy than the uniform one (ln 2):
  # an estimate that forgets tanh's Jacobian would exceed it.
  assert entropy['value'] < np.log(2.0)

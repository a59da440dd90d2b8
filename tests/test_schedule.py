"""The data ratio: train steps per environment step, on real train_eval runs."""
import math
import os
import signal

import pytest
import reverb

from planet_tfa import experiment as experiment_lib
from planet_tfa import learner
from planet_tfa import schedule
from planet_tfa import validation
from planet_tfa.replay import tables
from counting_env import CountingEnv


def test_ratio_carries_fractions_across_iterations():
  plan = schedule.TrainSchedule(train_steps_per_env_step=0.3, action_repeat=2)
  # 24, 6 and 40 env steps earn 7.2, 1.8 and 12: the fractions add up to a step.
  assert [plan.train_steps(n) for n in (12, 3, 20)] == [7, 2, 12]
  plan = schedule.TrainSchedule(train_steps_per_env_step=0.1, action_repeat=8)
  assert [plan.train_steps(125) for _ in range(5)] == [100] * 5  # a DMC episode


def test_per_iteration_form_ignores_the_data():
  plan = schedule.TrainSchedule(train_steps_per_iteration=3)
  assert [plan.train_steps(n) for n in (0, 12, 500)] == [3, 3, 3]


class RepeatedCountingEnv(CountingEnv):
  action_repeat = 2  # each agent step stands for 2 environment steps


def counting_loader(seed=None):
  del seed
  return RepeatedCountingEnv(episode_lengths=(5, 12, 3, 20))


def counting_experiment():
  return experiment_lib.Experiment(env_loader=counting_loader)


@pytest.mark.slow  # a whole train_eval run: ~20 s
def test_train_steps_after_n_iterations_follow_the_ratio(tiny_gin, tmp_path):
  # Warm-up: the 5-step episode (earns nothing); then one episode per
  # iteration of 12, 3 and 20 agent steps = 70 environment steps at repeat 2.
  result = learner.train_eval(
      str(tmp_path / 'run'), experiment=counting_experiment(), num_iterations=3,
      initial_collect_episodes=1, collect_episodes_per_iteration=1,
      train_steps_per_iteration=None, train_steps_per_env_step=0.3,
      eval_interval=0, eval_episodes=0, image_summary_interval=0, policy_export_interval=0)
  assert result['env_steps'] == 5 + 12 + 3 + 20
  assert result['physics_steps'] == 2 * result['env_steps']
  assert result['train_steps'] == 21  # floor(0.3 * 70); per-iteration floors give 20


def test_both_forms_of_the_ratio_set_is_an_error_naming_both(tiny_gin, tmp_path):
  with pytest.raises(validation.SettingError) as raised:
    learner.train_eval(str(tmp_path / 'run'), experiment=counting_experiment(),
                   train_steps_per_iteration=100, train_steps_per_env_step=0.1)
  message = str(raised.value)
  assert 'train_eval.train_steps_per_iteration=100' in message
  assert 'train_eval.train_steps_per_env_step=0.1' in message and 'None' in message
  assert not (tmp_path / 'run').exists()


def test_a_remote_only_learner_counts_the_env_steps_collectors_report(tiny_gin):
  # A real server with a standalone server's tables; reports as collectors send them.
  experiment = counting_experiment()
  env = experiment_lib.make_env(experiment)
  agent = experiment_lib.make_agent(env.time_step_spec(), env.action_spec())
  experiment_lib.close_env(env)
  server = reverb.Server(experiment_lib.make_replay_tables(agent))
  address = f'localhost:{server.port}'
  try:
    remote = experiment_lib.connect_replay(address)
    assert remote.counts_collected_steps()
    assert remote.drain_collected_steps() == (0, 0)
    for steps in (30, 12, 7):
      tables.report_collected_steps(remote.client, steps)
    assert remote.drain_collected_steps() == (3, 49)
    assert remote.drain_collected_steps() == (0, 0)  # each report is counted once
    with pytest.raises(tables.ReplayEmptyError) as raised:
      remote.drain_collected_steps(wait_s=0.1, deadline_s=0.5)
    assert address in str(raised.value) and 'planet_tfa.programs.collect' in str(raised.value)
  finally:
    server.stop()


def test_a_server_without_the_step_queue_is_named_for_the_per_env_step_ratio(tiny_gin, tmp_path):
  experiment = counting_experiment()
  env = experiment_lib.make_env(experiment)
  agent = experiment_lib.make_agent(env.time_step_spec(), env.action_spec())
  experiment_lib.close_env(env)
  older_tables = experiment_lib.make_replay_tables(agent)[:2]  # before the step queue
  server = reverb.Server(older_tables)
  try:
    with pytest.raises(validation.SettingError) as raised:
      learner.train_eval(str(tmp_path / 'run'), experiment=counting_experiment(),
                         replay_server=f'localhost:{server.port}',
                         train_steps_per_iteration=None, train_steps_per_env_step=0.1)
  finally:
    server.stop()
  message = str(raised.value)
  assert "no 'collected_steps' table" in message
  assert 'train_eval.train_steps_per_env_step=0.1' in message
  assert 'train_eval.train_steps_per_iteration' in message


@pytest.mark.slow  # two train_eval runs: ~40 s
def test_env_step_budget_stops_the_run_in_physics_steps(tiny_gin, tmp_path):
  # Physics steps at repeat 2: warm-up 10, then 24 (34), 6 (40), 40 (80 >= 50): stop.
  root = tmp_path / 'run'
  result = learner.train_eval(
      str(root), experiment=counting_experiment(), num_iterations=100, env_step_budget=50,
      initial_collect_episodes=1, collect_episodes_per_iteration=1,
      train_steps_per_iteration=None, train_steps_per_env_step=0.05,
      eval_interval=0, eval_episodes=0, image_summary_interval=0, policy_export_interval=0)
  assert result['stopped_by'] == 'env_step_budget'
  assert result['iterations'] == 3 and result['physics_steps'] == 80
  # Resuming a run that has spent its budget does no more iterations.
  tiny_gin()  # the resume parses afresh, as a new process would
  again = learner.train_eval(
      str(root), experiment=counting_experiment(), num_iterations=100, env_step_budget=50,
      initial_collect_episodes=1, train_steps_per_iteration=None,
      train_steps_per_env_step=0.05, eval_interval=0, eval_episodes=0,
      image_summary_interval=0, policy_export_interval=0)
  assert again['iterations'] == 3 and again['stopped_by'] == 'env_step_budget'


def test_env_step_budget_must_be_a_positive_whole_number(tiny_gin, tmp_path):
  with pytest.raises(validation.SettingError, match=r"train_eval.env_step_budget='1e5'"):
    learner.train_eval(str(tmp_path / 'run'), experiment=counting_experiment(), env_step_budget='1e5')


def test_steps_a_stop_cut_short_and_the_fractions_stay_owed():
  plan = schedule.TrainSchedule(train_steps_per_env_step=0.3, action_repeat=2)
  assert plan.train_steps(12) == 7          # 7.2 earned
  plan.owe(6)                                # a stop after 1 of the 7
  resumed = schedule.TrainSchedule(train_steps_per_env_step=0.3, action_repeat=2)
  resumed.credit = plan.credit               # what the checkpoint carries
  assert resumed.train_steps(3) == 8         # 6.2 + 1.8
  fixed = schedule.TrainSchedule(train_steps_per_iteration=3)
  fixed.owe(2)
  assert [fixed.train_steps(0), fixed.train_steps(0)] == [5, 3]


class StoppingCountingEnv(RepeatedCountingEnv):
  """Sends the process SIGTERM once, after its 10th step (inside the first policy episode)."""
  sent = []

  def _step(self, action):
    step = super()._step(action)
    self.steps = getattr(self, 'steps', 0) + 1
    if self.steps == 10 and not self.sent:
      self.sent.append(True)
      os.kill(os.getpid(), signal.SIGTERM)
    return step


@pytest.mark.slow  # two train_eval runs
def test_a_stopped_and_resumed_run_trains_what_its_data_earned(tiny_gin, tmp_path):
  root = str(tmp_path / 'run')
  experiment = experiment_lib.Experiment(
      env_loader=lambda seed=None: StoppingCountingEnv(episode_lengths=(5, 12, 3, 20)))
  args = dict(experiment=experiment, initial_collect_episodes=1,
              collect_episodes_per_iteration=1, train_steps_per_iteration=None,
              train_steps_per_env_step=0.3, eval_interval=0, eval_episodes=0,
              image_summary_interval=0, policy_export_interval=0)
  stopped = learner.train_eval(root, num_iterations=3, **args)
  assert stopped['stopped_by'] == 'SIGTERM' and stopped['train_steps'] == 1
  resumed = learner.train_eval(root, num_iterations=3, **args)
  policy_physics_steps = 2 * (resumed['env_steps'] - 5)  # less the 5-step warm-up
  # Every step the data earned, as an uninterrupted run makes them (floor(0.3 * 70) = 21
  # there); before the fix the 6 steps the stop cut short and the credit were lost.
  assert resumed['train_steps'] == math.floor(0.3 * policy_physics_steps + 1e-9)

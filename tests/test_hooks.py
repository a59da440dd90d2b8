"""The learner's periodic work, one hook at a time, and the progress lines."""
import csv
import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.environments import tf_py_environment
from tf_agents.policies import random_tf_policy

from planet_tfa import episodes
from planet_tfa import hooks
from planet_tfa import summaries


def state(iteration, final=False, **kwargs):
  return hooks.IterationState(iteration=iteration, train_step=10 * iteration,
                              env_steps=20 * iteration, rates={}, final=final, **kwargs)


class Recorder(hooks.IntervalHook):

  def __init__(self, interval, at_end=False):
    super().__init__(interval, at_end)
    self.ran = []

  def run(self, s):
    self.ran.append(s.iteration)


def test_interval_hook_runs_on_multiples_and_at_the_end_only_when_asked():
  every_3, every_3_and_end, never = Recorder(3), Recorder(3, at_end=True), Recorder(0)
  for i in range(1, 9):
    for hook in (every_3, every_3_and_end, never):
      hook(state(i, final=i == 8))
  assert every_3.ran == [3, 6]
  assert every_3_and_end.ran == [3, 6, 8]
  assert never.ran == []


def test_callback_hook_calls_its_function_on_its_interval():
  calls = []
  hook = hooks.CallbackHook(2, lambda: calls.append(len(calls)))
  for i in range(1, 6):
    hook(state(i))
  assert calls == [0, 1]  # iterations 2 and 4


@pytest.fixture
def collection(counting_env):
  tf_env = tf_py_environment.TFPyEnvironment(counting_env(episode_lengths=(4, 6)))
  policy = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
  written = []

  def replay_observer(trajectory):
    written.append(trajectory)  # what would reach the replay
  return episodes.Collection(tf_env, tf_env, policy, policy, replay_observer,
                             use_tf_function=False), written


def test_eval_hook_records_the_return_best_value_and_summaries(collection, tmp_path):
  collection, written = collection
  writer = tf.summary.create_file_writer(str(tmp_path / 'eval'))
  best = tf.Variable(-np.inf, dtype=tf.float64)
  hook = hooks.EvalHook(2, 2, collection, str(tmp_path), writer, best)
  for i in (1, 2, 3):
    s = state(i, final=i == 3)
    hook(s)
    if i == 1:
      assert s.eval_return is None and not (tmp_path / 'eval_returns.csv').exists()
  writer.flush()
  with open(tmp_path / 'eval_returns.csv') as f:
    rows = list(csv.DictReader(f))
  assert [int(r['iteration']) for r in rows] == [2, 3]  # its interval, then the end
  assert [int(r['env_steps']) for r in rows] == [40, 60]
  returns = [float(r['eval_return']) for r in rows]
  assert float(best.numpy()) == max(returns)
  assert s.eval_return == returns[-1]
  assert written == []  # evaluation episodes never reach the replay
  assert glob.glob(str(tmp_path / 'eval' / 'events.out.tfevents.*'))


def test_eval_hook_without_episodes_never_runs(collection, tmp_path):
  collection, _ = collection
  hook = hooks.EvalHook(1, 0, collection, str(tmp_path),
                        tf.summary.create_file_writer(str(tmp_path)),
                        tf.Variable(-np.inf, dtype=tf.float64))
  hook(state(1, final=True))
  assert not os.path.exists(tmp_path / 'eval_returns.csv')


def test_progress_hook_prints_counters_returns_and_an_eta():
  lines = []
  progress = summaries.Progress(10, start=0)
  metrics = {'return': tf.keras.metrics.Mean()}
  metrics['return'].update_state(7.5)
  hook = hooks.ProgressHook(progress, metrics, replay_size=lambda: 123,
                            printer=lambda line, flush: lines.append(line))
  hook(state(2, eval_return=4.25))
  assert lines[0].startswith('iter 2/10 | train step 20 | env steps 40 | replay windows 123')
  assert 'return 7.5' in lines[0] and 'eval return 4.25' in lines[0]
  assert 'ETA' in lines[0]


def test_progress_hook_shows_the_images_error_not_the_model_loss_its_constant_hides():
  lines = []
  hook = hooks.ProgressHook(summaries.Progress(10, start=0), {'return': tf.keras.metrics.Mean()},
                            printer=lambda line, flush: lines.append(line))
  extra = {'model_loss': 11310.7, 'pixels_log_prob': -11300.0, 'pixels_image_mse': 0.004,
           'bev_image_mse': 0.002, 'kl': 3.25, 'reward_mse': 0.015, 'critic_loss': 2.0}
  hook(state(1, loss_info=tf_agent.LossInfo(loss=11312.0, extra=extra)))
  # The mean over the decoded images, beside KL and the reward error (not the reward's mse).
  assert '| image mse 0.003 | kl 3.25 | reward mse 0.015 |' in lines[0]
  assert 'model loss' not in lines[0]
  # A model decoding no image shows no image error.
  hook(state(2, loss_info=tf_agent.LossInfo(loss=1.0, extra={'kl': 1.0, 'reward_mse': 0.5})))
  assert 'image mse' not in lines[1] and 'kl 1 | reward mse 0.5' in lines[1]


def test_progress_eta_is_the_nearest_budget():
  progress = summaries.Progress(10**9, start=0, env_step_budget=1000, start_env_steps=0)
  progress.started_at -= 100.0  # 100 s spent on 250 of 1000 agent steps
  eta = progress.eta(5, env_steps=250)
  assert eta == pytest.approx(300.0, rel=0.01)  # not the billion iterations' ETA
  assert progress.line(5, {}).startswith('iter 5 |')  # no "/1000000000"


def test_progress_eta_leaves_out_the_work_before_the_loop_but_the_time_budget_does_not():
  progress = summaries.Progress(10**9, start=0, time_budget_s=7200.0, env_step_budget=25000,
                                start_env_steps=0)
  progress.loop_starts(1250)
  # 50 min of warm-up and model pre-training (1250 steps), then 500 agent steps in a minute.
  progress.started_at -= 3060.0
  progress.loop_started_at -= 60.0
  # 23,250 steps left at 500 per minute: 46.5 min, not the 2.4 days that counting
  # the pre-training's 50 minutes as collection time would give.
  assert progress.eta(2, env_steps=1750) == pytest.approx(46.5 * 60, rel=0.01)
  # The time budget counts the whole run: 7200 - 3060 s left.
  progress.env_step_budget = None
  assert progress.eta(2, env_steps=1750) == pytest.approx(4140.0, rel=0.01)


def test_step_progress_reports_within_an_iteration_at_its_interval():
  now = [0.0]
  lines = []
  progress = summaries.StepProgress('iter 3: train steps', 100, interval_s=30.0,
                                    printer=lambda line, flush: lines.append(line),
                                    clock=lambda: now[0])
  for done in range(1, 101):
    now[0] = done * 1.0  # one step per second
    progress.update(done)
  # Lines at 30, 60 and 90 s; none for the last step (the iteration's own line follows).
  assert len(lines) == 3
  assert lines[0] == '  iter 3: train steps 30/100 | 1/s | 0:01:10 left'

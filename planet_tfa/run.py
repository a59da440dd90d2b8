"""The training loop behind `train_eval.py`: collect, train, evaluate, save.

One iteration = `collect_episodes_per_iteration` policy episodes into the
replay, then the train steps they earn at `train_steps_per_env_step` (or a
fixed `train_steps_per_iteration`) on sampled windows;
every `eval_interval` iterations `eval_episodes` greedy episodes on a separate
environment. Layout of ROOT:
  operative_config.gin    the full configuration the run used
  train/, eval/           TensorBoard events
  train/checkpoints/      agent, optimizers, counters, metrics, iteration
  replay/                 Reverb checkpoints of the experience table
"""
import json
import logging
import os
import time

import gin
import numpy as np
import tensorflow as tf
from tf_agents.environments import tf_py_environment
from tf_agents.utils import common

from planet_tfa import checkpoints
from planet_tfa import export
from planet_tfa import schedule
from planet_tfa import stop_signals
from planet_tfa import summaries
from planet_tfa import validation
from planet_tfa import videos
from planet_tfa.agents import latent_sac_agent
from planet_tfa.drivers import episode_drivers
from planet_tfa.drivers import observers
from planet_tfa.drivers import replay
from planet_tfa.environments import suites

TRAIN_DIR = 'train'
EVAL_DIR = 'eval'
CHECKPOINT_DIR = os.path.join(TRAIN_DIR, 'checkpoints')
OPERATIVE_CONFIG = 'operative_config.gin'
EVAL_RECORDS = 'eval_returns.csv'


def make_tf_env(env_loader, seed, instance=None):
  """Builds and steps the env in one dedicated thread (OpenGL contexts are per thread).

  `instance` (a collector's number) reaches loaders that take it, e.g. CarlaEnv,
  which talks to its own simulator port; None keeps the gin binding.
  """
  return tf_py_environment.TFPyEnvironment(
      lambda: suites.call_loader(env_loader, seed, instance), isolation=True)


def close_tf_env(tf_env):
  """Closes the Python env inside its isolation thread, then the thread."""
  # pylint: disable=protected-access
  tf_env._execute(tf_env.pyenv.close)
  # TFPyEnvironment.close() joins the pool before closing it, which raises.
  if tf_env._pool is not None:
    tf_env._pool.close()
    tf_env._pool.join()
    tf_env._pool = None


def _scalar(value):
  return float(np.asarray(value))


@gin.configurable(denylist=['root_dir', 'replay_server'])
def train_eval(root_dir,
               env_loader=suites.load_environment,
               num_iterations=1000,
               initial_collect_episodes=5,
               collect_episodes_per_iteration=1,
               train_steps_per_iteration=None,
               train_steps_per_env_step=0.1,
               batch_size=32,
               sequence_length=9,
               eval_interval=10,
               eval_episodes=1,
               eval_on_train_env=False,
               checkpoint_interval=10,
               summary_interval=1,
               image_summary_interval=10,
               policy_export_interval=50,
               sample_timeout_s=60.0,
               sac_batch_size=None,
               time_budget_s=None,
               env_step_budget=None,
               world_model_checkpoint=None,
               freeze_world_model=False,
               world_model_only=False,
               seed=0,
               replay_server=None,
               remote_collect_episodes_per_iteration=0,
               server_deadline_s=60.0,
               remote_wait_for_data_s=600.0):
  """Trains a LatentSacAgent; returns a dict summarising the run.

  Args:
    root_dir: where everything is written (see module doc).
    env_loader: callable(seed=...) -> PyEnvironment; gin chooses the task.
    num_iterations: total iterations of the run (a resumed run continues to it).
    initial_collect_episodes: random-policy episodes before training, skipped
      when the (restored) replay already holds windows.
    collect_episodes_per_iteration: policy episodes per iteration.
    train_steps_per_env_step: the data ratio: train steps per environment
      step, where an environment step is a physics step (agent steps x the
      env's action repeat; see `schedule`). Each iteration trains for the
      steps its episodes earned, fractions carried over; the warm-up earns
      none (with remote collectors: only this process's episodes earn). SLAC's
      one per agent step is 1 / action repeat; 0.1 (Dreamer's ratio) = 100
      train steps per 1000-physics-step DMC episode.
    train_steps_per_iteration: instead of the ratio, a fixed number per
      iteration (a learner fed by remote collectors only needs it). Set one
      of the two and the other to None.
    batch_size: windows per train step.
    sequence_length: steps per replay window (T+1).
    eval_interval, eval_episodes: greedy evaluation cadence and size.
    eval_on_train_env: evaluate on the training env between collection
      episodes instead of on a second env. For simulators that are servers
      (CARLA): two clients must not tick one world, and a second server per
      run is rarely at hand. Evaluation episodes never reach the replay.
    checkpoint_interval: in iterations; the run checkpoint, the world-model
      checkpoint (ROOT/world_model) and the replay (ROOT/replay) are written
      together, so a resumed run's replay matches its counters.
    summary_interval, image_summary_interval: in iterations.
    policy_export_interval: SavedModels to ROOT/policies every this many
      iterations (and always at the end).
    sample_timeout_s: sampling raises ReplayEmptyError after this long.
    sac_batch_size: None (default): SAC learns from the features of the world
      model's own batch. A number: SAC gets its own batch of that many windows,
      encoded without gradients (SLAC's layout, a second encoder pass).
    time_budget_s: stop (checkpointed, evaluated) once this much wall time has
      passed in this process; None: no limit. For equal-budget comparisons.
    env_step_budget: stop (checkpointed, evaluated) once the run has
      collected this many environment (physics) steps, warm-up included: the
      papers' "100k environment steps". None: no limit.
    world_model_checkpoint: a run root or checkpoint whose world model
      (encoders, RSSM, decoders, reward head) initialises this run's; actor,
      critics and alpha start fresh. Only used when the run has no checkpoint.
    freeze_world_model: do not update the world model (e.g. a restored one).
    world_model_only: train only the world model, collecting with a random
      policy; its ROOT/world_model checkpoints feed world_model_checkpoint.
    seed: seeds TF, NumPy and the environments (eval env gets seed + 1); a
      resumed run reseeds from seed and its iteration, so it does not replay
      the random numbers of its start.
    replay_server: 'host:port' of a standalone `planet_tfa.drivers.reverb_server`
      (docs/distributed.md). Collectors fill it; this process samples the
      remote table, publishes the collect policy's variables + train step after
      every iteration and evaluates locally. It collects nothing itself unless
      `remote_collect_episodes_per_iteration` > 0 (then also the random warm-up
      into an empty table). None: everything in this process with its own server.
    server_deadline_s: give up on an unreachable replay_server after this long.
    remote_wait_for_data_s: how long to wait for collectors to fill the remote
      table up to its minimum size before raising ReplayEmptyError.
  """
  # Bad settings fail here, before any directory, env, model or warm-up.
  validation.check_train_eval(dict(locals()))
  root_dir = os.path.abspath(os.path.expanduser(root_dir))
  os.makedirs(root_dir, exist_ok=True)
  tf.keras.utils.set_random_seed(seed)  # Python, NumPy, TF and Keras initialisers

  remote = None
  if replay_server:
    # Distributed mode: connect first, so a wrong address fails before any env starts.
    from planet_tfa.drivers import reverb_server  # pylint: disable=g-import-not-at-top
    remote = reverb_server.RemoteReplay(replay_server, deadline_s=server_deadline_s)
    collect_episodes_per_iteration = remote_collect_episodes_per_iteration
    if collect_episodes_per_iteration <= 0:
      initial_collect_episodes = 0  # the collectors act randomly until the first publish

  collects = remote is None or collect_episodes_per_iteration > 0
  train_env = make_tf_env(env_loader, seed) if collects else None
  eval_env = None
  if eval_episodes > 0:
    eval_env = (train_env if eval_on_train_env and train_env is not None
                else make_tf_env(env_loader, seed + 1))
  if train_env is None:  # remote collectors gather the data: the specs suffice
    train_env = reverb_server.SpecsOnlyEnv(
        *reverb_server.env_specs(root_dir, env_loader, seed, tf_env=eval_env))
  opened_envs = [e for e in (train_env, eval_env)
                 if isinstance(e, tf_py_environment.TFPyEnvironment)]
  opened_envs = list({id(e): e for e in opened_envs}.values())  # a shared env closes once
  try:
    # Environment steps per agent step, for the data ratio and the env-step budget.
    action_repeat = schedule.action_repeat_of(train_env if collects else eval_env)
    train_schedule = schedule.TrainSchedule(train_steps_per_iteration,
                                            train_steps_per_env_step, action_repeat)
    train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
    agent = latent_sac_agent.LatentSacAgent(
        train_env.time_step_spec(), train_env.action_spec(), train_step_counter=train_step,
        train_sac=not world_model_only)
    if freeze_world_model:
      agent.set_train_world_model(False)
    export.save_specs(root_dir, train_env.time_step_spec(), train_env.action_spec())

    if remote is not None:
      remote.attach(agent, train_step)  # checks the server's tables fit this agent
      replay_server = remote
    else:
      table = replay.make_experience_table(agent.collect_data_spec)
      replay_server = replay.ReplayServer([table], root_dir=root_dir)
    episode_observer = observers.TFReverbObserver(
        lambda: observers.ReverbEpisodeObserver(replay_server.client, sequence_length),
        batch_size=train_env.batch_size)
    eval_video = videos.EvalVideo(os.path.join(root_dir, EVAL_DIR, videos.VIDEO_DIR),
                                  agent.world_model)
    collection = episode_drivers.Collection(
        train_env, eval_env, agent.collect_policy, agent.policy, episode_observer,
        random_collect=world_model_only, eval_observers=[eval_video.observer])

    iteration = tf.Variable(0, dtype=tf.int64, name='iteration')
    best_eval_return = tf.Variable(-np.inf, dtype=tf.float64, name='best_eval_return')
    run_checkpoints = checkpoints.RunCheckpoints(
        os.path.join(root_dir, CHECKPOINT_DIR), agent=agent, iteration=iteration,
        best_eval_return=best_eval_return, **collection.checkpoint_objects())
    world_model_checkpoints = tf.train.CheckpointManager(
        checkpoints.world_model_checkpoint(agent.world_model),
        os.path.join(root_dir, checkpoints.WORLD_MODEL_DIR), max_to_keep=2)
    restored = run_checkpoints.restore()
    if restored:
      print(f'Resumed {root_dir} from {restored}: iteration {int(iteration.numpy())}, '
            f'train step {int(train_step.numpy())}', flush=True)
      tf.keras.utils.set_random_seed((seed + 1_000_003 * int(iteration.numpy())) % 2**31)
      if world_model_checkpoint:
        print('world_model_checkpoint ignored: the run resumes from its own checkpoint.')
    elif world_model_checkpoint:
      checkpoints.restore_world_model(agent.world_model, world_model_checkpoint)

    operative_config = gin.operative_config_str()
    _report_config_changes(root_dir, operative_config)
    with open(os.path.join(root_dir, OPERATIVE_CONFIG), 'w') as f:
      f.write(operative_config)

    def save_all():
      """Run checkpoint, world model and replay, in that order (see docstring)."""
      run_checkpoints.save(train_step.numpy())
      world_model_checkpoints.save(checkpoint_number=int(train_step.numpy()))
      replay_server.checkpoint()

    policies_dir = os.path.join(root_dir, export.POLICIES_DIR)
    train_writer = tf.summary.create_file_writer(os.path.join(root_dir, TRAIN_DIR))
    eval_writer = tf.summary.create_file_writer(os.path.join(root_dir, EVAL_DIR))
    train_fn = common.function(agent.train)
    open_loop_fn = common.function(agent.world_model.open_loop_prediction)

    if remote is not None:
      if int(train_step.numpy()) > 0:
        remote.publish()  # a resumed learner: collectors use its policy at once
      if not collects:  # else this learner's own warm-up and episodes fill it too
        remote.wait_for_data(remote_wait_for_data_s)
    stored_windows = replay_server.table_size()
    if stored_windows == 0 and initial_collect_episodes > 0:
      print(f'Warm-up: {initial_collect_episodes} random episodes ...', flush=True)
      start = time.time()
      collection.warmup(initial_collect_episodes)
      print(f'Warm-up done: {int(collection.train_metrics["env_steps"].result())} env '
            f'steps in {time.time() - start:.1f}s', flush=True)
    elif stored_windows:
      print(f'Replay holds {stored_windows} windows: warm-up skipped.', flush=True)

    sampler = replay.ReplaySampler(
        agent.collect_data_spec, replay_server.address, sequence_length,
        batch_size=batch_size, timeout_s=sample_timeout_s)
    sac_sampler = (replay.ReplaySampler(
        agent.collect_data_spec, replay_server.address, sequence_length,
        batch_size=sac_batch_size, timeout_s=sample_timeout_s) if sac_batch_size else None)

    stop = stop_signals.StopRequested(
        'finishing the train step, then checkpointing and exiting (send it again '
        'to abort).').install()
    start_iteration = int(iteration.numpy())
    progress = summaries.Progress(num_iterations, start=start_iteration,
                                  time_budget_s=time_budget_s)
    counters = lambda: {'env_steps': int(collection.train_metrics['env_steps'].result()),
                        'train_steps': int(train_step.numpy())}
    progress.rates(counters())
    last_eval_return = None
    loss_info = None
    try:
      out_of_time = lambda: (time_budget_s is not None
                             and time.time() - progress.started_at > time_budget_s)
      out_of_data = lambda: (env_step_budget is not None
                             and counters()['env_steps'] * action_repeat >= env_step_budget)
      while (int(iteration.numpy()) < num_iterations and stop.signal is None
             and not out_of_time() and not out_of_data()):
        steps_before = counters()['env_steps']
        collection.collect(collect_episodes_per_iteration)
        for _ in range(train_schedule.train_steps(counters()['env_steps'] - steps_before)):
          experience = next(sampler)
          if sac_sampler is None:
            loss_info = train_fn(experience)
          else:
            loss_info = train_fn(experience, sac_experience=next(sac_sampler))
          if stop.signal is not None:
            break
        iteration.assign_add(1)
        if remote is not None:
          remote.publish()
        it = int(iteration.numpy())
        rates = progress.rates(counters())

        if summary_interval and it % summary_interval == 0 and loss_info is not None:
          with train_writer.as_default():
            step = train_step
            summaries.write_scalars(
                {k: v for k, v in loss_info.extra.items()}, step, 'losses/')
            summaries.write_scalars({
                'metrics/return': collection.train_metrics['return'].result(),
                'metrics/episode_length': collection.train_metrics['episode_length'].result(),
                'metrics/env_steps': collection.train_metrics['env_steps'].result(),
                'metrics/episodes': collection.train_metrics['episodes'].result(),
                'rates/env_steps_per_sec': rates['env_steps'],
                'rates/train_steps_per_sec': rates['train_steps'],
                'metrics/iteration': it,
            }, step)
            if image_summary_interval and it % image_summary_interval == 0:
              context = max(1, sequence_length // 3)
              truth, prediction = open_loop_fn(
                  experience.observation, experience.action, experience.step_type, context)
              tf.summary.image('open_loop/truth_top_model_bottom',
                               summaries.open_loop_strip(truth, prediction), step=step)

        if eval_env is not None and eval_interval and (
            it % eval_interval == 0 or it == num_iterations or out_of_time()
            or out_of_data()):
          eval_video.arm()  # records the first eval episode
          last_eval_return = collection.evaluate(eval_episodes)
          _append_eval_record(root_dir, {
              'iteration': it, 'train_step': int(train_step.numpy()),
              'env_steps': counters()['env_steps'],
              'wall_time_s': round(time.time() - progress.started_at, 1),
              'eval_return': last_eval_return})
          best_eval_return.assign(max(float(best_eval_return.numpy()), last_eval_return))
          with eval_writer.as_default():
            summaries.write_scalars({
                'metrics/return': last_eval_return,
                'metrics/episode_length': collection.eval_metrics['episode_length'].result(),
            }, train_step)
            eval_video.write(int(train_step.numpy()))  # ROOT/eval/videos/eval_<step>.gif

        if checkpoint_interval and it % checkpoint_interval == 0:
          save_all()
        if policy_export_interval and it % policy_export_interval == 0:
          export.export_policies(agent, policies_dir, train_step, operative_config)

        fields = {
            'train step': int(train_step.numpy()),
            'env steps': counters()['env_steps'],
            'replay windows': replay_server.table_size() if remote is not None else None,
            'env steps/s': rates['env_steps'],
            'train steps/s': rates['train_steps'],
            # The loss is dominated by the image NLL's constant (~0.92 per pixel
            # channel); KL and reward error show the model learning.
            **{label: _scalar(loss_info.extra[term]) if loss_info is not None else None
               for label, term in (('model loss', 'model_loss'), ('kl', 'kl'),
                                   ('reward mse', 'reward_mse'))},
            'return': _scalar(collection.train_metrics['return'].result()),
            'eval return': last_eval_return,
        }
        print(progress.line(it, fields), flush=True)
    finally:
      stop.restore()
      # Whatever ended the loop (done, a signal, an error), keep what was done.
      # A non-finite loss raised before any variable changed, so this is safe.
      save_all()
      export.export_policies(agent, policies_dir, train_step, operative_config)
      train_writer.flush()
      eval_writer.flush()

    result = {
        'root_dir': root_dir,
        'iterations': int(iteration.numpy()),
        'train_steps': int(train_step.numpy()),
        'env_steps': int(collection.train_metrics['env_steps'].result()),
        # Environment (physics) steps: the unit of train_steps_per_env_step.
        'physics_steps': int(collection.train_metrics['env_steps'].result()) * action_repeat,
        'action_repeat': action_repeat,
        'episodes': int(collection.train_metrics['episodes'].result()),
        'last_eval_return': last_eval_return,
        'best_eval_return': (float(best_eval_return.numpy())
                             if np.isfinite(best_eval_return.numpy()) else None),
        'replay_windows': replay_server.table_size(),
        # What ended the loop: a signal, num_iterations, the env-step budget, else
        # the wall-clock budget (asked after the loop, the clock would also count
        # the final save).
        'stopped_by': stop.signal or (
            'num_iterations' if int(iteration.numpy()) >= num_iterations else
            'env_step_budget' if out_of_data() else 'time_budget_s'),
        'wall_time_s': round(time.time() - progress.started_at, 1),
    }
  except BaseException:
    # Close the envs in their own thread even on errors: their OpenGL
    # contexts otherwise fail noisily at exit.
    for env in opened_envs:
      close_tf_env(env)
    raise
  replay_server.stop()
  # Close in the envs' own thread, which frees their OpenGL contexts there.
  for env in opened_envs:
    close_tf_env(env)
  _print_summary(result)
  with open(os.path.join(root_dir, 'run_summary.json'), 'w') as f:
    json.dump(result, f, indent=2)
  return result


def _bindings(config_text):
  """Binding lines of a gin config, without comments and blank lines."""
  lines = []
  for line in config_text.splitlines():
    line = line.split('#', 1)[0].rstrip()
    if line:
      lines.append(line)
  return lines


def _report_config_changes(root_dir, new_config):
  """Prints how this start's gin config differs from the run's saved one."""
  path = os.path.join(root_dir, OPERATIVE_CONFIG)
  if not os.path.exists(path):
    return
  with open(path) as f:
    old = _bindings(f.read())
  new = _bindings(new_config)
  removed = [line for line in old if line not in new]
  added = [line for line in new if line not in old]
  if removed or added:
    print(f'NOTE: the gin config differs from the one saved in {path}:', flush=True)
    for line in removed:
      print(f'  - {line}')
    for line in added:
      print(f'  + {line}')
    with open(os.path.join(root_dir, 'operative_config.previous.gin'), 'w') as f:
      f.write('\n'.join(old) + '\n')


def _append_eval_record(root_dir, record):
  """ROOT/eval_returns.csv: one line per evaluation, for plotting learning curves."""
  path = os.path.join(root_dir, EVAL_RECORDS)
  new = not os.path.exists(path)
  with open(path, 'a') as f:
    if new:
      f.write(','.join(record) + '\n')
    f.write(','.join(str(v) for v in record.values()) + '\n')


def _print_summary(result):
  root = result['root_dir']
  print('\n=== run summary ===')
  for key in ('iterations', 'train_steps', 'env_steps', 'episodes', 'last_eval_return',
              'best_eval_return', 'replay_windows', 'wall_time_s', 'stopped_by'):
    print(f'  {key:18s} {result[key]}')
  print(f'  checkpoints        {os.path.join(root, CHECKPOINT_DIR)}')
  print(f'  replay             {os.path.join(root, replay.REPLAY_DIR)}')
  print(f'  policies           {os.path.join(root, export.POLICIES_DIR)}')
  print(f'  tensorboard        tensorboard --logdir {root}')
  print(f'  config             {os.path.join(root, OPERATIVE_CONFIG)}', flush=True)

"""The learner: setup, then a short loop of collect and train, with interval hooks.

One iteration = `collect_episodes_per_iteration` policy episodes into the
replay, then the train steps they earn at `train_steps_per_env_step` (or a
fixed `train_steps_per_iteration`) on sampled windows. Everything periodic
(summaries, evaluation and its records, checkpoints, export, the progress
line) is a hook in `hooks`. What the run writes where: `layout`.
"""
import dataclasses
import json
import os
import sys
import time
from typing import Any, Callable

import gin
import numpy as np
import tensorflow as tf
from tf_agents.utils import common

from planet_tfa import checkpoints
from planet_tfa import episodes
from planet_tfa import experiment as experiment_lib
from planet_tfa import hardware
from planet_tfa import hooks as hooks_lib
from planet_tfa import layout
from planet_tfa import precision
from planet_tfa import saved_policies
from planet_tfa import schedule
from planet_tfa import stop_signals
from planet_tfa import summaries
from planet_tfa import validation
from planet_tfa.agents import autopilot_expert
from planet_tfa.agents import expert_policy
from planet_tfa.agents import world_model
from planet_tfa.environments import suites
from planet_tfa.replay import tables
from planet_tfa import videos


@gin.configurable(denylist=['root_dir', 'replay_server', 'experiment', 'on_start'])
def train_eval(root_dir,
               num_iterations=1000,
               initial_collect_episodes=5,
               initial_collect_env_steps=None,
               warmup_policy='random',
               expert='controller',
               expert_episodes_per_iteration=0,
               model_pretrain_steps=0,
               collect_episodes_per_iteration=1,
               train_steps_per_iteration=None,
               train_steps_per_env_step=0.1,
               batch_size=32,
               eval_interval=10,
               eval_episodes=1,
               eval_on_train_env=False,
               checkpoint_interval=10,
               summary_interval=1,
               image_summary_interval=10,
               policy_export_interval=50,
               progress_interval_s=30.0,
               sample_timeout_s=60.0,
               sac_batch_size=None,
               sac_updates_per_train_step=1,
               eval_stochastic=True,
               time_budget_s=None,
               env_step_budget=None,
               world_model_checkpoint=None,
               freeze_world_model=False,
               world_model_only=False,
               replay_server=None,
               remote_collect_episodes_per_iteration=0,
               server_deadline_s=60.0,
               remote_wait_for_data_s=600.0,
               experiment=None,
               on_start=None):
  """Trains a LatentSacAgent; returns a dict summarising the run.

  The task, seed and replay window come from `experiment` (default: the
  gin-configured `Experiment`), which the server and collectors share.

  Args:
    root_dir: where everything is written (`layout`).
    num_iterations: total iterations of the run (a resumed run continues to it).
    initial_collect_episodes: random-policy episodes before training, skipped
      when the (restored) replay already holds windows.
    initial_collect_env_steps: the warm-up size in environment (physics)
      steps instead (whole episodes until at least this many; SLAC: 10000);
      None: `initial_collect_episodes` decides.
    warmup_policy: who drives the warm-up: 'random' (uniform actions) or
      'expert' (`expert_policy.ExpertDrivingPolicy`, a route-following
      controller on the driving tasks' `state`, with action noise): random
      actions cannot drive a car.
    expert: who the expert of the warm-up and the demonstrations is:
      'controller' (`expert_policy.ExpertDrivingPolicy`, with action noise)
      or 'autopilot' (the simulator's own: CARLA's Traffic Manager drives the
      planned route and the replay records the controls it applied,
      `autopilot_expert`; CarlaAutopilot sets its speed).
    expert_episodes_per_iteration: expert episodes added to the replay every
      iteration next to the agent's own (demonstrations; they earn train
      steps like any collected data). 0: none.
    model_pretrain_steps: world-model updates on the warm-up data before SAC's
      first update (SLAC pre-trains its model); counted in the summary and
      resumed where a stop left them. Done only by a run that has not trained.
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
    progress_interval_s: during an iteration's train steps, a progress line
      (steps done, rate, time left) at most this often; 0: none.
    sample_timeout_s: sampling raises ReplayEmptyError after this long.
    sac_batch_size: None (default): SAC learns from the features of the world
      model's own batch. A number: SAC gets its own batch of that many windows,
      encoded without gradients (SLAC's layout, a second encoder pass).
    sac_updates_per_train_step: SAC updates per world-model update. The first
      is the train step's own; each further one samples its own fresh windows
      (`sac_batch_size` of them, else `batch_size`) and encodes them without
      gradients. SAC updates cost a fraction of a model update, and SLAC makes
      several times more of them.
    eval_stochastic: every evaluation also runs the stochastic (collect)
      policy for `eval_episodes` episodes (SLAC's published curves are of it);
      both returns go to ROOT/eval_returns.csv and TensorBoard.
    time_budget_s: stop (checkpointed, evaluated) once this much wall time has
      passed in this process since the warm-up, checked after each iteration
      (so at least one runs); None: no limit. For equal-budget comparisons.
    env_step_budget: stop (checkpointed, evaluated) once the run has
      collected this many environment (physics) steps, warm-up included: the
      papers' "100k environment steps". None: no limit.
    world_model_checkpoint: a run root or checkpoint whose world model
      (encoders, RSSM, decoders, reward head) initialises this run's; actor,
      critics and alpha start fresh. Only used when the run has no checkpoint.
    freeze_world_model: do not update the world model (e.g. a restored one).
    world_model_only: train only the world model, collecting with a random
      policy; its ROOT/world_model checkpoints feed world_model_checkpoint.
    replay_server: 'host:port' of a standalone server (`python -m
      planet_tfa.programs.serve`, docs/distributed.md). Collectors fill it;
      this process samples the remote table, publishes the collect policy's
      variables + train step after every iteration and evaluates locally. It
      collects nothing itself unless `remote_collect_episodes_per_iteration`
      > 0 (then also the random warm-up into an empty table). None:
      everything in this process with its own server.
    server_deadline_s: give up on an unreachable replay_server after this long.
    remote_wait_for_data_s: how long to wait for collectors to fill the remote
      table up to its minimum size before raising ReplayEmptyError.
    experiment: the `experiment.Experiment`; None: the gin-configured one.
    on_start: called with the root once the settings passed their checks and
      the root exists, before anything else (the program opens its log file).
  """
  experiment = experiment or experiment_lib.Experiment()
  settings = dict(locals())
  # Bad settings fail here, before any directory, env, model or warm-up.
  validation.check_train_eval(settings, experiment)
  root_dir = os.path.abspath(os.path.expanduser(root_dir))
  os.makedirs(root_dir, exist_ok=True)
  if on_start is not None:
    on_start(root_dir)
  tf.keras.utils.set_random_seed(experiment.seed)  # Python, NumPy, TF and Keras initialisers

  # Distributed mode: connect first, so a wrong address fails before any env starts.
  remote = (experiment_lib.connect_replay(replay_server, server_deadline_s)
            if replay_server else None)
  if remote is not None:
    collect_episodes_per_iteration = remote_collect_episodes_per_iteration
    if collect_episodes_per_iteration <= 0:
      initial_collect_episodes = 0  # the collectors act randomly until the first publish
      _check_counts_remote_steps(remote, settings)
  collects = remote is None or collect_episodes_per_iteration > 0

  opened_envs = []
  try:
    # Inside the try: an env that fails to build still closes the one built before it.
    train_env = eval_env = None
    if collects:
      train_env = experiment_lib.make_env(experiment)
      opened_envs.append(train_env)
    if eval_episodes > 0:
      if eval_on_train_env and train_env is not None:
        eval_env = train_env
      else:
        eval_env = experiment_lib.make_env(experiment, seed=experiment.seed + 1)
        opened_envs.append(eval_env)
    if train_env is None:  # remote collectors gather the data: the specs suffice
      train_env = experiment_lib.SpecsOnlyEnv(
          *experiment_lib.env_specs(experiment, root_dir, tf_env=eval_env))
    settings.update(collect_episodes_per_iteration=collect_episodes_per_iteration,
                    initial_collect_episodes=initial_collect_episodes)
    result = _train(root_dir, experiment, settings, train_env=train_env, eval_env=eval_env,
                    collects=collects, remote=remote)
  finally:
    # Close in the envs' own thread (their OpenGL contexts otherwise fail
    # noisily at exit), on errors too.
    for env in opened_envs:
      experiment_lib.close_env(env)
  _print_summary(result)
  with open(os.path.join(root_dir, layout.RUN_SUMMARY), 'w') as f:
    json.dump(result, f, indent=2)
  return result


@dataclasses.dataclass
class _Run:
  """What setup made and the loop, the hooks and the summary use."""
  agent: Any
  replay: Any                 # replay.handles.LocalReplay or RemoteReplay
  collection: Any             # episodes.Collection
  eval_video: Any
  iteration: tf.Variable
  best_eval_return: tf.Variable
  save_all: Callable[[], None]  # run checkpoint, world model, replay
  export: Callable[[], None]    # the policy SavedModels
  action_repeat: int
  updates: Any                  # _UpdateCounters

  @property
  def train_step(self):
    return self.agent.train_step_counter

  def counters(self):
    return {'env_steps': int(self.collection.train_metrics['env_steps'].result()),
            'train_steps': int(self.train_step.numpy())}


class _UpdateCounters:
  """Updates that are not train steps, checkpointed with the run."""

  def __init__(self):
    self.pretrain_steps = tf.Variable(0, dtype=tf.int64, name='model_pretrain_steps')
    self.extra_sac_updates = tf.Variable(0, dtype=tf.int64, name='extra_sac_updates')
    # The data ratio's credit (`schedule.TrainSchedule.credit`): fractions of a
    # step and the steps a stop cut short, owed after a resume.
    self.train_credit = tf.Variable(0.0, dtype=tf.float64, name='train_credit')

  def checkpoint_objects(self):
    return {'model_pretrain_steps': self.pretrain_steps,
            'extra_sac_updates': self.extra_sac_updates,
            'train_credit': self.train_credit}


def _train(root_dir, experiment, s, train_env, eval_env, collects, remote):
  """Setup, the loop and the final save; returns the run summary.

  `s`: train_eval's settings by name.
  """
  run = _setup(root_dir, experiment, s, train_env, eval_env, remote, collects)
  _fill_replay(run, s, collects)
  train_writer = tf.summary.create_file_writer(os.path.join(root_dir, layout.TRAIN_DIR))
  eval_writer = tf.summary.create_file_writer(os.path.join(root_dir, layout.EVAL_DIR))
  # The budget in agent steps, as the progress line and the metrics count them.
  agent_step_budget = (None if s['env_step_budget'] is None
                       else -(-s['env_step_budget'] // run.action_repeat))
  progress = summaries.Progress(s['num_iterations'], start=int(run.iteration.numpy()),
                                time_budget_s=s['time_budget_s'],
                                env_step_budget=agent_step_budget,
                                start_env_steps=run.counters()['env_steps'])
  hooks = [
      hooks_lib.ScalarSummaryHook(s['summary_interval'], train_writer,
                                  run.collection.train_metrics),
      hooks_lib.OpenLoopImageHook(
          s['image_summary_interval'] if s['summary_interval'] else 0, train_writer,
          common.function(run.agent.world_model.open_loop_prediction),
          experiment.sequence_length),
      hooks_lib.EvalHook(s['eval_interval'] if eval_env is not None else 0,
                         s['eval_episodes'], run.collection, root_dir, eval_writer,
                         run.best_eval_return, video=run.eval_video,
                         started_at=progress.started_at),
      hooks_lib.CallbackHook(s['checkpoint_interval'], run.save_all),
      hooks_lib.CallbackHook(s['policy_export_interval'], run.export),
      hooks_lib.ProgressHook(progress, run.collection.train_metrics,
                             replay_size=run.replay.table_size if run.replay.is_remote else None,
                             random_return=suites.random_policy_return(experiment.env_loader)),
  ]
  ends = {
      'num_iterations': lambda: int(run.iteration.numpy()) >= s['num_iterations'],
      'env_step_budget': lambda: (agent_step_budget is not None
                                  and run.counters()['env_steps'] >= agent_step_budget),
      # Checked after an iteration: the setup before the first one (samplers,
      # tracing) never uses up a budget before any training.
      'time_budget_s': lambda: (s['time_budget_s'] is not None
                                and int(run.iteration.numpy()) > progress.start
                                and time.time() - progress.started_at > s['time_budget_s']),
  }
  stop = stop_signals.StopRequested(
      'finishing the train step, then checkpointing and exiting (send it again '
      'to abort).').install()
  try:
    _pretrain_world_model(run, s, experiment, stop)
    state = _loop(run, s, experiment, progress, hooks, stop,
                  ended=lambda: any(end() for end in ends.values()))
  finally:
    stop.restore()
    # Whatever ended the loop (done, a signal, an error), keep what was done.
    # A non-finite loss raised before any variable changed, so this is safe.
    run.save_all()
    run.export()
    train_writer.flush()
    eval_writer.flush()

  env_steps = run.counters()['env_steps']
  train_steps = int(run.train_step.numpy())
  pretrain_steps = int(run.updates.pretrain_steps.numpy())
  result = {
      'root_dir': root_dir,
      'iterations': int(run.iteration.numpy()),
      'train_steps': train_steps,
      # Every world-model update: pre-training plus one per train step.
      'model_pretrain_steps': pretrain_steps,
      'model_updates': pretrain_steps + (train_steps if not s['freeze_world_model'] else 0),
      'sac_updates': ((train_steps if not s['world_model_only'] else 0)
                      + int(run.updates.extra_sac_updates.numpy())),
      'env_steps': env_steps,
      # Environment (physics) steps: the unit of train_steps_per_env_step.
      'physics_steps': env_steps * run.action_repeat,
      'action_repeat': run.action_repeat,
      'episodes': int(run.collection.train_metrics['episodes'].result()),
      'last_eval_return': state.eval_return,
      'last_eval_return_stochastic': state.eval_return_stochastic,
      'best_eval_return': (float(run.best_eval_return.numpy())
                           if np.isfinite(run.best_eval_return.numpy()) else None),
      'replay_windows': run.replay.table_size(),
      # What ended the loop: a signal, else the first end that holds (asked in
      # this order: the wall clock would also count the final save).
      'stopped_by': stop.signal or next(
          (name for name, end in ends.items() if end()), 'time_budget_s'),
      'wall_time_s': round(time.time() - progress.started_at, 1),
  }
  run.replay.stop()
  return result


def _loop(run, s, experiment, progress, hooks, stop, ended):
  """Collect, train the steps the data earned, then the hooks; until an end or a signal."""
  train_schedule = schedule.TrainSchedule(s['train_steps_per_iteration'],
                                          s['train_steps_per_env_step'], run.action_repeat)
  train_schedule.credit = float(run.updates.train_credit.numpy())
  sampler = experiment_lib.make_sampler(experiment, run.agent, run.replay.address,
                                        s['batch_size'], s['sample_timeout_s'])
  sac_sampler = (experiment_lib.make_sampler(experiment, run.agent, run.replay.address,
                                             s['sac_batch_size'], s['sample_timeout_s'])
                 if s['sac_batch_size'] else None)
  extra_sac_updates = 0 if s['world_model_only'] else s['sac_updates_per_train_step'] - 1
  extra_sac_sampler = None
  if extra_sac_updates:
    extra_sac_sampler = sac_sampler or experiment_lib.make_sampler(
        experiment, run.agent, run.replay.address, s['batch_size'], s['sample_timeout_s'])
  train_fn = common.function(run.agent.train)
  sac_only_fn = common.function(run.agent.train_sac_only)
  progress.loop_starts(run.counters()['env_steps'])
  progress.rates(run.counters())
  state = hooks_lib.IterationState(int(run.iteration.numpy()), int(run.train_step.numpy()),
                                   run.counters()['env_steps'], {})
  counts_remote = _counts_remote_steps(run)
  # Trained per env step on the collectors' data alone: an iteration waits for
  # at least one of their episodes, as a local one collects at least one.
  waits_for_remote = (counts_remote and s['collect_episodes_per_iteration'] <= 0
                      and s['train_steps_per_env_step'] is not None)
  while not ended() and stop.signal is None:
    steps_before = run.counters()['env_steps']
    run.collection.collect(s['collect_episodes_per_iteration'])
    if counts_remote:
      run.collection.count_remote(*run.replay.drain_collected_steps(
          wait_s=0.2 if waits_for_remote else 0.0, deadline_s=s['remote_wait_for_data_s']))
    if run.collection.has_expert:
      run.collection.demonstrate(s['expert_episodes_per_iteration'])
    num_train_steps = train_schedule.train_steps(run.counters()['env_steps'] - steps_before)
    within = summaries.StepProgress(f'iter {state.iteration + 1}: train steps',
                                    num_train_steps, s['progress_interval_s'])
    done = 0
    while done < num_train_steps:
      state.experience = next(sampler)
      extra = {} if sac_sampler is None else {'sac_experience': next(sac_sampler)}
      state.loss_info = train_fn(state.experience, **extra)
      for _ in range(extra_sac_updates):
        sac_only_fn(next(extra_sac_sampler))
      run.updates.extra_sac_updates.assign_add(extra_sac_updates)
      done += 1
      within.update(done)
      if stop.signal is not None:
        break
    train_schedule.owe(num_train_steps - done)  # a stop's unfinished steps
    run.updates.train_credit.assign(train_schedule.credit)
    run.iteration.assign_add(1)
    run.replay.publish()
    state.iteration = int(run.iteration.numpy())
    state.train_step = int(run.train_step.numpy())
    state.env_steps = run.counters()['env_steps']
    state.rates = progress.rates(run.counters())
    state.final = ended()
    for hook in hooks:
      hook(state)
  return state


def _decide_image_precision(experiment, batch_size):
  """WorldModel.image_precision for this run: 'auto' measured at the run's batch
  (precision.decide) and bound, so the model and operative_config.gin say the same."""
  requested = validation.check_image_precision()
  depth = validation.bound_value('WorldModel', 'image_depth', world_model.WorldModel)
  decision = precision.decide(requested, depth=depth,
                              frames=batch_size * experiment.sequence_length)
  if requested == precision.AUTO:
    with gin.unlock_config():
      gin.bind_parameter('WorldModel.image_precision', decision.precision)
  return decision


def _setup(root_dir, experiment, s, train_env, eval_env, remote, collects):
  """The agent, its replay, the drivers, the checkpoints (restored) and the saved config."""
  train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
  image_precision = _decide_image_precision(experiment, s['batch_size'])
  agent = experiment_lib.make_agent(train_env.time_step_spec(), train_env.action_spec(),
                                    train_step, train_sac=not s['world_model_only'])
  print(f'{hardware.summary_line()}; world-model {image_precision.describe()}', flush=True)
  if s['freeze_world_model']:
    agent.set_train_world_model(False)
  experiment_lib.save_specs(root_dir, train_env.time_step_spec(), train_env.action_spec())
  replay = experiment_lib.make_replay(agent, root_dir, remote)
  eval_video = videos.EvalVideo(os.path.join(root_dir, layout.VIDEO_DIR), agent.world_model)
  uses_expert = collects and (s['warmup_policy'] == 'expert'
                              or s['expert_episodes_per_iteration'] > 0)
  collection = episodes.Collection(
      train_env, eval_env, agent.collect_policy, agent.policy,
      experiment_lib.make_episode_observer(experiment, replay.client, train_env.batch_size),
      random_collect=s['world_model_only'], eval_observers=[eval_video.observer],
      eval_stochastic_policy=agent.collect_policy if s['eval_stochastic'] else None,
      expert_policy=(expert_policy.ExpertDrivingPolicy(
          train_env.time_step_spec(), train_env.action_spec(),
          control_ranges=expert_policy.env_control_ranges(train_env))
                     if uses_expert and s['expert'] == 'controller' else None),
      autopilot_expert=(autopilot_expert.AutopilotExpert(train_env)
                        if uses_expert and s['expert'] == 'autopilot' else None))

  iteration = tf.Variable(0, dtype=tf.int64, name='iteration')
  best_eval_return = tf.Variable(-np.inf, dtype=tf.float64, name='best_eval_return')
  counters = _UpdateCounters()
  run_checkpoints = checkpoints.RunCheckpoints(
      os.path.join(root_dir, layout.CHECKPOINT_DIR), agent=agent, iteration=iteration,
      best_eval_return=best_eval_return, optional=counters.checkpoint_objects(),
      **collection.checkpoint_objects())
  world_model_checkpoints = tf.train.CheckpointManager(
      checkpoints.world_model_checkpoint(agent.world_model),
      os.path.join(root_dir, layout.WORLD_MODEL_DIR), max_to_keep=2)
  restored = run_checkpoints.restore()
  if restored:
    print(f'Resumed {root_dir} from {restored}: iteration {int(iteration.numpy())}, '
          f'train step {int(train_step.numpy())}', flush=True)
    # Reseed from the iteration: a resumed run does not replay its start's randomness.
    tf.keras.utils.set_random_seed(
        (experiment.seed + 1_000_003 * int(iteration.numpy())) % 2**31)
    if s['world_model_checkpoint']:
      print('world_model_checkpoint ignored: the run resumes from its own checkpoint.')
  elif s['world_model_checkpoint']:
    checkpoints.restore_world_model(agent.world_model, s['world_model_checkpoint'])

  operative_config = gin.operative_config_str()
  _report_config_changes(root_dir, operative_config)
  with open(os.path.join(root_dir, layout.OPERATIVE_CONFIG), 'w') as f:
    f.write(operative_config)

  def save_all():
    """Run checkpoint, world model and replay, in that order (see train_eval)."""
    run_checkpoints.save(train_step.numpy())
    world_model_checkpoints.save(checkpoint_number=int(train_step.numpy()))
    replay.checkpoint()

  def export():
    saved_policies.export_policies(agent, os.path.join(root_dir, layout.POLICIES_DIR),
                                   train_step, operative_config)

  # Environment steps per agent step, for the data ratio and the env-step budget.
  action_repeat = schedule.action_repeat_of(train_env if collects else eval_env)
  return _Run(agent, replay, collection, eval_video, iteration, best_eval_return, save_all,
              export, action_repeat, counters)


def _pretrain_world_model(run, s, experiment, stop):
  """World-model updates on the warm-up data before SAC's first update.

  Only a run that has made no train step pre-trains; a stop in the middle
  checkpoints the count, and the resumed run does the rest.
  """
  target = s['model_pretrain_steps']
  done = int(run.updates.pretrain_steps.numpy())
  if (not target or done >= target or int(run.train_step.numpy()) > 0
      or s['freeze_world_model']):
    return
  print(f'Pre-training the world model: {target - done} updates on the warm-up data '
        f'({done} done before) ...', flush=True)
  sampler = experiment_lib.make_sampler(experiment, run.agent, run.replay.address,
                                        s['batch_size'], s['sample_timeout_s'])
  pretrain_fn = common.function(run.agent.pretrain_world_model)
  within = summaries.StepProgress('pre-training', target - done, s['progress_interval_s'])
  start = time.time()
  terms = {}
  for step in range(done, target):
    terms = pretrain_fn(next(sampler))
    run.updates.pretrain_steps.assign_add(1)
    within.update(step - done + 1)
    if stop.signal is not None:
      break
  loss = float(terms['model_loss']) if terms else float('nan')
  print(f'Pre-training: {int(run.updates.pretrain_steps.numpy())}/{target} updates, model '
        f'loss {loss:.2f}, {time.time() - start:.0f}s', flush=True)
  run.save_all()


def _check_counts_remote_steps(remote, s):
  """A learner that only trains on collectors' data and counts their env steps needs their queue."""
  needs = [f'train_eval.{name}={s[name]}' for name in ('train_steps_per_env_step',
                                                       'env_step_budget')
           if s[name] is not None]
  if needs and not remote.counts_collected_steps():
    raise validation.SettingError(
        f"the Reverb server at {remote.address} has no '{tables.COLLECTED_STEPS_TABLE}' "
        'table: it was started by an older planet_tfa, whose collectors do not report '
        f'their environment steps, and {" and ".join(needs)} count them. Restart the '
        'server and the collectors with this version, or set '
        'train_eval.train_steps_per_iteration (and train_steps_per_env_step=None, '
        'env_step_budget=None).')


def _counts_remote_steps(run):
  """Whether the collectors' episodes count as this run's env steps (a server that has their queue)."""
  return run.replay.is_remote and run.replay.counts_collected_steps()


def _fill_replay(run, s, collects):
  """The random warm-up into an empty table; with remote collectors, wait for their data."""
  if int(run.train_step.numpy()) > 0:
    run.replay.publish()  # a resumed learner: remote collectors use its policy at once
  if not collects:  # only remote collectors fill it (else this learner's warm-up does)
    run.replay.wait_for_data(s['remote_wait_for_data_s'])
    if _counts_remote_steps(run) and run.counters()['env_steps'] == 0:
      # What the collectors wrote before this new run's first train step is its
      # warm-up: counted as env steps, owed no train steps (as a local warm-up).
      episodes_done, env_steps = run.replay.drain_collected_steps()
      run.collection.count_remote(episodes_done, env_steps)
      print(f'Warm-up by the collectors: {episodes_done} episodes, {env_steps} env steps.',
            flush=True)
  stored_windows = run.replay.table_size()
  if stored_windows:
    print(f'Replay holds {stored_windows} windows: warm-up skipped.', flush=True)
    return
  # The warm-up's size: environment steps (whole episodes up to it), else episodes.
  env_step_target = s['initial_collect_env_steps']
  if not env_step_target and s['initial_collect_episodes'] <= 0:
    return
  size = (f'episodes up to {env_step_target} environment steps' if env_step_target
          else f'{s["initial_collect_episodes"]} episodes')
  by_expert = s['warmup_policy'] == 'expert'
  who = f'expert ({s["expert"]})' if by_expert else s['warmup_policy']
  print(f'Warm-up: {who} {size} ...', flush=True)
  start = time.time()
  if env_step_target:
    while run.counters()['env_steps'] * run.action_repeat < env_step_target:
      run.collection.warmup(1, by_expert=by_expert)
  else:
    run.collection.warmup(s['initial_collect_episodes'], by_expert=by_expert)
  agent_steps = run.counters()['env_steps']
  print(f'Warm-up done: {agent_steps * run.action_repeat} environment steps ({agent_steps} '
        f'agent steps) in {time.time() - start:.1f}s', flush=True)


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
  path = os.path.join(root_dir, layout.OPERATIVE_CONFIG)
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
    with open(os.path.join(root_dir, layout.PREVIOUS_CONFIG), 'w') as f:
      f.write('\n'.join(old) + '\n')


def _print_summary(result):
  root = result['root_dir']
  print('\n=== run summary ===')
  for key in ('iterations', 'train_steps', 'model_pretrain_steps', 'model_updates',
              'sac_updates', 'env_steps', 'episodes', 'last_eval_return',
              'last_eval_return_stochastic', 'best_eval_return', 'replay_windows',
              'wall_time_s', 'stopped_by'):
    print(f'  {key:28s} {result[key]}')
  for key, value in (('checkpoints', os.path.join(root, layout.CHECKPOINT_DIR)),
                     ('replay', os.path.join(root, layout.REPLAY_DIR)),
                     ('policies', os.path.join(root, layout.POLICIES_DIR)),
                     ('logs', os.path.join(root, layout.LOG_DIR)),
                     ('tensorboard', f'tensorboard --logdir {root}'),
                     ('config', os.path.join(root, layout.OPERATIVE_CONFIG))):
    print(f'  {key:28s} {value}')
  sys.stdout.flush()

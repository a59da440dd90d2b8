"""Checks of a run's settings before anything starts.

`check_train_eval` runs first in `learner.train_eval`: before the root directory,
an environment, a model or the warm-up exist. Each problem raises
`SettingError` (a `errors.ConfigError`) whose message names the binding, the
value given and what is valid; `train_eval.py` prints it without a traceback
and exits 2, as it does for a misspelled gin binding.
"""
import errno
import inspect
import os
import tempfile

import gin
from gin import config_parser as gin_config_parser

from planet_tfa import errors
from planet_tfa import layout
from planet_tfa import precision
from planet_tfa import setting_values
from planet_tfa.agents import cem_policy
from planet_tfa.agents import latent_sac_agent
from planet_tfa.agents import world_model
from planet_tfa.environments import highway
from planet_tfa.environments import suites


class SettingError(errors.ConfigError):
  """A setting has a value the run cannot use."""


# train_eval parameter -> (test, what is valid). Optional ones also take None.
_WHOLE_AT_LEAST_0 = (lambda v: setting_values.is_whole(v) and v >= 0, 'a whole number >= 0')
_WHOLE_AT_LEAST_1 = (lambda v: setting_values.is_whole(v) and v >= 1, 'a whole number >= 1')
_POSITIVE = (lambda v: setting_values.is_number(v) and v > 0, 'a number > 0')
_BOOL = (lambda v: isinstance(v, bool), 'True or False')

_TRAIN_EVAL_RULES = {
    'num_iterations': (_WHOLE_AT_LEAST_0, False, 'iterations of collect + train'),
    'initial_collect_episodes': (_WHOLE_AT_LEAST_0, False, 'random warm-up episodes'),
    'collect_episodes_per_iteration': (_WHOLE_AT_LEAST_0, False, 'policy episodes per iteration'),
    'batch_size': (_WHOLE_AT_LEAST_1, False, 'replay windows per train step'),
    'eval_interval': (_WHOLE_AT_LEAST_0, False, 'iterations between evaluations; 0: never'),
    'eval_episodes': (_WHOLE_AT_LEAST_0, False, 'greedy episodes per evaluation'),
    'checkpoint_interval': (_WHOLE_AT_LEAST_0, False, 'iterations between checkpoints'),
    'summary_interval': (_WHOLE_AT_LEAST_0, False, 'iterations between summaries'),
    'image_summary_interval': (_WHOLE_AT_LEAST_0, False, 'iterations between images'),
    'policy_export_interval': (_WHOLE_AT_LEAST_0, False, 'iterations between exports'),
    'sample_timeout_s': (_POSITIVE, False, 'seconds to wait for a replay sample'),
    'sac_batch_size': (_WHOLE_AT_LEAST_1, True, "SAC's own windows per train step"),
    'sac_updates_per_train_step': (_WHOLE_AT_LEAST_1, False,
                                   'SAC updates per world-model update'),
    'model_pretrain_steps': (_WHOLE_AT_LEAST_0, False,
                             'world-model updates on the warm-up data before SAC'),
    'initial_collect_env_steps': (_WHOLE_AT_LEAST_1, True,
                                  'random warm-up size in environment steps'),
    'eval_stochastic': (_BOOL, False, 'also evaluate the stochastic policy'),
    'warmup_policy': ((lambda v: v in ('random', 'expert'), "'random' or 'expert'"), False,
                      'who drives the warm-up episodes'),
    'expert': ((lambda v: v in ('controller', 'autopilot'), "'controller' or 'autopilot'"),
               False, 'who the expert is'),
    'expert_episodes_per_iteration': (_WHOLE_AT_LEAST_0, False,
                                      'expert demonstration episodes per iteration'),
    'train_steps_per_iteration': (_WHOLE_AT_LEAST_0, True, 'train steps per iteration'),
    'train_steps_per_env_step': ((lambda v: setting_values.is_number(v) and v >= 0, 'a number >= 0'), True,
                                 'train steps per environment step'),
    'time_budget_s': (_POSITIVE, True, 'wall-clock seconds for the run'),
    'env_step_budget': (_WHOLE_AT_LEAST_1, True,
                        'environment (physics) steps to collect, warm-up included'),
    'freeze_world_model': (_BOOL, False, 'keep the world model fixed'),
    'world_model_only': (_BOOL, False, 'train the world model alone'),
    'remote_collect_episodes_per_iteration': (_WHOLE_AT_LEAST_0, False,
                                              'local episodes next to remote collectors'),
    'server_deadline_s': (_POSITIVE, False, 'seconds to reach the replay server'),
    'remote_wait_for_data_s': (_POSITIVE, False, 'seconds to wait for remote data'),
    'progress_interval_s': ((lambda v: setting_values.is_number(v) and v >= 0, 'a number >= 0'), False,
                            'seconds between progress lines within an iteration; 0: none'),
}

# Experiment field -> the same form: the settings every role shares.
_EXPERIMENT_RULES = {
    'sequence_length': ((lambda v: setting_values.is_whole(v) and v >= 2, 'a whole number >= 2'), False,
                        'steps per replay window, T+1'),
    'seed': (_WHOLE_AT_LEAST_0, False, 'the random seed'),
}


def _describe(value):
  return f'{value!r} ({type(value).__name__})'


def bound_value(configurable, parameter, default_fn):
  """The gin binding `configurable.parameter`, else `default_fn`'s default."""
  try:
    return gin.query_parameter(f'{configurable}.{parameter}')
  except ValueError:
    return inspect.signature(default_fn).parameters[parameter].default


def check_root_dir(root_dir):
  """A run root must be a directory, or a path where one can be made."""
  path = os.path.abspath(os.path.expanduser(str(root_dir)))
  probe = path
  while probe and not os.path.exists(probe):
    parent = os.path.dirname(probe)
    if parent == probe:
      break
    probe = parent
  if os.path.exists(probe) and not os.path.isdir(probe):
    what = 'is an existing file' if probe == path else f'lies under the file {probe!r}'
    raise SettingError(
        f'--root_dir={str(root_dir)!r} {what}: a run root must be a directory (a new '
        'one, or a run to resume). Pick another --root_dir or move the file away.')
  problem = _unwritable(probe)
  if problem:
    what = 'is not writable' if probe == path else f'cannot be made in {probe!r}'
    raise SettingError(
        f'--root_dir={str(root_dir)!r} {what} ({problem}). Pick a --root_dir in a '
        'directory you can write to, e.g. under your home or runs/.')


def _unwritable(directory):
  """Why no directory can be made in `directory`; None if one can.

  A trial, not os.access: root passes os.access everywhere, yet cannot write
  to /proc or a read-only mount. The trial directory is removed at once.
  """
  try:
    os.rmdir(tempfile.mkdtemp(prefix='.planet_tfa-probe-', dir=directory))
  except OSError as error:
    return error.strerror or errno.errorcode.get(error.errno, str(error))
  return None


def check_replay_server(address):
  """--replay_server must be HOST:PORT: a typo must not wait for a server that cannot answer."""
  host, _, port = str(address).rpartition(':')
  if not (host and port.isdigit() and 1 <= int(port) <= 65535):
    raise SettingError(
        f'--replay_server={address!r}: must be HOST:PORT with a whole-number port '
        "1-65535, e.g. localhost:8000 (the --port of 'python -m planet_tfa.programs.serve').")


def _check_rules(configurable, rules, settings):
  for name, ((test, valid), optional, meaning) in rules.items():
    if name not in settings:
      continue
    value = settings[name]
    if optional and value is None:
      continue
    if not test(value):
      raise SettingError(
          f'{configurable}.{name}={_describe(value)}: must be {valid}'
          f'{" or None" if optional else ""} ({meaning}).')


def check_experiment(experiment):
  """Raises `SettingError` for an unusable `Experiment` field or environment binding
  (every role checks them)."""
  _check_rules('Experiment', _EXPERIMENT_RULES,
               {name: getattr(experiment, name) for name in _EXPERIMENT_RULES})
  _check_env_bindings()
  check_image_precision()


# Bindings that shape the model's variables: a run resumed with other values
# cannot restore its checkpoint into the model they build.
MODEL_SHAPE_BINDINGS = (
    'WorldModel.encoder_keys', 'WorldModel.decoder_keys', 'WorldModel.image_depth',
    'RSSM.deter_size', 'RSSM.stoch_size', 'RSSM.hidden_size',
    'LatentSacAgent.actor_fc_layers', 'LatentSacAgent.critic_fc_layers',
    'WorldModel.continuation_scale', 'WorldModel.vector_scales')
# Model-shaping bindings added after runs existed: (their value in a run saved
# before them, what of the value shapes the model).
_ADDED_MODEL_BINDINGS = {
    'WorldModel.continuation_scale': (0.0, lambda scale: scale > 0),  # a head or none
    # Not the variables' shapes but what they mean: a model trained on raw metres.
    'WorldModel.vector_scales': (None, lambda scales: {
        k: [float(x) for x in v] for k, v in (scales or {}).items()}),
}


def _saved_bindings(config_path):
  """{'Configurable.param': value} of a run's operative_config.gin (unknown names skipped)."""
  with open(config_path) as f:
    text = f.read()
  parser = gin_config_parser.ConfigParser(text, gin.config.ParserDelegate(skip_unknown=True))
  values = {}
  for statement in parser:
    if isinstance(statement, gin_config_parser.BindingStatement) and not statement.scope:
      values[f'{statement.selector}.{statement.arg_name}'] = statement.value
  return values


def _normalized(value):
  return list(value) if isinstance(value, tuple) else value


def check_resume(root_dir):
  """A run root with checkpoints resumes only into a model of the same shape.

  Compares the model-shaping bindings of ROOT/operative_config.gin with the
  ones gin holds now; a difference would otherwise surface as an unreadable
  checkpoint or a shape error. Raises `SettingError` naming each.
  """
  root = os.path.abspath(os.path.expanduser(str(root_dir)))
  checkpoint_dir = os.path.join(root, layout.CHECKPOINT_DIR)
  config_path = os.path.join(root, layout.OPERATIVE_CONFIG)
  if not (os.path.isdir(checkpoint_dir) and os.path.exists(config_path)
          and any(name.endswith('.index') for name in os.listdir(checkpoint_dir))):
    return
  saved = _saved_bindings(config_path)
  changed = []
  for name in MODEL_SHAPE_BINDINGS:
    before, shape = _ADDED_MODEL_BINDINGS.get(name, (None, _normalized))
    if name in saved:
      old = saved[name]
    elif name in _ADDED_MODEL_BINDINGS and any(k.startswith('WorldModel.') for k in saved):
      old = before  # a run from before the binding existed
    else:
      continue
    try:
      now = gin.query_parameter(name)
    except ValueError:
      if name not in _ADDED_MODEL_BINDINGS:
        continue  # not bound now: the configurable's default, which older runs also recorded
      now = before
    if shape(now) != shape(old):
      changed.append((name, old, now))
  if not changed:
    return
  lines = [f'  {name}: run {old!r}, this config {new!r}' for name, old, new in changed]
  hint = ''
  if any(name == 'WorldModel.encoder_keys' and {'state', 'route'} & set(new or [])
         - set(old or []) for name, old, new in changed):
    hint = ('gin/driving.gin feeds the ego state and the route to the encoders since '
            '2026-12-01 (issue 22); runs before that encoded camera and lidar only. ')
  if any(name == 'WorldModel.continuation_scale' for name, _, _ in changed):
    hint += ('gin/driving.gin trains a continuation head since 2026-12-01 (issue 23); runs '
             'before that have none. ')
  if any(name == 'WorldModel.vector_scales' for name, _, _ in changed):
    hint += ('gin/driving.gin scales the state and route inputs to unit size since '
             '2026-12-07 (issue 57); runs before that took them raw, in metres. ')
  fix = ' '.join(setting_values.shell_word(f'--gin_param={name} = {old!r}')
                 for name, old, _ in changed)
  raise SettingError(
      f'{root} holds checkpoints of a model shaped by other settings than this config:\n'
      + '\n'.join(lines) + f'\n{hint}To resume it, keep its settings ({fix}); for the new '
      'model, start a new --root_dir. Nothing was written.')


def check_train_eval(settings, experiment):
  """Raises `SettingError` for the first unusable setting of `train_eval`.

  `settings`: train_eval's arguments by name (its `locals()` at entry);
  `experiment`: the run's `Experiment`.
  """
  check_root_dir(settings['root_dir'])
  if settings.get('replay_server') is not None:
    check_replay_server(settings['replay_server'])
  _check_rules('train_eval', _TRAIN_EVAL_RULES, settings)
  check_experiment(experiment)

  _check_data_ratio(settings)

  if settings['freeze_world_model'] and not settings['world_model_checkpoint']:
    raise SettingError(
        'train_eval.freeze_world_model=True without train_eval.world_model_checkpoint '
        'would freeze a randomly initialised world model. Set '
        'train_eval.world_model_checkpoint to a run root or world-model checkpoint '
        '(e.g. one written by train_eval.world_model_only=True), or drop '
        'freeze_world_model.')

  burn_in = bound_value('LatentSacAgent', 'sac_burn_in', latent_sac_agent.LatentSacAgent)
  pairs = experiment.sequence_length - 1
  if not (setting_values.is_whole(burn_in) and burn_in >= 0):
    raise SettingError(f'LatentSacAgent.sac_burn_in={_describe(burn_in)}: must be a '
                       'whole number >= 0 (leading pairs of mid-episode windows SAC skips).')
  if not settings['world_model_only'] and burn_in >= pairs:
    raise SettingError(
        f'LatentSacAgent.sac_burn_in={burn_in} with Experiment.sequence_length='
        f'{experiment.sequence_length} leaves SAC no transition of windows that start '
        f'mid-episode (a window has {pairs} pairs), so it would learn only from episode '
        f'starts. Use sac_burn_in <= {pairs - 1} or a longer sequence_length (> '
        f'{burn_in + 1}).')

  acting_window = bound_value('LatentSacAgent', 'acting_window',
                              latent_sac_agent.LatentSacAgent)
  initial_alpha = bound_value('LatentSacAgent', 'initial_alpha',
                              latent_sac_agent.LatentSacAgent)
  td_steps = bound_value('LatentSacAgent', 'td_steps', latent_sac_agent.LatentSacAgent)
  target_pessimism = bound_value('LatentSacAgent', 'target_pessimism',
                                 latent_sac_agent.LatentSacAgent)
  priority_exponent = bound_value('LatentSacAgent', 'critic_priority_exponent',
                                  latent_sac_agent.LatentSacAgent)
  try:
    latent_sac_agent.check_sac_settings(initial_alpha, acting_window, td_steps, target_pessimism,
                                        priority_exponent)
  except errors.ConfigError as error:
    raise SettingError(str(error)) from None
  if not settings['world_model_only'] and td_steps > pairs:
    raise SettingError(
        f'LatentSacAgent.td_steps={td_steps} with Experiment.sequence_length='
        f'{experiment.sequence_length}: a window has only {pairs} pairs to sum rewards over. '
        f'Use td_steps <= {pairs} or a longer sequence_length (>= {td_steps + 1}).')
  if acting_window is not None and acting_window > experiment.sequence_length:
    raise SettingError(
        f'LatentSacAgent.acting_window={acting_window} with Experiment.sequence_length='
        f'{experiment.sequence_length}: the acting belief would have more history than any '
        'belief SAC trained on (a replay window starts from zeros). Use acting_window <= '
        f'{experiment.sequence_length - 1}, or longer windows.')

  greedy_filter = bound_value('LatentSacAgent', 'greedy_filter',
                              latent_sac_agent.LatentSacAgent)
  if greedy_filter not in latent_sac_agent.LatentSacAgent.GREEDY_FILTERS:
    raise SettingError(
        f'LatentSacAgent.greedy_filter={greedy_filter!r}: use one of '
        f'{latent_sac_agent.LatentSacAgent.GREEDY_FILTERS} (the greedy policy filters with '
        'the posterior mean or a posterior sample).')

  _check_acting_policies(latent_sac_agent)


def check_image_precision():
  """WorldModel.image_precision: one of precision.CHOICES."""
  requested = bound_value('WorldModel', 'image_precision', world_model.WorldModel)
  if requested not in precision.CHOICES:
    raise SettingError(
        f'WorldModel.image_precision={_describe(requested)}: use one of '
        f"{', '.join(repr(c) for c in precision.CHOICES)} ('auto': bf16 convs only where "
        "measured faster on this machine). mixed_float16 / 'fp16' would need loss scaling, "
        'which the world model does not do.')
  return requested


def _check_acting_policies(latent_sac_agent):
  """LatentSacAgent.collect_with / eval_with, and the planner when one acts."""
  kinds = {binding: bound_value('LatentSacAgent', binding, latent_sac_agent.LatentSacAgent)
           for binding in ('collect_with', 'eval_with')}
  for binding, kind in kinds.items():
    if kind not in latent_sac_agent.POLICY_KINDS:
      raise SettingError(f'LatentSacAgent.{binding}={kind!r}: choose one of '
                         f'{latent_sac_agent.POLICY_KINDS} (the latent actor or the CEM planner).')
  if 'cem' in kinds.values():
    planner = {p: bound_value('CemPlanningPolicy', p, cem_policy.planner_settings)
               for p in ('horizon', 'num_candidates', 'top_k', 'iterations',
                         'exploration_noise_std', 'actor_share', 'terminal_value', 'discount')}
    # The agent always hands the planner its actor and critics.
    cem_policy.check_config(**planner, has_actor=True, has_critics=True)


def _check_data_ratio(settings):
  """Exactly one form of the data ratio."""
  per_iteration = settings.get('train_steps_per_iteration')
  per_env_step = settings.get('train_steps_per_env_step')
  if per_iteration is not None and per_env_step is not None:
    raise SettingError(
        f'train_eval.train_steps_per_iteration={per_iteration} and '
        f'train_eval.train_steps_per_env_step={per_env_step} are both set: they are two '
        'forms of the data ratio. Keep one and set the other to None, e.g. '
        "--gin_param='train_eval.train_steps_per_iteration=None'.")
  if per_iteration is None and per_env_step is None:
    raise SettingError(
        'train_eval.train_steps_per_iteration and train_eval.train_steps_per_env_step are '
        'both None: set one (train_steps_per_env_step = 0.1 is the default in '
        'gin/defaults.gin).')


def _bound(binding):
  """(True, value) when gin binds `binding` to a value, else (False, None).

  A macro (%NAME) is looked up; a reference to a configurable (@fn) is left
  to the loader, which gets its value only when called.
  """
  try:
    value = gin.query_parameter(binding)
  except ValueError:
    return False, None
  if isinstance(value, gin.config.ConfigurableReference):
    if not (value.evaluate and value.configurable.selector == 'gin.macro'):
      return False, None
    value = value.scoped_configurable_fn()  # the macro's value, nested macros resolved
  return True, value


def _check_env_bindings():
  """Environment settings gin holds, checked without building the environment.

  Unbound ones keep the loader's default, or belong to a task this run does not use.
  """
  bound, domain_task = _bound('load_dmc_pixels.domain_task')
  if bound:
    try:
      suites.check_dmc_task(domain_task)
    except ImportError:
      pass  # no dm_control here: the loader says so when it is used
  bound, action_repeat = _bound('load_dmc_pixels.action_repeat')
  if bound and action_repeat is not None and not (setting_values.is_whole(action_repeat)
                                                  and action_repeat >= 1):
    raise SettingError(
        f'load_dmc_pixels.action_repeat={_describe(action_repeat)}: must be a whole number '
        ">= 1 or None (physics steps per agent step; None: the PlaNet paper's value for "
        'the task).')
  bound, scenario = _bound('load_highway.scenario')
  if bound:
    try:
      highway.scenario_id(scenario)
    except highway.HighwayEnvError as error:
      raise SettingError(f'load_highway.scenario={scenario!r}: {error}') from None
  bound, scenario_mix = _bound('load_highway.scenario_mix')
  if bound and scenario_mix is not None:
    try:
      highway.mix_entries(scenario_mix)
    except highway.HighwayEnvError as error:
      raise SettingError(str(error)) from None
  bound, destinations = _bound('load_highway.destinations')
  if bound:
    try:
      highway.check_destinations(destinations)
    except highway.HighwayEnvError as error:
      raise SettingError(str(error)) from None

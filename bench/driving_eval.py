"""Driving metrics of a policy: per-episode return, crash rate and distance driven.

  python -m bench.driving_eval --gin_file=highway_fast.gin --policy=random --episodes=10
  python -m bench.driving_eval --gin_file=highway_fast.gin --policy=constant --episodes=10
  python -m bench.driving_eval --gin_file=highway_fast.gin \
      --policy=runs/highway_s0/policies/greedy_policy --episodes=10

Policies: 'random' (uniform actions), 'constant' (`--throttle`, zero steering;
`--throttle=0` is doing nothing), 'expert' (`ExpertDrivingPolicy`, the
route-following controller of the expert warm-up, noise-free, at
`--expert_speed` m/s), or the path of an exported SavedModel
(ROOT/policies/greedy_policy). The
environment is the one train_eval builds from the gin files, with the eval
env's seed (Experiment.seed + 1); reasons and distances come from the
environment's `get_info()` (planet_tfa/environments/highway.py). Prints one JSON
line (and writes it to --out): every episode, then the means and rates.

  python -m bench.driving_eval --curve_root=runs/highway_s0 --png=docs/driving_curve.png \
      --baseline=random.json --baseline=constant.json

plots the run's eval returns over wall time (ROOT/eval_returns.csv) with the
baselines' mean returns (JSON lines written by --out) as horizontal lines.

  python -m bench.driving_eval --suite=heldout --policy=runs/mix/policies/greedy_policy

runs the held-out suite (HELDOUT_SUITE: scenarios never in gin/driving_mix.gin's
training mix; --suite=train: the mix's own scenarios one by one) on the task of --gin_file (default there: driving_mix.gin), each
scenario for the policy and for the route expert on the same episode seeds
(--seed, --seed + 1, ...), and prints one JSON line per scenario: `scenario`,
`return_mean`, `crash_rate`, `route_completion`, `commanded_exit_rate` (junctions:
the episodes that took the planned exit; None elsewhere) and the expert's same
figures (`expert_return_mean`, ...).
"""
import json
import sys
import time

from absl import app
from absl import flags
import numpy as np

from bench import common

flags.DEFINE_multi_string('gin_file', ['highway_fast.gin'], 'Gin files of the task.')
flags.DEFINE_multi_string('gin_param', [], 'Gin bindings.')
flags.DEFINE_string('policy', 'random',
                    "'random', 'constant', 'expert', or a SavedModel directory.")
flags.DEFINE_float('expert_speed', 5.0, "Target speed (m/s) of the 'expert' policy.")
flags.DEFINE_float('throttle', 0.5, "Acceleration action of the 'constant' policy.")
flags.DEFINE_integer('episodes', 10, 'Episodes to run.')
flags.DEFINE_integer('seed', None, 'Environment seed (default: Experiment.seed + 1, the eval env).')
flags.DEFINE_string('out', None, 'Also write the JSON line here.')
flags.DEFINE_multi_string('curve_root', [], 'Plot these run roots\' eval returns instead of '
                          'driving (LABEL=ROOT or ROOT).')
flags.DEFINE_multi_string('baseline', [], 'driving_eval JSON files drawn as horizontal lines.')
flags.DEFINE_string('png', 'driving_curve.png', 'Where --curve_root writes its plot.')
flags.DEFINE_enum('suite', None, ['heldout', 'train'], 'Run a suite of scenarios (one JSON '
                  'line each) for --policy and the route expert, instead of one task: '
                  "'heldout' (never trained on) or 'train' (driving_mix.gin's, one by one).")
flags.DEFINE_multi_string('suite_scenario', [], 'Only these scenarios of the suite.')
flags.DEFINE_string('expert_results', None, "JSON lines of the same suite run with "
                    "--policy=expert on the same seeds: the expert's figures are read from "
                    'them instead of driving it again.')
FLAGS = flags.FLAGS


def parse_args(argv):
  """Parses `argv` (without the program name) into FLAGS, running nothing
  (bench.registry --check)."""
  return FLAGS(['bench.driving_eval'] + list(argv))

CRASH_REASONS = ('collision', 'off_road')
STEP_SECONDS = 0.2  # highway-env's policy period in the driving gin files (5 Hz)
SUITE_GIN_FILES = ['driving_mix.gin']
SUITE_SEED = 101
SUITE_EXPERT_SPEED = 10.0

# Held-out scenarios: (label, gin bindings over the task's). None of them is in
# gin/driving_mix.gin's training mix (racetrack with 1 car; the intersection from
# the south with 1-2 cars): other tracks, more traffic, the intersection from the
# east (the major road) and the roundabout (a junction layout never trained on).
_ONE_SCENARIO = 'load_highway.scenario_mix = None'
HELDOUT_SUITE = (
    ('racetrack-oval', [_ONE_SCENARIO, "load_highway.scenario = 'racetrack-oval'",
                        "load_highway.config = {'other_vehicles': 1}"]),
    ('racetrack-large', [_ONE_SCENARIO, "load_highway.scenario = 'racetrack-large'",
                         "load_highway.config = {'other_vehicles': 1}"]),
    ('racetrack-3-cars', [_ONE_SCENARIO, "load_highway.scenario = 'racetrack'",
                          "load_highway.config = {'other_vehicles': 3}"]),
    ('intersection-traffic', [_ONE_SCENARIO, "load_highway.scenario = 'intersection'",
                              'load_highway.episode_seconds = 30.0',
                              "load_highway.config = {'initial_vehicle_count': 6, "
                              "'spawn_probability': 0.2}"]),
    ('intersection-east', [_ONE_SCENARIO, "load_highway.scenario = 'intersection'",
                           'load_highway.episode_seconds = 30.0',
                           "load_highway.config = {'ego_arm': 1, 'initial_vehicle_count': 2, "
                           "'spawn_probability': 0.0}"]),
    ('roundabout', [_ONE_SCENARIO, "load_highway.scenario = 'roundabout'",
                    'load_highway.episode_seconds = 30.0', 'load_highway.config = None']),
)
# The training mix's scenarios one by one (gin/driving_mix.gin), for the same table.
TRAIN_SUITE = (
    ('racetrack', [_ONE_SCENARIO, "load_highway.scenario = 'racetrack'",
                   "load_highway.config = {'other_vehicles': 1}"]),
    ('intersection', [_ONE_SCENARIO, "load_highway.scenario = 'intersection'",
                      'load_highway.episode_seconds = 30.0',
                      "load_highway.config = {'initial_vehicle_count': 2, "
                      "'spawn_probability': 0.0}"]),
)
SUITES = {'heldout': HELDOUT_SUITE, 'train': TRAIN_SUITE}


class RandomPolicy:
  def __init__(self, spec, seed=0):
    self._spec = spec
    self._rng = np.random.default_rng(seed)

  def reset(self):
    pass

  def __call__(self, time_step):
    return self._rng.uniform(self._spec.minimum, self._spec.maximum,
                             self._spec.shape).astype(self._spec.dtype)


class ConstantPolicy:
  """[throttle, 0]: straight ahead at a constant pedal, the do-nothing driver."""

  def __init__(self, throttle):
    self._action = np.array([throttle, 0.0], np.float32)

  def reset(self):
    pass

  def __call__(self, time_step):
    return self._action


class ExpertPolicy:
  """The expert warm-up's controller on the env's `state`, without its noise."""

  def __init__(self, env, target_speed):
    from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
    from tf_agents.specs import tensor_spec  # pylint: disable=g-import-not-at-top
    from planet_tfa.agents import expert_policy  # pylint: disable=g-import-not-at-top
    self._policy = expert_policy.ExpertDrivingPolicy(
        ts.time_step_spec(tensor_spec.from_spec(env.observation_spec())),
        tensor_spec.from_spec(env.action_spec()), target_speed=target_speed, noise_std=0.0,
        control_ranges=expert_policy.env_control_ranges(env))

  def reset(self):
    pass

  def __call__(self, time_step):
    route = time_step.observation.get('route')
    return self._policy.controls(time_step.observation['state'][None],
                                 None if route is None else route[None]).numpy()[0]


class SavedPolicy:
  """An exported (stateful) policy; feeds it only the observation keys it declares."""

  def __init__(self, path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    # tensorflow_probability registers the distribution types the SavedModel uses.
    import tensorflow_probability  # pylint: disable=g-import-not-at-top,unused-import
    from planet_tfa import acting  # pylint: disable=g-import-not-at-top
    self._tf = tf
    # One step at a time at batch 1: the step traced once (acting.StepFunction).
    self._step = acting.StepFunction(tf.saved_model.load(path))
    self._keys = sorted(self._step.time_step_spec.observation)
    self._state = None

  def reset(self):
    self._state = self._step.get_initial_state()

  def __call__(self, time_step):
    from tf_agents.trajectories import time_step as ts  # pylint: disable=g-import-not-at-top
    tf = self._tf
    batched = ts.TimeStep(
        step_type=tf.constant([time_step.step_type], tf.int32),
        reward=tf.constant([time_step.reward], tf.float32),
        discount=tf.constant([time_step.discount], tf.float32),
        observation={k: tf.constant(time_step.observation[k][None]) for k in self._keys})
    step = self._step(batched, self._state)
    self._state = step.state
    return step.action.numpy()[0]


def run_episodes(env, policy, episodes, seeds=None):
  """Runs whole episodes; returns one dict per episode from the env's info.

  `seeds`: one per episode, each episode starting from its own (env.reseed), so
  two policies meet the same episodes; None: the env's own seed sequence.
  """
  results = []
  for episode in range(episodes):
    if seeds is not None:
      env.reseed(seeds[episode])
    policy.reset()
    time_step = env.reset()
    total, steps = 0.0, 0
    while not time_step.is_last():
      time_step = env.step(policy(time_step))
      total += float(time_step.reward)
      steps += 1
    info = env.get_info()
    result = {'return': round(total, 3), 'steps': steps, 'reason': info['reason'],
              'distance_m': round(float(info['distance_m']), 1)}
    for key in ('scenario', 'route_completion', 'junction_command', 'exit'):
      if info.get(key) is not None:
        result[key] = (round(info[key], 3) if isinstance(info[key], float) else info[key])
    results.append(result)
  return results


def summarize(results):
  reasons = [r['reason'] for r in results]
  return {
      'episodes': len(results),
      'speed_mps_mean': round(float(np.mean([r['distance_m'] / max(r['steps'], 1)
                                             for r in results]) / STEP_SECONDS), 2),
      'return_mean': round(float(np.mean([r['return'] for r in results])), 2),
      'return_std': round(float(np.std([r['return'] for r in results])), 2),
      'crash_rate': round(float(np.mean([r in CRASH_REASONS for r in reasons])), 3),
      'collision_rate': round(float(np.mean([r == 'collision' for r in reasons])), 3),
      'off_road_rate': round(float(np.mean([r == 'off_road' for r in reasons])), 3),
      'time_limit_rate': round(float(np.mean([r == 'time_limit' for r in reasons])), 3),
      'distance_m_mean': round(float(np.mean([r['distance_m'] for r in results])), 1),
      'steps_mean': round(float(np.mean([r['steps'] for r in results])), 1),
      'off_route_rate': round(float(np.mean([r == 'off_route' for r in reasons])), 3),
      'route_completion': _mean_of(results, 'route_completion'),
      'commanded_exit_rate': _commanded_exit_rate(results),
  }


def _mean_of(results, key):
  values = [r[key] for r in results if r.get(key) is not None]
  return round(float(np.mean(values)), 3) if values else None


def _commanded_exit_rate(results):
  """Of the episodes with a junction on the route, the share that took its planned exit."""
  at_junctions = [r for r in results if r.get('junction_command')]
  if not at_junctions:
    return None
  return round(float(np.mean([r.get('exit') == 'commanded' for r in at_junctions])), 3)


def exits_by_command(results):
  """{command: [episodes that took the planned exit, episodes]} at junctions."""
  counts = {}
  for r in results:
    if r.get('junction_command'):
      taken = counts.setdefault(r['junction_command'], [0, 0])
      taken[0] += r.get('exit') == 'commanded'
      taken[1] += 1
  return counts


def _expert_figures(path, suite, episodes, seeds, expert_speed):
  """{scenario: summary} of an expert run of the suite on exactly these episodes."""
  figures = {}
  with open(path) as f:
    for line in f:
      run = json.loads(line)
      if (run.get('suite') == suite and run['policy'] == 'expert'
          and run['episodes'] == episodes and run['seeds'] == [seeds[0], seeds[-1]]
          and run['expert_speed'] == expert_speed):
        figures[run['scenario']] = run
  return figures


def run_suite(suite, gin_paths, gin_params, policy_name, episodes, seed, expert_speed,
              scenarios=(), expert_results=None):
  """Yields one summary dict per scenario of the suite: the policy and the expert side by side.

  `expert_results`: a file of this suite's lines for --policy=expert; where one
  matches a scenario's episodes and seeds, the expert's figures come from it.
  """
  import gin  # pylint: disable=g-import-not-at-top
  saved = None if policy_name in ('random', 'constant', 'expert') else SavedPolicy(policy_name)
  cases = [c for c in SUITES[suite] if not scenarios or c[0] in scenarios]
  if scenarios and len(cases) != len(set(scenarios)):
    known = [c[0] for c in SUITES[suite]]
    raise ValueError(f'--suite_scenario={list(scenarios)}: the {suite} suite has {known}')
  seeds = [seed + k for k in range(episodes)]
  known = (_expert_figures(expert_results, suite, episodes, seeds, expert_speed)
           if expert_results else {})
  for label, case_params in cases:
    gin.clear_config()
    env, _ = common.configured_eval_env(gin_paths, list(gin_params) + case_params, seed)
    try:
      start = time.time()
      expert = ExpertPolicy(env, expert_speed)
      if saved is not None:
        policy = saved
      elif policy_name == 'expert':
        policy = expert
      elif policy_name == 'random':
        policy = RandomPolicy(env.action_spec(), seed)
      else:
        policy = ConstantPolicy(FLAGS.throttle)
      agent = run_episodes(env, policy, episodes, seeds)
      agent_s = time.time() - start
      if policy is expert:
        theirs = summarize(agent)
      elif label in known:
        theirs = known[label]
      else:
        theirs = summarize(run_episodes(env, expert, episodes, seeds))
    finally:
      env.close()
    mine = summarize(agent)
    yield {'name': 'driving_eval', 'suite': suite, 'scenario': label, 'policy': policy_name,
           'episodes': episodes, 'seeds': [seeds[0], seeds[-1]], **mine,
           'exits_by_command': exits_by_command(agent),
           **{f'expert_{k}': theirs[k] for k in ('return_mean', 'return_std', 'crash_rate',
                                                   'off_route_rate', 'route_completion',
                                                   'commanded_exit_rate', 'speed_mps_mean')},
           'expert_speed': expert_speed, 'expert_from': expert_results if label in known else None,
           'return_ratio': (round(mine['return_mean'] / theirs['return_mean'], 3)
                            if theirs['return_mean'] > 0 else None),
           'gin_files': list(gin_paths), 'gin_params': list(gin_params) + case_params,
           'policy_wall_s': round(agent_s, 1), 'wall_s': round(time.time() - start, 1),
           'per_episode': agent}


def plot_curve(roots, baseline_paths, png):
  """Eval return over wall minutes of runs (LABEL=ROOT or ROOT), baselines as dashed lines."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from bench import compare_curves  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4))
  for root in roots:
    label, _, path = root.rpartition('=')
    records = compare_curves.load(path)
    ax.plot([r['wall_time_s'] / 60 for r in records], [r['eval_return'] for r in records],
            marker='o', markersize=3, label=label or f'latent SAC ({path})')
  for path, style in zip(baseline_paths, ('--', ':', '-.')):
    with open(path) as f:
      baseline = json.loads(f.readline())
    name = baseline['policy'] if baseline['policy'] in ('random', 'constant',
                                                        'expert') else 'saved'
    if name == 'constant':
      name = f'constant throttle {baseline["throttle"]:g}, no steering'
    if name == 'expert':
      route = any('k_route' in p for p in baseline.get('gin_params', []))  # k_route(_m)
      name = (f'expert controller at {baseline["expert_speed"]:g} m/s'
              + (' with the route' if route else ''))
    name += f', {100 * baseline["crash_rate"]:.0f} % crashes' if 'crash_rate' in baseline else ''
    ax.axhline(baseline['return_mean'], color='gray', linestyle=style,
               label=f'{name} ({baseline["episodes"]} episodes)')
  ax.set_xlabel('wall time (minutes, shared 2-core CPU)')
  ax.set_ylabel('eval return (mean of the eval episodes)')
  ax.grid(alpha=0.3)
  ax.legend(loc='lower right', fontsize='small')
  fig.tight_layout()
  fig.savefig(png, dpi=100)
  return png


def main(argv):
  del argv
  if FLAGS.curve_root:
    print(plot_curve(FLAGS.curve_root, FLAGS.baseline, FLAGS.png))
    return 0
  if FLAGS.suite:
    # The suite's task is the training mix's (its settings: steering range, reward, expert).
    gin_paths = SUITE_GIN_FILES if FLAGS['gin_file'].using_default_value else FLAGS.gin_file
    expert_speed = (SUITE_EXPERT_SPEED if FLAGS['expert_speed'].using_default_value
                    else FLAGS.expert_speed)
    seed = SUITE_SEED if FLAGS.seed is None else FLAGS.seed
    lines = []
    for summary in run_suite(FLAGS.suite, gin_paths, FLAGS.gin_param, FLAGS.policy,
                             FLAGS.episodes, seed, expert_speed, FLAGS.suite_scenario,
                             FLAGS.expert_results):
      line = json.dumps(summary)
      print(line, flush=True)
      lines.append(line)
    if FLAGS.out:
      with open(FLAGS.out, 'w') as f:
        f.write(''.join(l + '\n' for l in lines))
    return 0
  env, seed = common.configured_eval_env(FLAGS.gin_file, FLAGS.gin_param, FLAGS.seed)
  if FLAGS.policy == 'random':
    policy = RandomPolicy(env.action_spec(), seed)
  elif FLAGS.policy == 'constant':
    policy = ConstantPolicy(FLAGS.throttle)
  elif FLAGS.policy == 'expert':
    policy = ExpertPolicy(env, FLAGS.expert_speed)
  else:
    policy = SavedPolicy(FLAGS.policy)
  results = run_episodes(env, policy, FLAGS.episodes)
  env.close()
  line = json.dumps({'name': 'driving_eval', 'policy': FLAGS.policy,
                     'throttle': FLAGS.throttle if FLAGS.policy == 'constant' else None,
                     'expert_speed': FLAGS.expert_speed if FLAGS.policy == 'expert' else None,
                     'gin_files': FLAGS.gin_file, 'gin_params': FLAGS.gin_param, 'seed': seed,
                     **summarize(results), 'per_episode': results})
  print(line, flush=True)
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      f.write(line + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(app.run(main))

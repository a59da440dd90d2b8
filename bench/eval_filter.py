"""The greedy policy's filter, measured: posterior mean vs posterior sample.

  python -m bench.eval_filter --root_dir=runs/cartpole [--episodes=10] [--filters=mean,sample]
      [--gin_param=LatentSacAgent.acting_window=None]

SAC trains on features of *sampled* posteriors; the greedy policy filters with
the posterior *mean* unless `LatentSacAgent.greedy_filter = 'sample'`. This
loads a run's newest checkpoint once and evaluates the greedy policy with each
filter on the same checkpoint, each on a fresh evaluation env with the same
seed (so both modes meet the same initial states), and prints one JSON line:
per filter the mean, std and every episode's return. `--out` also writes it.
`--gin_param` changes the rebuilt agent's settings (the checkpoint's variables
must still fit it): e.g. acting on the whole-episode belief instead of the
window SAC trained on.
"""
import json
import os

import numpy as np

from bench import common


def _episode_returns(tf_env, policy, episodes):
  """Returns of `episodes` whole episodes of `policy` in `tf_env`."""
  from tf_agents.metrics import tf_metrics  # pylint: disable=g-import-not-at-top
  from planet_tfa import episodes as episodes_lib  # pylint: disable=g-import-not-at-top
  last_return = tf_metrics.AverageReturnMetric(buffer_size=1)
  driver = episodes_lib.EpisodeDriver(tf_env, {'greedy': (policy, [last_return])})
  returns = []
  for _ in range(episodes):
    driver.run(1)
    returns.append(float(last_return.result()))
  return returns


def random_policy_return(gin_paths, gin_params, episodes):
  """Average return of uniform random actions on the configured task's eval env."""
  import gin  # pylint: disable=g-import-not-at-top
  env, _ = common.configured_eval_env(gin_paths, gin_params)
  rng = np.random.default_rng(0)
  spec = env.action_spec()
  returns = []
  for _ in range(episodes):
    time_step = env.reset()
    total = 0.0
    while not time_step.is_last():
      time_step = env.step(rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(spec.dtype))
      total += float(time_step.reward)
    returns.append(total)
  env.close()
  gin.clear_config()
  return float(np.mean(returns)), float(np.std(returns))


def evaluate_root(root_dir, episodes=10, filters=None, seed=None, stochastic=False,
                  bindings=()):
  """Greedy returns of a run's newest checkpoint, per filter.

  filters: e.g. ('mean', 'sample'); None: the filter the run is configured with;
    (): no greedy policy (with `stochastic`, the stochastic one alone).
  seed: the evaluation env's seed; None: the run's own eval seed (seed + 1).
  stochastic: also the stochastic (collect) policy's returns on the same env
    seed, under 'stochastic': what SLAC's published curves report.
  bindings: gin bindings over the run's config for the agent (not the env), e.g.
    'LatentSacAgent.acting_window=None' to act on the whole-episode belief.
  """
  import gin  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import gin_files  # pylint: disable=g-import-not-at-top
  from planet_tfa.programs import export  # pylint: disable=g-import-not-at-top
  from planet_tfa import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from planet_tfa import layout  # pylint: disable=g-import-not-at-top

  root_dir = os.path.abspath(root_dir)
  agent, _ = export.load_agent_from_root(root_dir, bindings)

  def returns_of(policy):
    # The env loader reads its gin bindings when called: parse the run's config.
    gin_files.parse_run_config(os.path.join(root_dir, layout.OPERATIVE_CONFIG))
    try:
      run_experiment = experiment_lib.Experiment()
      env_seed = run_experiment.seed + 1 if seed is None else seed
      tf_env = experiment_lib.make_env(run_experiment, seed=env_seed)
    finally:
      gin.clear_config()
    try:
      tf.random.set_seed(env_seed)  # the posterior and action samples, when sampling
      returns = _episode_returns(tf_env, policy, episodes)
    finally:
      experiment_lib.close_env(tf_env)
    return {'mean': round(float(np.mean(returns)), 2), 'std': round(float(np.std(returns)), 2),
            'returns': [round(r, 2) for r in returns]}

  filters = [agent.greedy_filter] if filters is None else list(filters)
  result = {'name': 'eval_filter', 'root_dir': root_dir,
            'train_step': int(agent.train_step_counter.numpy()),
            'configured_filter': agent.greedy_filter, 'episodes': episodes,
            'bindings': list(bindings),
            'filters': {f: returns_of(agent.greedy_policy(f)) for f in filters}}
  if stochastic:
    result['stochastic'] = returns_of(agent.collect_policy)
  return result


def main(argv):
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from planet_tfa.agents import latent_sac_agent  # pylint: disable=g-import-not-at-top
  del argv
  f = flags.FLAGS
  if f.episodes < 1:
    raise app.UsageError(f'--episodes={f.episodes}: must be >= 1')
  unknown = [m for m in f.filters if m not in latent_sac_agent.LatentSacAgent.GREEDY_FILTERS]
  if unknown:
    raise app.UsageError(f'--filters={",".join(f.filters)}: unknown {unknown}; use '
                         f'{",".join(latent_sac_agent.LatentSacAgent.GREEDY_FILTERS)}')
  result = evaluate_root(f.root_dir, f.episodes, [m for m in f.filters if m] or None,
                         bindings=f.gin_param)
  line = json.dumps(result)
  print(line)
  if f.out:
    with open(f.out, 'w') as out:
      out.write(line + '\n')


def define_flags():
  """This module's flags, defined only when it is the program (learning_curve
  and dmc_table import it, and absl flags are global)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('root_dir', None, 'Run root written by train_eval.py.')
  flags.DEFINE_integer('episodes', 10, 'Greedy episodes per filter.')
  flags.DEFINE_list('filters', ['mean', 'sample'], "Filters to compare: 'mean', 'sample'.")
  flags.DEFINE_string('out', None, 'Also write the JSON line here.')
  flags.DEFINE_multi_string('gin_param', [], 'Gin binding over the run\'s config for the '
                            'agent, e.g. LatentSacAgent.acting_window=None.')
  flags.mark_flag_as_required('root_dir')


def parse_args(argv):
  """Defines the flags and parses `argv` (without the program name), running
  nothing (bench.registry --check)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  define_flags()
  return flags.FLAGS(['bench.eval_filter'] + list(argv))


if __name__ == '__main__':
  from absl import app  # pylint: disable=g-import-not-at-top
  define_flags()
  app.run(main)

"""One driving recipe: carla_sac.gin trains what drove on the racetrack (highway_drive.gin).

The two files may differ only in environment bindings: the simulator and its settings, who the
expert is (CARLA's autopilot; highway-env has none), the evaluation cadence a simulator affords,
and the conv depth a CPU affords on the embedded task. Any other difference is a recipe that
drifted apart.
"""
import gin
import pytest

from planet_tfa.programs import gin_files

# Configurables that belong to one simulator (their whole settings group).
SIMULATOR_CONFIGURABLES = ('CarlaAutopilot', 'CarlaEnv', 'CarlaEpisode', 'CarlaLidar',
                           'CarlaReward', 'CarlaRoute', 'CarlaSensors', 'CarlaServer',
                           'CarlaWorld', 'load_highway')
# Single bindings that may differ, each for the reason in the module doc.
ENVIRONMENT_BINDINGS = ('load_environment.loader', 'train_eval.expert',
                        'train_eval.eval_on_train_env', 'train_eval.eval_interval',
                        'train_eval.eval_episodes', 'WorldModel.image_depth')
# What made the racetrack agent drive (docs/driving.md, drive_v8).
RECIPE = {'WorldModel.continuation_scale': 1.0,
          'WorldModel.continuation_features': 'both',
          'WorldModel.continuation_terminal_weight': 30.0,
          'WorldModel.reward_terminal_weight': 30.0,
          'terminal_oversampling.priority': 10.0,
          'terminal_oversampling.steps_before': 8}


def bindings(gin_file):
  """{'Configurable.parameter': value} of everything `gin_file` binds, includes resolved."""
  gin.clear_config()
  gin_files.parse([gin_file])
  values = {}
  for (scope, selector), parameters in gin.config._CONFIG.items():  # pylint: disable=protected-access
    name = selector.split('.')[-1]
    for parameter, value in parameters.items():
      values[f"{scope + '/' if scope else ''}{name}.{parameter}"] = value
  gin.clear_config()
  return values


def recipe_differences(a, b):
  """Bindings whose values differ between two configs, environment bindings left out."""
  return sorted(name for name in set(a) | set(b)
                if a.get(name, '<unset>') != b.get(name, '<unset>')
                and name.split('.')[0].split('/')[-1] not in SIMULATOR_CONFIGURABLES
                and name not in ENVIRONMENT_BINDINGS)


@pytest.mark.usefixtures('clean_gin')
def test_carla_and_the_racetrack_run_differ_only_in_environment_bindings():
  carla, racetrack = bindings('carla_sac.gin'), bindings('highway_drive.gin')
  assert recipe_differences(carla, racetrack) == []
  for name, value in RECIPE.items():
    assert carla[name] == racetrack[name] == value, name


@pytest.mark.usefixtures('clean_gin')
def test_the_comparison_catches_a_recipe_setting_that_drifts():
  carla = bindings('carla_sac.gin')
  drifted = dict(carla, **{'WorldModel.continuation_terminal_weight': 1.0})
  assert recipe_differences(carla, drifted) == ['WorldModel.continuation_terminal_weight']
  assert recipe_differences(carla, dict(carla, **{'CarlaWorld.town': 'Town05'})) == []

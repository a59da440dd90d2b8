"""A newcomer's first run: the default configuration fits the machine and says so."""
import gin
import pytest

from planet_tfa import experiment as experiment_lib
from planet_tfa import hooks
from planet_tfa import summaries
from planet_tfa.environments import suites
from planet_tfa.programs import gin_files


def test_without_a_gpu_the_default_is_the_cpu_configuration_with_a_budget():
  files, params, lines = gin_files.default_config(gpu=False)
  assert files == ('dmc_cartpole_swingup.gin', 'cartpole_fast.gin')
  assert 'train_eval.env_step_budget = 100000' in params
  said = ' '.join(lines)
  # Which configuration, why, how long, and how to pick the other one.
  assert 'no GPU' in said and 'minutes' in said and '--gin_file=dmc_cartpole_swingup.gin' in said


def test_with_a_gpu_the_default_is_the_full_size_configuration():
  files, params, lines = gin_files.default_config(gpu=True)
  assert files == ('dmc_cartpole_swingup.gin',) and params == ()
  assert 'GPU' in lines[0] and '--gin_file=cartpole_fast.gin' in ' '.join(lines)


def test_the_cpu_default_parses_to_a_small_model_with_the_budget(clean_gin):
  printed = []
  gin_files.parse_program_config([], [], printer=printed.append)
  if 'no GPU' not in printed[0]:
    pytest.skip('this machine has a GPU')
  assert gin.query_parameter('WorldModel.image_depth') == 16
  assert gin.query_parameter('train_eval.env_step_budget') == 100000


def test_given_gin_files_are_used_as_they_are(clean_gin):
  printed = []
  gin_files.parse_program_config(['dmc_walker_walk.gin'], [], printer=printed.append)
  assert not printed
  assert gin.query_parameter('load_dmc_pixels.domain_task') == 'walker-walk'


def test_progress_line_shows_the_random_policys_return_next_to_the_eval_return(clean_gin):
  gin_files.parse(['dmc_cheetah_run.gin'])
  random_return = suites.random_policy_return(experiment_lib.Experiment().env_loader)
  assert random_return == suites.RANDOM_POLICY_RETURNS['cheetah-run']
  lines = []
  hook = hooks.ProgressHook(summaries.Progress(10), {'return': _Fixed(3.0)},
                            printer=lambda line, **_: lines.append(line),
                            random_return=random_return)
  state = hooks.IterationState(1, 100, 1000, {})
  state.eval_return = 55.0
  hook(state)
  assert 'eval return 55 | vs random policy 10.4' in lines[0]
  # A task without a measured random score shows nothing extra.
  assert suites.random_policy_return(lambda seed=None: None) is None


class _Fixed:
  def __init__(self, value):
    self._value = value

  def result(self):
    return self._value

"""Fixtures shared by the test files: the tiny model, gin state and the counting environment.

The tiny model's sizes and builders live in tiny_model.py (read from gin/tiny.gin), imported
by tests whose module-level helpers build agents; fixtures here serve the rest.

Tests marked `slow` start train_eval, servers or collectors in other processes, or run for
more than ~20 s; `make test-fast` (pytest -m "not slow") leaves them out, `make test` runs all.
"""
import gin
import pytest

from planet_tfa.programs import gin_files
from counting_env import CountingEnv
import tiny_model


@pytest.fixture
def tiny_model_bindings():
  """gin bindings of the tiny model alone, for task files other than DMC's (a fresh list)."""
  return list(tiny_model.BINDINGS)


@pytest.fixture
def clean_gin():
  """An empty gin config during the test and after it."""
  gin.clear_config()
  yield
  gin.clear_config()


@pytest.fixture
def tiny_gin(clean_gin):  # pylint: disable=redefined-outer-name,unused-argument
  """gin parsed as a tiny DMC cartpole run; calling the fixture's value parses it afresh."""
  def parse():
    gin.clear_config()
    gin_files.parse(tiny_model.DMC_GIN_FILES)
  parse()
  return parse


@pytest.fixture
def counting_env():
  """Makes CountingEnvs (tests/counting_env.py) and closes them after the test."""
  made = []

  def make(**kwargs):
    made.append(CountingEnv(**kwargs))
    return made[-1]

  yield make
  for env in made:
    env.close()

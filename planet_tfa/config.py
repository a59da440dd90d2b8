"""Gin parsing with errors that name the bad file or binding.

Every configurable module is imported before parsing, so a misspelled
configurable or parameter fails at start instead of being ignored.
"""
import logging
import os
import re
import tempfile

import gin

from planet_tfa.renamed_bindings import RENAMED_BINDINGS

GIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'gin')
DEFAULT_GIN_FILE = 'dmc_cartpole_swingup.gin'


class ConfigError(ValueError):
  """A gin file or binding is wrong."""


def import_configurables():
  # pylint: disable=g-import-not-at-top,unused-import
  from planet_tfa import run
  from planet_tfa.agents import cem_policy
  from planet_tfa.agents import latent_sac_agent
  from planet_tfa.agents import world_model
  from planet_tfa.drivers import episode_drivers
  from planet_tfa.drivers import observers
  from planet_tfa.drivers import replay
  from planet_tfa.environments import highway  # imports highway-env only when used
  from planet_tfa.environments import suites
  from planet_tfa.networks import decoders
  from planet_tfa.networks import encoders
  from planet_tfa.networks import rssm
  try:
    from planet_tfa.environments.carla import env as carla_env
  except ImportError:
    pass


def resolve_gin_file(name):
  """A path as given, else the same name inside the project's gin/ directory."""
  for candidate in (name, os.path.join(GIN_DIR, name),
                    os.path.join(GIN_DIR, os.path.basename(name))):
    if os.path.isfile(candidate):
      return candidate
  raise ConfigError(f'gin file {name!r} not found (also looked in {GIN_DIR}); '
                    f'available: {sorted(f for f in os.listdir(GIN_DIR) if f.endswith(".gin"))}')


def parse(gin_files, gin_params=()):
  import_configurables()
  files = [resolve_gin_file(f) for f in gin_files]
  gin.add_config_file_search_path(GIN_DIR)
  # gin logs an error for every include it first looks for in the cwd before
  # finding it on the search path; that is noise, not a problem.
  quiet = _DropMessages('Path not found')
  logging.getLogger().addFilter(quiet)
  try:
    gin.parse_config_files_and_bindings(files, list(gin_params), finalize_config=False)
  except (ValueError, KeyError, TypeError, SyntaxError, IOError) as error:
    # gin quotes the failing line, so an old name in the message is the cause.
    renamed = [f'`{old}` is now `{new}`: rename the binding.'
               for old, new in RENAMED_BINDINGS.items() if old in str(error)]
    raise ConfigError(
        f'bad gin configuration: {error}\n(files: {files}, bindings: {list(gin_params)}). '
        + (' '.join(renamed) if renamed else
           'Check the spelling of the configurable and parameter names.')) from error
  finally:
    logging.getLogger().removeFilter(quiet)


def upgrade_renamed(config_text):
  """A gin config with the renamed bindings written under their new names.

  For configs a run wrote itself (operative_config.gin): they record every
  parameter, so an older run's has the old names and must still load.
  """
  for old, new in RENAMED_BINDINGS.items():
    config_text = re.sub(rf'(?m)^(\s*(?:\S+/)?){re.escape(old)}(?=\s*=)', rf'\g<1>{new}',
                         config_text)
  return config_text


def parse_run_config(path):
  """Parses a run's own operative_config.gin, older versions' names included."""
  with open(path) as f:
    text = upgrade_renamed(f.read())
  with tempfile.TemporaryDirectory() as staging:
    upgraded = os.path.join(staging, os.path.basename(path))
    with open(upgraded, 'w') as f:
      f.write(text)
    parse([upgraded])


class _DropMessages(logging.Filter):

  def __init__(self, prefix):
    super().__init__()
    self._prefix = prefix

  def filter(self, record):
    return not str(record.msg).startswith(self._prefix)


def exit_with(error):
  """The one way command-line programs report a ConfigError: the message, exit 2."""
  import sys  # pylint: disable=g-import-not-at-top
  print(f'error: {error}', file=sys.stderr)
  sys.exit(2)


def parse_or_exit(gin_files, gin_params=()):
  """For command-line entry points: parse, or print the error and exit 2."""
  try:
    parse(gin_files or [DEFAULT_GIN_FILE], gin_params)
  except ConfigError as error:
    exit_with(error)

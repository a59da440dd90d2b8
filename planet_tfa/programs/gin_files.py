"""Gin parsing for the programs, with errors that name the bad file or binding.

Every configurable module is imported here, before parsing, so a misspelled
configurable or parameter fails at start instead of being ignored. Library
modules never parse gin: the programs do, through this module.
"""
import logging
import os
import re
import tempfile
import tokenize

import gin

# pylint: disable=unused-import
# Imported for their gin configurables (registered at import).
from planet_tfa import episodes
from planet_tfa import experiment
from planet_tfa import learner
from planet_tfa import videos
from planet_tfa.agents import cem_policy
from planet_tfa.agents import latent_sac_agent
from planet_tfa.agents import world_model
from planet_tfa.environments import highway  # imports highway-env only when used
from planet_tfa.environments.carla import env as carla_env  # the wheel loads lazily
from planet_tfa.environments import suites
from planet_tfa.networks import decoders
from planet_tfa.networks import encoders
from planet_tfa.networks import rssm
from planet_tfa.replay import observers
from planet_tfa.replay import tables
# pylint: enable=unused-import

from planet_tfa import hardware
from planet_tfa.errors import ConfigError
from planet_tfa.renamed_bindings import RENAMED_BINDINGS

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIN_DIR = os.path.join(REPO_DIR, 'gin')
DEFAULT_GIN_FILE = 'dmc_cartpole_swingup.gin'
# Without --gin_file: the default task sized to the machine. On a CPU the
# full-size PlaNet configuration takes ~2.5 min per iteration (an ETA of
# days); the CPU configuration shows learning within about an hour.
CPU_DEFAULT = (('dmc_cartpole_swingup.gin', 'cartpole_fast.gin'),
               ('train_eval.env_step_budget = 100000',))
GPU_DEFAULT = ((DEFAULT_GIN_FILE,), ())


def default_config(gpu=None):
  """(gin files, gin params, lines saying what was chosen and why) for a run without --gin_file."""
  gpu = hardware.gpu_available() if gpu is None else gpu
  if gpu:
    return GPU_DEFAULT + ([
        'No --gin_file given and a GPU is present: the full-size PlaNet configuration '
        f'({DEFAULT_GIN_FILE}: conv depth 32, 1000 iterations = 1M environment steps).',
        'For the small CPU configuration instead: --gin_file=cartpole_fast.gin '
        '(make train GIN=cartpole_fast.gin).'],)
  return CPU_DEFAULT + ([
      'No --gin_file given and no GPU: the CPU configuration (cartpole_fast.gin: cartpole '
      'swing-up from pixels, conv depth 16) to 100k environment steps, about 45-75 minutes on '
      'a 2-core CPU; the evaluation return should pass the random policy\'s (~117) within '
      'the first half hour.',
      f'For the full-size configuration (days on a CPU): --gin_file={DEFAULT_GIN_FILE} '
      f'(make train GIN={DEFAULT_GIN_FILE}).'],)


def parse_program_config(gin_file_flags, gin_param_flags, printer=print):
  """Parses the program's gin: its --gin_file flags, else the machine's default."""
  if gin_file_flags:
    return parse(gin_file_flags, gin_param_flags)
  files, params, lines = default_config()
  for line in lines:
    printer(line)
  return parse(list(files), list(params) + list(gin_param_flags))


def resolve_gin_file(name):
  """A path as given, else the same name inside the project's gin/ directory."""
  for candidate in (name, os.path.join(GIN_DIR, name),
                    os.path.join(GIN_DIR, os.path.basename(name))):
    if os.path.isfile(candidate):
      return candidate
  raise ConfigError(f'gin file {name!r} not found (also looked in {GIN_DIR}); '
                    f'available: {sorted(f for f in os.listdir(GIN_DIR) if f.endswith(".gin"))}')


def parse(gin_files, gin_params=()):
  files = [resolve_gin_file(f) for f in gin_files]
  gin.add_config_file_search_path(GIN_DIR)
  # gin logs an error for every include it first looks for in the cwd before
  # finding it on the search path; that is noise, not a problem.
  quiet = _DropMessages('Path not found')
  logging.getLogger().addFilter(quiet)
  try:
    gin.parse_config_files_and_bindings(files, list(gin_params), finalize_config=False)
  except tokenize.TokenError as error:  # gin's tokenizer reached the end inside ( [ { or '''
    raise ConfigError(_unclosed_message(files, gin_params, error)) from None
  except (ValueError, KeyError, TypeError, SyntaxError, IOError, ModuleNotFoundError) as error:
    # gin quotes the failing line, so an old name in the message is the cause.
    renamed = [f'`{old}` is now `{new}`: rename the binding.'
               for old, new in RENAMED_BINDINGS.items() if old in str(error)]
    raise ConfigError(
        f'bad gin configuration: {error}\n(files: {files}, bindings: {list(gin_params)}). '
        + (' '.join(renamed) if renamed else
           'Check the spelling of the configurable and parameter names.')) from error
  finally:
    logging.getLogger().removeFilter(quiet)


def _unclosed_message(files, gin_params, error):
  """Names the binding (else the files) a TokenError came from: it says only where it ended."""
  reason = error.args[0] if error.args else str(error)
  for binding in gin_params:
    try:
      list(tokenize.generate_tokens(iter([binding + '\n']).__next__))
    except tokenize.TokenError:
      return (f'bad gin binding --gin_param={binding!r}: {reason} (an unclosed bracket or '
              'quote). Close it, and quote the whole binding for the shell, e.g. '
              "--gin_param='train_eval.num_iterations=10'.")
  return (f'bad gin configuration: {reason} (an unclosed bracket or quote) in one of the '
          f'files {files}. Close it.')


def upgrade_renamed(config_text):
  """A gin config with the renamed bindings written under their new names.

  For configs a run wrote itself (operative_config.gin): they record every
  parameter, so an older run's has the old names and must still load.
  """
  for old, new in RENAMED_BINDINGS.items():
    config_text = re.sub(rf'(?m)^(\s*(?:\S+/)?){re.escape(old)}(?=\s*=)', rf'\g<1>{new}',
                         config_text)
  return config_text


def parse_run_config(path, bindings=()):
  """Parses a run's own operative_config.gin, older versions' names included,
  then `bindings` over it (e.g. to evaluate a run with one setting changed)."""
  with open(path) as f:
    text = upgrade_renamed(f.read())
  with tempfile.TemporaryDirectory() as staging:
    upgraded = os.path.join(staging, os.path.basename(path))
    with open(upgraded, 'w') as f:
      f.write(text)
    parse([upgraded], bindings)


class _DropMessages(logging.Filter):

  def __init__(self, prefix):
    super().__init__()
    self._prefix = prefix

  def filter(self, record):
    return not str(record.msg).startswith(self._prefix)

"""Checks that the installed TensorFlow / Reverb / TF-Agents work together.

A Reverb wheel built for another TensorFlow minor fails at import with an
`undefined symbol` crash that names neither package; this check runs before
any of them is imported and says what to install instead.
"""
import importlib.metadata
import os

# distribution name(s) -> required release prefix (major.minor).
REQUIRED = (
    (('tensorflow', 'tensorflow-cpu', 'tensorflow-gpu'), '2.15'),
    (('dm-reverb',), '0.14'),
    (('tf-agents',), '0.19'),
    (('tensorflow-probability',), '0.23'),
)
FIX_COMMAND = "pip install -e '.[dmc,carla,dev]'   (or: make venv)"
SKIP_ENV = 'PLANET_TFA_SKIP_VERSION_CHECK'


class StackVersionError(ImportError):
  """The installed ML stack is not the pinned combination."""


def installed_version(names):
  for name in names:
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue
  return None


def _matches(version, prefix):
  return version == prefix or version.startswith(prefix + '.')


def check_stack(required=REQUIRED):
  """Raises StackVersionError listing every package off its pin."""
  if os.environ.get(SKIP_ENV):
    return
  problems = []
  for names, prefix in required:
    version = installed_version(names)
    if version is None:
      problems.append(f'  {names[0]}: not installed (need {prefix}.x)')
    elif not _matches(version, prefix):
      problems.append(f'  {names[0]}: installed {version}, need {prefix}.x')
  if problems:
    raise StackVersionError(
        'planet_tfa needs TensorFlow 2.15, Reverb 0.14, TF-Agents 0.19 and '
        'TFP 0.23 together (Reverb only loads with the TF it was built '
        'for):\n' + '\n'.join(problems) + f'\nFix: {FIX_COMMAND}\n'
        f'(set {SKIP_ENV}=1 to bypass at your own risk)')

"""What kind of value a setting holds, for the checks that refuse bad ones,
and how a setting is written back as a flag a user can paste into a shell.

Python counts `True` as the whole number 1, so a gin binding of `True` where a
number was meant would pass a plain `isinstance(v, int)`; these tests exclude
bools. numpy scalars count (they register as `numbers.Integral`/`Real`).
Imports nothing of the project, so any module's checks can use it.
"""
import math
import numbers
import shlex


def is_whole(value):
  """A whole number, not a bool."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value):
  """A real number (whole or not), not a bool."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite_number(value):
  """A real number that is neither NaN nor infinite, not a bool."""
  return is_number(value) and math.isfinite(value)


def shell_word(arg):
  """`arg` as one shell word that still reads well when printed for pasting.

  Unquoted when nothing needs protecting; in double quotes when only spaces,
  brackets or single quotes do (gin's strings: `'float32'`, `['camera']`);
  else shlex's single quoting, which protects everything.
  """
  if shlex.quote(arg) == arg:
    return arg
  if not set(arg) & set('"$`\\!'):
    return f'"{arg}"'
  return shlex.quote(arg)

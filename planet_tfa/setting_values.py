"""What kind of value a setting holds, for the checks that refuse bad ones.

Python counts `True` as the whole number 1, so a gin binding of `True` where a
number was meant would pass a plain `isinstance(v, int)`; these tests exclude
bools. numpy scalars count (they register as `numbers.Integral`/`Real`).
Imports nothing of the project, so any module's checks can use it.
"""
import math
import numbers


def is_whole(value):
  """A whole number, not a bool."""
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value):
  """A real number (whole or not), not a bool."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite_number(value):
  """A real number that is neither NaN nor infinite, not a bool."""
  return is_number(value) and math.isfinite(value)

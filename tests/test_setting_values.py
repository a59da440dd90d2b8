"""The value tests every setting check shares: bools are never numbers."""
import math

import numpy as np
import pytest

from planet_tfa import setting_values


@pytest.mark.parametrize('value, whole, number, finite', [
    (3, True, True, True),
    (np.int64(3), True, True, True),
    (2.5, False, True, True),
    (np.float32(0.316), False, True, True),
    (math.nan, False, True, False),
    (math.inf, False, True, False),
    (True, False, False, False),    # gin's True where a number was meant
    (False, False, False, False),
    ('1', False, False, False),
    (None, False, False, False),
])
def test_kinds_of_value(value, whole, number, finite):
  assert setting_values.is_whole(value) is whole
  assert setting_values.is_number(value) is number
  assert setting_values.is_finite_number(value) is finite

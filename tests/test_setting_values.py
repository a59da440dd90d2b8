"""The value tests every setting check shares: bools are never numbers."""
import math
import shlex
import subprocess

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


@pytest.mark.parametrize('word, printed', [
    ('--seeds=0,1', '--seeds=0,1'),  # nothing to protect: left bare
    ("--gin_param=WorldModel.image_precision='float32'",
     '"--gin_param=WorldModel.image_precision=\'float32\'"'),
    ("--gin_param=WorldModel.encoder_keys = ['camera', 'lidar']",
     '"--gin_param=WorldModel.encoder_keys = [\'camera\', \'lidar\']"'),
    ('--gin_param=CarlaServer.host="10.0.0.5"', None),  # double quotes: shlex's quoting
    ("--gin_param=x='$HOME `id`'", None),
])
def test_shell_word_survives_the_shell_unchanged(word, printed):
  quoted = setting_values.shell_word(word)
  # A real shell hands back exactly the flag, as one word.
  echoed = subprocess.run(['bash', '-c', 'printf "%s\\0" ' + quoted], capture_output=True,
                          text=True, check=True).stdout
  assert echoed.split('\0')[:-1] == [word]
  assert shlex.split(quoted) == [word]
  if printed is not None:
    assert quoted == printed

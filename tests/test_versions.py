"""The import-time stack check names what is installed, what is needed and the fix."""
import pytest

from planet_tfa import versions


def test_installed_stack_passes():
  versions.check_stack()  # the pinned stack of this environment


def test_mismatch_names_installed_and_required_versions_and_the_fix(monkeypatch):
  monkeypatch.delenv(versions.SKIP_ENV, raising=False)
  required = ((('tensorflow', 'tensorflow-cpu'), '2.99'), (('no-such-package-xyz',), '1.0'))
  with pytest.raises(versions.StackVersionError) as error:
    versions.check_stack(required)
  message = str(error.value)
  installed_tf = versions.installed_version(('tensorflow', 'tensorflow-cpu'))
  assert f'tensorflow: installed {installed_tf}, need 2.99.x' in message
  assert 'no-such-package-xyz: not installed (need 1.0.x)' in message
  assert "pip install -e '.[dmc,carla,dev]'" in message


def test_release_prefix_matching_is_exact():
  assert versions._matches('2.15.1', '2.15')
  assert not versions._matches('2.150.0', '2.15')
  assert not versions._matches('2.14.1', '2.15')

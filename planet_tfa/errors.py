"""Errors whose message names the cause and the fix.

The programs (planet_tfa/programs) print these without a traceback: a
`ConfigError` exits 2 (a setting, found before anything started), any other
`UserError` exits 1 after saying what was kept. Library modules raise their
own subclasses, so this module imports nothing of the project.
"""


class UserError(Exception):
  """A problem the user can fix from the message alone."""


class ConfigError(UserError, ValueError):
  """A gin file, binding or flag is wrong; raised before anything starts."""

"""Benchmarks (`python -m bench`, bench/registry.py) and diagnosis tools (`python -m bench.X`).

Launched as a program, a tool keeps the console as clean as train_eval.py
does: TensorFlow's start-up lines, absl and Python logging and warnings go to
a log file, LOG_DIR/bench.X.log (LOG_DIR: $PLANET_TFA_LOG_DIR, else
runs/logs in the repository); stdout, the tool's own progress lines and
tracebacks stay on the console. Imported (tests, other tools), nothing changes.
"""
import os
import sys

from planet_tfa.programs import cli

LOG_DIR_ENV = 'PLANET_TFA_LOG_DIR'
DEFAULT_LOG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               'runs', 'logs')


def launched_module():
  """'bench.X' when this process is `python -m bench.X` (or 'bench'), else None."""
  argv = getattr(sys, 'orig_argv', [])
  if sys.argv[:1] != ['-m'] or '-m' not in argv[:-1]:
    return None  # imported, not launched: runpy sets argv[0] to '-m' while it finds the module
  module = argv[argv.index('-m') + 1]
  return module if module.split('.')[0] == __name__ else None


def _capture():
  module = launched_module()
  if module is None:
    return
  cli.capture_tool_logs(os.environ.get(LOG_DIR_ENV) or DEFAULT_LOG_DIR, module)
  # gym (imported by tf_agents) prints a notice on Python's stderr at import:
  # import it while stderr still points at the log.
  saved, sys.stderr = sys.stderr, sys.__stderr__  # fd 2: the log file
  try:
    import gym  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    pass
  finally:
    sys.stderr = saved


_capture()

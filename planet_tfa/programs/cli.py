"""What every program shares: the log file under ROOT and one way of reporting errors.

Log file: `capture_native_logs()` runs before TensorFlow is imported (only
when a program runs as `__main__`); it points the process's stderr file
descriptor, where TensorFlow's and Reverb's C++ log lines go, at a scratch
file. `start(main)` runs the program with Python's `sys.stderr` back on the
console; `attach_log(root_dir, name)` moves the scratch to ROOT/logs/NAME.log
once the root is known and sends absl, Python logging and Python warnings
there too. The console keeps the
program's own lines (stdout) and its error messages.

Errors: `run_program` prints a `ConfigError` (a setting; nothing started)
and exits 2; any other `errors.UserError` (or a lost connection) prints its
message and what was kept, and exits 1. Both without a traceback, and
without the "In call to configurable" lines gin appends (those go to the log).
Any other error keeps its traceback: it is a bug to report, not a setting.
"""
import atexit
import logging
import os
import re
import sys
import tempfile

from absl import app
from absl import flags as absl_flags
from absl import logging as absl_logging

from planet_tfa import errors
from planet_tfa import layout

_capture = {}


def capture_native_logs():
  """Sends fd 2 (C++ logs) to a scratch file; `sys.stderr` stays the console."""
  if _capture:
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '0')  # info lines too: they go to the file
  sys.stderr.flush()
  console_fd = os.dup(2)
  scratch = tempfile.NamedTemporaryFile(prefix='planet_tfa-', suffix='.log', delete=False)
  os.dup2(scratch.fileno(), 2)
  _capture.update(console_fd=console_fd, scratch=scratch, path=scratch.name, log=None)
  atexit.register(_drop_scratch)
  # Until `start`, Python's stderr goes there too: what libraries print while
  # they are imported (e.g. gym's notices) is log noise, not the program's.


def start(main):
  """Runs the absl program `main` with Python's stderr back on the console."""
  _console_stderr()
  app.run(main)


def _console_stderr():
  if _capture:
    sys.stderr.flush()
    sys.stderr = os.fdopen(os.dup(_capture['console_fd']), 'w', buffering=1)


def capture_tool_logs(log_dir, name):
  """For a tool without a run root (bench/): library log lines to LOG_DIR/NAME.log.

  The console keeps the tool's own output (stdout, its stderr progress, its
  tracebacks); an uncaught error's traceback ends with where the log is.
  """
  capture_native_logs()
  # What app.run does for train_eval.py: absl's handler on the root logger (every
  # library's logging reaches it), writing to its stream once flags count as parsed.
  absl_logging.use_absl_handler()
  if not absl_flags.FLAGS.is_parsed():  # argparse tools never parse absl's flags
    absl_flags.FLAGS.mark_as_parsed()
  path = attach_log(log_dir, name, subdir='')
  _console_stderr()
  hook = sys.excepthook

  def excepthook(kind, value, traceback):
    if isinstance(value, errors.UserError):  # the user's to fix: the message suffices
      print(f'error: {console_message(value)}', file=sys.stderr)
    else:
      hook(kind, value, traceback)
    print(f'(library log: {path})', file=sys.stderr, flush=True)

  sys.excepthook = excepthook
  return path


def _drop_scratch():
  """A program that ended before knowing its root leaves no scratch file behind."""
  if _capture and not _capture['log'] and os.path.exists(_capture['path']):
    os.unlink(_capture['path'])


def attach_log(root_dir, name, subdir=layout.LOG_DIR):
  """Moves the captured log lines to ROOT/logs/NAME.log; returns its path (None: not captured)."""
  if not _capture or _capture['log']:
    return _capture.get('log')
  log_dir = os.path.join(root_dir, subdir)
  os.makedirs(log_dir, exist_ok=True)
  path = os.path.join(log_dir, f'{name}.log')
  log = open(path, 'a', buffering=1)  # pylint: disable=consider-using-with
  _capture['scratch'].flush()
  with open(_capture['path']) as scratch:
    log.write(scratch.read())
  os.dup2(log.fileno(), 2)
  _capture['scratch'].close()
  os.unlink(_capture['path'])
  _capture.update(log=path, stream=log)
  _route_python_logs(log)
  return path


def _route_python_logs(stream):
  # absl's handler (TF and TF-Agents log through it) keeps the stream it was made with.
  absl_logging.get_absl_handler().python_handler.stream = stream
  # So do the handlers libraries added themselves (TensorFlow's 'tensorflow' logger).
  loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict
                                     .values() if isinstance(logger, logging.Logger)]
  console = (sys.__stderr__, sys.stderr)
  for logger in loggers:
    for handler in logger.handlers:
      if isinstance(handler, logging.StreamHandler) and handler.stream in console:
        handler.setStream(stream)
  logging.captureWarnings(True)  # warnings.warn -> the 'py.warnings' logger -> the file


def log_path():
  return _capture.get('log')


def run_program(main_fn, kept=None, user_errors=()):
  """Calls `main_fn()`; turns user errors into a message and an exit code.

  `kept`: what to tell the user survived an error (e.g. "checkpoints and
  replay in ROOT were kept"). `user_errors`: (exception type, text) pairs: an
  exception of that type whose message contains the text is the user's to
  fix (e.g. the agent's own NaN check), so its message suffices. The same
  type with any other message is a bug and keeps its traceback.
  """
  try:
    return main_fn()
  except errors.ConfigError as error:  # a setting, found before anything started
    exit_with(error, code=2)
  except (errors.UserError, ConnectionError) as error:
    exit_with(error, code=1, kept=kept, name=type(error).__name__)
  except Exception as error:  # pylint: disable=broad-except
    if not any(isinstance(error, kind) and text in str(error) for kind, text in user_errors):
      raise
    exit_with(error, code=1, kept=kept, name=type(error).__name__)
  return None


# gin appends one such line per configurable the exception passed through.
_GIN_CONTEXT = re.compile(r"^\s*In call to configurable '[^']*' \(.*\)$")


def console_message(error):
  """`error`'s message without gin's "In call to configurable" lines, at most 40 lines."""
  lines = [line for line in str(error).splitlines() if not _GIN_CONTEXT.match(line)]
  return '\n'.join(lines[:40])


def exit_with(error, code, kept=None, name=None):
  """Prints `error` (its first 40 lines) and where the full log is, then exits with `code`."""
  if log_path():  # the whole message, gin's context included, for a bug report
    print(f'error: {name + ": " if name else ""}{error}', file=_capture['stream'], flush=True)
  print(f'error: {name + ": " if name else ""}{console_message(error)}', file=sys.stderr)
  if kept:
    print(f'({kept})', file=sys.stderr)
  if log_path():
    print(f'(log: {log_path()})', file=sys.stderr)
  sys.stderr.flush()
  sys.exit(code)

"""SIGTERM / SIGINT as a stop request that long loops honour at a safe point.

The first signal only sets `StopRequested.signal` (and prints what will
happen); the loop finishes its unit of work, saves, and exits. A second
signal gets `second_handler` (by default the handler that was installed
before), so it aborts at once.
"""
import signal


class StopRequested:

  def __init__(self, announcement=None, second_handler=None):
    self.signal = None
    self._announcement = announcement
    self._second_handler = second_handler
    self._previous = {}

  def install(self):
    for sig in (signal.SIGTERM, signal.SIGINT):
      try:
        self._previous[sig] = signal.signal(sig, self._handle)
      except ValueError:  # not the main thread (e.g. tests calling a loop)
        pass
    return self

  def _handle(self, signum, frame):
    del frame
    self.signal = signal.Signals(signum).name
    if self._announcement:
      print(f'\n{self.signal} received: {self._announcement}', flush=True)
    second = self._second_handler
    signal.signal(signum, second if second is not None
                  else self._previous.get(signum, signal.SIG_DFL))

  def restore(self):
    """Puts back the handlers that were installed before."""
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)

"""A standalone Reverb server for many collectors and one learner.

Serves the tables of `experiment.make_replay_tables` (built from the same gin
config as the learner; run it with `python -m planet_tfa.programs.serve`):
  experience  T+1-step windows (signature = the agent's collect_data_spec with
              a time dimension); PlaNet's "train episodes".
  variables   one item: the collect policy's variables + the train step,
              published by the learner and pulled by collectors.

The tables persist to ROOT/replay/: restored on start, written every
`checkpoint_interval_s` and on SIGTERM/SIGINT.

Security: Reverb's C++ server listens on every network interface and has no
bind-address option and no authentication or encryption. Anyone who can
reach the port can read and overwrite the replay and the policy variables.
Keep the port on a trusted network or firewall it (docs/distributed.md).
"""
import os
import signal
import sys
import time

from planet_tfa import errors
from planet_tfa import layout
from planet_tfa import stop_signals
from planet_tfa.replay import tables

SECURITY_WARNING = (
    'WARNING: the Reverb server listens on port {port} of EVERY network interface '
    '(Reverb has no bind-address option) and has NO authentication: any host that can '
    'reach this port can read the replay and overwrite the policy variables. Firewall '
    'the port or keep it on a trusted network. Pass --allow_remote to acknowledge '
    'this when collectors run on other hosts.')
REMOTE_NOTE = (
    'NOTE: --allow_remote: port {port} is meant to be reached from other hosts. Reverb '
    'has no authentication or encryption: keep it on a trusted network / behind a '
    'firewall that admits only the collector and learner hosts.')


class ServerStartError(errors.UserError, RuntimeError):
  """The server could not start: a taken port or an unreadable replay checkpoint."""


def serve(server_tables, root_dir, port, checkpoint_interval_s=600.0, allow_remote=False):
  """Serves `server_tables` until SIGTERM/SIGINT; returns the last checkpoint path."""
  try:
    server = tables.ReplayServer(server_tables, root_dir=root_dir, port=port)
  except (RuntimeError, ValueError) as error:
    raise ServerStartError(
        f'could not start the Reverb server on port {port}: {error}\nIf the port is '
        f'taken pick another --port; if restoring {os.path.join(root_dir, layout.REPLAY_DIR)} '
        'failed, it was written by another config: use a fresh --root_dir or move the '
        'replay directory away.') from error
  print((REMOTE_NOTE if allow_remote else SECURITY_WARNING).format(port=server.port),
        file=sys.stderr, flush=True)
  info = server.client.server_info()
  print(f'Reverb server ready on port {server.port} (root {root_dir}): '
        f'experience holds {info[tables.EXPERIENCE_TABLE].current_size} windows, '
        f'variables {info[tables.VARIABLES_TABLE].current_size} item(s). '
        f'Checkpoints to {server.checkpoint_dir} '
        + (f'every {checkpoint_interval_s:.0f}s and ' if checkpoint_interval_s else '')
        + 'on SIGTERM/SIGINT.', flush=True)
  signals = stop_signals.StopRequested(second_handler=signal.SIG_DFL).install()
  last_checkpoint = time.time()
  path = None
  try:
    while signals.signal is None:
      time.sleep(0.5)
      if checkpoint_interval_s and time.time() - last_checkpoint >= checkpoint_interval_s:
        path = _checkpoint(server)
        last_checkpoint = time.time()
  finally:
    if signals.signal:
      print(f'{signals.signal} received: checkpointing the replay, then stopping.',
            flush=True)
    path = _checkpoint(server) or path
    server.stop()
  return path


def _checkpoint(server):
  start = time.time()
  info = server.client.server_info()
  path = server.checkpoint()
  print(f'replay checkpoint: {info[tables.EXPERIENCE_TABLE].current_size} windows -> '
        f'{path} ({time.time() - start:.1f}s)', flush=True)
  return path

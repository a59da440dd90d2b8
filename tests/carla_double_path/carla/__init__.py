"""`import carla` for subprocesses: the server double (tests/carla_double.py).

Put tests/carla_double_path and tests/ on PYTHONPATH. CARLA_DOUBLE_SERVERS
("2000" or "2000,2010") starts simulated servers on those ports at import,
which stand in for CarlaUE4 processes that outlive the client. With
CARLA_DOUBLE_REPORT=PATH, a clean exit writes what each server was left with
(actors of the adapter, synchronous mode, how many clients ticked it) as JSON.
"""
import atexit
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
import carla_double  # pylint: disable=wrong-import-position

sys.modules[__name__] = carla_double
_servers = [carla_double.start_server(int(port)) for port in
            filter(None, os.environ.get('CARLA_DOUBLE_SERVERS', '').split(','))]


def _report(path=os.environ.get('CARLA_DOUBLE_REPORT')):
  if not path:
    return
  report = {str(server.port): {
      # Tagged planet_tfa_<instance>_..., and the ego: role_name 'hero'.
      'adapter_actors': len(server.actors('planet_tfa')) + len(server.actors('hero')),
      'synchronous_mode': server.settings.synchronous_mode,
      'fixed_delta_seconds': server.settings.fixed_delta_seconds,
      'ticking_clients': len(server.ticking_clients),
      'frames': server.frame} for server in _servers}
  with open(path, 'w') as f:
    json.dump(report, f)


atexit.register(_report)

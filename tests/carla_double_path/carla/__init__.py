"""`import carla` for subprocesses: the server double (tests/carla_double.py).

Put tests/carla_double_path and tests/ on PYTHONPATH. CARLA_DOUBLE_SERVERS
("2000" or "2000,2010") starts simulated servers on those ports at import,
which stand in for CarlaUE4 processes that outlive the client.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
import carla_double  # pylint: disable=wrong-import-position

sys.modules[__name__] = carla_double
for _port in filter(None, os.environ.get('CARLA_DOUBLE_SERVERS', '').split(',')):
  carla_double.start_server(int(_port))

"""The errors the CARLA adapter raises on purpose, and what counts as a simulator fault."""
from planet_tfa import errors


class CarlaEnvError(errors.UserError):
  """Base class of the errors this environment raises on purpose."""


class CarlaConnectionError(CarlaEnvError, ConnectionError):
  """No CARLA server answered (at start, or after a crash and all retries)."""


class CarlaVersionError(CarlaEnvError):
  """Client and server versions differ; CARLA's RPC is not compatible across them."""


class CarlaPortError(CarlaEnvError, ValueError):
  """The Traffic Manager port is taken (by another server's TM or a simulator)."""


class CarlaSpawnError(CarlaEnvError):
  """The ego vehicle could not be placed at any of the tried spawn points."""


class SensorTimeout(CarlaEnvError):
  """A sensor delivered nothing for the ticked frame: the server stalled or died."""


# The carla client raises plain RuntimeError on RPC time-outs and lost servers.
SIMULATOR_FAULTS = (RuntimeError, SensorTimeout)

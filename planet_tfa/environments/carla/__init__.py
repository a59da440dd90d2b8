"""CARLA 0.9.16 driving environment (TF-Agents PyEnvironment) for PlaNet / latent SAC.

Modules, each importing only those above it:
  errors    the errors the adapter raises on purpose
  specs     observation and action specs (no server needed)
  client    the lazily imported `carla` client: connection, versions, ports,
            retries, world settings, leftovers of crashed runs, sensor buffers
  geometry  bird's-eye rendering: polygons, rasterising, lidar and camera images
  route     route projection and the state vector
  reward    reward terms, termination and truncation
  settings  the gin-configurable settings groups CarlaEnv takes
  env       CarlaEnv, which ties them to a running server

Only `client.import_carla` imports `carla`, so the package imports without it.
"""

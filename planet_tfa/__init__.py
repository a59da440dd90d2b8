"""planet_tfa: PlaNet's RSSM world model with latent SAC on TF-Agents."""
from planet_tfa import hardware as _hardware
from planet_tfa import versions as _versions

# Before TensorFlow is imported: oneDNN on every CPU, not only AVX-512 ones, and thread pools
# as wide as the cores this process may use (its affinity: `taskset` sets it).
_hardware.prefer_onednn()
_hardware.prefer_threads()
_versions.check_stack()

__version__ = '0.1.0'

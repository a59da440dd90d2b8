"""planet_tfa: PlaNet's RSSM world model with latent SAC on TF-Agents."""
from planet_tfa import versions as _versions

_versions.check_stack()

__version__ = '0.1.0'

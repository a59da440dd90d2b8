"""planet_tfa: PlaNet's RSSM world model with latent SAC, on TF-Agents, Reverb and gin."""
import setuptools

# The stack is pinned exactly: Reverb wheels only work with the TF minor they
# were built against, and tf-agents 0.19 is tested against both.
STACK = [
    'numpy==1.26.4',
    'tensorflow==2.15.1',
    'tensorflow-probability==0.23.0',
    'tf-agents[reverb]==0.19.0',
    'dm-reverb==0.14.0',
    'gym==0.23.0',
    'gin-config==0.5.0',
    'absl-py>=1.0',
    'pillow>=9.0',
]

setuptools.setup(
    name='planet_tfa',
    version='0.1.0',
    description='PlaNet RSSM world model + latent SAC on TF-Agents and Reverb',
    packages=setuptools.find_packages(include=['planet_tfa', 'planet_tfa.*']),
    python_requires='>=3.9,<3.12',
    install_requires=STACK,
    extras_require={
        # mujoco 4 breaks dm-control 1.0.50.
        'dmc': ['dm-control==1.0.50', 'mujoco==3.17.0'],
        'carla': ['carla==0.9.16'],
        # highway-env 1.12+ pulls pygame-ce, which overwrites tf-agents' pygame==2.1.3
        # without pip check noticing; 1.11 is the last on pygame. Installed on its own,
        # highway-env 1.11 resolved to gymnasium 1.4 with numpy 2.4 and typing-extensions
        # 4.16; gymnasium 1.3.0 works with the pinned numpy and tf-agents' 4.5.0.
        'highway': ['highway-env==1.11', 'gymnasium==1.3.0'],
        'dev': ['pytest>=7', 'pytest-timeout>=2.1', 'matplotlib>=3.5'],
    },
)

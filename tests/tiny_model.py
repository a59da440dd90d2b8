"""The tiny model of tests and smoke runs, read from gin/tiny.gin so its sizes have one home.

`train_eval.py` runs get them from `--gin_file=tiny.gin` (`DMC_FLAGS`); runs on another
task file whose run settings differ (CARLA) take only the model part as `BINDINGS`; tests
that build the model in Python use `rssm()`, `world_model()` and `agent()`. conftest.py's
fixtures `tiny_model_bindings` and `tiny_gin` are built on it.
"""
import ast
import os

import numpy as np
from tf_agents.trajectories import time_step as ts

from planet_tfa.agents import latent_sac_agent
from planet_tfa.agents import world_model as world_model_lib
from planet_tfa.networks import rssm as rssm_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_GIN = os.path.join(REPO, 'gin', 'tiny.gin')
# The model lines of tiny.gin; its other lines (time limit, data ratio, intervals) only fit
# DMC runs of train_eval.
_MODEL_SCOPES = ('RSSM.', 'WorldModel.', 'LatentSacAgent.')
# A tiny DMC cartpole run: gin files, and the same as train_eval.py flags.
DMC_GIN_FILES = ['dmc_cartpole_swingup.gin', 'tiny.gin']
DMC_FLAGS = [f'--gin_file={name}' for name in DMC_GIN_FILES]


def _model_settings():
  settings = {}
  with open(TINY_GIN) as f:
    for line in f:
      line = line.split('#', 1)[0].strip()
      if line.startswith(_MODEL_SCOPES):
        name, value = (part.strip() for part in line.split('=', 1))
        settings[name] = ast.literal_eval(value)
  return settings


SETTINGS = _model_settings()  # e.g. {'RSSM.deter_size': 16, ...}
BINDINGS = [f'{name} = {value!r}' for name, value in SETTINGS.items()]
RSSM_SIZES = {name.split('.', 1)[1]: value for name, value in SETTINGS.items()
              if name.startswith('RSSM.')}
IMAGE_DEPTH = SETTINGS['WorldModel.image_depth']
ACTOR_FC_LAYERS = SETTINGS['LatentSacAgent.actor_fc_layers']
CRITIC_FC_LAYERS = SETTINGS['LatentSacAgent.critic_fc_layers']


def rssm(**overrides):
  return rssm_lib.RSSM(**dict(RSSM_SIZES, **overrides))


def world_model(observation_spec, action_spec, **kwargs):
  """A WorldModel at tiny.gin's sizes; `kwargs` add keys or override a size."""
  kwargs.setdefault('image_depth', IMAGE_DEPTH)
  if 'rssm' not in kwargs:
    kwargs['rssm'] = rssm()
  return world_model_lib.WorldModel(observation_spec, action_spec, **kwargs)


def agent(observation_spec, action_spec, model=None, **kwargs):
  """A LatentSacAgent on `model` (default: `world_model()` of the specs) at tiny.gin's sizes."""
  if model is None:
    model = world_model(observation_spec, action_spec)
  kwargs.setdefault('actor_fc_layers', ACTOR_FC_LAYERS)
  kwargs.setdefault('critic_fc_layers', CRITIC_FC_LAYERS)
  return latent_sac_agent.LatentSacAgent(ts.time_step_spec(observation_spec), action_spec,
                                         world_model=model, **kwargs)


def remember_last_action(rssm, action_size, gain):
  """Sets the RSSM's prior step so that deter[:action_size] = tanh(gain * a) after
  any step, whatever the previous state: an RSSM whose imagined states are known."""
  # pylint: disable=protected-access
  stoch, deter, hidden = rssm.stoch_size, rssm.deter_size, rssm._img_in.units
  kernel = np.zeros(rssm._img_in.kernel.shape, np.float32)
  bias = np.zeros(hidden, np.float32)
  for i in range(action_size):
    kernel[stoch + i, i] = 1.0
    bias[i] = 2.0  # a + 2 > 0: the ELU passes it unchanged
  rssm._img_in.kernel.assign(kernel)
  rssm._img_in.bias.assign(bias)
  cell = rssm._cell
  gru_kernel = np.zeros(cell.kernel.shape, np.float32)
  gru_bias = np.zeros(cell.bias.shape, np.float32)
  gru_bias[0, :deter] = -30.0  # update gate shut: the new state is the candidate
  for i in range(action_size):
    gru_kernel[i, 2 * deter + i] = gain
    gru_bias[0, 2 * deter + i] = -2.0 * gain
  cell.kernel.assign(gru_kernel)
  cell.recurrent_kernel.assign(np.zeros(cell.recurrent_kernel.shape, np.float32))
  cell.bias.assign(gru_bias)

"""The documentation agrees with the code: the generated configuration reference is
current, every user error is in the troubleshooting page, every relative link resolves."""
import os

from planet_tfa.tools import config_reference

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(REPO, 'docs', 'guide')


def _read(path):
  with open(path) as f:
    return f.read()


# ---- configuration.md -------------------------------------------------------

def test_the_configuration_reference_is_generated_from_the_current_code():
  committed = _read(os.path.join(GUIDE, 'configuration.md'))
  generated = config_reference.render()
  assert committed == generated, (
      'docs/guide/configuration.md differs from the code: '
      + '; '.join(config_reference.differences(committed, generated))
      + f'. Regenerate it: {config_reference.COMMAND}')


def test_the_reference_names_every_configurable_and_parameter_of_the_package():
  items = config_reference.configurables()
  selectors = {item.selector for item in items}
  # The settings a newcomer binds first, from each layer.
  assert {'train_eval', 'Experiment', 'WorldModel', 'LatentSacAgent', 'RSSM',
          'load_dmc_pixels', 'load_highway', 'CarlaEnv', 'ReplaySampler'} <= selectors
  parameters = {item.selector: {p.name: p.default for p in item.parameters} for item in items}
  assert parameters['WorldModel']['image_depth'] == '32'
  assert parameters['Experiment']['env_loader'] == '@load_environment'
  assert all(item.module.startswith('planet_tfa') for item in items)


def test_a_missing_or_changed_configurable_is_named():
  generated = config_reference.render()
  sections = generated.split('\n## `')
  without_world_model = '\n## `'.join(s for s in sections if not s.startswith('WorldModel`'))
  assert config_reference.differences(without_world_model, generated) == ['missing: WorldModel']
  changed = generated.replace('| `image_depth` | `32` |', '| `image_depth` | `16` |')
  assert config_reference.differences(changed, generated) == ['changed: WorldModel']


def test_every_module_with_a_configurable_is_imported_by_the_reference():
  # Else its settings would be missing from the page (and from the programs' gin).
  declaring = []
  for folder, _, files in os.walk(os.path.join(REPO, 'planet_tfa')):
    for name in files:
      path = os.path.join(folder, name)
      if name.endswith('.py') and '@gin.configurable' in _read(path):
        module = os.path.relpath(path, REPO)[:-3].replace(os.sep, '.')
        declaring.append(module[:-len('.__init__')] if module.endswith('.__init__') else module)
  assert 'planet_tfa.agents.world_model' in declaring
  registered = {item.module for item in config_reference.configurables()}
  assert sorted(set(declaring) - registered) == []

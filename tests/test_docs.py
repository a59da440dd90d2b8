"""The documentation agrees with the code: the generated configuration reference is
current, every user error is in the troubleshooting page, every relative link resolves."""
import os
import re
import shlex

import pytest

from planet_tfa.tools import config_reference
import test_readme  # the README's command checks, applied to the guide's commands

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


def test_every_binding_of_defaults_gin_is_shown_beside_its_parameter():
  shown = {(item.selector, p.name): p.run_default
           for item in config_reference.configurables() for p in item.parameters}
  bindings = config_reference.defaults_gin()
  assert len(bindings) > 50  # the parser reads the file
  assert {key: shown.get(key) for key in bindings} == {
      key: value for key, (value, _) in bindings.items()}
  assert shown[('WorldModel', 'image_precision')] == "'auto'"  # differs from the code's


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


# ---- troubleshooting.md -----------------------------------------------------

def user_error_classes():
  """Names of the classes the package defines on errors.UserError or errors.ConfigError,
  found in the source: `class Name(...UserError...)`, `class Name(...ConfigError...)`,
  or a subclass of one of those."""
  sources = []
  for folder, _, files in os.walk(os.path.join(REPO, 'planet_tfa')):
    sources += [_read(os.path.join(folder, name)) for name in files if name.endswith('.py')]
  definitions = re.findall(r'^class (\w+)\(([^)]*)\):', '\n'.join(sources), re.M)
  found = {'UserError', 'ConfigError'}
  grew = True
  while grew:  # subclasses of subclasses (CarlaEnvError -> CarlaConnectionError)
    grew = False
    for name, bases in definitions:
      base_names = {base.strip().rsplit('.', 1)[-1] for base in bases.split(',')}
      if name not in found and base_names & found:
        found.add(name)
        grew = True
  return found


def test_every_user_error_of_the_package_is_in_troubleshooting():
  classes = user_error_classes()
  assert {'SettingError', 'ObservationSpecError', 'CarlaConnectionError',
          'ReplayEmptyError'} <= classes  # the search finds them
  page = _read(os.path.join(GUIDE, 'troubleshooting.md'))
  missing = sorted(name for name in classes if f'`{name}`' not in page)
  assert not missing, (f'docs/guide/troubleshooting.md does not name {missing}: add what each '
                       'means and its fix')


def test_troubleshooting_gives_the_exit_codes_the_programs_use():
  page = _read(os.path.join(GUIDE, 'troubleshooting.md'))
  cli_source = _read(os.path.join(REPO, 'planet_tfa', 'programs', 'cli.py'))
  assert 'exit_with(error, code=2)' in cli_source and 'exit_with(error, code=1' in cli_source
  assert '| **2** |' in page and '| **1** |' in page


# ---- relative links ---------------------------------------------------------

_FENCE = re.compile(r'^(```|~~~).*?^\1', re.M | re.S)
_INLINE_CODE = re.compile(r'`[^`\n]*`')
_LINK = re.compile(r'!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')


def markdown_files():
  files = [os.path.join(REPO, 'README.md')]
  for folder, _, names in os.walk(os.path.join(REPO, 'docs')):
    files += [os.path.join(folder, name) for name in sorted(names) if name.endswith('.md')]
  return files


def relative_links(text):
  """The relative targets of the markdown links and images in `text`, anchors stripped
  (code blocks and inline code left out: their brackets are not links)."""
  text = _INLINE_CODE.sub('', _FENCE.sub('', text))
  targets = []
  for target in _LINK.findall(text):
    if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I) or target.startswith('#'):
      continue  # http:, https:, mailto:, or an anchor on the same page
    targets.append(target.split('#', 1)[0])
  return targets


def test_the_link_finder_finds_links_and_images_and_skips_code_and_urls():
  text = ('see [a](docs/a.md#part) and ![b](b.png) and [c](https://x.org/c) and [d](#here)\n'
          '`[e](e.md)`\n```\n[f](f.md)\n```\n')
  assert relative_links(text) == ['docs/a.md', 'b.png']


def test_every_relative_link_in_the_readme_and_docs_resolves():
  broken = []
  for path in markdown_files():
    for target in relative_links(_read(path)):
      resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
      if not os.path.exists(resolved):
        broken.append(f'{os.path.relpath(path, REPO)}: {target}')
  assert not broken, 'broken relative links:\n  ' + '\n  '.join(broken)


# ---- the guide's commands ---------------------------------------------------

PROGRAMS = dict(test_readme.PROGRAMS, **{
    'planet_tfa.programs.export': 'planet_tfa.programs.export'})


def guide_commands():
  """The project's commands in the guide's shell blocks (`python train_eval.py`, `-m planet_tfa.programs.X`)."""
  commands = []
  for name in sorted(os.listdir(GUIDE)):
    if not name.endswith('.md'):
      continue
    for block in re.findall(r'```sh\n(.*?)```', _read(os.path.join(GUIDE, name)), re.S):
      for line in block.splitlines():
        line = line.split(' #', 1)[0].strip()
        words = line.split()
        if words[:1] == ['python'] and (words[1] in PROGRAMS or words[1:3] == ['-m', words[2]]
                                        and words[2] in PROGRAMS):
          commands.append(line)
  return commands


def test_the_guide_has_its_train_commands():
  commands = guide_commands()
  assert any('--gin_file=examples/gymnasium_pendulum.gin' in c for c in commands)
  assert any('--gin_file=carla_sac.gin' in c for c in commands)


@pytest.mark.parametrize('command', guide_commands())
def test_each_guide_command_names_flags_and_gin_files_that_exist(command):
  words = shlex.split(command)
  program = words[2] if words[1] == '-m' else words[1]
  with open(os.path.join(REPO, *PROGRAMS[program].split('.')) + '.py') as f:
    defined = set(re.findall(r"DEFINE_\w+\(\s*'(\w+)'", f.read()))
  for word in words[2:]:
    word = word.strip('[]')
    if word.startswith('--'):
      assert word[2:].split('=', 1)[0] in defined, f'{command}: {program} has no flag {word}'
    if word.startswith('--gin_file=') and word != '--gin_file=FILE':
      name = word.split('=', 1)[1]
      assert (os.path.exists(os.path.join(REPO, name))
              or os.path.exists(os.path.join(REPO, 'gin', name))), command


@pytest.mark.slow  # train_eval in other processes
@pytest.mark.parametrize('command', [c for c in guide_commands()
                                     if c.startswith('python train_eval.py')
                                     and '--replay_server' not in c])
def test_guide_train_commands_pass_the_settings_checks_as_written(command, tmp_path):
  words = shlex.split(command.replace('runs/', f'{tmp_path}/'))
  test_readme.assert_stops_at_the_settings_checks(words)

"""Writes the configuration reference: every gin configurable of planet_tfa.

    python -m planet_tfa.tools.config_reference --out docs/guide/configuration.md

The page is generated from gin's registry after importing every module the
programs import for their configurables (`programs/gin_files.py`), so it lists
exactly what a gin file or a `--gin_param` can bind: per configurable its
selector, module, the first line of its docstring and each parameter with its
default (`inspect.signature`). tests/test_docs.py regenerates it in memory and
fails when the committed page differs: after adding or changing a setting, run
the command above.
"""
import argparse
import dataclasses
import enum
import inspect
import io
import os
import re
import sys
import tokenize

import gin

# Imports every configurable module of the package (registered at import).
from planet_tfa.programs import gin_files  # pylint: disable=unused-import
from planet_tfa.renamed_bindings import RENAMED_BINDINGS

PACKAGE = 'planet_tfa'
COMMAND = 'python -m planet_tfa.tools.config_reference --out docs/guide/configuration.md'
SECTION_PREFIX = '## `'


@dataclasses.dataclass(frozen=True)
class Parameter:
  name: str
  default: str  # as shown: a Python literal, '@name' for a callable, '(required)'
  doc: str = ''  # its entry under Args: / Attributes: in the docstrings, if any
  run_default: str = ''  # the value gin/defaults.gin binds, if it binds one


@dataclasses.dataclass(frozen=True)
class Configurable:
  selector: str    # the shortest name gin accepts for it, e.g. 'WorldModel'
  module: str
  summary: str     # the first line of its docstring
  parameters: tuple


def _registry():
  return gin.config._REGISTRY  # pylint: disable=protected-access


def _show_default(value):
  if value is inspect.Parameter.empty:
    return '(required)'
  if isinstance(value, enum.Enum):
    return f'{type(value).__name__}.{value.name}'
  if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismethod(value):
    selector = f'{value.__module__}.{value.__qualname__}'
    if selector in _registry():  # a configurable: as a gin binding names it
      return f'@{_registry().minimal_selector(selector)}'
    return f'@{selector}'
  if callable(value) and hasattr(value, '__name__'):
    return f'@{value.__name__}'
  text = repr(value)
  if ' at 0x' in text:  # an object without a stable repr: name its type
    return f'<{type(value).__name__}>'
  return text


def _summary(target):
  doc = inspect.getdoc(target)
  if not doc and inspect.isclass(target):
    doc = inspect.getdoc(target.__init__)
  return doc.strip().splitlines()[0].strip() if doc else ''


# A Google-style docstring section and its entries ('  name: text', continued indented).
_SECTION = re.compile(r'^(Args|Arguments|Attributes):\s*$')
_ENTRY = re.compile(r'^(\s+)(\*{0,2}\w+(?:, \w+)*)(?: \([^)]*\))?:\s*(.*)$')


def _parameter_docs(target):
  """{parameter: its text} from the Args:/Attributes: sections of `target`'s docstrings."""
  docs = [inspect.getdoc(target) or '']
  if inspect.isclass(target):
    docs.append(inspect.getdoc(target.__init__) or '')
  found = {}
  for doc in docs:
    in_section, indent, current = False, None, None
    for line in doc.splitlines():
      if _SECTION.match(line):
        in_section, indent, current = True, None, None
        continue
      if not in_section:
        continue
      if line.strip() and not line.startswith((' ', '\t')):  # the next section
        in_section = False
        continue
      entry = _ENTRY.match(line)
      if entry and (indent is None or len(entry.group(1)) == indent):
        indent = len(entry.group(1))
        current = [name.strip() for name in entry.group(2).split(',')]  # 'a, b: shared text'
        for name in current:
          found.setdefault(name, []).append(entry.group(3).strip())
      elif current is not None and line.strip():
        for name in current:
          found[name].append(line.strip())
  return {name: ' '.join(part for part in parts if part) for name, parts in found.items()}


_FIELD = re.compile(r'^\s+(\w+)\s*:')


def _field_comments(target):
  """{field: its trailing comment} of a dataclass's fields (`port: int = 2000  # ...`)."""
  if not (inspect.isclass(target) and dataclasses.is_dataclass(target)):
    return {}
  try:
    source = inspect.getsource(target)
  except (OSError, TypeError):
    return {}
  lines = source.splitlines()
  found = {}
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.COMMENT:
      field = _FIELD.match(lines[token.start[0] - 1])
      if field and token.start[1] > field.end():
        found[field.group(1)] = token.string.lstrip('#').strip()
  return found


DEFAULTS_GIN = os.path.join(gin_files.GIN_DIR, 'defaults.gin')
_BINDING = re.compile(r'^([\w.]+)\.(\w+)\s*=\s*(.*)$')


def defaults_gin(path=DEFAULTS_GIN):
  """{(selector, parameter): (value, trailing comment)} of the one-line bindings in `path`."""
  with open(path) as f:
    text = f.read()
  comments = {}
  for token in tokenize.generate_tokens(io.StringIO(text).readline):
    if token.type == tokenize.COMMENT:
      comments[token.start[0]] = (token.start[1], token.string.lstrip('#').strip())
  found = {}
  for number, line in enumerate(text.splitlines(), 1):
    column, comment = comments.get(number, (len(line), ''))
    binding = _BINDING.match(line[:column].strip())
    if binding:
      found[(binding.group(1), binding.group(2))] = (binding.group(3).strip(), comment)
  return found


def _parameters(target, configurable, selector, run_defaults):
  try:
    signature = inspect.signature(target)
  except (TypeError, ValueError):
    return ()
  docs = dict(_field_comments(target), **_parameter_docs(target))
  parameters = []
  for name, parameter in signature.parameters.items():
    if name == 'self' or parameter.kind in (inspect.Parameter.VAR_POSITIONAL,
                                            inspect.Parameter.VAR_KEYWORD):
      continue
    if configurable.allowlist and name not in configurable.allowlist:
      continue
    if configurable.denylist and name in configurable.denylist:
      continue
    run_default, comment = run_defaults.get((selector, name), ('', ''))
    parameters.append(Parameter(name, _show_default(parameter.default),
                                docs.get(name) or comment, run_default))
  return tuple(parameters)


def configurables():
  """Every configurable of the package in gin's registry, by module then selector."""
  registry = _registry()
  run_defaults = defaults_gin()
  found = []
  for selector, configurable in registry.items():
    module = configurable.module or ''
    if module != PACKAGE and not module.startswith(PACKAGE + '.'):
      continue
    minimal = registry.minimal_selector(selector)
    found.append(Configurable(
        selector=minimal, module=module, summary=_summary(configurable.wrapped),
        parameters=_parameters(configurable.wrapped, configurable, minimal, run_defaults)))
  return sorted(found, key=lambda c: (c.module, c.selector))


def _cell(text):
  return text.replace('|', '\\|').replace('\n', ' ')


def render(items=None):
  """The reference page as markdown."""
  items = configurables() if items is None else items
  lines = [
      '# Configuration reference',
      '',
      f'Generated from the code by `{COMMAND}`; do not edit by hand. '
      'tests/test_docs.py fails when this page and the code disagree.',
      '',
      'Every gin configurable of planet_tfa with each parameter, its default in the code and '
      'the value `gin/defaults.gin` binds: every task file in `gin/` includes defaults.gin, '
      'so that value is what a run starts from, and the task files override some of it. '
      "Bind a parameter in a gin file (`WorldModel.image_depth = 16`) or on the command line "
      "(`--gin_param='WorldModel.image_depth=16'`). Parameters shown `(required)` are passed "
      'by the code, not bound in gin. What each does: its docstring, else its comment in '
      'defaults.gin. A misspelled name stops the run at start '
      '([troubleshooting.md](troubleshooting.md)).',
      '',
      '| configurable | module | what it is |',
      '|---|---|---|',
  ]
  for item in items:
    anchor = item.selector.lower().replace('.', '')
    lines.append(f'| [`{item.selector}`](#{anchor}) | `{item.module}` | {_cell(item.summary)} |')
  for item in items:
    lines += ['', f'{SECTION_PREFIX}{item.selector}`', '', f'`{item.module}`: {item.summary}', '']
    if item.parameters:
      lines += ['| parameter | default | defaults.gin | what it does |', '|---|---|---|---|']
      lines += [f'| `{p.name}` | `{_cell(p.default)}` | '
                f'{f"`{_cell(p.run_default)}`" if p.run_default else ""} | {_cell(p.doc)} |'
                for p in item.parameters]
    else:
      lines.append('No parameters.')
  lines += ['', '## Renamed bindings', '',
            'Older names still named at start, with their new spelling '
            '(`planet_tfa/renamed_bindings.py`); an older run\'s `operative_config.gin` is '
            'upgraded on resume.', '',
            '| old binding | new binding |', '|---|---|']
  lines += [f'| `{old}` | `{new}` |' for old, new in sorted(RENAMED_BINDINGS.items())]
  return '\n'.join(lines) + '\n'


def sections(text):
  """{selector: section text} of a rendered page, to name what differs."""
  found = {}
  current = None
  for line in text.splitlines():
    if line.startswith(SECTION_PREFIX):
      current = line[len(SECTION_PREFIX):].rstrip('`')
      found[current] = []
    elif line.startswith('## '):
      current = None
    elif current is not None:
      found[current].append(line)
  return {name: '\n'.join(body).strip() for name, body in found.items()}


def differences(committed, generated):
  """Lines naming what a committed page lacks, has extra or shows differently."""
  old, new = sections(committed), sections(generated)
  report = [f'missing: {name}' for name in new if name not in old]
  report += [f'no longer in the code: {name}' for name in old if name not in new]
  report += [f'changed: {name}' for name in new if name in old and new[name] != old[name]]
  if not report and committed != generated:
    report.append('the text outside the configurables differs')
  return report


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', help='where to write the page (default: stdout)')
  args = parser.parse_args(argv)
  text = render()
  if args.out:
    with open(args.out, 'w') as f:
      f.write(text)
    print(f'{args.out}: {len(configurables())} configurables')
  else:
    sys.stdout.write(text)


if __name__ == '__main__':
  main()

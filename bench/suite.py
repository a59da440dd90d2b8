"""The benchmark suite: `python -m bench` (or `make bench`).

Runs the registry's suite entries (bench/registry.py) in order, each module
in its own process (clean peak RSS, one TF runtime each, LD_PRELOAD for the
tcmalloc run), prints every figure as one JSON line tagged with its entry
("benchmark") and docs section ("section"), and writes the document of this
CPU's kind, docs/benchmarks/<kind>.md (tables by topic, the machine, the exact
command), and the index docs/benchmarks.md of every kind measured. Children's logs
(TF, Reverb) go to --log_dir.

  python -m bench [--quick] [--only flops,replay,policy,planner,train,tcmalloc,carla] \
      [--out FILE.md] [--log_dir /tmp/planet_bench_logs] [--list]

--only takes registry groups or entry names. --quick runs the entries'
quick arguments (the project's tiny sizes: a smoke test of the suite; it
writes no document unless --out is given).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

from bench import common
from planet_tfa import hardware
from bench import registry

CHILD_TIMEOUT_S = 600


def _print(line):
  print(json.dumps(line), flush=True)


def run_child(entry, argv, log_dir, timeout_s=CHILD_TIMEOUT_S):
  """Runs `python -m entry.module argv`; returns its JSON lines, each tagged
  with the entry and its section (echoed as they come)."""
  env = dict(os.environ, PYTHONUNBUFFERED='1', TF_CPP_MIN_LOG_LEVEL='1', PLANET_TFA_LOG_DIR=log_dir)
  env.update(dict(entry.env))
  log_path = os.path.join(log_dir, f'{entry.name}.log')
  cmd = [sys.executable, '-m', entry.module] + argv
  tag = {'benchmark': entry.name, 'section': entry.section}
  lines = []
  start = time.time()
  with open(log_path, 'w') as log:
    log.write(' '.join(shlex.quote(c) for c in cmd) + '\n')
    log.flush()
    proc = subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=subprocess.PIPE,
                            stderr=log, text=True)
    try:
      for raw in proc.stdout:
        raw = raw.strip()
        if raw.startswith('{'):
          line = {**json.loads(raw), **tag}
          lines.append(line)
          _print(line)
        elif raw:
          log.write(raw + '\n')
      proc.wait(timeout=max(1, timeout_s - (time.time() - start)))
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()
  if proc.returncode != 0:
    with open(log_path) as f:
      tail = f.read().splitlines()[-15:]
    # Failures go to their own section so a broken benchmark cannot pass unseen.
    line = {'name': f'{entry.name}_failed', 'value': None, 'unit': None,
            'benchmark': entry.name, 'section': registry.FAILURES,
            'returncode': proc.returncode, 'log': log_path, 'log_tail': tail}
    _print(line)
    lines.append(line)
  print(f'# {entry.name}: {time.time() - start:.0f}s (log {log_path})', file=sys.stderr,
        flush=True)
  return lines


def select(only):
  """Suite entries named by `only` (groups or entry names), in running order."""
  wanted = [w for w in only.split(',') if w]
  entries = registry.suite()
  known = set(registry.groups()) | {e.name for e in entries}
  unknown = sorted(set(wanted) - known)
  if unknown:
    raise ValueError(f'unknown groups {unknown}; choose from {",".join(registry.groups())} '
                     'or entry names (python -m bench --list)')
  return [e for e in entries if e.group in wanted or e.name in wanted]


def run(entries, quick, log_dir):
  """Runs `entries` in order; returns every JSON line, derived figures included."""
  os.makedirs(log_dir, exist_ok=True)
  lines = []
  for entry in entries:
    if entry.requires and not os.path.exists(entry.requires):
      line = {'name': f'{entry.name}_skipped', 'value': None, 'unit': None,
              'benchmark': entry.name, 'section': entry.section,
              'note': f'{entry.requires} missing'}
      _print(line)
      lines.append(line)
      continue
    argv = entry.argv(quick)
    produced = {l['name']: l.get('value') for l in lines}
    for flag, figure in entry.figure_args:
      if produced.get(figure):
        argv += [flag, str(produced[figure])]
    lines += run_child(entry, argv, log_dir)
  for line in registry.derived(lines):
    _print(line)
    lines.append(line)
  return lines


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  groups = registry.groups()
  parser = argparse.ArgumentParser(description='planet_tfa benchmark suite')
  parser.add_argument('--quick', action='store_true',
                      help='tiny sizes: a smoke test of the suite (no document written)')
  parser.add_argument('--only', default=','.join(groups),
                      help=f'comma list of groups ({",".join(groups)}) or entry names')
  parser.add_argument('--out', default=None,
                      help='markdown report (default docs/benchmarks/<CPU kind>.md and the '
                      'docs/benchmarks.md index; none with --quick)')
  parser.add_argument('--log_dir', default='/tmp/planet_bench_logs')
  parser.add_argument('--list', action='store_true', help='print the registry and exit')
  args = parser.parse_args(argv)
  if args.list:
    return registry.main([])
  try:
    entries = select(args.only)
  except ValueError as error:
    parser.error(str(error))
  # Each kind of CPU keeps its own document; the index lists them all.
  out = args.out if args.out is not None else (
      None if args.quick else os.path.join(common.REPO, 'docs', 'benchmarks',
                                           f'{hardware.cpu_kind()}.md'))
  start = time.time()
  info = common.machine()
  lines = run(entries, args.quick, args.log_dir)
  wall_s = time.time() - start
  print(f'# suite: {wall_s:.0f}s', file=sys.stderr, flush=True)
  if out:
    from bench import report  # pylint: disable=g-import-not-at-top
    command = ' '.join(['python -m bench'] + [shlex.quote(a) for a in argv])
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    report.write(out, lines, info, command, wall_s, quick=args.quick)
    print(f'# wrote {out}', file=sys.stderr, flush=True)
    if args.out is None:
      report.write_index(report.INDEX, report.KIND_DIR)
      print(f'# wrote {report.INDEX}', file=sys.stderr, flush=True)
  return 0 if not any(l['name'].endswith('_failed') for l in lines) else 1

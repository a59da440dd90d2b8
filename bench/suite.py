"""The benchmark suite: `python -m bench` (or `make bench`).

Runs each benchmark module in its own process (clean peak RSS, one TF
runtime each, LD_PRELOAD for the tcmalloc run), prints every figure as one
JSON line, and writes docs/benchmarks.md with the table, the machine and the
exact command. Children's logs (TF, Reverb) go to --log_dir.

  python -m bench [--quick] [--only flops,replay,policy,planner,train,tcmalloc,carla] \
      [--out docs/benchmarks.md] [--log_dir /tmp/planet_bench_logs]

--quick runs everything at the project's tiny sizes in about a minute (a smoke
test of the suite; it writes no document unless --out is given).
"""
import argparse
import datetime
import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCMALLOC = '/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4'
GROUPS = ('flops', 'replay', 'policy', 'planner', 'train', 'tcmalloc', 'carla')
CHILD_TIMEOUT_S = 420


def run_child(label, module_args, log_dir, env_extra=None):
  """Runs `python -m <module_args>`; returns its JSON lines (echoed as they come)."""
  env = dict(os.environ, PYTHONUNBUFFERED='1', TF_CPP_MIN_LOG_LEVEL='1')
  env.update(env_extra or {})
  log_path = os.path.join(log_dir, f'{label}.log')
  cmd = [sys.executable, '-m'] + module_args
  lines = []
  start = time.time()
  with open(log_path, 'w') as log:
    log.write(' '.join(shlex.quote(c) for c in cmd) + '\n')
    log.flush()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log,
                            text=True)
    try:
      for raw in proc.stdout:
        raw = raw.strip()
        if raw.startswith('{'):
          line = json.loads(raw)
          lines.append(line)
          print(json.dumps(line), flush=True)
        elif raw:
          log.write(raw + '\n')
      proc.wait(timeout=max(1, CHILD_TIMEOUT_S - (time.time() - start)))
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()
  if proc.returncode != 0:
    with open(log_path) as f:
      tail = f.read().splitlines()[-15:]
    line = {'issue': None, 'name': f'{label}_failed', 'value': None, 'unit': None,
            'returncode': proc.returncode, 'log': log_path, 'log_tail': tail}
    print(json.dumps(line), flush=True)
    lines.append(line)
  print(f'# {label}: {time.time() - start:.0f}s (log {log_path})', file=sys.stderr,
        flush=True)
  return lines


def machine():
  """Machine and stack, without importing TensorFlow in this process."""
  info = {'cpu': 'unknown', 'cores': len(os.sched_getaffinity(0))}
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          info['cpu'] = line.split(':', 1)[1].strip()
          break
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemTotal'):
          info['ram_gib'] = round(int(line.split()[1]) / 2**20, 1)
          break
  except OSError:
    pass
  for package in ('tensorflow', 'dm-reverb', 'tf-agents', 'tensorflow-probability',
                  'dm-control', 'mujoco', 'numpy'):
    try:
      info[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      info[package] = None
  info['tcmalloc'] = TCMALLOC if os.path.exists(TCMALLOC) else None
  info['date'] = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
  return info


def main(argv=None):
  parser = argparse.ArgumentParser(description='planet_tfa benchmark suite')
  parser.add_argument('--quick', action='store_true',
                      help='tiny sizes: a smoke test of the suite (no document written)')
  parser.add_argument('--only', default=','.join(GROUPS),
                      help=f'comma list of {",".join(GROUPS)}')
  parser.add_argument('--out', default=None,
                      help='markdown report (default docs/benchmarks.md; none with --quick)')
  parser.add_argument('--log_dir', default='/tmp/planet_bench_logs')
  args = parser.parse_args(argv)
  groups = [g for g in args.only.split(',') if g]
  unknown = set(groups) - set(GROUPS)
  if unknown:
    parser.error(f'unknown groups {sorted(unknown)}; choose from {GROUPS}')
  out = args.out if args.out is not None else (
      None if args.quick else os.path.join(REPO, 'docs', 'benchmarks.md'))
  os.makedirs(args.log_dir, exist_ok=True)
  quick = ['--quick'] if args.quick else []
  default_depth, small_depth = (8, 4) if args.quick else (32, 16)
  start = time.time()
  info = machine()
  lines = []

  gflops_args = []
  if 'flops' in groups:
    got = run_child('flops', ['bench.flops'] + (['--repeats', '3'] if args.quick else []),
                    args.log_dir)
    lines += got
    matmul = next((l for l in got if l['name'] == 'matmul_fp32_gflops'), None)
    if matmul and matmul['value']:
      gflops_args = ['--matmul_gflops', str(matmul['value'])]
  if 'replay' in groups:
    lines += run_child('replay', ['bench.replay_bench'] + quick, args.log_dir)
  if 'policy' in groups:
    lines += run_child('policy', ['bench.policy_bench'] + quick, args.log_dir)
  if 'planner' in groups:
    lines += run_child('planner', ['bench.planner_bench'] + quick, args.log_dir)
  if 'train' in groups:
    lines += run_child(f'train_d{default_depth}',
                       ['bench.train_bench', '--depth', str(default_depth)] + quick
                       + gflops_args, args.log_dir)
  if 'tcmalloc' in groups:
    if os.path.exists(TCMALLOC):
      lines += run_child(f'train_d{default_depth}_tcmalloc',
                         ['bench.train_bench', '--depth', str(default_depth),
                          '--suffix', '_tcmalloc'] + quick + gflops_args,
                         args.log_dir, env_extra={'LD_PRELOAD': TCMALLOC})
    else:
      line = {'issue': 8, 'name': f'train_step_s_d{default_depth}_tcmalloc', 'value': None,
              'unit': 's',
              'note': f'{TCMALLOC} missing: apt-get install -y libtcmalloc-minimal4'}
      print(json.dumps(line), flush=True)
      lines.append(line)
  if 'train' in groups:
    lines += run_child(f'train_d{small_depth}',
                       ['bench.train_bench', '--depth', str(small_depth)] + quick
                       + gflops_args, args.log_dir)
    lines += run_child('slac_shape', ['bench.slac_shape_bench', '--precisions',
                                      'float32,mixed_bfloat16'] + quick, args.log_dir)

  if 'carla' in groups:
    lines += run_child('carla_obs', ['bench.carla_obs_bench'] + quick, args.log_dir)

  by_name = {l['name']: l for l in lines}
  tag = f'_d{default_depth}'
  glibc = by_name.get(f'train_step_s{tag}')
  tc = by_name.get(f'train_step_s{tag}_tcmalloc')
  if glibc and tc and glibc.get('value') and tc.get('value'):
    line = {'issue': 8, 'name': f'tcmalloc_speedup{tag}',
            'value': round(glibc['value'] / tc['value'], 3),
            'unit': 'x (glibc s / tcmalloc s)', 'glibc_s': glibc['value'],
            'tcmalloc_s': tc['value'],
            'glibc_min_max_s': [glibc.get('min_s'), glibc.get('max_s')],
            'tcmalloc_min_max_s': [tc.get('min_s'), tc.get('max_s')],
            'glibc_peak_rss_mb': by_name.get(f'peak_rss_mb{tag}', {}).get('value'),
            'tcmalloc_peak_rss_mb': by_name.get(f'peak_rss_mb{tag}_tcmalloc', {}).get('value')}
    print(json.dumps(line), flush=True)
    lines.append(line)

  wall_s = time.time() - start
  print(f'# suite: {wall_s:.0f}s', file=sys.stderr, flush=True)
  if out:
    from bench import report  # pylint: disable=g-import-not-at-top
    command = 'python -m bench' + (' ' + ' '.join(shlex.quote(a) for a in (argv or sys.argv[1:]))
                                   if (argv or sys.argv[1:]) else '')
    report.write(out, lines, info, command, wall_s, quick=args.quick)
    print(f'# wrote {out}', file=sys.stderr, flush=True)
  return 0 if not any(l['name'].endswith('_failed') for l in lines) else 1

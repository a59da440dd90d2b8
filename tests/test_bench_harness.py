"""The benchmark harness (bench/registry.py, suite.py, report.py, common.py).

The registry's entries must name modules that exist and accept the
arguments the registry gives them; the suite must run an entry end to end
and tag its figures; the report must file figures under their topics.
"""
import ast
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from bench import common
from bench import registry
from bench import report
from bench import suite
from planet_tfa import hardware

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED='1')


def test_registry_entries_are_complete_and_consistent():
  names = [b.name for b in registry.BENCHMARKS]
  assert len(names) == len(set(names)), 'duplicate entry names'
  for entry in registry.BENCHMARKS:
    assert entry.section in registry.SECTIONS, entry
    assert entry.module.startswith('bench.'), entry
    assert os.path.exists(os.path.join(REPO, *entry.module.split('.')) + '.py'), entry
    assert entry.docs is None or os.path.exists(os.path.join(REPO, entry.docs)), entry
    assert entry.about, entry
    if entry.in_suite:
      assert entry.group and entry.quick_args is not None, entry
  # Every bench/ script is in the registry (or is the harness itself, or the
  # peer's worker that bench.peer_slac starts in the peer's own Python).
  harness = {'__init__', '__main__', 'common', 'registry', 'report', 'suite', 'peer_slac_worker'}
  scripts = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, 'bench', '*.py'))}
  assert scripts - harness == {b.module.split('.')[1] for b in registry.BENCHMARKS}


def test_every_module_parses_its_registry_arguments():
  # One process per module: absl flags are process-global.
  modules = sorted({b.module for b in registry.BENCHMARKS})
  procs = {m: subprocess.Popen([sys.executable, '-m', 'bench.registry', '--check', m],
                               cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for m in modules}
  for module, proc in procs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f'{module}: {err[-2000:]}'
    checked = out.split()
    assert checked == [b.name for b in registry.BENCHMARKS if b.module == module], out


def _flags_defined_on_import(path):
  """Names of the absl flags a module defines at its top level (on import)."""
  top_level_calls = [node for statement in ast.parse(open(path).read()).body
                     if isinstance(statement, (ast.Expr, ast.Assign))
                     for node in ast.walk(statement) if isinstance(node, ast.Call)]
  return {call.args[0].value for call in top_level_calls
          if isinstance(call.func, ast.Attribute) and call.func.attr.startswith('DEFINE')
          and call.args and isinstance(call.args[0], ast.Constant)}


def test_bench_modules_that_others_import_define_no_clashing_flags():
  # absl flags are process-global: two imported modules defining one flag name
  # raise DuplicateFlagError in whichever test imports the second.
  imported = set()
  for path in glob.glob(os.path.join(REPO, 'bench', '*.py')) + glob.glob(
      os.path.join(REPO, 'tests', '*.py')):
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.ImportFrom) and node.module == 'bench':
        imported.update(alias.name for alias in node.names)
  owners = {}
  for module in sorted(imported):
    for name in _flags_defined_on_import(os.path.join(REPO, 'bench', module + '.py')):
      owners.setdefault(name, []).append(module)
  clashes = {name: modules for name, modules in owners.items() if len(modules) > 1}
  assert not clashes, (f'{clashes}: these imported bench modules define the same flags on '
                       'import; move what others need into bench.common or define the '
                       "flags in the module's main (see bench.eval_filter.define_flags)")


def test_argument_check_fails_on_arguments_a_module_does_not_take():
  from bench import flops  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit):
    flops.parse_args(['--no_such_flag', '1'])
  with pytest.raises(KeyError):
    registry.check_args('bench.no_such_module')


def test_only_groups_named_in_the_docs_exist():
  groups = set(registry.groups())
  assert {'flops', 'replay', 'policy', 'planner', 'train', 'tcmalloc', 'carla'} <= groups
  texts = [open(p).read() for p in glob.glob(os.path.join(REPO, 'docs', '*.md'))
           + [os.path.join(REPO, 'README.md'), os.path.join(REPO, 'Makefile')]]
  named = {g for t in texts for m in re.findall(r'python -m bench --only ([\w,]+)', t)
           for g in m.split(',')}
  named |= {g for t in texts for g in re.findall(r'group `(\w+)`', t)}
  assert named and named <= groups, named - groups
  assert [e.name for e in suite.select('planner')] == ['planner']
  assert [e.name for e in suite.select('train')] == ['train_d32', 'train_d16', 'slac_shape']
  with pytest.raises(ValueError):
    suite.select('no_such_group')


def test_suite_runs_one_benchmark_end_to_end_in_quick_mode(tmp_path):
  out = tmp_path / 'benchmarks.md'
  result = subprocess.run(
      [sys.executable, '-m', 'bench', '--quick', '--only', 'carla', '--out', str(out),
       '--log_dir', str(tmp_path / 'logs')],
      cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = [json.loads(l) for l in result.stdout.splitlines() if l.startswith('{')]
  names = [l['name'] for l in lines]
  assert names == ['carla_birdeye_ms_before', 'carla_birdeye_ms_after',
                   'carla_lidar_image_ms_full_sweep', 'carla_lidar_image_ms_default_dropoff']
  for line in lines:
    assert line['benchmark'] == 'carla_obs' and line['section'] == 'CARLA observations'
    assert line['unit'] == 'ms' and line['value'] > 0
    # Timing figures carry their spread: median (= value), IQR, min, max, n.
    assert line['median_ms'] == pytest.approx(line['value'], abs=0.01)
    assert line['min_ms'] <= line['median_ms'] <= line['max_ms']
    assert line['iqr_ms'] >= 0 and line['n'] == 5
  text = out.read_text()
  heading = '## CARLA observations: '
  assert heading in text and '(issue' not in text
  table = text.split(heading, 1)[1].split('\n## ', 1)[0]
  for name in names:
    assert f'| `{name}` |' in table
  # The document holds what it needs to be re-rendered without a run.
  read_lines, run = report.read(str(out))
  assert [l['name'] for l in read_lines] == names
  assert run['quick'] is True and run['command'].startswith('python -m bench --quick')


@pytest.mark.slow
def test_replay_bench_runs_in_quick_mode_through_the_projects_own_env_and_collection(tmp_path):
  # It once called an API a refactor had removed, and no test ran it.
  result = subprocess.run([sys.executable, '-m', 'bench.replay_bench', '--quick'], cwd=REPO,
                          env=dict(ENV, PLANET_TFA_LOG_DIR=str(tmp_path)), capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  lines = {l['name']: l for l in map(json.loads, filter(lambda t: t.startswith('{'),
                                                            result.stdout.splitlines()))}
  assert set(lines) == {'replay_warmup_env_steps_per_s', 'replay_storage_dmc',
                        'replay_sample_dmc', 'replay_storage_random', 'replay_sample_random'}
  assert lines['replay_warmup_env_steps_per_s']['value'] > 0
  # Each stored step is stored about once, though 9 windows hold it.
  assert 0.5 < lines['replay_storage_random']['value'] < 2.0


def _line(name, section, benchmark=None, value=1.0, **details):
  return {'name': name, 'value': value, 'unit': 's', 'section': section,
          'benchmark': benchmark, **details}


def test_report_files_figures_under_their_topic_sections():
  lines = [
      _line('train_step_s_d32', 'Training step', 'train_d32', x_floor=1.5, depth=32,
            median_s=1.0, iqr_s=0.01),
      _line('replay_sample_dmc', 'Replay', 'replay', frames='real dm_control cartpole frames'),
      _line('carla_birdeye_ms_after', 'CARLA observations', 'carla_obs'),
      _line('policy_failed', registry.FAILURES, 'policy', value=None),
      _line('mystery', 'No such topic'),
  ]
  info = common.machine()
  text = report.render(lines, info, 'python -m bench', 12.0)
  headings = [h for h in re.findall(r'^## (.*)$', text, re.M)]
  order = [h.split(':')[0] for h in headings]
  # Registry order, failures after the topics, unknown sections last; empty ones left out.
  assert order.index('Replay') < order.index('Training step') < order.index(
      'CARLA observations') < order.index('Failures') < order.index(report.OTHER)
  assert 'Policy latency' not in order and 'Planner' not in order
  for line in lines:
    owner = line['section'] if line['section'] in registry.SECTIONS or (
        line['section'] == registry.FAILURES) else report.OTHER
    section_text = re.split(r'^## ', text, flags=re.M)[order.index(owner) + 1]
    assert f"| `{line['name']}` |" in section_text, line['name']
  row = next(l for l in text.splitlines() if l.startswith('| `train_step_s_d32`'))
  # The figure's spread is shown; the entry's context (depth) and the median
  # (the value itself) are left to the raw JSON.
  assert 'iqr_s=0.01' in row and 'depth=' not in row and 'median_s' not in row
  assert '| 1.5 |' in row
  row = next(l for l in text.splitlines() if l.startswith('| `replay_sample_dmc`'))
  assert 'frames=' not in row  # a description: raw JSON only
  # The standalone tools are listed with their commands.
  for entry in registry.BENCHMARKS:
    if not entry.in_suite:
      assert entry.command() in text


def test_policy_summary_names_what_the_profile_puts_in_the_convolutions():
  lines = [_line('policy_latency_inprocess_ms', 'Policy latency', value=1.1),
           _line('policy_latency_savedmodel_ms', 'Policy latency', value=1.2),
           _line('policy_call_floor_ms', 'Policy latency', value=0.3),
           _line('policy_step_in_graph_ms', 'Policy latency', value=0.5),
           _line('policy_latency_xla_ms', 'Policy latency', value=1.2)]
  text = report.render(lines, common.machine(), 'python -m bench', 1.0)
  assert 'convolutions are' not in text  # no profile, no claim
  lines.append(_line('policy_call_conv_ms', 'Policy latency', value=0.7, function_run_ms=1.0,
                     conv_share_of_function_run=0.7))
  text = report.render(lines, common.machine(), 'python -m bench', 1.0)
  assert "profiled, the convolutions are 70% of the function's run" in text
  assert 'through `acting.StepFunction` (' not in text  # not measured, not claimed


def test_policy_summary_leads_with_the_step_function_and_its_threads():
  lines = [_line('policy_step_function_inprocess_ms', 'Policy latency', value=0.86,
                 intra_op_threads=1),
           _line('policy_step_function_savedmodel_ms', 'Policy latency', value=0.92),
           _line('policy_latency_inprocess_ms', 'Policy latency', value=1.2),
           _line('policy_latency_savedmodel_ms', 'Policy latency', value=1.1)]
  text = report.render(lines, common.machine(), 'python -m bench', 1.0)
  assert ('0.86 ms in-process and 0.92 ms from the SavedModel through `acting.StepFunction` '
          '(1 intra-op thread(s)); through the polymorphic `action`: 1.2 ms in-process, '
          '1.1 ms from the SavedModel (goal: 1 ms)') in text


def test_tcmalloc_speedup_is_derived_from_both_train_runs():
  lines = [_line('train_step_s_d32', 'Training step', value=0.6, min_s=0.5, max_s=0.7),
           _line('train_step_s_d32_tcmalloc', 'Training step', value=0.5)]
  (derived,) = registry.derived(lines)
  assert derived['name'] == 'tcmalloc_speedup_d32' and derived['value'] == 1.2
  assert derived['section'] == 'Training step'
  assert registry.derived(lines[:1]) == []


def test_suite_skips_an_entry_whose_requirement_is_missing(tmp_path):
  entry = dataclasses.replace(registry.by_name()['train_d32_tcmalloc'],
                              requires=str(tmp_path / 'missing.so'))
  (line,) = suite.run([entry], quick=True, log_dir=str(tmp_path))
  assert line['name'] == 'train_d32_tcmalloc_skipped' and line['value'] is None
  assert line['section'] == 'Training step' and 'missing' in line['note']
  assert not os.path.exists(tmp_path / 'train_d32_tcmalloc.log')  # nothing ran


def test_measure_repeats_until_enough_time_and_interleave_alternates():
  calls = []
  times = common.measure(lambda i: (calls.append(i), time.sleep(0.01)), repeats=3, warmup=2,
                         min_time_s=0.08, max_repeats=20)
  assert calls[:2] == [0, 1]  # warm-up calls are not timed
  assert len(times) == len(calls) - 2 and 3 <= len(times) < 20
  assert sum(times) >= 0.08
  assert len(common.measure(lambda i: None, repeats=4, min_time_s=10.0, max_repeats=6)) == 6
  assert len(common.measure(lambda i: None, repeats=4)) == 4

  order = []
  got = common.interleave({'a': lambda i: order.append(('a', i)),
                           'b': lambda i: order.append(('b', i))}, rounds=2, warmup=1)
  assert order == [('a', 0), ('b', 0), ('a', 1), ('b', 1), ('a', 2), ('b', 2)]
  assert {k: len(v) for k, v in got.items()} == {'a': 2, 'b': 2}

  stats = common.summarize([4.0, 1.0, 3.0, 2.0, 100.0])
  assert stats == {'median_s': 3.0, 'iqr_s': 2.0, 'min_s': 1.0, 'max_s': 100.0, 'n': 5}
  assert common.summarize_ms([0.001, 0.003, 0.002])['median_ms'] == 2.0


def test_compare_curves_compares_at_equal_agent_steps_over_a_window():
  from bench import compare_curves  # pylint: disable=g-import-not-at-top
  records = [dict(iteration=i, train_step=100 * i, env_steps=1000 * i, wall_time_s=60.0 * i,
                  eval_return=float(10 * i)) for i in range(1, 11)]
  summary = compare_curves.summarize(records, [5000, 10000], x='agent_steps')
  # The window is a fifth of the point: (4000, 5000] holds step 5000 only,
  # (8000, 10000] steps 9000 and 10000.
  assert summary['return_at_agent_steps'] == {5000: 50.0, 10000: 95.0}
  assert summary['return_at_agent_steps'][5000] != compare_curves.summarize(
      records, [5], x='wall')['return_at_minute'][5]   # 5 minutes: steps 1000-5000
  assert compare_curves.parse_args(['--x=agent_steps', '--at=5000', '--out=o', 'a=r']).x == (
      'agent_steps')


def test_compare_curves_scores_against_train_steps_across_a_resumed_run(tmp_path):
  from bench import compare_curves  # pylint: disable=g-import-not-at-top
  # A run resumed after iteration 2: its wall clock restarts, its train steps do not; the
  # stochastic column came with the resume, so the older rows leave it empty.
  (tmp_path / 'eval_returns.csv').write_text(
      'iteration,train_step,env_steps,wall_time_s,eval_return,eval_return_stochastic\n'
      '1,100,500,600.0,10.0,\n'
      '2,200,1000,1200.0,20.0,\n'
      '3,300,1500,60.0,30.0,25.0\n'
      '4,400,2000,120.0,40.0,35.0\n')
  records = compare_curves.load(str(tmp_path))
  assert 'eval_return_stochastic' not in records[0] and records[3]['eval_return_stochastic'] == 35
  summary = compare_curves.summarize(records, [200, 400], x='train_steps')
  # The window is a fifth of the point: (160, 200] and (320, 400].
  assert summary['return_at_train_steps'] == {200: 20.0, 400: 40.0}
  assert summary['processes'] == 2 and summary['train_steps_per_minute'] is None
  # At equal wall time the resumed run's points mix: minute 2 holds iterations 3 and 4.
  assert compare_curves.summarize(records, [2], x='wall')['return_at_minute'][2] == 35.0
  compare_curves.plot({'run': records}, str(tmp_path / 'curve.png'),
                      x=compare_curves.X_AXES['train_steps'])
  assert (tmp_path / 'curve.png').stat().st_size > 0


# Lines that reach a tool the way library log lines do (C++ on fd 2, absl and
# Python logging, a Python warning), and one of the tool's own stderr lines,
# all once its arguments are parsed; then the tool stops.
TOOL_PROBE = """\
import argparse, logging, os, sys, warnings
from absl import logging as absl_logging
_parse = argparse.ArgumentParser.parse_args
def _probed(self, *args, **kwargs):
  parsed = _parse(self, *args, **kwargs)
  os.write(2, b'PROBE-native\\n')
  absl_logging.warning('PROBE-absl')
  logging.getLogger('some.library').warning('PROBE-logging')
  warnings.warn('PROBE-warning')
  print('PROBE-own-progress', file=sys.stderr, flush=True)
  raise SystemExit(0)
argparse.ArgumentParser.parse_args = _probed
"""


def test_a_tool_keeps_library_lines_off_the_console_and_in_its_log(tmp_path):
  (tmp_path / 'probe').mkdir()
  (tmp_path / 'probe' / 'sitecustomize.py').write_text(TOOL_PROBE)
  env = dict(ENV, PYTHONPATH=os.pathsep.join([str(tmp_path / 'probe'), REPO]),
             PLANET_TFA_LOG_DIR=str(tmp_path / 'logs'))
  result = subprocess.run([sys.executable, '-m', 'bench.belief_gap', '--root_dir=unused'],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  log = (tmp_path / 'logs' / 'bench.belief_gap.log').read_text()
  for line in ('PROBE-native', 'PROBE-absl', 'PROBE-logging', 'PROBE-warning'):
    assert line in log and line not in result.stdout + result.stderr, (line, log, result.stderr)
  assert 'PROBE-own-progress' in result.stderr and 'PROBE-own-progress' not in log


def test_a_tool_given_a_wrong_root_names_it_without_a_traceback(tmp_path):
  env = dict(ENV, PLANET_TFA_LOG_DIR=str(tmp_path / 'logs'))
  result = subprocess.run([sys.executable, '-m', 'bench.belief_gap', f'--root_dir={tmp_path}'],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 1
  assert 'is not a planet_tfa run root' in result.stderr and 'Traceback' not in result.stderr
  assert f'(library log: {tmp_path / "logs" / "bench.belief_gap.log"})' in result.stderr


def test_the_peer_comparison_without_the_peer_says_how_to_install_it(tmp_path):
  from bench import peer_slac  # pylint: disable=g-import-not-at-top
  result = subprocess.run([sys.executable, '-m', 'bench.peer_slac',
                           f'--peer_dir={tmp_path / "no_checkout"}'], cwd=REPO,
                          env=dict(ENV, PLANET_TFA_LOG_DIR=str(tmp_path / 'logs')),
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  (line,) = [json.loads(l) for l in result.stdout.splitlines() if l.startswith('{')]
  assert line['name'] == 'peer_slac_skipped' and line['value'] is None
  assert line['reason'] in ('PyTorch is not installed',
                            f'{tmp_path / "no_checkout"} is not a checkout of '
                            f'{peer_slac.PEER_REPOSITORY} (no slac/algo.py)')
  assert peer_slac.PEER_COMMIT in line['install'] and 'download.pytorch.org/whl/cpu' in line['install']


def test_each_cpu_kind_keeps_its_own_document_and_the_index_lists_every_kind(tmp_path):
  kinds = tmp_path / 'benchmarks'
  kinds.mkdir()
  runs = {'amd-epyc-avx2': ('2026-12-02 01:00 UTC', ['avx2'], 0.9),
          'amd-epyc-avx512-bf16': ('2026-11-29 23:03 UTC', ['avx2', 'avx512f', 'avx512_bf16'],
                                   0.5)}
  for kind, (date, flags, step_s) in runs.items():
    # The machine described, not read off the host (the heading names its CPU).
    info = dict(common.machine(), cpu='AMD EPYC', date=date, cpu_flags=flags)
    line = _line('train_step_s_d32', 'Training step', 'train_d32', value=step_s, x_floor=1.5,
                 machine={'cpu': 'AMD EPYC', 'cpu_flags': flags, 'onednn': True})
    report.write(str(kinds / f'{kind}.md'), [line], info, 'python -m bench', 100.0)
  index = tmp_path / 'benchmarks.md'
  report.write_index(str(index), str(kinds))
  text = index.read_text()
  headings = re.findall(r'^## (.*)$', text, re.M)
  # One section per kind, newest first, each with its date, flags, oneDNN state,
  # its own figures and a link that resolves from the index.
  assert headings == ['AMD EPYC (amd-epyc-avx2), 2026-12-02 01:00 UTC',
                      'AMD EPYC (amd-epyc-avx512-bf16), 2026-11-29 23:03 UTC']
  avx2, avx512 = re.split(r'^## ', text, flags=re.M)[1:]
  assert 'Train step at depth 32: 0.9 s' in avx2 and 'oneDNN on' in avx2
  assert 'avx512_bf16' in avx512 and 'Train step at depth 32: 0.5 s' in avx512
  for kind in runs:
    link = f'benchmarks/{kind}.md'
    assert f']({link})' in text and (tmp_path / link).exists()
  # The kind slug: model and widest vector units.
  assert hardware.cpu_kind({'cpu': 'AMD EPYC 7B13 64-Core Processor',
                            'flags': ['avx2']}) == 'amd-epyc-7b13-avx2'
  assert hardware.cpu_kind({'cpu': 'Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz',
                            'flags': ['avx2', 'avx512f', 'amx_bf16']}) == (
                                'intel-xeon-platinum-8481c-avx512-bf16')


def test_the_peer_ratio_is_the_median_of_per_round_ratios_with_its_spread():
  from bench import peer_slac  # pylint: disable=g-import-not-at-top
  # A peer that swings 2x between rounds: the ratio of medians (2.1 / 1.0) and the median
  # of the per-round ratios differ; the per-round form pairs the rounds that ran together.
  peer = [1.6, 3.4, 1.6, 3.2, 2.0, 1.7, 3.5, 1.8, 3.0, 2.2]
  ours = [1.0, 1.0, 0.8, 1.6, 1.0, 0.85, 1.4, 0.9, 1.5, 1.1]
  summary = peer_slac.ratio_summary(peer, ours)
  assert summary['ratio_per_round'] == [1.6, 3.4, 2.0, 2.0, 2.0, 2.0, 2.5, 2.0, 2.0, 2.0]
  assert summary['value'] == 2.0 and summary['min_x'] == 1.6 and summary['max_x'] == 3.4
  assert summary['n'] == 10
  with pytest.raises(ValueError):
    peer_slac.ratio_summary(peer, ours[:-1])


def test_the_peer_comparison_refuses_fewer_than_ten_rounds_unless_quick():
  from bench import peer_slac  # pylint: disable=g-import-not-at-top
  assert peer_slac.parse_args([]).rounds >= 10
  assert peer_slac.parse_args(['--quick']).rounds == 2
  with pytest.raises(SystemExit):
    peer_slac.parse_args(['--rounds', '6'])


def test_the_train_profile_sums_compute_thread_op_spans_by_op_type():
  from bench import train_profile  # pylint: disable=g-import-not-at-top
  events = [
      {'ph': 'M', 'name': 'thread_name', 'pid': 1, 'tid': 1, 'args': {'name': 'tf_Compute/0'}},
      {'ph': 'M', 'name': 'thread_name', 'pid': 1, 'tid': 2, 'args': {'name': 'python'}},
      {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'wm/encoder/conv/Conv2D:Conv2D', 'dur': 30},
      {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'grad/Conv2DBackpropFilter', 'dur': 50},
      {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'sac/dense/MatMul', 'dur': 5},
      {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'ExecutorState::Process', 'dur': 999},
      {'ph': 'X', 'pid': 1, 'tid': 2, 'name': 'other/Conv2D', 'dur': 700},  # not a compute thread
      {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'wm/decoder/Conv2D', 'dur': 10},
  ]
  assert train_profile.summed_op_us(events) == {'Conv2D': 40, 'Conv2DBackpropFilter': 50,
                                                'MatMul': 5}

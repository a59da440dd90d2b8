"""Writes the suite's JSON lines up as markdown: one document per CPU kind, and an index.

Figures differ 2x between CPUs (AVX-512 or not, bf16 units or not), so each
kind of CPU measured keeps its own document, `docs/benchmarks/<kind>.md`
(`hardware.cpu_kind`: e.g. amd-epyc-avx2), replaced only by a later run on the
same kind; `docs/benchmarks.md` is the index: one section per kind with its
date and summary.

In a document, each line's "section" (set by the suite from the registry entry
that ran it) picks its table; sections come in bench/registry.py's order. The
raw JSON block ends the document, headed by one {"run": ...} line (machine,
command, wall time), so documents and index can be re-rendered after a change
to this file without running anything:

  python -m bench.report [--doc docs/benchmarks/amd-epyc-avx2.md]   (default: all)
"""
import argparse
import glob
import json
import os
import sys

from bench import registry

OTHER = 'Other figures'  # lines without a known section: shown, never dropped
# Keys never in the details column: the table's own columns, where the line
# came from, and values the details already give (median = value, n).
HIDDEN = {'name', 'value', 'unit', 'x_floor', 'section', 'benchmark', 'issue', 'log',
          'log_tail', 'median_s', 'median_ms', 'repeats', 'all_s',
          # descriptions by name, whatever their length: raw JSON and methods only
          'how', 'what', 'note', 'window', 'task', 'frames',
          # the CPU path of every record: the document's header and the index say it once
          'machine'}

METHODS = """\
## How each figure is measured

Every figure comes from the real components: a Reverb server with the project's
`tables.make_experience_table` (T+1 = 9 windows, stride 1, capacity 100k), writes through
`observers.ReverbEpisodeObserver`, reads through `tables.ReplaySampler`, the real
`LatentSacAgent` built from `gin/dmc_cartpole_swingup.gin` (+ `gin/defaults.gin`) and the real
dm_control cartpole swing-up from 64x64 pixels (`suites.load_dmc_pixels`, action repeat 8,
125 agent steps + 1 boundary step per episode). Times are medians after untimed warm-up calls,
with their spread in the raw lines (`iqr` = 75th - 25th percentile, `min`, `max`, `n`); fast
calls are repeated until a minimum time is spent (`bench.common.measure`), and figures compared
with each other are timed in interleaved rounds (`bench.common.interleave`) so a slow phase of
the machine hits all of them. Each registry entry (`bench/registry.py`) runs in its own
process, so peak RSS is that process's own.

- **replay_warmup_env_steps_per_s**: random policy through `episodes.Collection.warmup`
  (TF driver, `TFPyEnvironment` in its own thread, `TFReverbObserver` writing whole episodes);
  env steps (the `EnvironmentSteps` metric) per second over single episodes after a first,
  tracing one; median of the episodes.
- **replay_storage_{dmc,random}**: `ReplayServer(root_dir=tmp).checkpoint()` of the table, the
  apparent size of the checkpoint directory (`du -sb`) divided by the env steps written, as a
  multiple of the raw 64x64x3 uint8 frame (12288 B). Reverb compresses chunks (and the
  checkpoint's TFRecords are ZLIB-compressed), so real cartpole frames (`dmc`, the warm-up
  episodes above) land far below 1x; uniform-noise frames (`random`) cannot be compressed and
  show the layout's own cost: about 1x means each step is stored once and shared by the 9
  windows that contain it (a copy per window would be 9x).
- **replay_sample_{dmc,random}**: `next(ReplaySampler)` of [32, 9] windows with the pixels
  materialised in host memory, after 5 warm-up batches; sequences/s = 32 / median batch time.
- **policy_step_function_{inprocess,savedmodel}_ms**: the greedy policy (RSSM filter + actor
  mode) through `acting.StepFunction`, the step traced once at batch 1 and called as a concrete
  function, policy state carried from call to call; in-process on `agent.policy`, and on
  `tf.saved_model.load(.../greedy_policy)` after `saved_policies.export_policies(...)`.
- **policy_latency_{inprocess,savedmodel}_ms**: the same through the polymorphic
  `common.function(agent.policy.action)` and the SavedModel's restored `action`, which bind the
  nested inputs against their signatures on every call. Every policy figure runs on the
  intra-op thread count its record names (`intra_op_threads`, 1 by default; 0 is
  TensorFlow's default of one per core).
- **policy_latency_tflite_ms**: the same export's batch-1 TFLite model
  (`greedy_policy/policy_batch1.tflite`) through `lite_policy.TFLitePolicy.action`, numpy in
  and out, one thread.
- **policy_call_floor_ms / policy_step_in_graph_ms / policy_latency_xla_ms**: what bounds the
  step against its 1 ms goal: a tf.function with the same inputs that does nothing (dispatch);
  100 steps in one `tf.while_loop` call, per step (the graph's own work, no dispatch); the step
  under `jit_compile=True` (XLA fuses its small ops).
- **policy_call_conv_ms**: TensorFlow's profiler over the in-process calls: per call, the
  ms in the image encoder's convolutions, beside the matmuls, the other ops and the whole
  function's run (`conv_share_of_function_run`); the profiler's own cost inflates all of them.
- **planner_action_ms / planner_guided_action_ms / sac_action_ms** (`bench/planner_bench.py`):
  `common.function(policy.action)` at batch 1 on real cartpole frames, state carried over;
  the planner with PlaNet's defaults (horizon 12, 1000 candidates, top 100, 10 iterations),
  guided: 10% actor candidates + min-critic terminal value. `planner_savedmodel_action_ms`:
  the exported greedy planner; `planner_iteration_ms`: one iteration's scoring of the 1000
  candidates; `sac_action_batch_ms`: the actor policy on 1000 frames in one call. FLOPs
  (`planner_action_gflop`, `sac_action_mflop`) are counted from the layer shapes: the
  encoder + posterior step of the filter, and for the planner iterations x candidates x
  horizon RSSM prior steps and reward-head passes.
- **replay_checkpoint_{dmc,noise}_s / replay_restore_{dmc,noise}_s**: the table filled to the
  default capacity (100k env steps of 126-step episodes written in Python through
  `ReverbEpisodeObserver`; `dmc` cycles real cartpole frames, `noise` is incompressible), then
  `ReplayServer.checkpoint()`; restore = constructing a new `ReplayServer` on that root (it
  loads the newest checkpoint) until `table_size()` answers with the full size. If a run fills
  less than the capacity the value is extrapolated linearly (`extrapolated: true`).
- **matmul_fp32_gflops**: `tf.linalg.matmul` of two 2048x2048 fp32 matrices, 2*2048^3 FLOPs
  per call; median of at least 20 calls and 1 s after 3 untimed ones.
- **wm_update_gflop**: FLOPs of one world-model update on [32, 9] counted from the built
  layers' kernel shapes (4 stride-2 4x4 encoder convs, the decoder's dense + 4 transposed convs,
  the RSSM's dense layers and GRU per step, the reward MLP), forward x 3 for forward +
  backward; element-wise work and Adam are not counted, so the floor is a lower bound.
  The SAC update's FLOPs (`sac_update_gflop`) count 5 actor + 12 critic MLP passes per
  transition pair (critic loss, actor loss, alpha loss) over 32 x 8 pairs.
- **train_step_s**: one `common.function(agent.train)` call (world-model update + SAC update)
  on a [32, 9] batch pre-sampled from Reverb; **wm_update_s**: the same with
  `LatentSacAgent(train_sac=False)`. After each function's first call and 5 more, 20 timed
  rounds interleave full, wm-only and SAC-only calls. **sac_update_s** = median over the rounds
  of (full - wm); the details also give the difference of the medians and
  `direct_sac_train_s`, the SAC update alone (`agent.sac.train` on `agent.sac_transitions` of
  precomputed posterior features). `floor_s` = FLOPs / matmul throughput; `x_floor` =
  measured / floor.
- **sample_batch_s**: seconds per `next(ReplaySampler)` [32, 9] batch of real cartpole frames.
- **train_retraces**: `experimental_get_tracing_count()` of the train function after the 5
  calls that follow the first, minus the count after the first call.
- **peak_rss_mb**: `resource.getrusage(RUSAGE_SELF).ru_maxrss` of the training benchmark
  process after the full agent's first 6 train steps (before the wm-only agent is built).
- **train_iteration_s_{reuse,separate}** (`python -m bench.slac_shape_bench`): one
  `agent.train` call at depth 32 on a [32, 9] model batch; `separate` also passes a [256, 9]
  `sac_experience` batch (SLAC's layout, `train_eval.sac_batch_size=256`), whose frames the
  updated model encodes without gradients before SAC trains on its 256 x 8 pairs. FLOPs: the
  world-model update (forward x 3) + the SAC update + for `separate` the encoder and RSSM
  forward over the SAC windows. After each layout's tracing call and 3 untimed rounds, 15
  timed rounds alternate the two layouts; the median of each. `*_bf16`: the same
  with `WorldModel.image_precision = 'mixed_bfloat16'`; `x_floor` still against the fp32 floor.
- **\*_d32_tcmalloc / tcmalloc_speedup_d32**: the same training benchmark (same procedure) in a
  process started with `LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4`
  (Debian `libtcmalloc-minimal4`), against the glibc-malloc run. One pair of processes is
  at the mercy of the VM's slow phases; `python -m bench.allocator_ab` alternates glibc and
  tcmalloc processes of the SLAC-shaped benchmark over several rounds for a fairer ratio.
"""


def _fmt(value):
  if isinstance(value, float):
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
      return f'{value:.3g}'
    return f'{value:g}'
  if isinstance(value, dict):
    return ', '.join(f'{k} {_fmt(v)}' for k, v in value.items())
  if isinstance(value, list):
    return '[' + ', '.join(_fmt(v) for v in value) + ']'
  return str(value)


def _details(line):
  entry = registry.by_name().get(line.get('benchmark'))
  hidden = HIDDEN | set(entry.context if entry else ())
  return '; '.join(f'{k}={_fmt(v)}' for k, v in line.items()
                   if k not in hidden and not _prose(v))


def _prose(value):
  """Descriptions (what, how, frames, notes) stay in the raw JSON and the
  methods text: a string with a space or over 40 characters."""
  return isinstance(value, str) and (' ' in value or len(value) > 40)


def sections(lines):
  """[(heading, rows)] in the registry's section order, failures, then lines
  whose section is unknown (never dropped); empty sections left out."""
  order = list(registry.SECTIONS) + [registry.FAILURES]
  titles = {**{name: f'{name}: {about}' for name, about in registry.SECTIONS.items()},
            registry.FAILURES: registry.FAILURES}
  grouped = {}
  for line in lines:
    section = line.get('section')
    grouped.setdefault(section if section in titles else OTHER, []).append(line)
  return [(titles.get(name, name), grouped[name]) for name in order + [OTHER]
          if name in grouped]


def standalone():
  """The registry's standalone tools, as markdown bullets."""
  out = []
  for entry in registry.BENCHMARKS:
    if not entry.in_suite:
      where = f'results in `{entry.docs}`' if entry.docs else 'prints JSON lines'
      out.append(f'- **{entry.name}** ({entry.section}; {where}): '
                 f'{entry.about}. `{entry.command()}`')
  return out


def _bf16_units(line, fp32_s=None):
  """What the line's CPU reports of bf16 units, and how bf16 measured against fp32 there:
  the flag alone does not say which is faster (issue 61)."""
  flags = (line.get('machine') or {}).get('cpu_flags')
  if flags is None:
    units = 'reports AVX512_BF16'  # records before flags were kept: the AVX-512 machine
  else:
    units = ('reports bf16 units' if {'avx512_bf16', 'amx_bf16'} & set(flags)
             else 'reports no bf16 units')
  if fp32_s and line.get('value'):
    ratio = line['value'] / fp32_s
    units += (f"; {ratio:.2f}x the fp32 time: {'faster' if ratio < 1 else 'slower'}")
  return units


def _summary(by_name):
  """A few sentences computed from the figures (only for those present)."""
  out = []
  get = lambda name: by_name.get(name, {}).get('value')
  if get('replay_storage_random') is not None:
    out.append(
        f"- Replay storage: {get('replay_storage_random'):.3f}x the raw frame per env step with "
        'incompressible frames, so each step is stored about once although 9 windows hold it '
        '(one copy per window would be 9x); the pixel chunks hold '
        f"{by_name['replay_storage_random'].get('chunk_steps_per_step')} steps per step written "
        f"({by_name['replay_storage_random'].get('duplicated_pixel_chunks')} chunks repeat a step "
        'range already stored). Real cartpole frames: '
        f"{get('replay_storage_dmc')}x ({by_name.get('replay_storage_dmc', {}).get('bytes_per_step')}"
        ' B/step).')
  if get('replay_sample_dmc') is not None:
    out.append(f"- Sampling: {get('replay_sample_dmc'):.0f} [32, 9] windows/s of real frames "
               f"({get('replay_sample_random')} with noise frames); warm-up collects "
               f"{get('replay_warmup_env_steps_per_s')} env steps/s.")
  if get('policy_latency_inprocess_ms') is not None:
    bounds = ''
    if get('policy_call_floor_ms') is not None:
      bounds = (f"; a call that does nothing costs {get('policy_call_floor_ms')} ms, the "
                f"step's graph alone {get('policy_step_in_graph_ms')} ms, under XLA "
                f"{get('policy_latency_xla_ms')} ms")
    conv = by_name.get('policy_call_conv_ms')
    if conv is not None and conv.get('conv_share_of_function_run') is not None:
      bounds += (f"; profiled, the convolutions are {conv['conv_share_of_function_run']:.0%} "
                 'of the function\'s run')
    step_fn = ''
    if get('policy_step_function_inprocess_ms') is not None:
      threads = by_name['policy_step_function_inprocess_ms'].get('intra_op_threads')
      step_fn = (f"{get('policy_step_function_inprocess_ms')} ms in-process and "
                 f"{get('policy_step_function_savedmodel_ms')} ms from the SavedModel through "
                 f"`acting.StepFunction` ({threads or 'default'} intra-op thread(s)); through "
                 'the polymorphic `action`: ')
    out.append(f"- Policy step at batch 1: {step_fn}{get('policy_latency_inprocess_ms')} ms "
               f"in-process, {get('policy_latency_savedmodel_ms')} ms from the SavedModel"
               + (f", {get('policy_latency_tflite_ms')} ms from its TFLite model"
                  if get('policy_latency_tflite_ms') is not None else '')
               + f" (goal: 1 ms){bounds}.")
  if get('planner_action_ms') is not None:
    planner = by_name['planner_action_ms']
    out.append(
        f"- One action at batch 1: the CEM planner (horizon {planner.get('horizon')}, "
        f"{planner.get('num_candidates')} candidates, top {planner.get('top_k')}, "
        f"{planner.get('iterations')} iterations) {planner['value']} ms for "
        f"{planner.get('gflop')} GFLOP ({planner.get('achieved_gflops')} GFLOP/s), the SAC actor "
        f"{get('sac_action_ms')} ms for {get('sac_action_mflop')} MFLOP: "
        f"{planner.get('x_sac')}x the time. From the SavedModel: "
        f"{get('planner_savedmodel_action_ms')} ms; actor-guided: "
        f"{get('planner_guided_action_ms')} ms; one CEM iteration alone "
        f"{get('planner_iteration_ms')} ms; the actor policy at batch "
        f"{by_name.get('sac_action_batch_ms', {}).get('batch')}: {get('sac_action_batch_ms')} ms.")
  if get('replay_checkpoint_noise_s') is not None or get('replay_checkpoint_dmc_s') is not None:
    dmc = by_name.get('replay_checkpoint_dmc_s', {})
    noise = by_name.get('replay_checkpoint_noise_s', {})
    out.append(
        f"- Replay at 100k env steps: checkpoint {dmc.get('value')} s / restore "
        f"{get('replay_restore_dmc_s')} s with real frames "
        f"({dmc.get('checkpoint_mb_at_capacity')} MiB), {noise.get('value')} s / "
        f"{get('replay_restore_noise_s')} s with incompressible frames "
        f"({noise.get('checkpoint_mb_at_capacity')} MiB)"
        + (' (extrapolated)' if dmc.get('extrapolated') or noise.get('extrapolated') else '')
        + '.')
  for tag in sorted({n[len('train_step_s'):] for n in by_name
                     if n.startswith('train_step_s') and not n.endswith('_tcmalloc')}):
    step = by_name.get(f'train_step_s{tag}', {})
    wm = by_name.get(f'wm_update_s{tag}', {})
    sac = by_name.get(f'sac_update_s{tag}', {})
    if step.get('value') is None:
      continue
    out.append(
        f"- Train step{tag.replace('_d', ' at depth ')}: {step['value']} s "
        f"({step.get('x_floor')}x its FLOP floor of {step.get('floor_s')} s); world model "
        f"{wm.get('value')} s ({wm.get('x_floor')}x floor), SAC {sac.get('value')} s "
        f"(alone: {sac.get('direct_sac_train_s')} s, {sac.get('x_floor')}x floor); "
        f"sampling a batch {get('sample_batch_s' + tag)} s; peak RSS "
        f"{get('peak_rss_mb' + tag)} MiB; {get('train_retraces' + tag)} retraces in the 5 "
        'calls after the first.')
  separate = by_name.get('train_iteration_s_separate', {})
  if separate.get('value') is not None:
    reuse = by_name.get('train_iteration_s_reuse', {})
    out.append(
        f"- SLAC-shaped iteration (depth {separate.get('depth')}, model batch "
        f"{separate.get('model_batch')} x {separate.get('seq')} plus a separate SAC batch of "
        f"{separate.get('sac_batch')} x {separate.get('seq')} windows encoded without gradients): "
        f"{separate['value']} s for {separate.get('gflop')} GFLOP ({separate.get('x_floor')}x its "
        f"floor of {separate.get('floor_s')} s; target: at most 0.9 s and 1.3x). "
        f"The default layout, SAC on the model batch's own features: {reuse.get('value')} s "
        f"({reuse.get('x_floor')}x its floor).")
  bf16 = by_name.get('train_iteration_s_separate_bf16', {})
  if bf16.get('value') is not None:
    reuse_bf16 = by_name.get('train_iteration_s_reuse_bf16', {})
    out.append(
        "- With `WorldModel.image_precision = 'mixed_bfloat16'` (bf16 convs on fp32 variables; "
        f"this CPU {_bf16_units(bf16, separate.get('value'))}): SLAC-shaped {bf16['value']} s, "
        "default layout "
        f"{reuse_bf16.get('value')} s ({bf16.get('x_floor')}x / {reuse_bf16.get('x_floor')}x "
        'the fp32 floor).')
  for name, line in by_name.items():
    if name.startswith('tcmalloc_speedup'):
      out.append(f"- tcmalloc (LD_PRELOAD): {line['tcmalloc_s']} s vs {line['glibc_s']} s with "
                 f"glibc malloc per train step: {line['value']}x (ranges "
                 f"{line['tcmalloc_min_max_s']} vs {line['glibc_min_max_s']}).")
  return out


def render(lines, info, command, wall_s, quick=False, note=None):
  """The document's text (`note`: a paragraph under the command, kept on re-rendering)."""
  by_name = {l['name']: l for l in lines}
  md = ['# Benchmarks', '',
        f'Generated by the benchmark suite (`bench/`), {info["date"]}, in {wall_s:.0f} s of '
        'wall time' + (' (QUICK mode: tiny sizes, not representative)' if quick else '') + '.',
        '', 'Exact command (from the repository root; `make bench` runs the same):', '',
        f'    .venv/bin/{command}', '',
        *([note, ''] if note else []),
        'What runs, with which arguments and into which section: `bench/registry.py` '
        '(`python -m bench --list`).', '',
        '## Machine', '',
        f'- CPU: {info["cpu"]}, {info["cores"]} cores usable (`os.sched_getaffinity`), '
        f'{info.get("ram_gib")} GiB RAM; no GPU used',
        f'- TensorFlow {info["tensorflow"]}, dm-reverb {info["dm-reverb"]}, tf-agents '
        f'{info["tf-agents"]}, TFP {info["tensorflow-probability"]}, dm-control '
        f'{info["dm-control"]}, MuJoCo {info["mujoco"]}, NumPy {info["numpy"]}',
        f'- tcmalloc: {info["tcmalloc"] or "not installed"}',
        f'- CPU flags of interest: {", ".join(info.get("cpu_flags") or []) or "not recorded"}; '
        f'oneDNN: {_onednn(lines, info)} (each record\'s `machine` in the raw JSON)', '']
  summary = _summary(by_name)
  if summary:
    md += ['## Summary', ''] + summary + ['']
  for title, rows in sections(lines):
    md += [f'## {title}', '', '| Figure | Value | Unit | x FLOP floor | Details |',
           '|---|---:|---|---:|---|']
    for l in rows:
      value = '' if l.get('value') is None else _fmt(l['value'])
      floor = '' if l.get('x_floor') is None else _fmt(l['x_floor'])
      md.append(f"| `{l['name']}` | {value} | {l.get('unit') or ''} | {floor} | "
                f"{_details(l).replace('|', '/')} |")
    md.append('')
  md += [METHODS, '## Standalone benchmarks', '',
         'Long runs or evaluations of a finished training run, not part of the suite; '
         'each writes its own results:', ''] + standalone() + ['']
  run = {'run': {'info': info, 'command': command, 'wall_s': round(wall_s, 1), 'quick': quick,
                 **({'note': note} if note else {})}}
  md += ['## Raw JSON lines', '', '```', json.dumps(run)]
  md += [json.dumps(l) for l in lines]
  md += ['```', '']
  return '\n'.join(md)


def write(path, lines, info, command, wall_s, quick=False, note=None):
  with open(path, 'w') as f:
    f.write(render(lines, info, command, wall_s, quick, note))


def kind_documents(kind_dir):
  """{kind: path} of the per-CPU-kind documents in `kind_dir`."""
  return {os.path.splitext(os.path.basename(path))[0]: path
          for path in sorted(glob.glob(os.path.join(kind_dir, '*.md')))}


def render_index(kind_dir, index_dir):
  """The index: one section per CPU kind measured, newest first, with its summary."""
  measured = []
  for kind, path in kind_documents(kind_dir).items():
    lines, run = read(path)
    measured.append((run['info'].get('date', ''), kind, path, lines, run))
  measured.sort(key=lambda item: item[0], reverse=True)
  md = ['# Benchmarks', '',
        'Speed and memory figures of the benchmark suite (`make bench`, `python -m bench`), one '
        'document per kind of CPU measured: figures differ up to 2x between CPUs with and '
        'without AVX-512 and bf16 units, so a run replaces only the document of its own kind '
        '(`hardware.cpu_kind`). Every JSON record also names the CPU model, its flags, '
        "TensorFlow's oneDNN state and the allocator it ran with.", '']
  for date, kind, path, lines, run in measured:
    info = run['info']
    flags = ', '.join(info.get('cpu_flags') or []) or 'flags not recorded'
    link = os.path.relpath(path, index_dir)
    md += [f'## {info.get("cpu", "unknown CPU")} ({kind}), {date}', '',
           f'{info.get("cores")} cores, {flags}; oneDNN '
           f'{_onednn(lines, info)}; {run["wall_s"]:.0f} s of wall time'
           + (' (QUICK mode: not representative)' if run.get('quick') else '')
           + f'. Full tables, methods and raw JSON: [{link}]({link}).', '']
    md += _summary({l['name']: l for l in lines}) + ['']
  if not measured:
    md += ['No run yet: `make bench` writes the first document.', '']
  return '\n'.join(md)


def _onednn(lines, info):
  states = {l['machine'].get('onednn') for l in lines if isinstance(l.get('machine'), dict)}
  if states == {True}:
    return 'on'
  if states == {False}:
    return 'off'
  return f'env {info.get("onednn_env")!r}' if info.get('onednn_env') else 'not recorded'


def write_index(index_path, kind_dir):
  with open(index_path, 'w') as f:
    f.write(render_index(kind_dir, os.path.dirname(os.path.abspath(index_path))))


def read(path):
  """(lines, run header) from a document written by `write`."""
  with open(path) as f:
    text = f.read()
  raw = text.split('## Raw JSON lines', 1)[1].split('```')[1]
  decoded = [json.loads(l) for l in raw.splitlines() if l.strip().startswith('{')]
  runs = [l['run'] for l in decoded if 'run' in l]
  if not runs:
    raise ValueError(f'{path}: no {{"run": ...}} line in its raw JSON')
  return [l for l in decoded if 'run' not in l], runs[0]


DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs')
INDEX = os.path.join(DOCS, 'benchmarks.md')
KIND_DIR = os.path.join(DOCS, 'benchmarks')


def main(argv=None):
  parser = argparse.ArgumentParser(description='re-render the benchmark documents from their '
                                   'raw JSON')
  parser.add_argument('--doc', default=None, help='one document (default: every kind)')
  parser.add_argument('--index', default=INDEX)
  parser.add_argument('--kind_dir', default=KIND_DIR)
  args = parser.parse_args(argv)
  docs = [args.doc] if args.doc else list(kind_documents(args.kind_dir).values())
  for doc in docs:
    lines, run = read(doc)
    write(doc, lines, run['info'], run['command'], run['wall_s'], run['quick'],
          run.get('note'))
  write_index(args.index, args.kind_dir)
  return 0


if __name__ == '__main__':
  sys.exit(main())

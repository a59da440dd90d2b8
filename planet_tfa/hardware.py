"""The CPU this process runs on, and the TensorFlow CPU path chosen for it.

TensorFlow 2.15 turns its oneDNN optimisations on by default only on CPUs with
AVX-512; on AVX2-only CPUs (AMD Zen 3) it leaves them off, although they made
the world-model step 1.4-2x faster there (docs/benchmarks.md). `prefer_onednn()`
turns them on for every CPU unless the user set `TF_ENABLE_ONEDNN_OPTS`
themselves; it must run before TensorFlow is imported (`planet_tfa/__init__`
calls it). Whether bf16 convolutions pay off is measured, not read off the
flags (`precision.decide`). A user (or a benchmark emulating an older CPU) can cap the instruction sets the
libraries dispatch to (`ONEDNN_MAX_CPU_ISA=AVX2`, PyTorch's `ATEN_CPU_CAPABILITY`,
MKL's `MKL_ENABLE_INSTRUCTIONS`): every record of the CPU path names the caps in effect.

Nothing here imports TensorFlow at module level: `planet_tfa` imports this
module before TensorFlow is loaded.
"""
import functools
import os
import re
import sys

ONEDNN_ENV = 'TF_ENABLE_ONEDNN_OPTS'
# /proc/cpuinfo flag names of the features the figures depend on.
FLAGS_OF_INTEREST = ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile')
# Environment variables that cap the instruction sets oneDNN (TensorFlow's and
# PyTorch's), PyTorch's own kernels and MKL dispatch to.
ONEDNN_ISA_ENV = 'ONEDNN_MAX_CPU_ISA'
ISA_CAP_ENVS = (ONEDNN_ISA_ENV, 'DNNL_MAX_CPU_ISA', 'ATEN_CPU_CAPABILITY',
                'MKL_ENABLE_INSTRUCTIONS')


INTRAOP_ENV, INTEROP_ENV = 'TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS'


def thread_counts(environ=None, cores=None):
  """{'intra_op', 'inter_op', 'cores', 'set_by'}: TensorFlow's thread pools for this process.

  Both pools as wide as the cores this process may run on (its CPU affinity):
  on a 2-core Xeon the depth-16 train step ran 3.98-4.74 steps/s so, 3.41-4.01
  with one inter-op thread and 2.95-3.00 on one core (two runs of `python -m
  bench.threads_bench`, docs/performance.md). Two runs side by side, each
  pinned to one core (`taskset -c 0 ...`, `taskset -c 1 ...`), get one thread
  each from their affinity and together trained 4.55-6.05 steps/s. The user's
  TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS win.
  """
  environ = os.environ if environ is None else environ
  cores = cores or len(os.sched_getaffinity(0))
  counts = {'cores': cores, 'set_by': 'planet_tfa'}
  for key, name in (('intra_op', INTRAOP_ENV), ('inter_op', INTEROP_ENV)):
    given = environ.get(name)
    if given:
      counts[key], counts['set_by'] = int(given), 'environment'
    else:
      counts[key] = cores
  return counts


def prefer_threads(environ=None):
  """Sets TensorFlow's thread counts (`thread_counts`) unless the user chose; before TF loads."""
  environ = os.environ if environ is None else environ
  counts = thread_counts(environ)
  environ.setdefault(INTRAOP_ENV, str(counts['intra_op']))
  environ.setdefault(INTEROP_ENV, str(counts['inter_op']))
  return counts


def prefer_onednn(environ=None):
  """Sets TF_ENABLE_ONEDNN_OPTS=1 unless the user chose; returns whether it was set here."""
  environ = os.environ if environ is None else environ
  if ONEDNN_ENV in environ:
    return False
  environ[ONEDNN_ENV] = '1'
  return True


@functools.lru_cache(maxsize=None)  # the CPU does not change: read once per process
def cpu_info(cpuinfo_path='/proc/cpuinfo'):
  """{'cpu': model name, 'flags': the FLAGS_OF_INTEREST present} (unknown off Linux)."""
  model, flags = 'unknown', set()
  try:
    with open(cpuinfo_path) as f:
      for line in f:
        key, _, value = line.partition(':')
        key = key.strip()
        if key == 'model name' and model == 'unknown':
          model = value.strip()
        elif key == 'flags' and not flags:
          flags = set(value.split())
        if model != 'unknown' and flags:
          break
  except OSError:
    pass
  return {'cpu': model, 'flags': [f for f in FLAGS_OF_INTEREST if f in flags]}


def cpu_kind(info=None, environ=None):
  """A file-name slug of the CPU model and its widest vector units, e.g.
  'amd-epyc-avx2' or 'amd-epyc-avx512-bf16': benchmark figures are kept per kind.
  A oneDNN ISA cap makes its own kind ('amd-epyc-avx512-bf16-isa-avx2')."""
  info = info or cpu_info()
  caps = isa_caps(environ)
  onednn_cap = caps.get(ONEDNN_ISA_ENV) or caps.get('DNNL_MAX_CPU_ISA')
  model = re.sub(r'\((R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|@.*$|\d+-Core', ' ', info['cpu'])
  slug = re.sub(r'[^a-z0-9]+', '-', model.lower()).strip('-') or 'unknown-cpu'
  flags = info['flags']
  units = ('avx512-bf16' if 'avx512_bf16' in flags or 'amx_bf16' in flags
           else 'avx512' if 'avx512f' in flags else 'avx2' if 'avx2' in flags else 'baseline')
  capped = f'-isa-{re.sub(r"[^a-z0-9]+", "-", onednn_cap.lower())}' if onednn_cap else ''
  return f'{slug}-{units}{capped}'


def isa_caps(environ=None):
  """{variable: value} of the ISA caps set in the environment (empty: none)."""
  environ = os.environ if environ is None else environ
  return {name: environ[name] for name in ISA_CAP_ENVS if environ.get(name)}


def onednn_enabled():
  """Whether this process's TensorFlow runs its oneDNN (MKL) CPU kernels."""
  # pylint: disable=g-import-not-at-top
  from tensorflow.python.util import _pywrap_util_port
  return bool(_pywrap_util_port.IsMklEnabled())


def gpu_available():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return bool(tf.config.list_physical_devices('GPU'))


def describe():
  """One JSON-able record of the CPU path: model, flags, oneDNN, allocator."""
  info = cpu_info()
  preload = os.environ.get('LD_PRELOAD', '')
  return {
      'cpu': info['cpu'],
      'cpu_flags': info['flags'],
      'onednn': onednn_enabled() if 'tensorflow' in sys.modules else None,
      'onednn_env': os.environ.get(ONEDNN_ENV),
      'allocator': 'tcmalloc' if 'tcmalloc' in preload else 'glibc',
      'isa_caps': isa_caps(),
      'threads': thread_counts(),
  }


def summary_line():
  """What the run's log says about the path it took."""
  d = describe()
  flags = ','.join(d['cpu_flags']) or 'none of ' + ','.join(FLAGS_OF_INTEREST)
  onednn = {True: 'on', False: 'off', None: 'unknown'}[d['onednn']]
  caps = ''.join(f'; {name}={value}' for name, value in d['isa_caps'].items())
  threads = d['threads']
  return (f"CPU path: {d['cpu']} [{flags}]; TensorFlow oneDNN {onednn} "
          f"({ONEDNN_ENV}={d['onednn_env']}){caps}; allocator {d['allocator']}; "
          f"threads: intra-op {threads['intra_op']}, inter-op {threads['inter_op']} of "
          f"{threads['cores']} core(s) ({threads['set_by']})")

"""The CPU path: oneDNN on unless the user chose, the CPU described per kind, same numbers either way."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from planet_tfa import hardware

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_prefer_onednn_sets_the_default_and_keeps_the_users_choice():
  environ = {}
  assert hardware.prefer_onednn(environ) and environ[hardware.ONEDNN_ENV] == '1'
  environ = {hardware.ONEDNN_ENV: '0'}
  assert not hardware.prefer_onednn(environ) and environ[hardware.ONEDNN_ENV] == '0'


def test_cpu_info_reads_the_model_and_the_flags_of_interest(tmp_path):
  flags = 'fpu avx2 avx512f avx512bw avx512_bf16'
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text(f'processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n'
                     f'processor\t: 1\nmodel name\t: Test CPU\nflags\t\t: {flags}\n')
  info = hardware.cpu_info(str(cpuinfo))
  assert info == {'cpu': 'Test CPU', 'flags': ['avx2', 'avx512f', 'avx512_bf16']}


@pytest.mark.parametrize('cap', [
    {}, {'ONEDNN_MAX_CPU_ISA': 'AVX2'}, {'ONEDNN_MAX_CPU_ISA': 'avx512_core'},
    {'DNNL_MAX_CPU_ISA': 'AVX2'}, {'ONEDNN_MAX_CPU_ISA': 'AVX512_CORE_BF16'},
    {'ATEN_CPU_CAPABILITY': 'avx2'},  # PyTorch's cap: not TensorFlow's
])
def test_an_isa_cap_names_its_own_kind(cap):
  bf16_cpu = {'cpu': 'AMD EPYC 9B14', 'flags': ['avx2', 'avx512f', 'avx512_bf16']}
  assert hardware.isa_caps(cap) == cap
  onednn_cap = cap.get('ONEDNN_MAX_CPU_ISA') or cap.get('DNNL_MAX_CPU_ISA')
  kind = hardware.cpu_kind(bf16_cpu, environ=cap)
  # Figures measured under a cap never land in the uncapped CPU's document.
  assert kind == ('amd-epyc-9b14-avx512-bf16'
                  + (f'-isa-{onednn_cap.lower().replace("_", "-")}' if onednn_cap else ''))


def test_the_cpu_path_record_and_log_line_name_the_caps_in_effect(monkeypatch):
  monkeypatch.setenv('ONEDNN_MAX_CPU_ISA', 'AVX2')
  monkeypatch.setenv('MKL_ENABLE_INSTRUCTIONS', 'AVX2')
  record = hardware.describe()
  assert record['isa_caps'] == {'ONEDNN_MAX_CPU_ISA': 'AVX2', 'MKL_ENABLE_INSTRUCTIONS': 'AVX2'}
  line = hardware.summary_line()
  assert 'ONEDNN_MAX_CPU_ISA=AVX2' in line and 'MKL_ENABLE_INSTRUCTIONS=AVX2' in line
  threads = record['threads']
  assert (f"threads: intra-op {threads['intra_op']}, inter-op {threads['inter_op']} of "
          f"{threads['cores']} core(s)") in line
  monkeypatch.delenv('ONEDNN_MAX_CPU_ISA')
  monkeypatch.delenv('MKL_ENABLE_INSTRUCTIONS')
  assert hardware.describe()['isa_caps'] == {} and 'ISA' not in hardware.summary_line()


_LOSS_SCRIPT = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, 'tests')
    import planet_tfa
    from planet_tfa import hardware
    import numpy as np, tensorflow as tf
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import trajectory
    import tiny_model
    tf.keras.utils.set_random_seed(0)
    observation_spec = {'pixels': tf.TensorSpec([64, 64, 3], tf.uint8)}
    action_spec = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0)
    model = tiny_model.world_model(observation_spec, action_spec)
    rng = np.random.default_rng(1)
    experience = trajectory.Trajectory(
        step_type=tf.ones([4, 6], tf.int32), next_step_type=tf.ones([4, 6], tf.int32),
        observation={'pixels': tf.constant(rng.integers(0, 256, (4, 6, 64, 64, 3)), tf.uint8)},
        action=tf.constant(rng.uniform(-1, 1, (4, 6, 2)), tf.float32), policy_info=(),
        reward=tf.constant(rng.normal(size=(4, 6)), tf.float32),
        discount=tf.ones([4, 6]))
    loss, terms, _ = model.loss(experience)
    print(json.dumps({'onednn': hardware.onednn_enabled(), 'loss': float(loss),
                      'kl': float(terms['kl'])}))
    """)


def _loss_with(onednn):
  env = dict(os.environ)
  if onednn is None:
    env.pop(hardware.ONEDNN_ENV, None)
  else:
    env[hardware.ONEDNN_ENV] = onednn
  result = subprocess.run([sys.executable, '-c', _LOSS_SCRIPT], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_onednn_is_on_by_default_and_agrees_with_the_plain_path():
  default, user_off = _loss_with(None), _loss_with('0')
  # `import planet_tfa` turned oneDNN on (on any CPU); the user's 0 wins.
  assert default['onednn'] is True and user_off['onednn'] is False
  # Same model, same data: the two kernel libraries agree to float32 round-off
  # (summation order differs), far below any learning-relevant difference.
  np.testing.assert_allclose(default['loss'], user_off['loss'], rtol=1e-4)
  np.testing.assert_allclose(default['kl'], user_off['kl'], rtol=1e-4, atol=1e-5)


def test_thread_pools_follow_the_cores_this_process_may_use_unless_the_user_set_them():
  # Two cores (a 2-core machine), one (a run pinned with taskset -c 0 beside another).
  assert hardware.thread_counts({}, cores=2) == {'intra_op': 2, 'inter_op': 2, 'cores': 2,
                                                 'set_by': 'planet_tfa'}
  assert hardware.thread_counts({}, cores=1)['intra_op'] == 1
  user = {hardware.INTRAOP_ENV: '1', hardware.INTEROP_ENV: '3'}
  assert hardware.thread_counts(user, cores=2) == {'intra_op': 1, 'inter_op': 3, 'cores': 2,
                                                   'set_by': 'environment'}
  environ = {hardware.INTRAOP_ENV: '1'}
  hardware.prefer_threads(environ)
  assert environ[hardware.INTRAOP_ENV] == '1'  # the user's choice stays
  assert environ[hardware.INTEROP_ENV] == str(len(os.sched_getaffinity(0)))

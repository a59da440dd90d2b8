"""The CPU path: oneDNN on unless the user chose, bf16 only with bf16 units, same numbers either way."""
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


@pytest.mark.parametrize('flags, gpu, expected', [
    ('fpu sse avx avx2 fma', False, 'float32'),                              # Zen 3
    ('fpu avx2 avx512f avx512bw', False, 'float32'),                         # AVX-512, no bf16
    ('fpu avx2 avx512f avx512_bf16', False, 'mixed_bfloat16'),               # Zen 4
    ('fpu avx2 avx512f amx_bf16 amx_tile', False, 'mixed_bfloat16'),         # Sapphire Rapids
    ('fpu avx2', True, 'mixed_bfloat16'),                                    # any CPU + GPU
])
def test_auto_precision_follows_the_hardware(tmp_path, flags, gpu, expected):
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text(f'processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n'
                     f'processor\t: 1\nmodel name\t: Test CPU\nflags\t\t: {flags}\n')
  info = hardware.cpu_info(str(cpuinfo))
  assert info['cpu'] == 'Test CPU'
  assert hardware.image_precision('auto', info=info, gpu=gpu) == expected
  # An explicit choice is never overridden.
  assert hardware.image_precision('float32', info=info, gpu=gpu) == 'float32'


@pytest.mark.parametrize('cap, expected', [
    ({}, 'mixed_bfloat16'),
    ({'ONEDNN_MAX_CPU_ISA': 'AVX2'}, 'float32'),              # an AVX2 CPU emulated
    ({'ONEDNN_MAX_CPU_ISA': 'avx512_core'}, 'float32'),       # AVX-512 without bf16
    ({'DNNL_MAX_CPU_ISA': 'AVX2'}, 'float32'),                # oneDNN's older name
    ({'ONEDNN_MAX_CPU_ISA': 'AVX512_CORE_BF16'}, 'mixed_bfloat16'),
    ({'ONEDNN_MAX_CPU_ISA': 'ALL'}, 'mixed_bfloat16'),
    ({'ATEN_CPU_CAPABILITY': 'avx2'}, 'mixed_bfloat16'),      # PyTorch's cap: not TensorFlow's
])
def test_an_isa_cap_below_bf16_counts_as_no_bf16_units_and_names_its_own_kind(cap, expected):
  bf16_cpu = {'cpu': 'AMD EPYC 9B14', 'flags': ['avx2', 'avx512f', 'avx512_bf16']}
  assert hardware.image_precision('auto', info=bf16_cpu, gpu=False, environ=cap) == expected
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

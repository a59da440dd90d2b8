"""WorldModel.image_precision='auto': chosen from measured timings, cached per machine."""
import json

import gin
import pytest

from planet_tfa import errors
from planet_tfa import experiment as experiment_lib
from planet_tfa import learner
from planet_tfa import precision

FP32, BF16 = precision.FLOAT32, precision.BFLOAT16
# Machine descriptions as hardware.describe() gives them: injected, never the host's.
XEON = {'cpu': 'Intel(R) Xeon(R) Processor @ 2.60GHz', 'cpu_flags': ['avx2', 'avx512f'],
        'isa_caps': {}, 'onednn_env': '1'}
EPYC = {'cpu': 'AMD EPYC 9B14', 'cpu_flags': ['avx2', 'avx512f', 'avx512_bf16'],
        'isa_caps': {}, 'onednn_env': '1'}


@pytest.mark.parametrize('fp32_s, bf16_s, gpu, expected', [
    (1.0, 0.50, False, BF16),    # bf16 units that pay off (Zen 4)
    (1.0, 0.89, False, BF16),    # just past the margin
    (1.0, 0.95, False, FP32),    # inside the margin: fp32's numerics
    (1.0, 2.05, False, FP32),    # AVX512_BF16 without fast kernels (Xeon)
    (1.0, 5.00, False, FP32),    # emulated bf16 (AVX2)
    (1.0, 5.00, True, BF16),     # a GPU keeps bf16
])
def test_auto_is_a_pure_function_of_the_timings(fp32_s, bf16_s, gpu, expected):
  timings = {FP32: fp32_s, BF16: bf16_s}
  assert precision.choose('auto', timings, gpu=gpu) == expected
  # A setting that names a precision is never overridden by the timings.
  assert precision.choose(FP32, {FP32: 1.0, BF16: 0.1}) == FP32
  assert precision.choose(BF16, {FP32: 1.0, BF16: 9.0}) == BF16


def test_the_margin_is_a_setting_of_choose():
  timings = {FP32: 1.0, BF16: 0.95}
  assert precision.choose('auto', timings, margin=0.0) == BF16
  assert precision.choose('auto', timings, margin=0.1) == FP32


def test_an_unknown_precision_is_a_config_error_naming_the_binding():
  with pytest.raises(errors.ConfigError, match="'fp16'.*WorldModel.image_precision"):
    precision.choose('fp16')


class CountingProbe:
  """A probe with fixed timings that counts how often it ran."""

  def __init__(self, fp32_s=1.0, bf16_s=2.0):
    self.calls = []
    self.timings = {FP32: fp32_s, BF16: bf16_s}

  def __call__(self, depth, frames):
    self.calls.append((depth, frames))
    return dict(self.timings)


def decide(probe, directory, machine=XEON, tf_version='2.15.1', depth=32, frames=288, **kwargs):
  return precision.decide('auto', depth, frames, gpu=False, directory=str(directory),
                          probe=probe, machine=machine, tf_version=tf_version,
                          printer=lambda line: None, **kwargs)


def test_the_probe_runs_once_per_machine_and_tensorflow_and_the_cache_answers_after(tmp_path):
  probe = CountingProbe(fp32_s=0.8, bf16_s=1.7)
  first = decide(probe, tmp_path)
  assert (first.precision, first.source, probe.calls) == (FP32, 'probe', [(32, 288)])
  again = decide(probe, tmp_path)
  assert (again.precision, again.source, again.timings) == (FP32, 'cache', first.timings)
  assert len(probe.calls) == 1
  # Each of these re-probes: the timings were not measured under it.
  decide(probe, tmp_path, tf_version='2.16.1')
  decide(probe, tmp_path, machine=EPYC)
  decide(probe, tmp_path, machine=dict(XEON, isa_caps={'ONEDNN_MAX_CPU_ISA': 'AVX2'}))
  decide(probe, tmp_path, frames=32 * 51)
  decide(probe, tmp_path, depth=16)
  assert len(probe.calls) == 6
  records = json.loads((tmp_path / precision.CACHE_FILE).read_text())
  assert len(records) == 6
  assert any('tensorflow 2.16.1' in key and 'Intel' in key for key in records)
  # The choice comes from the cached timings, so a later margin applies to them.
  assert decide(probe, tmp_path, machine=EPYC).timings == {FP32: 0.8, BF16: 1.7}


def test_a_faster_bf16_is_chosen_and_the_log_clause_names_both_timings(tmp_path):
  decision = decide(CountingProbe(fp32_s=0.5, bf16_s=0.33), tmp_path, machine=EPYC)
  assert decision.precision == BF16
  line = decision.describe()
  assert 'fp32 500 ms' in line and 'bf16 330 ms' in line and 'bf16/fp32 0.66' in line


def test_forced_settings_and_a_gpu_never_probe(tmp_path):
  probe = CountingProbe()
  for requested in (FP32, BF16):
    decision = precision.decide(requested, 32, 288, gpu=False, directory=str(tmp_path),
                                probe=probe, machine=XEON)
    assert (decision.precision, decision.source) == (requested, 'set')
  decision = precision.decide('auto', 32, 288, gpu=True, directory=str(tmp_path), probe=probe,
                              machine=XEON)
  assert (decision.precision, decision.source) == (BF16, 'gpu')
  assert probe.calls == [] and not (tmp_path / precision.CACHE_FILE).exists()


@pytest.mark.parametrize('content', ['{not json', '[1, 2]', '{"KEY": {"timings": {}}}'])
def test_a_corrupt_cache_is_probed_again_and_rewritten(tmp_path, content):
  key = precision.cache_key(32, 288, machine=XEON, tf_version='2.15.1')
  (tmp_path / precision.CACHE_FILE).write_text(content.replace('KEY', key))
  probe = CountingProbe()
  assert decide(probe, tmp_path).source == 'probe' and len(probe.calls) == 1
  assert decide(probe, tmp_path).source == 'cache'
  json.loads((tmp_path / precision.CACHE_FILE).read_text())  # valid again


def test_an_unwritable_cache_costs_a_probe_not_the_run(tmp_path):
  blocker = tmp_path / 'file'
  blocker.write_text('')
  probe = CountingProbe()
  assert decide(probe, blocker / 'cache').precision == FP32  # a directory under a file
  assert decide(probe, blocker / 'cache').source == 'probe'


def test_the_cache_directory_follows_the_environment(tmp_path):
  assert precision.cache_dir({precision.CACHE_DIR_ENV: str(tmp_path)}) == str(tmp_path)
  assert precision.cache_dir({'XDG_CACHE_HOME': '/x'}) == '/x/planet_tfa'


def test_the_real_probe_times_both_precisions_of_the_model_layers():
  timings = precision.probe_timings(depth=2, frames=4, rounds=2)
  assert set(timings) == {FP32, BF16} and all(s > 0 for s in timings.values())


def test_the_learner_binds_the_measured_choice_so_the_model_and_config_agree(tiny_gin,
                                                                              tmp_path,
                                                                              monkeypatch):
  monkeypatch.setenv(precision.CACHE_DIR_ENV, str(tmp_path))
  monkeypatch.setattr(precision.hardware, 'gpu_available', lambda: False)
  experiment = experiment_lib.Experiment(sequence_length=9)
  key = precision.cache_key(4, 8 * 9)  # the tiny model's depth, batch 8 x 9 frames
  precision.write_cache(str(tmp_path), key, {'timings': {FP32: 1.0, BF16: 0.5}})
  with gin.unlock_config():
    gin.bind_parameter('WorldModel.image_precision', 'auto')
  decision = learner._decide_image_precision(experiment, 8)  # pylint: disable=protected-access
  assert (decision.precision, decision.source) == (BF16, 'cache')
  assert gin.query_parameter('WorldModel.image_precision') == BF16

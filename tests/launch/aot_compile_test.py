"""launch/aot_compile.py on the CPU fallback: 8 simulated devices (conftest), a tiny config."""

import os
import pathlib
import re
import subprocess
import sys
import types

import jax
import pytest
import tensorflow as tf

from bertjax.input import input_pipeline
from bertjax.input import record_check
from bertjax.training import perf
from bertjax.training import train_state
from configs import pretrain
from launch import aot_compile
from launch import cloud


def tiny_config(**model_fields):
  config = pretrain.get_config('size=tiny,seq=32,batch=16,vocab=512')
  config.data.max_predictions_per_seq = 4
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
  config.model.scan_layers = False  # So that XLA's FLOP count covers every layer.
  for name, value in model_fields.items():
    config.model[name] = value
  return config


def test_compiles_on_data_fsdp_tensor_mesh():
  config = tiny_config()
  devices, hbm_bytes = aot_compile.topology_devices('cpu:8')
  assert hbm_bytes is None

  compiled, mesh, state = aot_compile.compile_train_step(config, devices)

  assert dict(mesh.shape) == {'data': 2, 'fsdp': 2, 'tensor': 2}
  memory = aot_compile.memory_per_device(compiled)
  for name in ('arguments', 'outputs', 'temporaries', 'total'):
    assert memory[name] > 0, (name, memory)
  # The arguments are this device's state and batch shards (4 of 16 rows: 3 x 32 tokens,
  # 3 x 4 predictions, 1 label, 4 bytes each); the donated state is reused for the new one.
  state_bytes = aot_compile.shard_bytes(state)
  assert memory['arguments'] == state_bytes + 4 * (3 * 32 + 3 * 4 + 1) * 4
  assert memory['aliased'] == state_bytes
  embedding = state.params['bert']['embeddings']['word_embeddings']['embedding']
  assert embedding.sharding.spec == jax.sharding.PartitionSpec('tensor', 'fsdp')
  assert embedding.sharding.shard_shape(embedding.shape) == (256, 64)
  # Per-device FLOPs near the formula's 1/8th: a replicated (unsharded) step would be ~8x. With
  # no layer scan no loop holds a matmul, so XLA's count is complete.
  assert aot_compile.matmul_loops(compiled) == 0
  formula = perf.flops_per_sequence(config.model, 32, 4) * 16 / 8
  ratio = aot_compile.xla_flops_per_device(compiled) / formula
  assert 0.9 < ratio < 1.5, ratio


def test_unshardable_config_fails_before_tracing(monkeypatch):
  def traced(*args, **kwargs):
    raise AssertionError('the config was traced before it was validated')

  monkeypatch.setattr(train_state, 'train_state_shapes', traced)
  with pytest.raises(ValueError, match='num_heads=1 is not divisible by mesh.tensor=2'):
    aot_compile.compile_train_step(tiny_config(num_heads=1), jax.devices()[:8])


def test_topology_names_are_checked():
  with pytest.raises(ValueError, match='v4:2x2x4'):
    aot_compile.topology_devices('v9:4x4')
  with pytest.raises(ValueError, match='xla_force_host_platform_device_count=64'):
    aot_compile.topology_devices('cpu:64')


@pytest.mark.parametrize('platform, layers, want', [
    ('tpu', 12, ('xla', True)), ('tpu', 2, ('xla', False)), ('cpu', 12, ('xla', True)),
    ('gpu', 12, ('cudnn', False))])
def test_auto_is_settled_for_the_platform_it_compiles_for(platform, layers, want):
  """The configs' 'auto' (a string, true in an `if`) becomes what a run on that platform gets."""
  config = pretrain.get_config('size=tiny,seq=32,batch=16,vocab=512,dtype=bfloat16')
  config.model.num_layers, config.model.attention_dropout_rate = layers, 0.0
  assert (config.model.attention_impl, config.model.scan_layers) == ('auto', 'auto')
  devices = [types.SimpleNamespace(platform=platform)] * 8
  line = aot_compile.settle_model(config, devices)
  assert (config.model.attention_impl, config.model.scan_layers) == want
  assert line == (f'attention {want[0]}, layers {"scanned" if want[1] else "unrolled"}: '
                  f'{platform.upper()} defaults')


def test_the_command_prints_and_counts_the_settled_scan():
  """With 'auto' settled to unrolled layers (tiny on a CPU), --count_flops has no scan to unroll:
  XLA's count of this compile is complete (the string 'auto', true in an `if`, compiled two
  needless copies); the lines name the settled choice, never 'auto'."""
  repo = pathlib.Path(__file__).resolve().parents[2]
  result = subprocess.run(
      [sys.executable, '-m', 'launch.aot_compile', '--topology=cpu:2', '--count_flops',
       '--config=configs/pretrain.py:size=tiny,seq=16,batch=4,vocab=256',
       '--config.data.max_predictions_per_seq=2', '--config.mesh.data=1',
       '--config.mesh.fsdp=-1'],  # As README and the DOES NOT FIT hint advise (was refused).
      cwd=repo, capture_output=True, text=True, timeout=600, check=False,
      env={**os.environ, 'XLA_FLAGS': ''})
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert "mesh: {'data': 1, 'fsdp': 2, 'tensor': 1}" in out, out
  # bertjax's INFO lines (sharding's `mesh ...`) are held: the command prints its own.
  assert 'sharding.py' not in result.stderr and not re.search(r'^I\d{4} ', result.stderr, re.M), (
      result.stderr)
  assert 'model: attention xla, layers unrolled: CPU defaults' in out, out
  assert 'scan_layers=False' in out and 'auto' not in out, out
  assert '(this compile)' in out and 'unrolled 1- and 2-layer copies' not in out, out


@pytest.mark.parametrize('pack, nsp', [(1, True), (3, True), (3, False), (1, False)])
def test_the_compiled_batch_is_the_one_the_input_pipeline_yields(tmp_path, pack, nsp):
  """abstract_batch has the keys, shapes and dtypes of input_pipeline.pretrain_dataset's batches
  for the same lengths: packed rows (pack=N) add instance_starts and next_sentence_weights and
  hold a label per instance; MLM-only rows hold none."""
  config = tiny_config()
  config.data.max_instances_per_row, config.model.nsp = pack, nsp
  spec = record_check.feature_spec(32, 4, nsp=nsp, max_instances_per_row=pack)
  path = str(tmp_path / 'train.tfrecord')
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(16):
      writer.write(input_pipeline._padding_record(spec))  # pylint: disable=protected-access
  dataset = input_pipeline.pretrain_dataset(
      path, global_batch_size=16, max_seq_length=32, max_predictions_per_seq=4, seed=0,
      nsp=nsp, max_instances_per_row=pack, process_index=0, process_count=1)
  read = {name: (tuple(s.shape), s.dtype.name) for name, s in dataset.element_spec.items()}

  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  compiled = {name: (x.shape, x.dtype.name)
              for name, x in aot_compile.abstract_batch(config, sharding).items()}
  assert compiled == read
  assert ('instance_starts' in compiled) == (pack > 1)


def run_aot(*args):
  repo = pathlib.Path(__file__).resolve().parents[2]
  return subprocess.run([sys.executable, '-m', 'launch.aot_compile', *args], cwd=repo,
                        capture_output=True, text=True, timeout=600, check=False,
                        env={**os.environ, 'XLA_FLAGS': ''})


def test_every_phase_is_compiled_with_its_lengths_and_the_packed_rows():
  """phase2_fraction > 0: the run's last steps are at phase2's length and predictions, a step
  compiled on its own (the longest, so the one that may not fit); pack=2: packed rows."""
  result = run_aot('--topology=cpu:2', '--config=configs/pretrain.py:size=tiny,seq=16,batch=4,'
                   'vocab=256,steps=10,phase2_fraction=0.2,phase2_seq=32,pack=2',
                   '--config.data.max_predictions_per_seq=2',
                   '--config.phase2.max_predictions_per_seq=4', '--config.mesh.data=2')
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert 'batch 4 (grad_accum_steps 1), packed rows of up to 2 instances' in out, out
  assert 'phase 1 of 2: steps 0..8, batch 4 x seq 16, 2 predictions per row' in out, out
  assert 'phase 2 of 2: steps 8..10, batch 4 x seq 32, 4 predictions per row' in out, out
  assert out.count('lowered and compiled in') == 2, out
  # Each compile is its phase's step: twice the tokens, nearly twice XLA's FLOPs.
  flops = [float(line.split('XLA ')[1].split()[0]) for line in out.splitlines()
           if 'FLOPs per device per step' in line]
  assert len(flops) == 2 and flops[1] > 1.5 * flops[0], out
  # TensorFlow's C++ start-up lines (oneDNN, a CUDA build's cuInit probe) are held back.
  assert 'oneDNN' not in result.stderr and 'cuInit' not in result.stderr, result.stderr


@pytest.mark.parametrize('config, message', [
    ('configs/finetune.py:task=mrpc,size=tiny',
     "aot_compile: error: config.job='finetune': launch/aot_compile.py compiles the "
     'pre-training step only; pass a pre-training config, --config=configs/pretrain.py:...'),
    # Found by bertjax.main's check (config_check), not by anything the compile reads.
    ('configs/pretrain.py:size=tiny --config.data.masked_lm_prob=1.5',
     'aot_compile: error: config.data.masked_lm_prob=1.5: '),
])
def test_a_config_the_run_would_refuse_is_refused_in_one_line(config, message):
  result = run_aot('--topology=cpu:2', f'--config={config.split()[0]}', *config.split()[1:])
  assert result.returncode == cloud.REFUSED_EXIT, result.stdout + result.stderr
  assert message in result.stderr and 'Traceback' not in result.stderr, result.stderr
  assert 'lowered and compiled' not in result.stdout


def test_a_topology_libtpu_cannot_describe_is_refused_in_one_line():
  """Here libtpu is absent (CI); on a machine with it, 9x9 is no v5e slice shape."""
  result = run_aot('--topology=v5e:9x9', '--config=configs/pretrain.py:size=tiny')
  message = 'aot_compile: error: --topology=v5e:9x9: libtpu cannot describe it ('
  assert result.returncode == cloud.REFUSED_EXIT, result.stdout + result.stderr
  assert message in result.stderr and 'Traceback' not in result.stderr, result.stderr
  assert result.stderr.strip().splitlines()[-1].endswith(
      'or pass --topology=cpu:N to check the sharding without libtpu.'), result.stderr


def test_a_word_after_the_flags_is_one_line_not_the_whole_help():
  result = run_aot('--topology=cpu:2', '--config=configs/pretrain.py:size=tiny', 'extra')
  assert result.returncode == cloud.REFUSED_EXIT, result.stdout + result.stderr
  assert result.stderr.strip().splitlines() == [
      "aot_compile: error: unexpected arguments ['extra']: every input is a --flag (--config=..., "
      '--topology=...). (--helpshort lists the flags)'], result.stderr

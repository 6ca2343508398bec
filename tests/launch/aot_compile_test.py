"""launch/aot_compile.py on the CPU fallback: 8 simulated devices (conftest), a tiny config."""

import os
import pathlib
import subprocess
import sys
import types

import jax
import pytest

from bertjax.training import perf
from bertjax.training import train_state
from configs import pretrain
from launch import aot_compile


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
       '--config.data.max_predictions_per_seq=2', '--config.mesh.data=2'],
      cwd=repo, capture_output=True, text=True, timeout=600, check=False,
      env={**os.environ, 'XLA_FLAGS': ''})
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert 'model: attention xla, layers unrolled: CPU defaults' in out, out
  assert 'scan_layers=False' in out and 'auto' not in out, out
  assert '(this compile)' in out and 'unrolled 1- and 2-layer copies' not in out, out

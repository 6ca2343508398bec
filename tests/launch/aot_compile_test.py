"""launch/aot_compile.py on the CPU fallback: 8 simulated devices (conftest), a tiny config."""

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

"""init_from of a pre-training run into another layout (issue 29): a TPU run scans base's layers,
a GPU run unrolls them (model/platform_defaults.py), so continued pre-training loads stacked
(nn.scan) layers into per-layer ones and back, every value unchanged."""

import json

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import safetensors

from bertjax.interop import hf_names
from bertjax.interop import init_from
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.model import layer_stack
from bertjax.training import checkpoint
from bertjax.training import sharding

SEQ = 16


@flax.struct.dataclass
class State:
  params: dict
  step: jnp.ndarray


def model_config(scan_layers: bool, num_layers: int = 3):
  return encoder_config.default_config(num_layers=num_layers, hidden_size=32, num_heads=2,
                                       mlp_dim=64, vocab_size=128, max_position_embeddings=SEQ,
                                       scan_layers=scan_layers)


def abstract_params(config, mesh):
  """(ShapeDtypeStructs, shardings) of BertForPreTraining's params: nothing is initialised."""
  boxed = jax.eval_shape(lambda: heads.BertForPreTraining(config).init(
      jax.random.key(0), **heads.dummy_batch(1, SEQ, 2))['params'])
  return nn.unbox(boxed), sharding.logical_to_sharding(boxed, mesh)


def save_run(workdir, params):
  """A checkpoints/1 holding `params`, as a pre-training run writes it (digests in its meta)."""
  config = ml_collections.ConfigDict(
      {'checkpoint': {'keep': 1, 'keep_best': 0, 'every_steps': 1}})
  mngr = checkpoint.manager(workdir, config, best_metric='mlm_accuracy')
  checkpoint.save(mngr, 1, State(params, jnp.int32(1)), {'step': 1}, force=True)
  checkpoint.wait(mngr)
  mngr.close()
  return str(workdir)


def flat(tree) -> dict:
  return checkpoint.flatten(jax.device_get(tree))


@pytest.fixture(scope='module')
def mesh():
  return sharding.make_mesh(ml_collections.ConfigDict(dict(data=2, fsdp=2, tensor=2)))


def test_a_scanned_run_loads_unrolled_and_back_unchanged(tmp_path, mesh):
  scanned = nn.unbox(heads.BertForPreTraining(model_config(True)).init(
      jax.random.key(1), **heads.dummy_batch(1, SEQ, 2))['params'])
  assert 'layers' in scanned['bert'] and 'layers_0' not in scanned['bert']
  base = save_run(tmp_path / 'tpu_run', scanned)

  abstract, shardings = abstract_params(model_config(False), mesh)
  unrolled, unused, _ = init_from.load_params(base, abstract, shardings)
  assert unused == []
  got, want = flat(unrolled), layer_stack.unstack_layers(flat(scanned))
  assert got.keys() == want.keys() and 'bert/layers_2/mlp/intermediate/kernel' in got
  for path in want:
    np.testing.assert_array_equal(got[path], want[path], err_msg=path)
  # Placed in the model's shardings, per layer.
  kernel = unrolled['bert']['layers_1']['mlp']['intermediate']['kernel']
  assert kernel.sharding.spec == jax.sharding.PartitionSpec('fsdp', 'tensor')

  # And back: the unrolled run continued as a scanned one holds the first run's values.
  continued = save_run(tmp_path / 'gpu_run', jax.device_get(unrolled))
  abstract, shardings = abstract_params(model_config(True), mesh)
  again, unused, _ = init_from.load_params(continued, abstract, shardings)
  assert unused == []
  got, want = flat(again), flat(scanned)
  assert got.keys() == want.keys()
  for path in want:
    np.testing.assert_array_equal(got[path], want[path], err_msg=path)


def test_another_depth_is_refused_by_its_shapes_in_either_layout(tmp_path, mesh):
  unrolled = nn.unbox(heads.BertForPreTraining(model_config(False, num_layers=2)).init(
      jax.random.key(2), **heads.dummy_batch(1, SEQ, 2))['params'])
  base = save_run(tmp_path / 'two_layers', unrolled)
  abstract, shardings = abstract_params(model_config(True), mesh)  # 3 layers, scanned.
  with pytest.raises(ValueError, match=r'does not fit the config .*checkpoint \(2, '):
    init_from.load_params(base, abstract, shardings)
  abstract, shardings = abstract_params(model_config(False), mesh)  # 3 layers, unrolled.
  with pytest.raises(ValueError, match=r'lacks \d+ parameters .*layers_2/'):
    init_from.load_params(base, abstract, shardings)


def test_a_transformers_bert_loads_into_scanned_layers(minilm_dir, mesh):
  """What a TPU or CPU run of base (scanned by default) continues from: per-layer tensors."""
  cfg = hf_names.config_from_hf(json.loads((minilm_dir / 'config.json').read_text()))
  cfg.scan_layers = True
  abstract, shardings = abstract_params(cfg, mesh)
  params, unused, _ = init_from.load_params(str(minilm_dir), abstract, shardings)
  assert unused == []
  got = flat(params)
  with safetensors.safe_open(str(minilm_dir / 'model.safetensors'), 'np') as f:
    for i in (0, 5):
      np.testing.assert_array_equal(
          got['bert/layers/mlp/intermediate/kernel'][i],
          f.get_tensor(f'encoder.layer.{i}.intermediate.dense.weight').T)
  assert got['bert/layers/mlp/intermediate/kernel'].shape[0] == 6


def test_an_mlm_only_run_into_a_model_with_nsp_names_model_nsp(tmp_path, mesh):
  # Pre-training options combined (helper-184): continued pre-training from an MLM-only run
  # (model.nsp=False) with the default NSP head said 'is it a BERT of this architecture?'.
  mlm_only = model_config(False, num_layers=1)
  mlm_only.nsp = False
  params = nn.unbox(heads.BertForPreTraining(mlm_only).init(
      jax.random.key(3), **heads.dummy_batch(1, SEQ, 2))['params'])
  assert 'nsp' not in params
  base = save_run(tmp_path / 'mlm_only', params)
  abstract, shardings = abstract_params(model_config(False, num_layers=1), mesh)
  with pytest.raises(ValueError, match=r"lacks 2 parameters .*'nsp/.*: it has no NSP head .*"
                     r'set --config\.model\.nsp=False'):
    init_from.load_params(base, abstract, shardings)

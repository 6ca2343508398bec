"""Layer-wise learning-rate decay (optimizer.layer_decay): the rates against hand-computed ones
for unrolled and scanned layers, one update against the plain one times its factor, off equal
to no decay bit for bit, and a fine-tuning run that learns with it on."""

import logging

import finetune_runs
import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bertjax.finetune import job as finetune
from bertjax.model import heads
from bertjax.training import optimizer
from configs import common

flatten = flax.traverse_util.flatten_dict
DECAY = 0.8


def classifier(num_layers=2, scan=False):
  # A small vocab: the word embeddings' factor is what is tested, not their size.
  cfg = common.model_config('tiny', num_layers=num_layers, scan_layers=scan, vocab_size=512)
  return heads.BertForSequenceClassification(cfg, num_labels=3)


def init(model, boxed=False):
  """Real parameters (or, boxed, their logically annotated shapes as make() first sees them)."""
  batch = {k: v for k, v in heads.dummy_batch(2, 8, 2).items() if k != 'masked_lm_positions'}

  def params():
    out = model.init(jax.random.key(0), **batch)['params']
    return out if boxed else flax.linen.unbox(out)

  return jax.eval_shape(params) if boxed else jax.jit(params)()  # One compile, not op by op.


def opt_config(**overrides):
  """configs/common.py's AdamW with a flat rate (no warmup, decay to 0 over 100 steps)."""
  c = common.optimizer_config(learning_rate=1e-3, warmup_steps=0, total_steps=100)
  c.update(overrides)
  return c


@pytest.mark.parametrize('boxed', [False, True], ids=['params', 'boxed_shapes'])
def test_rates_of_a_tiny_model_are_the_hand_computed_ones(boxed):
  # L = 2: embeddings 0.8**3, layer 0 0.8**2, layer 1 0.8, the pooler and the head 1.
  unrolled = flatten(optimizer.layer_decay_factors(init(classifier(), boxed), DECAY), sep='/')
  want = {'bert/embeddings/word_embeddings/embedding': 0.512,
          'bert/embeddings/position_embeddings/embedding': 0.512,
          'bert/embeddings/token_type_embeddings/embedding': 0.512,
          'bert/embeddings/layer_norm/scale': 0.512,
          'bert/layers_0/attention/query/kernel': 0.64,
          'bert/layers_0/output_layer_norm/bias': 0.64,
          'bert/layers_1/mlp/intermediate/kernel': 0.8,
          'bert/layers_1/attention/out/bias': 0.8,
          'bert/pooler/kernel': 1.0,
          'classifier/kernel': 1.0,
          'classifier/bias': 1.0}
  for path, factor in want.items():
    assert unrolled[path].shape == () and unrolled[path] == np.float32(factor), path
  # Every parameter is accounted for: 5 embedding leaves, 16 per layer, 4 above the encoder.
  values = sorted(unrolled.values())
  np.testing.assert_array_equal(values, np.float32(sorted([0.512] * 5 + [0.64] * 16
                                                          + [0.8] * 16 + [1.0] * 4)))

  scanned = flatten(optimizer.layer_decay_factors(init(classifier(scan=True), boxed), DECAY),
                    sep='/')
  # One array per weight: its factor is one value per layer slice, broadcast over the rest.
  kernel = scanned['bert/layers/attention/query/kernel']  # [L, D, H, K].
  assert kernel.shape == (2, 1, 1, 1)
  np.testing.assert_array_equal(kernel.ravel(), np.float32([0.64, 0.8]))
  assert scanned['bert/layers/output_layer_norm/scale'].shape == (2, 1)
  assert scanned['bert/embeddings/word_embeddings/embedding'] == np.float32(0.512)
  assert scanned['classifier/kernel'] == scanned['bert/pooler/bias'] == 1.0


def test_pretraining_heads_train_at_the_full_rate_and_base_has_its_thirteen_depths():
  cfg = common.model_config('base', scan_layers=False)  # Per-layer names: layers_<i>.
  params = jax.eval_shape(lambda: flax.linen.unbox(heads.BertForPreTraining(cfg).init(
      jax.random.key(0), **heads.dummy_batch(1, 8, 2))['params']))
  factors = flatten(optimizer.layer_decay_factors(params, 0.9), sep='/')
  for path in ('mlm/transform/kernel', 'mlm/output_bias', 'mlm/layer_norm/scale',
               'nsp/dense/kernel', 'bert/pooler/kernel'):
    assert factors[path] == 1.0, path
  assert factors['bert/layers_11/attention/key/kernel'] == np.float32(0.9)
  assert factors['bert/layers_0/attention/key/kernel'] == np.float32(0.9 ** 12)
  assert factors['bert/embeddings/word_embeddings/embedding'] == np.float32(0.9 ** 13)


@pytest.mark.parametrize('name, scan', [('adamw', False), ('adamw', True), ('lamb', True)],
                         ids=['adamw_unrolled', 'adamw_scanned', 'lamb_scanned'])
def test_one_update_is_the_plain_update_times_the_factor(scan, name):
  model = classifier(num_layers=4, scan=scan)
  params = init(model)
  # Random gradients drawn on the host: jax.random's per-leaf programs took longer to compile
  # than the updates.
  grads = jax.tree.map(lambda p: np.random.default_rng(p.size).standard_normal(
      p.shape, np.float32) * np.float32(1e-2), params)
  plain_tx = optimizer.make(opt_config(name=name))
  decayed_tx = optimizer.make(opt_config(name=name, layer_decay=DECAY))

  def both_updates(grads, params):  # One program, compiled once: each from its fresh state.
    return (plain_tx.update(grads, plain_tx.init(params), params)[0],
            decayed_tx.update(grads, decayed_tx.init(params), params)[0])

  plain, decayed = jax.jit(both_updates)(grads, params)
  plain, decayed = flatten(plain, sep='/'), flatten(decayed, sep='/')
  # L = 4: the embeddings at 0.8**5, layer 1 (a middle one) at 0.8**3, the head at 1.
  for path, factor in (('bert/embeddings/word_embeddings/embedding', 0.8 ** 5),
                       ('bert/embeddings/layer_norm/bias', 0.8 ** 5),
                       ('classifier/kernel', 1.0), ('bert/pooler/kernel', 1.0)):
    np.testing.assert_allclose(decayed[path], plain[path] * factor, rtol=1e-6, err_msg=path)
    assert np.abs(plain[path]).max() > 0, path  # The comparison has teeth.
  for layer in range(4):
    for leaf in ('attention/query/kernel', 'mlp/output/bias'):
      factor = 0.8 ** (4 - layer)
      if scan:
        got, want = decayed[f'bert/layers/{leaf}'][layer], plain[f'bert/layers/{leaf}'][layer]
      else:
        got, want = decayed[f'bert/layers_{layer}/{leaf}'], plain[f'bert/layers_{layer}/{leaf}']
      np.testing.assert_allclose(got, want * factor, rtol=1e-6, err_msg=f'{layer} {leaf}')


def test_off_is_bit_identical_and_the_state_is_the_same_either_way():
  params = init(classifier())
  grads = jax.tree.map(lambda p: 0.3 * p + 0.01, params)
  # Off is the optimizer without the wrapper; the wrapper at 1.0 multiplies by exact ones.
  today = optimizer.make(opt_config(layer_decay=1.0))
  off = optimizer.scale_by_layer_decay(optimizer.make(opt_config(layer_decay=1.0)), 1.0)
  a, state_a = jax.jit(today.update)(grads, today.init(params), params)
  b, state_b = jax.jit(off.update)(grads, off.init(params), params)
  for x, y in zip(jax.tree.leaves((a, state_a)), jax.tree.leaves((b, state_b)), strict=True):
    np.testing.assert_array_equal(x, y)
  # No state of its own: a checkpoint written with the decay off resumes with it on, and back.
  on = optimizer.make(opt_config(layer_decay=DECAY))
  assert jax.tree.structure(on.init(params)) == jax.tree.structure(today.init(params))
  # The boxed init make() gets under jax.eval_shape works too.
  boxed = init(classifier(), boxed=True)
  assert (jax.tree.structure(jax.eval_shape(on.init, boxed))
          == jax.tree.structure(jax.eval_shape(today.init, boxed)))


def test_a_model_without_encoder_layers_is_refused_with_the_fix():
  params = {'dense': {'kernel': jnp.ones((2, 2)), 'bias': jnp.zeros(2)}}
  tx = optimizer.make(opt_config(layer_decay=DECAY))
  with pytest.raises(ValueError, match=r'layer_decay needs the encoder.*layer_decay=1.0'):
    tx.update(params, tx.init(params), params)


def test_start_line_names_the_extreme_factors():
  config = ml_collections.ConfigDict({'optimizer': {'layer_decay': 0.8},
                                      'model': {'num_layers': 12}})
  assert optimizer.layer_decay_line(config) == (
      'layer-wise LR decay 0.8: embeddings x0.055, top layer x0.8, pooler and heads x1 '
      '(12 layers)')


def test_fine_tuning_with_layer_decay_learns_on_a_sharded_scanned_model(tmp_path, caplog):
  data_dir = finetune_runs.write_sst2(tmp_path / 'sst2')
  # One eval and one save, at the end (64 examples / 16 = 4 steps per epoch, 8 epochs): what
  # the test reads.
  config = finetune_runs.tiny_config(data_dir, **{
      'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3, 'optimizer.layer_decay': DECAY,
      'model.scan_layers': True, 'eval_every_steps': 32, 'checkpoint.every_steps': 1000})
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
  # absl's logger, whose level an earlier test's verbosity may have raised.
  with caplog.at_level(logging.INFO, logger='absl'):
    metrics = finetune.train_and_evaluate(config, str(tmp_path / 'run'))
  assert ('layer-wise LR decay 0.8: embeddings x0.512, top layer x0.8, pooler and heads x1 '
          '(2 layers)') in caplog.text
  # As test_learns_and_eight_devices_equal_one without the decay: well past chance.
  assert metrics['accuracy'] >= 0.9, metrics
  params, step = finetune_runs.final_params(tmp_path / 'run')
  assert step == 32 and np.isfinite(params['bert/layers/attention/query/kernel']).all()

"""The loop counts real tokens beside the padded ones: on padded rows its tokens/s and MFU come
with real-token figures that are the padded ones times the data's share of real tokens, on
TensorBoard and on the progress line."""

import logging

import numpy as np
import pytest

from bertjax import pretrain_objective
from bertjax.input import global_batch
from bertjax.training import loop
from bertjax.training import perf
from bertjax.training import sharding
from bertjax.training import summaries
from configs import pretrain

SEQ, PREDICTIONS, BATCH, STEPS = 32, 4, 16, 3


def padded_batches(vocab_size: int) -> list[dict]:
  """STEPS host batches whose rows hold 8..SEQ real tokens, the rest padding (as unpacked
  pre-training rows do: [CLS] ... [SEP] then zeros)."""
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(STEPS):
    lengths = rng.integers(8, SEQ + 1, BATCH)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, n - 1), PREDICTIONS, replace=False))
                          for n in lengths]).astype(np.int32)
    batches.append(dict(
        input_ids=rng.integers(5, vocab_size, (BATCH, SEQ)).astype(np.int32) * mask,
        input_mask=mask, segment_ids=np.zeros((BATCH, SEQ), np.int32),
        masked_lm_positions=positions,
        masked_lm_ids=rng.integers(5, vocab_size, (BATCH, PREDICTIONS)).astype(np.int32),
        masked_lm_weights=np.ones((BATCH, PREDICTIONS), np.float32),
        next_sentence_labels=rng.integers(0, 2, (BATCH, 1)).astype(np.int32)))
  return batches


def test_real_token_figures_are_the_padded_ones_times_the_real_share(tmp_path, caplog):
  config = pretrain.get_config(f'size=tiny,steps={STEPS},batch={BATCH},seq={SEQ}')
  config.model.update(dict(num_layers=1, hidden_size=64, num_heads=2, mlp_dim=128))
  config.data.max_predictions_per_seq = PREDICTIONS
  config.log_every_steps = STEPS  # One log: the figures of all three batches.
  config.peak_tflops = 1.0  # A known peak, so that the CPU shows an MFU.
  rules = sharding.parse_rules(config.mesh.rules)
  mesh = sharding.make_mesh(config.mesh)
  host_batches = padded_batches(config.model.vocab_size)

  def batches(start_step, examples_consumed):
    del examples_consumed
    for host_batch in host_batches[start_step:]:
      yield global_batch.make_global_batch(host_batch, mesh, sharding.batch_axes(rules))

  job = loop.Job(
      objective=pretrain_objective.objective(config), batches=batches, evaluator=None,
      load_weights=None, describe=lambda step, means: '', best_metric='mlm_accuracy',
      sequence_cost=lambda step: (SEQ, perf.flops_per_sequence(config.model, SEQ, PREDICTIONS)))
  with caplog.at_level(logging.INFO, logger='absl'):
    loop.run(config, str(tmp_path), mesh, job, rules=rules)

  share = sum(np.count_nonzero(b['input_mask']) for b in host_batches) / (STEPS * BATCH * SEQ)
  assert 0.4 < share < 0.8  # The data has padding: real < padded.
  scalars = {tag: values[STEPS] for tag, values in summaries.read_scalars(str(tmp_path)).items()}
  assert scalars['train/real_token_share'] == pytest.approx(share, rel=1e-5)
  assert scalars['train/real_tokens_per_sec'] == pytest.approx(
      scalars['train/tokens_per_sec'] * share, rel=1e-5)
  assert scalars['train/real_mfu'] == pytest.approx(scalars['train/mfu'] * share, rel=1e-5)
  line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith(f'step {STEPS}/'))
  real_mfu = scalars['train/mfu'] * share
  assert f'real tokens/s ({share:.0%} of the padded)' in line, line
  assert f'MFU {scalars["train/mfu"]:.1%} (real {real_mfu:.1%})' in line, line


def test_packed_rows_count_their_tokens_not_their_instance_ids():
  """A packed row's input_mask holds instance ids 1, 2, ... (records/packing.py): each nonzero
  entry is one real token."""
  mask = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0]], np.int32)
  real, weight = perf.real_tokens({'input_mask': mask})['real_tokens']
  assert (float(real), float(weight)) == (9.0, 1.0)
  assert perf.real_tokens({'input_ids': mask}) == {}

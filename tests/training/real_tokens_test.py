"""The loop counts real tokens beside the padded ones: on padded rows its tokens/s and MFU come
with real-token figures that are the padded ones times the data's share of real tokens, on
TensorBoard and on the progress line."""

import logging
import time

import jax
import numpy as np
import pytest

from bertjax import pretrain_objective
from bertjax.input import global_batch
from bertjax.training import loop
from bertjax.training import perf
from bertjax.training import progress
from bertjax.training import sharding
from bertjax.training import summaries
from configs import pretrain

SEQ, PREDICTIONS, BATCH, STEPS = 32, 4, 16, 3


def padded_batches(vocab_size: int, seqs=(SEQ,) * STEPS) -> list[dict]:
  """Host batches of rows `seqs[i]` long, which hold 8.. real tokens, the rest padding (as
  unpacked pre-training rows do: [CLS] ... [SEP] then zeros)."""
  rng = np.random.default_rng(0)
  batches = []
  for seq in seqs:
    lengths = rng.integers(8, seq + 1, BATCH)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, n - 1), PREDICTIONS, replace=False))
                          for n in lengths]).astype(np.int32)
    batches.append(dict(
        input_ids=rng.integers(5, vocab_size, (BATCH, seq)).astype(np.int32) * mask,
        input_mask=mask, segment_ids=np.zeros((BATCH, seq), np.int32),
        masked_lm_positions=positions,
        masked_lm_ids=rng.integers(5, vocab_size, (BATCH, PREDICTIONS)).astype(np.int32),
        masked_lm_weights=np.ones((BATCH, PREDICTIONS), np.float32),
        next_sentence_labels=rng.integers(0, 2, (BATCH, 1)).astype(np.int32)))
  return batches


def run_logged_once(tmp_path, caplog, seqs, *, log_every_steps=0, on_first_batch=None):
  """Trains on batches of rows `seqs[i]` long with one log at the end (or every
  `log_every_steps`); (its config, the host batches, the train/ scalars of that log, its
  progress line). `on_first_batch()` runs as the first batch is drawn."""
  config = pretrain.get_config(f'size=tiny,steps={len(seqs)},batch={BATCH},seq={max(seqs)}')
  config.model.update(dict(num_layers=1, hidden_size=64, num_heads=2, mlp_dim=128))
  config.data.max_predictions_per_seq = PREDICTIONS
  config.log_every_steps = log_every_steps or len(seqs)  # One log: the figures of every batch.
  config.checkpoint.every_steps = config.log_every_steps
  config.peak_tflops = 1.0  # A known peak, so that the CPU shows an MFU.
  rules = sharding.parse_rules(config.mesh.rules)
  mesh = sharding.make_mesh(config.mesh)
  host_batches = padded_batches(config.model.vocab_size, seqs)

  def batches(start_step, examples_consumed):
    del examples_consumed
    for i, host_batch in enumerate(host_batches[start_step:]):
      if i == 0 and on_first_batch:
        on_first_batch()
      yield global_batch.make_global_batch(host_batch, mesh, sharding.batch_axes(rules))

  job = loop.Job(
      objective=pretrain_objective.objective(config), batches=batches, evaluator=None,
      load_weights=None, describe=lambda step, means: '', best_metric='mlm_accuracy')
  with caplog.at_level(logging.INFO, logger='absl'):
    loop.run(config, str(tmp_path), mesh, job, rules=rules)
  steps = len(seqs)
  scalars = {tag: values[steps] for tag, values in summaries.read_scalars(str(tmp_path)).items()}
  line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith(f'step {steps}/'))
  return config, host_batches, scalars, line


def test_real_token_figures_are_the_padded_ones_times_the_real_share(tmp_path, caplog):
  _, host_batches, scalars, line = run_logged_once(tmp_path, caplog, (SEQ,) * STEPS)
  share = sum(np.count_nonzero(b['input_mask']) for b in host_batches) / (STEPS * BATCH * SEQ)
  assert 0.4 < share < 0.8  # The data has padding: real < padded.
  assert scalars['train/real_token_share'] == pytest.approx(share, rel=1e-5)
  assert scalars['train/real_tokens_per_sec'] == pytest.approx(
      scalars['train/tokens_per_sec'] * share, rel=1e-5)
  assert scalars['train/real_mfu'] == pytest.approx(scalars['train/mfu'] * share, rel=1e-5)
  assert scalars['train/tokens_per_sec'] == pytest.approx(
      scalars['train/sequences_per_sec'] * SEQ, rel=1e-5)
  real_mfu = scalars['train/mfu'] * share
  assert f'real tokens/s ({share:.0%} of the padded)' in line, line
  assert f'MFU {scalars["train/mfu"]:.1%} (real {real_mfu:.1%})' in line, line


def test_a_window_of_two_lengths_counts_each_steps_own_work(tmp_path, caplog):
  """A log window across a length change (a two-phase run's boundary; fine-tuning's batches
  cut to their longest row) counts each step at its own length, not all at the last one's."""
  seqs = (SEQ, SEQ, SEQ // 2)
  config, host_batches, scalars, _ = run_logged_once(tmp_path, caplog, seqs)
  padded = sum(b['input_mask'].size for b in host_batches)
  share = sum(np.count_nonzero(b['input_mask']) for b in host_batches) / padded
  assert scalars['train/real_token_share'] == pytest.approx(share, rel=1e-5)
  steps_per_sec = scalars['train/sequences_per_sec'] / BATCH
  assert scalars['train/tokens_per_sec'] == pytest.approx(
      steps_per_sec * padded / len(seqs), rel=1e-5)
  flops = sum(BATCH * perf.flops_per_sequence(config.model, seq, PREDICTIONS)
              for seq in seqs) / len(seqs)  # Per step: each at its own length.
  devices = jax.device_count()
  assert scalars['train/mfu'] == pytest.approx(steps_per_sec * flops / (devices * 1e12),
                                               rel=1e-5)


def test_the_rates_leave_out_saves_and_the_pipelines_start(tmp_path, caplog, monkeypatch):
  """Pass AA: the window after a save (or an eval) and the first (the input pipeline's start)
  ran at half the rate of the others. Each save and the first batch take 100 s more here (a
  shifted clock): a window that counted them would show under 1 sequence/s."""
  offset = [0.0]
  clock = time.perf_counter
  monkeypatch.setattr(time, 'perf_counter', lambda: clock() + offset[0])
  save = loop._save  # pylint: disable=protected-access

  def slow_save(*args, **kwargs):
    save(*args, **kwargs)
    offset[0] += 100.0

  monkeypatch.setattr(loop, '_save', slow_save)
  run_logged_once(tmp_path, caplog, (SEQ,) * 6, log_every_steps=2,
                  on_first_batch=lambda: offset.__setitem__(0, offset[0] + 100.0))
  rates = summaries.read_scalars(str(tmp_path))['train/sequences_per_sec']
  assert sorted(rates) == [2, 4, 6]
  assert min(rates.values()) > 1.0, rates  # 2 steps of 16 sequences in well under 32 s.


def test_packed_rows_count_their_tokens_not_their_instance_ids():
  """A packed row's input_mask holds instance ids 1, 2, ... (records/packing.py): each nonzero
  entry is one real token."""
  mask = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0]], np.int32)
  real, weight = perf.real_tokens({'input_mask': mask})['real_tokens']
  assert (float(real), float(weight)) == (9.0, 1.0)
  assert perf.real_tokens({'input_ids': mask}) == {}


def test_filler_rows_and_instances_at_weight_0_are_no_real_tokens():
  """Pass AA: packed fine-tuning rounds its rows up with copies of an example at weight 0;
  they were counted, overstating the real share by 13%."""
  mask = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0]], np.int32)
  packed = {'input_mask': mask, 'example_weight': np.array([[1, 1], [0, 0]], np.float32),
            'instance_starts': np.array([[0, 2], [0, 0]], np.int32)}
  assert float(perf.real_tokens(packed)['real_tokens'][0]) == 5.0  # Row 1 is filler.
  packed['example_weight'] = np.array([[1, 0], [1, 0]], np.float32)
  assert float(perf.real_tokens(packed)['real_tokens'][0]) == 5.0  # Instance 2 of row 0.
  rows = {'input_mask': mask, 'example_weight': np.array([1, 0], np.float32)}
  assert float(perf.real_tokens(rows)['real_tokens'][0]) == 5.0  # A short batch's fill row.
  choices = {'input_mask': np.ones((2, 3, 4), np.int32),
             'example_weight': np.array([1, 0], np.float32)}
  assert float(perf.real_tokens(choices)['real_tokens'][0]) == 12.0


@pytest.mark.parametrize('shape, words', [
    ((16, 128), '16 sequences of 128 tokens'),
    ((8, 128), '16 sequences in 8 rows of 128 tokens'),  # Packed.
    ((16, 4, 64), '16 sequences in 64 rows of 64 tokens')])  # Four choices each.
def test_the_start_line_says_the_rows_the_step_computes(shape, words):
  assert progress.batch_words({'input_ids': np.zeros(shape)}, 16) == words

"""create_pretraining_data's masking flags against what training reads: flags that unmasked
instances never use are refused, and the rates it accepts are the ones training accepts."""

import pathlib
import subprocess
import sys

from absl import app
import pytest

from bertjax import create_pretraining_data as cli
from bertjax.input import masking_tf
from bertjax.pretraining_data import instances

ROOT = pathlib.Path(__file__).resolve().parents[2]
IDS = {'vocab_size': 8, 'mask_id': 1, 'cls_id': 2, 'sep_id': 3}


def test_masking_flags_with_nostatic_masking_are_refused_naming_the_config(tmp_path):
  corpus = ROOT / 'bertjax' / 'pretraining_data' / 'corpus'
  result = subprocess.run(
      [sys.executable, '-m', 'bertjax.create_pretraining_data',
       f'--input_file={corpus / "shakespeare_kjv_eval.txt.gz"}',
       f'--output_file={tmp_path / "u30"}', '--num_output_shards=1', '--num_workers=1',
       f'--vocab_file={corpus / "vocab.txt"}', '--max_seq_length=32', '--masked_lm_prob=0.3',
       '--nostatic_masking', '--dupe_factor=1'],
      cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode != 0, result.stderr[-2000:]
  assert ('--masked_lm_prob is read with static masking only, but --nostatic_masking writes '
          'unmasked instances: choose it where they are masked (--config.data.masked_lm_prob)'
          in result.stderr), result.stderr[-2000:]
  assert not list(tmp_path.iterdir())  # Nothing written, no report of an unused rate.


def test_check_unmasked_names_each_unread_flag():
  with pytest.raises(app.UsageError, match=r'^--max_predictions_per_seq is read with static '
                     r'masking only.*\(--config\.data\.max_predictions_per_seq\)'):
    cli.check_unmasked(False, ['max_predictions_per_seq', 'vocab_file'])
  with pytest.raises(app.UsageError, match=r'^--masked_lm_prob and --max_predictions_per_seq are '
                     r'read .*choose them .*\(--config\.data\.masked_lm_prob '
                     r'--config\.data\.max_predictions_per_seq\)'):
    cli.check_unmasked(False, ['masked_lm_prob', 'max_predictions_per_seq'])
  # Static masks read both; unmasked instances with neither given pass.
  cli.check_unmasked(True, ['masked_lm_prob', 'max_predictions_per_seq'])
  cli.check_unmasked(False, ['max_seq_length', 'static_masking'])


def test_creation_accepts_the_masking_rates_training_accepts():
  settings = dict(max_seq_length=64, max_predictions_per_seq=61)
  with pytest.raises(ValueError, match=r'masked_lm_prob=1 masks every token .*training refuses '
                     r'\(config\.data\.masked_lm_prob in \(0, 1\)\): pass a rate in \(0, 1\)'):
    instances.Settings(masked_lm_prob=1.0, **settings).validate()
  with pytest.raises(ValueError, match=r'must be in \(0, 1\)'):  # Training's own refusal.
    masking_tf.MaskingConfig(**IDS, masked_lm_prob=1.0)
  instances.Settings(masked_lm_prob=0.99, **settings).validate()
  masking_tf.MaskingConfig(**IDS, masked_lm_prob=0.99)


def test_the_share_masked_is_recorded_and_said_where_it_is_not_the_rate(tmp_path, capsys):
  """At a tiny length the one-prediction minimum masks far more than masked_lm_prob: the report
  recorded only the rate asked. It records the share realized, and a warning says it."""
  from bertjax.pretraining_data import writer  # noqa: PLC0415
  corpus = ROOT / 'bertjax' / 'pretraining_data' / 'corpus'
  shares, said = {}, {}
  for length, predictions in ((8, 2), (64, 10)):
    report = writer.create(
        str(corpus / 'shakespeare_kjv_eval.txt.gz'), str(tmp_path / f'l{length}' / 'train'),
        instances.Settings(max_seq_length=length, max_predictions_per_seq=predictions,
                           dupe_factor=1), vocab_file=str(corpus / 'vocab.txt'),
        do_lower_case=True, num_output_shards=1, num_workers=1)
    counts = report['counts']
    # [CLS] and two [SEP] per instance are never masked; every other token may be.
    maskable = counts['instance_tokens'] - 3 * counts['instances']
    shares[length] = counts['masked_lm_predictions'] / maskable
    assert report['masked_fraction'] == pytest.approx(shares[length], abs=1e-6)
    said[length] = capsys.readouterr().err
    warned = 'warning: the masks chose' in said[length]
    assert warned == (length == 8), said[length][-2000:]
  assert shares[8] > 0.18 and abs(shares[64] - 0.15) < 0.02, shares
  assert (f'warning: the masks chose {shares[8]:.1%} of the maskable tokens, not '
          'masked_lm_prob=0.15: each instance masks round(0.15 x its tokens), at least '
          'one') in said[8]

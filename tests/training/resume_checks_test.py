"""resume_checks: what a resumed pre-training run is refused or told when its config changed.

Unit tests on the configs alone (configs/pretrain.py's); tests/training/loop_test.py has the
first ones, tests/training/resume_test.py runs them in real resumes.
"""

import json
import types

import log_records
import pytest

from bertjax.training import resume_checks
from configs import pretrain


def _config(steps=20, fraction=0.5, batch=64, seq2=512):
  config = pretrain.get_config(f'size=tiny,steps={steps}')
  config.phase2.fraction = fraction
  config.global_batch_size = batch
  config.phase2.max_seq_length = seq2
  return config


def test_another_batch_on_a_two_phase_resume_is_refused_in_phase_1_too():
  """Pass Y: accepted with a warning in phase 1, then every resume in phase 2 was refused,
  asking to keep the batch the user had passed."""
  phases = resume_checks._check_phases  # pylint: disable=protected-access
  last = json.loads(_config().to_json())  # Phase 2 from step 10, batch 64.
  with pytest.raises(ValueError, match=r'^this two-phase run ran with global_batch_size=64 and '
                     r'would resume at step 8 with 128: .* keep global_batch_size=64, or start '
                     r'another --workdir with init_from=W\.$'):
    phases(_config(batch=128), last, 'W', 8, 512)
  with pytest.raises(ValueError, match='ran with global_batch_size=64 .* at step 10 with 32'):
    phases(_config(batch=32), last, 'W', 10, 640)  # At the boundary: phase 2 not read yet.
  # A run whose batch changed at an earlier resume (as before this check) is told so.
  last_now = json.loads(_config(batch=128).to_json())
  with pytest.raises(ValueError, match=r'consumed 640 examples in 8 steps, not 8 x '
                     r'global_batch_size 128 \(its batch changed at an earlier resume\)'):
    phases(_config(batch=128), last_now, 'W', 8, 640)
  with pytest.raises(ValueError, match=r'consumed 1664 examples in 16 steps, not 16 x '
                     r'global_batch_size 128 \(its batch changed at an earlier resume\): its '
                     r'second phase cannot find where it stopped; start another --workdir'):
    phases(_config(batch=128), last_now, 'W', 16, 1664)
  phases(_config(batch=64), last, 'W', 8, 512)  # The same batch: resumes.
  one = json.loads(_config(fraction=0).to_json())
  phases(_config(fraction=0, batch=128), one, 'W', 8, 512)  # One phase: from example 512.


def test_phase2_fields_are_no_data_order_change_before_phase_2_ran(monkeypatch):
  """Pass Y: a one-phase run resumed as two phases was told that phase2.max_seq_length and
  max_predictions_per_seq (never read) changed its data order."""
  warnings = log_records.recorded_warnings(monkeypatch, resume_checks)
  order = resume_checks._check_data_order  # pylint: disable=protected-access
  one = json.loads(_config(fraction=0, seq2=512).to_json())
  order(_config(seq2=64), one, 8, 512)
  two = json.loads(_config(seq2=512).to_json())
  order(_config(seq2=64), two, 8, 512)  # Still in phase 1: phase 2 read nothing yet.
  assert warnings == []
  order(_config(seq2=64), two, 12, 768)  # Phase 2 (from step 10) read its files at 512.
  assert len(warnings) == 1 and 'phase2.max_seq_length 512 -> 64' in warnings[0], warnings


def test_a_resume_on_another_process_count_is_said_where_the_order_depends_on_it(monkeypatch):
  """Pass AG: a two-process pre-training resumed by one process read on in another order
  (each host reads its own files) without a word; fine-tuning's order does not depend on it."""
  from bertjax.training import loop  # noqa: PLC0415
  said = log_records.recorded_warnings(monkeypatch, loop)
  meta = {'process_count': 2, 'examples_consumed': 320}
  pretraining = types.SimpleNamespace(order_per_process=True)
  loop._check_process_count(pretraining, meta)  # pylint: disable=protected-access
  assert said == ['this checkpoint was saved by 2 process(es) and this run has 1: each host reads '
                  'its own share of the files, so from example 320 the data comes in another '
                  'order (examples seen may come again, others never); resume on 2 process(es) '
                  'to continue exactly']
  said.clear()
  for job, saved in ((pretraining, 1), (pretraining, None),
                     (types.SimpleNamespace(order_per_process=False), 2)):
    loop._check_process_count(job, meta | {'process_count': saved})  # pylint: disable=protected-access
  assert said == []

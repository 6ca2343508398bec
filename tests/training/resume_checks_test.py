"""resume_checks: what a resumed pre-training run is refused or told when its config changed.

Unit tests on the configs alone (configs/pretrain.py's); tests/training/resume_test.py runs them
in real resumes.
"""

import json
import re

import jax
import log_records
import pytest

from bertjax.training import checkpoint
from bertjax.training import checkpoint_step
from bertjax.training import optimizer as optimizer_lib
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
  said = log_records.recorded_warnings(monkeypatch, resume_checks)
  meta = {'process_count': 2, 'examples_consumed': 320}
  resume_checks.process_count(True, meta)
  assert said == ['this checkpoint was saved by 2 process(es) and this run has 1: each host reads '
                  'its own share of the files, so from example 320 the data comes in another '
                  'order (examples seen may come again, others never); resume on 2 process(es) '
                  'to continue exactly']
  said.clear()
  for per_process, saved in ((True, 1), (True, None), (False, 2)):
    resume_checks.process_count(per_process, meta | {'process_count': saved})
  assert said == []


def test_a_two_phase_resume_that_would_read_phase_two_from_the_wrong_example_is_refused():
  phases = resume_checks._check_phases  # pylint: disable=protected-access
  last = json.loads(_config().to_json())  # Phase 2 from step 10, batch 64.
  # Resumed at 16 with a batch of 128: phase 2 would start at example 1024 - 10 x 128 < 0.
  with pytest.raises(ValueError, match=r'consumed 1024 examples in 16 steps, not 16 x '
                     r'global_batch_size 128: .* keep num_train_steps=20, phase2.fraction=0.5 '
                     r'and global_batch_size=64, or start another --workdir with init_from=W'):
    phases(_config(batch=128), last, 'W', 16, 1024)
  # Stretched to 40 steps: phase 2 moves to step 20, and step 16 was trained in phase 2.
  with pytest.raises(ValueError, match=r'this run ran with its second phase from step 10 and '
                     r'would now run with its second phase from step 20 \(num_train_steps or '
                     r'phase2.fraction changed\)'):
    phases(_config(steps=40), last, 'W', 16, 1024)
  with pytest.raises(ValueError, match=r'ran in one phase and would now run with its second phase '
                     r'from step 10'):
    phases(_config(), json.loads(_config(fraction=0).to_json()), 'W', 16, 1024)
  phases(_config(), last, 'W', 16, 1024)  # The same run: resumes.
  phases(_config(steps=40), last, 'W', 8, 512)  # Still in phase 1.
  phases(_config(fraction=0, batch=128), json.loads(
      _config(fraction=0).to_json()), 'W', 16, 1024)  # One phase reads from example 1024.


def test_another_embedded_corpus_on_a_resume_is_said(caplog):
  last = json.loads(pretrain.get_config('size=tiny').to_json())
  config = pretrain.get_config('size=tiny')
  config.data.dupe_factor = 2  # The same file names in <workdir>/data, other examples.
  resume_checks._check_data_order(config, last, 50, 3200)
  assert re.search(r'the data order differs .*\(data.dupe_factor 5 -> 2\)', caplog.text)
  caplog.clear()
  config.data.train_files = last['data']['train_files'] = 'records/train-*'
  resume_checks._check_data_order(config, last, 50, 3200)  # Own files: their records are checked.
  assert 'the data order differs' not in caplog.text


def test_a_resume_with_a_model_of_another_function_is_refused(tmp_path):
  """Pass S: a resume with --config.model.hidden_act=relu restored the gelu run's weights (the
  shapes fit) and trained them on under relu without a word."""
  (tmp_path / 'config.json').write_text(pretrain.get_config('size=tiny').to_json())
  config = pretrain.get_config('size=tiny')
  resume_checks.check(config, str(tmp_path), 6, 384, lambda step: 0.0)  # The same model.
  for field, value in (('hidden_act', 'relu'), ('layer_norm_eps', 1e-5)):
    changed = pretrain.get_config('size=tiny')
    changed.model[field] = value
    with pytest.raises(ValueError, match=rf"{tmp_path} was trained to step 6 with another model "
                       rf"than this config makes \(model.{field} .* -> {value!r}\): its weights "
                       'would go on under another function'):
      resume_checks.check(changed, str(tmp_path), 6, 384, lambda step: 0.0)


def test_a_resume_compares_with_the_config_that_wrote_its_checkpoint(tmp_path):
  for name, seed in (('config.json', 0), ('config-resumed-at-6.json', 1),
                     ('config-resumed-at-9.json', 2)):  # 9: a resume that failed at once.
    (tmp_path / name).write_text(json.dumps({'seed': seed}))
  assert resume_checks._last_config(str(tmp_path), 9) == {'seed': 1}
  assert resume_checks._last_config(str(tmp_path), 12) == {'seed': 2}
  assert resume_checks._last_config(str(tmp_path), 6) == {'seed': 0}


def test_a_schedule_change_on_a_resume_says_what_happens_at_its_step(caplog):
  schedule_check = resume_checks._check_schedule  # pylint: disable=protected-access
  def config(steps, warmup):
    c = pretrain.get_config(f'size=tiny,steps={steps}')
    c.optimizer.warmup_steps = warmup
    return optimizer_lib.resolve_total_steps(c)
  last = json.loads(config(50, 60).to_json())  # Still warming up when it ended at 50.
  now = config(52, 60)
  schedule_check(now, last, 'W', 40, optimizer_lib.learning_rate_schedule(now.optimizer))
  # Both still on the same warmup at step 40: no jump there, yet not the same schedule.
  assert re.search(r'at step 40 the rate is unchanged \(\S+\) but follows another curve from '
                   r'here\. To extend a run without that change, start a new run with '
                   r'init_from=W', caplog.text)
  caplog.clear()
  last = json.loads(config(50, 10).to_json())
  now = config(60, 10)
  schedule_check(now, last, 'W', 50, optimizer_lib.learning_rate_schedule(now.optimizer))
  assert re.search(r'at step 50 the rate goes from 0 to \S+\. To extend a run without that '
                   r'change, keep optimizer.total_steps=50 .*, or start a new run', caplog.text)


def test_a_run_recorded_before_decay_from_resumes_on_its_own_schedule(caplog):
  """A config.json written before optimizer.decay_from existed decayed from the warmup's end:
  resumed with that default, nothing is said; with the original's schedule, the jump is."""
  schedule_check = resume_checks._check_schedule  # pylint: disable=protected-access
  now = pretrain.get_config('size=tiny,steps=100')
  now.optimizer.warmup_steps = 10
  now = optimizer_lib.resolve_total_steps(now)
  last = json.loads(now.to_json())
  del last['optimizer']['decay_from']
  schedule_check(now, last, 'W', 50, optimizer_lib.learning_rate_schedule(now.optimizer))
  assert 'schedule differs' not in caplog.text
  now.optimizer.decay_from = 'step_0'
  schedule_check(now, last, 'W', 50, optimizer_lib.learning_rate_schedule(now.optimizer))
  assert re.search(r"optimizer.decay_from warmup_end -> step_0\): at step 50 the rate goes from "
                   r'\S+ to \S+\.', caplog.text)


def test_a_resume_names_every_setting_it_changes(tmp_path, caplog):
  """Hostile pass of 2026-12-01: another dropout, weight decay or b2 on a resume was applied
  with only the schedule's warning (the finished-run path listed every change)."""
  (tmp_path / 'config.json').write_text(pretrain.get_config('size=tiny').to_json())
  config = pretrain.get_config('size=tiny')
  resume_checks.check(config, str(tmp_path), 6, 384, lambda step: 0.0)
  assert 'settings other than the run had' not in caplog.text
  config.model.dropout_rate = 0.5
  config.optimizer.weight_decay = 0.5
  config.optimizer.b2 = 0.9
  resume_checks.check(config, str(tmp_path), 6, 384, lambda step: 0.0)
  assert re.search(r'resumed at step 6 with settings other than the run had: model.dropout_rate '
                   r'0.1 -> 0.5, optimizer.b2 0.999 -> 0.9, optimizer.weight_decay 0.01 -> 0.5 '
                   r'\(recorded in config-resumed-at-6.json', caplog.text), caplog.text


def _written_before_masking(path, whole_word: bool, dynamic: bool = True):
  """config.json as b03777a (2026-11-24) wrote it: data.whole_word_masking (dynamic masking's
  switch) where data.masking is now, and no data.max_instances_per_row."""
  last = json.loads(pretrain.get_config('size=tiny').to_json())
  del last['data']['masking'], last['data']['max_instances_per_row']
  last['data'].update(whole_word_masking=whole_word, dynamic_masking=dynamic)
  path.write_text(json.dumps(last))


def test_a_run_begun_with_whole_word_masking_before_data_masking_is_told_of_its_change(
    tmp_path, caplog):
  """A dynamically masked run of b03777a (data.whole_word_masking=True) resumed today took
  data.masking's default, wordpiece, and masked its later steps otherwise without a word."""
  _written_before_masking(tmp_path / 'config.json', whole_word=True)
  config = pretrain.get_config('size=tiny')
  config.data.dynamic_masking = True
  resume_checks.check(config, str(tmp_path), 6, 384, lambda step: 0.0)
  assert re.search(r"settings other than the run had: data.masking 'whole_word' -> "
                   r"'wordpiece'", caplog.text), caplog.text
  caplog.clear()
  config.data.masking = 'whole_word'
  resume_checks.check(config, str(tmp_path), 6, 384, lambda step: 0.0)
  assert 'settings other than the run had' not in caplog.text
  # Static masks are the files' (whole_word_masking was not read): nothing to compare.
  _written_before_masking(tmp_path / 'config.json', whole_word=False, dynamic=False)
  resume_checks.check(pretrain.get_config('size=tiny'), str(tmp_path), 6, 384, lambda step: 0.0)
  assert 'settings other than the run had' not in caplog.text


def test_a_resume_under_other_prng_settings_is_said(monkeypatch):
  """Pass helper-181: a run resumed with JAX_THREEFRY_PARTITIONABLE flipped (or rbg <->
  unsafe_rbg, keys of one width) went on with other dropout masks than the uninterrupted run's
  (losses 9.6985 -> 9.6999 at the first step) without a word."""
  said = log_records.recorded_warnings(monkeypatch, resume_checks)
  now = checkpoint.prng_settings()
  assert checkpoint_step.step_meta(_config(), jax.sharding.Mesh(jax.devices()[:1], ('data',)), 3,
                                   192, None)['prng'] == now
  resume_checks.prng({'step': 3, 'prng': now})
  resume_checks.prng({'step': 3})  # Saved before the record: nothing to compare.
  assert said == []
  flipped = now | {'threefry_partitionable': not now['threefry_partitionable']}
  resume_checks.prng({'step': 3, 'prng': flipped})
  assert said == [
      'this checkpoint was saved under other JAX PRNG settings than this process has '
      f'(JAX_THREEFRY_PARTITIONABLE {int(flipped["threefry_partitionable"])} -> '
      f'{int(now["threefry_partitionable"])}): from step 3 the same keys draw other dropout '
      'masks, so the run goes on, but not as the run it resumes; resume with JAX_DEFAULT_PRNG_IMPL='
      f'{now["impl"]}, JAX_THREEFRY_PARTITIONABLE={int(flipped["threefry_partitionable"])} to '
      'continue exactly']
  said.clear()  # The flag changes no bits of rbg's keys; the implementation is what differs.
  resume_checks.prng({'step': 3, 'prng': {'impl': 'rbg', 'threefry_partitionable': False}})
  if now['impl'] == 'threefry2x32':
    assert said == [
        'this checkpoint was saved under other JAX PRNG settings than this process has '
        '(JAX_DEFAULT_PRNG_IMPL rbg -> threefry2x32): from step 3 the same keys draw other '
        'dropout masks, so the run goes on, but not as the run it resumes; resume with '
        'JAX_DEFAULT_PRNG_IMPL=rbg to continue exactly']


def test_a_pre_training_checkpoint_saved_before_each_epoch_had_its_order_is_said(monkeypatch):
  """Pass helper-183 (04313db): every epoch after the first was read in the first's shuffle
  order; mended, a run saved before it reads its later epochs in other orders from its resume."""
  said = log_records.recorded_warnings(monkeypatch, resume_checks)
  meta = checkpoint_step.step_meta(_config(), jax.sharding.Mesh(jax.devices()[:1], ('data',)), 3,
                                   192, None)
  resume_checks.on_resume(True, meta)
  old = {k: v for k, v in meta.items() if k != 'epoch_orders'}
  resume_checks.on_resume(False, old)  # Fine-tuning's order never took the epoch so.
  assert said == []
  resume_checks.on_resume(True, old)
  assert said == [
      'this checkpoint was saved before 2026-12-06, when pre-training read every epoch after '
      "the first in the first's shuffle order: if the run is past its first epoch, it reads its "
      'later epochs from example 192 in their own orders (as a new run does), not as the '
      'bertjax that saved it would have']


def test_another_attention_kernel_on_a_resume_is_said(tmp_path):
  """Pass helper-181: a run resumed with another model.attention_impl (xla ->
  dot_product_attention here; xla <-> cudnn on a GPU, whose attention dropout is not drawn from
  the run's key) went on without a word: the field was left out of the changes said."""
  config = _config()
  config.model.attention_impl = 'xla'
  (tmp_path / 'config.json').write_text(config.to_json())
  config.model.attention_impl = 'dot_product_attention'
  assert resume_checks.changed_fields(config, str(tmp_path), 3) == [
      "model.attention_impl 'xla' -> 'dot_product_attention'"]
  config.model.attention_impl = 'xla'
  assert resume_checks.changed_fields(config, str(tmp_path), 3) == []
  config.model.attention_impl = 'auto'  # Recorded before it settled: no kernel to compare.
  (tmp_path / 'config.json').write_text(config.to_json())
  config.model.attention_impl = 'xla'
  assert resume_checks.changed_fields(config, str(tmp_path), 3) == []

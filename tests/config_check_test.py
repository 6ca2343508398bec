"""Every config value checked before anything runs (bertjax/config_check.py), in
process: one ValueError line naming the field and the fix."""

import functools
import types

import config_fields
import pytest

from bertjax import config_args
from bertjax import config_check
from bertjax import config_check_jobs
from bertjax.finetune.tasks import user_data
from bertjax.finetune.tasks import user_tasks
from configs import embed as embed_config
from configs import finetune as finetune_config
from configs import pretrain as pretrain_config

configured = config_fields.configured


def test_every_shipped_config_passes():
  for size in pretrain_config.RECIPES:
    config_check.check(pretrain_config.get_config(f'size={size}'))
  config_check.check(pretrain_config.get_config('size=base,phase2_fraction=0.1'))
  config_check.check(pretrain_config.get_config('size=tiny,steps=6'))  # Warmup > steps: legal.
  for task in finetune_config.TASKS:
    config_check.check(finetune_config.get_config(f'task={task}'))
  config_check.check(embed_config.get_config())
  assert pretrain_config.get_config().data.dupe_factor == config_check.EMBEDDED_DUPE_FACTOR
  config_check.check(configured(pretrain_config.get_config('size=tiny'),
                                data__train_files='/d/train128-*'))


PRETRAIN = [
    ({'optimizer__learning_rate': -1e-3}, 'config.optimizer.learning_rate=-0.001: a negative '
     'learning rate climbs the loss'),
    ({'global_batch_size': 0}, 'config.global_batch_size=0: must be > 0; set '
     '--config.global_batch_size'),
    ({'global_batch_size': -8}, 'config.global_batch_size=-8: must be > 0'),
    ({'eval_batch_size': 0}, 'config.eval_batch_size=0: must be > 0'),
    ({'num_train_steps': 0}, 'config.num_train_steps=0: must be >= 1'),
    ({'grad_accum_steps': 0}, 'config.grad_accum_steps=0: must be >= 1'),
    ({'grad_accum_steps': 3}, 'config.grad_accum_steps=3: does not divide global_batch_size=64'),
    ({'log_every_steps': 0}, 'config.log_every_steps=0: must be >= 1'),
    ({'optimizer__warmup_steps': -1}, 'config.optimizer.warmup_steps=-1: must be >= 0'),
    ({'optimizer__weight_decay': -0.01}, 'config.optimizer.weight_decay=-0.01: must be >= 0'),
    ({'optimizer__b2': 1.0}, 'config.optimizer.b2=1.0: must be in [0, 1)'),
    ({'optimizer__eps': 0.0}, 'config.optimizer.eps=0.0: must be > 0'),
    ({'optimizer__name': 'sgd'}, "config.optimizer.name='sgd': is unknown; valid: adamw, lamb"),
    ({'optimizer__decay_from': 'peak'}, "config.optimizer.decay_from='peak': is unknown; valid: "
     'warmup_end, step_0'),
    ({'model__dropout_rate': 1.0}, 'config.model.dropout_rate=1.0: a dropout rate must be in '
     '[0, 1)'),
    ({'model__attention_dropout_rate': -0.1}, 'config.model.attention_dropout_rate=-0.1'),
    ({'model__num_heads': 3}, 'config.model.num_heads=3: does not divide model.hidden_size=128'),
    ({'model__scan_unroll': 0}, 'config.model.scan_unroll=0: must be > 0; set '
     '--config.model.scan_unroll to the scanned layers per trip'),
    ({'data__max_seq_length': 0}, 'config.data.max_seq_length=0: needs room for [CLS]'),
    ({'data__max_seq_length': 1024}, 'config.data.max_seq_length=1024: exceeds the position '
     'table (model.max_position_embeddings=512); set --config.data.max_seq_length to at most'),
    ({'data__max_predictions_per_seq': 0}, 'config.data.max_predictions_per_seq=0: must be > 0'),
    ({'data__masked_lm_prob': 0.0}, 'config.data.masked_lm_prob=0.0: must be in (0, 1)'),
    ({'data__shuffle_window': 0}, 'config.data.shuffle_window=0: must be >= 1'),
    ({'data__masking': 'spans'}, "config.data.masking='spans': is unknown; valid: wordpiece, "
     'whole_word, ngram, span'),
    ({'phase2__fraction': 1.5}, 'config.phase2.fraction=1.5: the share of the steps'),
    ({'checkpoint__every_steps': 0}, 'config.checkpoint.every_steps=0: must be > 0'),
    ({'checkpoint__keep': 0}, 'config.checkpoint.keep=0: must be >= 1'),
    ({'mesh__data': 0}, 'config.mesh.data=0: must be -1'),
    ({'mesh__data': 1, 'mesh__tensor': 0}, 'config.mesh.tensor=0: must be -1 (all devices the '
     'other axes leave) or >= 1; set --config.mesh.tensor=1 (off), a device count or -1'),
    # mesh.data is -1 (the default), or fsdp is: no second -1 offered.
    ({'mesh__tensor': 0}, 'config.mesh.tensor=0: must be -1 (all devices the other axes leave) '
     'or >= 1; set --config.mesh.tensor=1 (off) or a device count'),
    ({'mesh__data': 0, 'mesh__fsdp': -1}, 'config.mesh.data=0: must be -1 (all devices the other '
     'axes leave) or >= 1; set --config.mesh.data=1 (off) or a device count'),
    ({'mesh__fsdp': -1}, 'config.mesh.fsdp=-1: mesh.data is -1 too, and only one axis may take '
     'the devices the others leave; set --config.mesh.data=1 (or a device count) to give '
     'mesh.fsdp the rest'),
    ({'max_eval_batches': 0}, 'config.max_eval_batches=0: must be -1'),
    ({'eval_every_steps': -5}, 'config.eval_every_steps=-5: must be >= 0'),
    ({'peak_tflops': -1.0}, 'config.peak_tflops=-1.0: must be >= 0'),
    # Each of these passed the check and failed in the job (or later): inf on the first NaN
    # step, 'no' as a scanned model, an unknown kernel once JAX had started.
    ({'optimizer__learning_rate': float('inf')}, 'config.optimizer.learning_rate=inf: must be '
     'a finite number'),
    ({'model__scan_layers': 'no'}, "config.model.scan_layers='no': is unknown; valid: True, "
     'False, auto'),
    ({'model__attention_impl': 'bogus'}, "config.model.attention_impl='bogus': is unknown; "
     'valid: auto, xla,'),
    ({'model__remat_policy': 'some'}, "config.model.remat_policy='some': is unknown"),
    ({'job': 'finetune'}, "config.job='finetune': but the config is not a finetune config (it "
     'has no task field); load configs/finetune.py'),
    # Pass S: 2**32 + 5 initialised as 5 (PRNGKey folds it); 2**64 died in a traceback after the
    # data was made. Phase 2's files beside phase2.fraction=0 were read by no step.
    ({'seed': 2**32 + 5}, 'config.seed=4294967301: is past what a 32-bit integer holds'),
    ({'seed': -1}, 'config.seed=-1: must be in [0, 2**31); pass --config.seed=<0 .. 2147483647>'),
    # Hostile pass of 2026-12-01: 2**31 passed (the check said [0, 2**32)), then the input
    # pipeline refused it after the data was made; steps of 2**31 or more overflowed in the
    # first jitted step, with a traceback, after the data and the model were made.
    ({'seed': 2**31}, 'config.seed=2147483648: is past what a 32-bit integer holds (the steps, '
     'counts and seed reach compiled code as int32); pass --config.seed below 2**31'),
    ({'num_train_steps': 3_000_000_000}, 'config.num_train_steps=3000000000: is past what a '
     '32-bit integer holds'),
    ({'optimizer__warmup_steps': 2**31}, 'config.optimizer.warmup_steps=2147483648: is past'),
    ({'optimizer__total_steps': 2**40}, 'config.optimizer.total_steps=1099511627776: is past'),
    # The same pass: a traceback (NoneType is not iterable) after the data was made.
    ({'mesh__rules': ''}, "config.mesh.rules='': maps the logical axis batch to no mesh axis, so "
     'every device would compute every example; keep batch=data+fsdp in it'),
    ({'mesh__rules': 'vocab=tensor'}, "config.mesh.rules='vocab=tensor': maps the logical axis "
     'batch to no mesh axis'),
    ({'mesh__rules': 'batch=,vocab=tensor'}, "config.mesh.rules='batch=,vocab=tensor': maps"),
    # The same pass: both trained without a word.
    ({'model__type_vocab_size': 1}, 'config.model.type_vocab_size=1: gives no embedding to '
     "segment B, which every NSP instance's second sentence is"),
    ({'early_stopping_patience': 2, 'eval_every_steps': 0}, 'config.early_stopping_patience=2: '
     'counts evaluations, but eval_every_steps=0 evaluates once, at the end, so it could never '
     'stop the run; set --config.eval_every_steps to a step count'),
    # Hostile pass of helper-174: refused by the loop once JAX had started (exit 1, retried).
    ({'early_stopping_patience': 2, 'data__train_files': '/d/t-*'}, 'config.early_stopping_'
     'patience=2: counts evaluations, but data.eval_files is empty beside your own '
     'data.train_files: this run has no eval data; set --config.data.eval_files to TFRecords of '
     'held-out text (create_pretraining_data), or early_stopping_patience=0'),
    ({'phase2__train_files': '/d/train512-*'}, "config.phase2.train_files='/d/train512-*': is "
     'set but phase2.fraction=0: no step runs phase 2; pass phase2_fraction=0.1'),
    # Pass 33, item 6: ignored without a word beside one's own TFRecords.
    ({'data__train_files': '/d/train128-*', 'data__dupe_factor': 10}, 'config.data.dupe_factor=10:'
     ' is read for the embedded corpus only, and data.train_files names your own TFRecords '
     '(their passes were fixed when they were made); drop it, or make the files again with '
     'create_pretraining_data --dupe_factor=N.'),
    # Hostile pass H1: pack=9999 wrote 6 GB of rows that hold at most 25 instances each.
    ({'data__max_instances_per_row': 9999}, 'config.data.max_instances_per_row=9999: exceeds '
     'the 25 instances of 5 tokens ([CLS] A [SEP] B [SEP]) a row of data.max_seq_length=128 '
     'could hold; set it to 3 (MLPerf BERT packs 3) or less; 1 = unpacked'),
    ({'data__max_instances_per_row': 26}, 'config.data.max_instances_per_row=26: exceeds the 25'),
    # Beside the user's files, whose value it must be: not told to pick 3.
    ({'data__max_instances_per_row': 30, 'data__train_files': '/d/t-*', 'phase2__fraction': 0.0},
     "config.data.max_instances_per_row=30: exceeds the 25 instances of 5 tokens ([CLS] A [SEP] "
     "B [SEP]) a row of data.max_seq_length=128 could hold; set it to the files' value, which "
     'can be at most 25 (files made with more: make them again with fewer)'),
    ({'data__max_instances_per_row': 43, 'model__nsp': False}, 'config.data.max_instances_per_row'
     '=43: exceeds the 42 instances of 3 tokens ([CLS] A [SEP]) a row'),
    # Pre-training options combined (helper-184): phase 2 packs as phase 1, and a phase 2 shorter
    # than the packed rows was accepted, then refused by create_pretraining_data once phase 1's
    # corpus was made, naming its own flags (max_instances_per_row=3 ... pass 1).
    ({'data__max_instances_per_row': 3, 'phase2__fraction': 0.1, 'phase2__max_seq_length': 9,
      'phase2__max_predictions_per_seq': 1},
     'config.data.max_instances_per_row=3: exceeds the 1 instances of 5 tokens ([CLS] A [SEP] B '
     '[SEP]) a row of phase2.max_seq_length=9 could hold (phase 2 reads rows packed as phase 1); '
     'set --config.phase2.max_seq_length to 15 or more, or data.max_instances_per_row to 1 or '
     'less'),
    # Hostile pass H4: parse_rules refused it once JAX had started (exit 1).
    ({'mesh__rules': 'batch=data+fsdp,vocab=tensr'}, "config.mesh.rules='batch=data+fsdp,vocab="
     "tensr': has an entry 'vocab=tensr' that is not logical_name=mesh_axis[+mesh_axis] over "
     'the mesh axes data, fsdp, tensor (empty = replicated); e.g. batch=data+fsdp,vocab=tensor'),
    ({'mesh__rules': 'batch=data,vocab'}, "config.mesh.rules='batch=data,vocab': has an entry "
     "'vocab' that is not"),
    # Read as training/sharding reads them (config_check's own parse stripped differently, and
    # `batch =data` passed it, then trained replicated; a name twice kept the first, unseen).
    ({'mesh__rules': 'batch=data,batch='}, "config.mesh.rules='batch=data,batch=': has an entry "
     "'batch=' that names batch a second time (the first would be applied); keep one entry"),
    ({'mesh__rules': 'batch=data+data'}, "config.mesh.rules='batch=data+data': has an entry "
     "'batch=data+data' that names a mesh axis twice (a dimension is split over an axis once); "
     'name each axis once'),
    ({'mesh__rules': 'batch=data,emebd=fsdp'}, "config.mesh.rules='batch=data,emebd=fsdp': has "
     "an entry 'emebd=fsdp' that names emebd, which nothing in the model carries (its logical "
     'names: batch, length, activation_embed, vocab, embed, heads, kv, mlp, layers), so it '
     'would shard nothing; did you mean embed?'),
    ({'checkpoint__best_metric': 'mlm_acc'}, "config.checkpoint.best_metric='mlm_acc': is not an "
     "eval metric of pre-training; valid: mlm_accuracy, mlm_loss, nsp_accuracy, nsp_loss ('' = "
     'mlm_accuracy)'),
    ({'checkpoint__best_metric': 'nsp_loss', 'model__nsp': False}, "config.checkpoint.best_metric"
     "='nsp_loss': is not an eval metric of pre-training; valid: mlm_accuracy, mlm_loss ("),
]


@pytest.mark.parametrize('fields, message', PRETRAIN)
def test_a_bad_pretraining_value_is_one_line_naming_field_and_fix(fields, message):
  with pytest.raises(ValueError) as e:
    config_check.check(configured(pretrain_config.get_config('size=tiny'), **fields))
  assert str(e.value).startswith(message), str(e.value)
  assert '\n' not in str(e.value) and '; ' in str(e.value)


def test_a_path_of_blanks_or_commas_is_refused_as_no_path():
  """' ' or ',' was no path to the launchers (skipped) and to absolute_config, yet a path to the
  checks before it (data.eval_files=' ' was 'set' beside no train_files)."""
  for config, name, value in (
      (pretrain_config.get_config('size=tiny'), 'data__eval_files', ' '),
      (pretrain_config.get_config('size=tiny'), 'data__train_files', ' , '),
      (finetune_config.get_config('task=sst2,size=tiny'), 'init_from', ','),
      (embed_config.get_config(''), 'init_from', ' ')):
    field = name.replace('__', '.')
    with pytest.raises(ValueError, match=rf"^config.{field}='{value}': holds only blanks or "
                       rf"commas, no path; give the path, or set --config.{field}='' \(or leave "
                       r"it out\) for none[.]$"):
      config_check.check(configured(config, **{name: value}))
  # A fix line that asks ends with its question mark alone.
  with pytest.raises(ValueError, match=r'; did you mean embed[?]$'):
    config_check.check(configured(pretrain_config.get_config('size=tiny'),
                                  mesh__rules='batch=data,emebd=fsdp'))


def test_mesh_rules_with_blanks_pass_as_sharding_reads_them():
  config_check.check(configured(pretrain_config.get_config('size=tiny'),
                                mesh__rules='vocab=tensor, batch = data + fsdp '))


def test_any_one_mesh_axis_may_take_the_devices_the_others_leave():
  """-1 on fsdp or tensor (the README's and aot_compile's advice) was refused as < 1, though
  sharding.mesh_shape fills any one axis."""
  for fields in ({'mesh__data': 1, 'mesh__fsdp': -1}, {'mesh__data': 2, 'mesh__tensor': -1}):
    config_check.check(configured(pretrain_config.get_config('size=tiny'), **fields))


def test_more_scanned_layers_per_trip_than_layers_is_refused_and_unscanned_ones_ignore_it():
  config = configured(pretrain_config.get_config('size=tiny'), model__scan_unroll=3)
  config_check.check(config)  # 'auto': a tiny model's layers are unrolled on every platform.
  with config.ignore_type():
    config.model.scan_layers = True
  with pytest.raises(ValueError, match=r'^config.model.scan_unroll=3: exceeds model.num_layers=2; '
                     r'set --config.model.scan_unroll to 2 or fewer scanned layers per trip.$'):
    config_check.check(config)


FINETUNE = [
    # Refused by the loop (training/ranking.py) only once the data was read and compiled.
    ({'checkpoint__best_mode': 'min'}, "config.checkpoint.best_mode='min': with best_metric='': "
     "task mrpc's main metric, a score, is better higher, so the run would keep (and early-stop "
     "on) its worst eval; set it to 'max', or leave it '' (each metric's own way), or name a "
     'loss-like best_metric (e.g. loss).'),
    # A data key the task never reads: the job refused it once JAX had started (a launcher had
    # booked the slice), and not at all where the workdir held a run (eval, predict, a resume).
    ({'data__label_field': 'topic'}, "config.data.label_field='topic' is not read by task=mrpc, "
     'which would ignore it; the tasks that read it: classification, regression. Drop it, or '
     'pick the task that reads it (task=mrpc reads its published files from '
     'config.data.data_dir).'),
    ({'data__test_file': 'mine.tsv'}, "config.data.test_file='mine.tsv' is not read by task=mrpc, "
     'which would ignore it: to predict on your file, pass --config.data.predict_file=mine.tsv '
     '(task=mrpc reads it in mode=predict; its test split otherwise).'),
    ({'mode': 'eval', 'data__label_field': 'topic'}, "config.data.label_field='topic' is not "
     'read by task=mrpc, which would ignore it; the tasks that read it: classification, '
     "regression. Drop it (mode=eval keeps the run's task)."),
    ({'num_epochs': -1.0}, 'config.num_epochs=-1.0: must be > 0 when num_train_steps is 0'),
    ({'num_epochs': 0.0}, 'config.num_epochs=0.0: must be > 0'),
    ({'num_train_steps': -1}, 'config.num_train_steps=-1: must be >= 0'),
    ({'optimizer__warmup_proportion': 5.0}, 'config.optimizer.warmup_proportion=5.0: the share '
     'of the steps spent warming up must be in [0, 1]'),
    ({'optimizer__learning_rate': -2e-5}, 'config.optimizer.learning_rate=-2e-05'),
    ({'optimizer__layer_decay': 0.0}, 'config.optimizer.layer_decay=0.0: the per-layer '
     'learning-rate factor must be in (0, 1]; set --config.optimizer.layer_decay=1.0 (off)'),
    ({'optimizer__layer_decay': 1.25}, 'config.optimizer.layer_decay=1.25: the per-layer'),
    ({'global_batch_size': 0}, 'config.global_batch_size=0: must be > 0'),
    ({'eval_batch_size': -1}, 'config.eval_batch_size=-1: must be > 0'),
    ({'mode': 'train'}, "config.mode='train': is unknown; valid: train_eval, eval, predict"),
    ({'pooling': 'max'}, "config.pooling='max': is unknown"),
    ({'data__eval_fraction': 1.0}, 'config.data.eval_fraction=1.0: the share of a train_file '
     'held out for eval must be in (0, 1)'),
    ({'data__doc_stride': 0}, 'config.data.doc_stride=0: must be >= 1'),
    ({'num_epochs': float('inf')}, 'config.num_epochs=inf: must be a finite number'),
    ({'job': 'pretrain'}, "config.job='pretrain': but the config is not a pretrain config"),
    # Windows further apart than a window is long would never read the pieces between them.
    ({'data__max_windows': 4}, 'config.data.doc_stride=128: exceeds the 126 pieces a window '
     'holds at data.max_seq_length=128, so the pieces between windows would never be read; set '
     '--config.data.doc_stride=126 (windows back to back) or less'),
    ({'data__pad_to_multiple_of': -32}, 'config.data.pad_to_multiple_of=-32: must be >= 0'),
    ({'data__max_train_examples': 0}, 'config.data.max_train_examples=0: must be -1'),
    ({'model__dropout_rate': 1.5}, 'config.model.dropout_rate=1.5'),
    ({'data__eval_fraction': 0.0}, 'config.data.eval_fraction=0.0: the share of a train_file '
     'held out for eval must be in (0, 1); set --config.data.eval_fraction'),
    ({'export_format': 'hff'}, "config.export_format='hff': 'hff' is not an export format (did "
     "you mean hf?); valid: hf, tf1, saved_model"),
    ({'export_format': 'HF'}, "config.export_format='HF': 'HF' is not an export format (did you "
     'mean hf?)'),
    ({'export_format': 'hf,transformers'}, "config.export_format='hf,transformers': "
     "'transformers' is not an export format (did you mean hf?)"),
    ({'export_format': 'saved_model,torchscript'}, "config.export_format='saved_model,torchscript'"
     ": 'torchscript' is not an export format; valid: hf,"),
    # Hostile pass H2: MRPC at 3 tokens trained on [CLS] [SEP] [SEP] alone, exit 0.
    ({'data__max_seq_length': 4}, 'config.data.max_seq_length=4: leaves no token of a pair: task '
     'mrpc reads text pairs, and a row needs [CLS] A [SEP] B [SEP] (it trained on [CLS] [SEP] '
     '[SEP] alone); set --config.data.max_seq_length to 5 or more'),
    # Hostile pass H4: each refused once the job had started (exit 1).
    ({'data__tag_scheme': 'iob3'}, "config.data.tag_scheme='iob3': is unknown; valid: auto, "
     'plain, iob1, iob2, iob, bio, iobes, ioes, bioes, bilou'),
]


def test_a_schedule_that_wastes_the_run_is_warned_about(caplog, monkeypatch):
  """Pass S: learning rate 0, a decay ending before the run (steps 5-12 at rate 0, logged as
  -5.96e-11) and a fine-tuning warmup longer than its steps passed without a word."""
  from bertjax import console  # pylint: disable=g-import-not-at-top
  from bertjax.finetune import job_setup  # pylint: disable=g-import-not-at-top
  from bertjax.training import optimizer  # pylint: disable=g-import-not-at-top
  del monkeypatch
  console.forget_warnings()  # Said once per job: whatever this process's jobs said before.
  config = configured(pretrain_config.get_config('size=tiny,steps=12'),
                      optimizer__learning_rate=0.0, optimizer__total_steps=4,
                      optimizer__warmup_steps=2)  # Its 60 would still be warming up at 12.
  config_check.check(config)
  optimizer.resolve_total_steps(config)
  config = configured(finetune_config.get_config('task=mrpc'), optimizer__warmup_steps=1000)
  job_setup.set_steps(config, 20)
  warned = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert any(m.startswith('config.optimizer.learning_rate=0: the parameters never change')
             for m in warned), warned
  assert ("config.optimizer.total_steps=4 ends the schedule before the run's 12 steps: steps 5 "
          'to 12 train at optimizer.end_learning_rate=0; set --config.optimizer.total_steps to '
          '0 (the run\'s steps) or 12 or more') in warned, warned
  assert any(m.startswith('config.optimizer.warmup_steps=1000 is longer than the 20 steps of '
                          'the schedule') for m in warned), warned


def test_a_lamb_setting_given_to_adamw_is_warned_about(caplog):
  from bertjax import console  # pylint: disable=g-import-not-at-top
  console.forget_warnings()
  config_check.check(configured(finetune_config.get_config('task=mrpc'),
                                optimizer__name='lamb', optimizer__trust_ratio_everywhere=False))
  assert not [r for r in caplog.records if r.levelname == 'WARNING']
  config_check.check(configured(finetune_config.get_config('task=mrpc'),
                                optimizer__trust_ratio_everywhere=False))
  assert [r.getMessage() for r in caplog.records if r.levelname == 'WARNING'] == [
      'config.optimizer.trust_ratio_everywhere=false is read by LAMB only: AdamW has no trust '
      'ratio (set --config.optimizer.name=lamb, or leave it)']


@pytest.mark.parametrize('fields, message', FINETUNE)
def test_a_bad_finetuning_value_is_one_line_naming_field_and_fix(fields, message):
  with pytest.raises(ValueError) as e:
    config_check.check(configured(finetune_config.get_config('task=mrpc'), **fields))
  assert str(e.value).startswith(message), str(e.value)


def test_the_model_choices_named_without_jax_are_the_models():
  from bertjax.model import attention  # pylint: disable=g-import-not-at-top
  from bertjax.model import encoder_config  # pylint: disable=g-import-not-at-top
  from bertjax.model import kernels  # pylint: disable=g-import-not-at-top
  assert config_check.ATTENTION_IMPLS == ('auto', *attention.IMPLEMENTATIONS)
  assert config_check.ACTIVATIONS == tuple(kernels.ACTIVATIONS)
  assert config_check.REMAT_POLICIES == ('none', *encoder_config.REMAT_POLICIES)


def test_bbc_windows_follow_a_shorter_length_only_when_their_stride_does():
  config = configured(finetune_config.get_config('task=bbc'), data__max_seq_length=64)
  with pytest.raises(ValueError, match=r'^config.data.doc_stride=126: exceeds the 62 pieces'):
    config_check.check(config)
  config_check.check(finetune_config.get_config('task=bbc,seq=64'))  # Derived from seq.


def test_finetuning_by_steps_ignores_the_epochs_and_embed_checks_its_own_fields():
  config_check.check(configured(finetune_config.get_config('task=mrpc'), num_epochs=0.0,
                                num_train_steps=10))
  # Export formats: a comma list, spaces and empty items allowed ('' = none asked).
  config_check.check(configured(finetune_config.get_config('task=mrpc'),
                                export_format=' hf, saved_model,,'))
  assert config_check.export_formats(' hf, saved_model,,') == ['hf', 'saved_model']
  with pytest.raises(ValueError, match=r'^config.batch_size=0: must be > 0'):
    config_check.check(configured(embed_config.get_config(), batch_size=0))


@pytest.mark.parametrize('arg, fields, message', [
    ('task=sst2', {'data__max_seq_length': 3}, None),  # One text: [CLS] A [SEP].
    ('task=classification', {'data__max_seq_length': 4}, None),
    ('task=classification', {'data__max_seq_length': 4, 'data__text_fields': 'a,b'},
     'config.data.max_seq_length=4: leaves no token of a pair: task classification'),
    ('task=squad_v1', {'data__max_seq_length': 4}, 'config.data.max_seq_length=4: leaves no'),
    ('task=classification', {'data__text_fields': ''}, "config.data.text_fields='': names 0 "
     'fields; name one field (single texts) or two, comma-separated (sentence pairs)'),
    ('task=classification', {'data__text_fields': 'a, b,c'}, "config.data.text_fields='a, b,c': "
     'names 3 fields'),
    ('task=classification', {'data__format': 'xlsx'}, "config.data.format='xlsx': is not a "
     "format task classification reads; valid: csv, tsv, jsonl, or '' (the file's extension)"),
    ('task=tagging', {'data__format': 'csv'}, "config.data.format='csv': is not a format task "
     'tagging reads; valid: conll, jsonl, tsv'),
    ('task=tagging', {'data__format': 'conll'}, None),
    ('task=swag', {'data__format': 'jsonl'}, "config.data.format='jsonl': is not a format task "
     'swag reads; valid: csv, tsv'),
    ('task=multiple_choice', {'data__format': 'csv'}, "config.data.format='csv': is not a "
     'format task multiple_choice reads; valid: jsonl'),
    ('task=swag', {'data__format': 'tsv'}, None),
    # Read by no reader of these tasks: refused with the config, not once the job has started.
    ('task=sst2', {'data__format': 'csv'}, "config.data.format='csv': is not read by task sst2, "
     "whose files have one format (a preset task's published files; span's SQuAD JSON); drop "
     "it (or set it to '')"),
    ('task=span', {'data__format': 'jsonl'}, "config.data.format='jsonl': is not read by task "
     'span'),
    ('task=squad_v1', {'data__max_instances_per_row': 2}, 'config.data.max_instances_per_row=2: '
     'packs examples, which a span task (squad_v1) cannot (classification, regression and '
     'tagging can); set it to 1'),
    ('task=swag', {'data__max_instances_per_row': 3}, 'config.data.max_instances_per_row=3: '
     'packs examples, which a multiple_choice task (swag) cannot'),
    ('task=conll2003', {'data__max_instances_per_row': 3}, None),
])
def test_a_tasks_own_fields_are_checked_with_the_config(arg, fields, message):
  """Hostile passes H2 and H4: each was refused once the job had started JAX or read its data
  (exit 1, a slice booked for it), or trained on nothing (a pair at 3 tokens)."""
  config = configured(finetune_config.get_config(arg), **fields)
  if message is None:
    config_check.check(config)
    return
  with pytest.raises(ValueError) as e:
    config_check.check(config)
  assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize('sentences, message', [
    ((), 'config.sentences=(): holds no sentence, and no config.input_file is set; quote each '
     'sentence, e.g. --config.sentences="(\'The first.\', \'The second.\')", or set '
     '--config.input_file=FILE'),
    (None, 'config.sentences=None: holds no sentence'),
    (('One.', 2), 'config.sentences[1]=2: is not text; quote each sentence'),
    (('',), "config.sentences[0]='': is empty (its vector would be [CLS] [SEP] alone)"),
    (('One.', ' '), "config.sentences[1]=' ': is empty"),
])
def test_embeds_sentences_are_checked_with_the_config(sentences, message):
  config = embed_config.get_config()
  with config.ignore_type():
    config.sentences = sentences
  with pytest.raises(ValueError) as e:
    config_check.check(config)
  assert str(e.value).startswith(message), str(e.value)
  config.input_file = 'in.txt'  # Read instead: sentences beside it were ignored without a word.
  if sentences:
    with pytest.raises(ValueError, match=r'^config.sentences=.*: is set beside '
                       'config.input_file=in.txt, which is read instead; drop one of them'):
      config_check.check(config)
  else:
    config_check.check(config)
  with config.ignore_type():
    config.sentences = embed_config.get_config().sentences  # The examples: the default.
  config_check.check(config)


def test_the_task_choices_named_without_jax_are_the_tasks(tmp_path):
  from bertjax.finetune.tasks import data_reads  # pylint: disable=g-import-not-at-top
  from bertjax.finetune.tasks import registry  # pylint: disable=g-import-not-at-top
  from bertjax.finetune.tasks import user_formats  # pylint: disable=g-import-not-at-top
  from bertjax.training import kinds  # pylint: disable=g-import-not-at-top
  assert set(config_check_jobs.UNPACKABLE) <= set(registry.NAMES)
  assert set(config_check_jobs.UNPACKABLE.values()) == {
      name for name, kind in kinds.KINDS.items() if kind.task and not kind.packable}
  assert config_check_jobs.TEXT_FORMATS == user_formats.FORMATS
  # FORMATS: the tasks that read data.format, each with the formats its reader takes.
  assert set(config_check_jobs.FORMATS) == {
      name for name, keys in data_reads.READS.items() if 'format' in keys}
  path = tmp_path / 'rows.unknown'
  path.write_text('a line\n')
  texts = functools.partial(user_data.read_texts, fields=['text'], label_field='label')
  readers = {'classification': texts, 'regression': texts, 'tagging': user_data.read_tagged,
             'multiple_choice': user_data.read_choices, 'swag': user_data.read_swag}
  for task, reader in readers.items():
    taken = set()
    for fmt in ('csv', 'tsv', 'jsonl', 'conll', 'json'):
      try:
        reader(str(path), fmt=fmt)
        taken.add(fmt)
      except ValueError as e:  # Taken, then its content refused; or the format refused.
        if f'config.data.format={fmt!r} cannot read' not in str(e):
          taken.add(fmt)
    assert taken == set(config_check_jobs.FORMATS[task]), task
  for scheme in config_check_jobs.TAG_SCHEMES:  # Each one user_tasks reads.
    user_tasks.tag_scheme(types.SimpleNamespace(tag_scheme=scheme), ['O', 'B-X'])
  with pytest.raises(ValueError, match='is unknown'):
    user_tasks.tag_scheme(types.SimpleNamespace(tag_scheme='iob3'), ['O', 'B-X'])


def test_a_value_of_the_wrong_type_is_named():
  # A ConfigDict refuses it when set; a config read back from a run's config.json does not.
  config = pretrain_config.get_config('size=tiny').to_dict()
  config['global_batch_size'] = '8'
  with pytest.raises(ValueError, match=r"^config.global_batch_size='8': must be a whole number"):
    config_check.check(config)
  config['global_batch_size'], config['optimizer']['weight_decay'] = 8, True
  with pytest.raises(ValueError, match=r'^config.optimizer.weight_decay=True: must be a number'):
    config_check.check(config)


def test_the_jobs_check_before_reading_data_or_compiling(tmp_path):
  # Called by the library entries too (notebooks), before the workdir is even made.
  from bertjax import pretrain  # pylint: disable=g-import-not-at-top
  from bertjax.finetune import job  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match='config.num_epochs=-1.0'):
    job.train_and_evaluate(configured(finetune_config.get_config('task=mrpc'), num_epochs=-1.0),
                           str(tmp_path / 'f'))
  with pytest.raises(ValueError, match='config.global_batch_size=0'):
    job.run_predict(configured(finetune_config.get_config('task=mrpc'), mode='eval',
                               global_batch_size=0), str(tmp_path / 'f'))
  with pytest.raises(ValueError, match='config.optimizer.learning_rate=-0.001'):
    pretrain.train_and_evaluate(configured(pretrain_config.get_config('size=tiny'),
                                           optimizer__learning_rate=-1e-3), str(tmp_path / 'p'))
  assert not (tmp_path / 'f').exists() and not (tmp_path / 'p').exists()


@pytest.mark.parametrize('overrides, predictions', [
    ([], 40),
    (['--config.data.max_predictions_per_seq=5'], 10),  # Follows phase 1's, scaled.
    (['--config.data.max_predictions_per_seq=5', '--config.phase2.max_predictions_per_seq=12'],
     12),  # Set itself: kept.
    # The lengths set by their fields, not the argument's: 40 at 64 of 20 at 32 (it was scaled
    # by the argument's seq, 80 here; the paper's 20/128 -> 80/512 kept).
    (['--config.data.max_seq_length=64', '--config.phase2.max_seq_length=128'], 40),
    (['--config.data.max_seq_length=128', '--config.data.max_predictions_per_seq=20',
      '--config.phase2.max_seq_length=512'], 80),
])
def test_phase2_predictions_follow_the_command_line(overrides, predictions):
  # As bertjax.main's --config flag parses them (sys_argv), the config then checked.
  config = config_args.check_args(
      [f'--config={pretrain_config.__file__}:size=tiny,seq=32,phase2_seq=64', *overrides])
  assert config.phase2.max_predictions_per_seq == predictions


def test_a_masking_rate_a_phase_cannot_hold_is_refused_naming_the_phase():
  """Dynamic masking was refused as the pipeline was built, and the embedded corpus's phase 2
  as its corpus was made (after phase 1's), saying `max_predictions_per_seq=3` of no field."""
  def check(*overrides):
    config_check.check(config_args.check_args(
        [f'--config={pretrain_config.__file__}:size=tiny,seq=32,phase2_seq=64,'
         'phase2_fraction=0.25', *overrides]))
  check('--config.data.max_predictions_per_seq=5')  # 5 of 30 (dynamic), 10 of 61 (embedded).
  with pytest.raises(ValueError, match=r"^config.phase2.max_predictions_per_seq=8: caps the 9 "
                     r"tokens data.masked_lm_prob=0.15 masks of a full row's 61 at "
                     r'phase2.max_seq_length=64; set --config.phase2.max_predictions_per_seq to 9 '
                     r'or more'):
    check('--config.data.max_predictions_per_seq=5', '--config.phase2.max_predictions_per_seq=8')
  with pytest.raises(ValueError, match=r"^config.data.max_predictions_per_seq=5: caps the 9 "
                     r"tokens data.masked_lm_prob=0.3 masks of a full row's 30 at "):
    check('--config.data.max_predictions_per_seq=5', '--config.data.dynamic_masking=True',
          '--config.data.masked_lm_prob=0.3')
  # The user's own static files: their reports decide, not this rule.
  check('--config.data.max_predictions_per_seq=5', '--config.phase2.max_predictions_per_seq=8',
        '--config.data.train_files=/d/t32-*', '--config.phase2.train_files=/d/t64-*')


def test_a_warning_is_said_once_per_job_and_again_by_the_next(caplog):
  """Notebook pass (session 34), 7: said once per process (absl's log_first_n), a second run in
  a notebook with the same mistake heard nothing; checked twice in one job (bertjax.main, then
  the job), it is said once."""
  from bertjax import console  # pylint: disable=g-import-not-at-top
  config = configured(pretrain_config.get_config('size=tiny,steps=12'),
                      optimizer__learning_rate=0.0)
  console.forget_warnings()
  for _ in range(2):  # One job: main's check, then the job's.
    config_check.check(config)
  console.forget_warnings()  # The job's end.
  config_check.check(config)  # The next job.
  said = [r.getMessage() for r in caplog.records
          if r.getMessage().startswith('config.optimizer.learning_rate=0')]
  assert len(said) == 2, said


def test_a_whole_number_written_as_a_float_is_refused_before_the_run():
  """Notebook pass (session 34), 11: global_batch_size=16.0 (set from Python, past the
  ConfigDict's types) passed, then failed in tf.data after config.json and the corpus were
  written; seed=0.0 in the PRNG; dupe_factor=1.0 in corpus creation."""
  for field, value in (('global_batch_size', 16.0), ('seed', 0.0), ('data.dupe_factor', 1.0),
                       ('data.max_seq_length', 128.0)):
    config = pretrain_config.get_config('size=tiny')
    *parents, leaf = field.split('.')
    node = config
    for parent in parents:
      node = node[parent]
    with node.ignore_type():
      node[leaf] = value
    with pytest.raises(ValueError, match=rf'^config.{field}={value}: must be a whole number, '
                       rf'written as one; pass {int(value)}.$'):
      config_check.check(config)

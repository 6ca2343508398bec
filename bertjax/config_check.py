"""Every value of a job's config checked before anything runs: ranges, signs and types.

`check(config)` raises ValueError with one line, `config.<field>=<value>: <why>; <fix>`, for the
first field that cannot work. bertjax.main calls it before it starts JAX, the jobs
(pretrain.train_and_evaluate, finetune.job) before they read data or compile, and the launchers
on the machine that books the slice. Pure Python: no JAX, no data, no files read.

Checks that need the mesh, the vocab file or init_from's shape (divisibility by the mesh, the
vocab's size, a checkpoint's position table) stay in training/train_state.check_config.
"""

import numbers

from bertjax import config_check_jobs
from bertjax import config_checker
from bertjax import console
from bertjax import format_names
from bertjax import mesh_rules
from bertjax import metric_direction
from bertjax import paths
from bertjax.pretraining_data import masking

JOBS = ('pretrain', 'finetune', 'embed')
MODES = ('train_eval', 'eval', 'predict')
OPTIMIZERS = ('adamw', 'lamb')
# optimizer.decay_from: from the warmup's peak (transformers'), or google-research/bert's.
DECAY_FROM = ('warmup_end', 'step_0')
DTYPES = ('float32', 'bfloat16')
POOLINGS = ('auto', 'cls', 'mean')
MASKING_STRATEGIES = masking.STRATEGIES  # wordpiece, whole_word, ngram, span
EMBEDDED_DUPE_FACTOR = 5  # configs/pretrain.py's data.dupe_factor.
# [CLS], at least one token and [SEP].
MIN_SEQ_LENGTH = 3
# The model's choices, named here without importing the model (JAX): model/encoder_config's
# check_config holds the same lists (config_check_test keeps them equal).
ATTENTION_IMPLS = ('auto', 'xla', 'dot_product_attention', 'cudnn', 'splash')
ACTIVATIONS = ('gelu', 'gelu_rational', 'gelu_tanh', 'relu')
REMAT_POLICIES = ('none', 'full', 'dots')
MESH_AXES = mesh_rules.MESH_AXES

_MISSING = config_checker.MISSING
_Checker = config_checker.Checker


def check(config) -> None:
  """Raises ValueError (one line naming the field and the fix) for the first bad value."""
  c = _Checker(config)
  job = c.get('job')
  if job is not _MISSING and job not in JOBS:
    c.fail('job', job, 'is unknown', f'valid: {", ".join(JOBS)}')
  # A job set on another job's config (--config.job=finetune on configs/pretrain.py) would
  # fail deep in the job, on the first field its own config has and this one lacks.
  for other, marker, config_file in (('finetune', 'task', 'finetune'),
                                     ('pretrain', 'phase2', 'pretrain'),
                                     ('embed', 'sentences', 'embed')):
    if job == other and c.get(marker) is _MISSING:
      c.fail('job', job, f'but the config is not {"an" if other == "embed" else "a"} {other} '
             f'config (it has no {marker} field)',
             f'load configs/{config_file}.py (or a copy of it) instead of setting config.job')
  for name, value in paths.path_fields(config):
    if not paths.split_list(value):  # Blanks or commas: none to the launchers, set to a job.
      c.fail(name, value, 'holds only blanks or commas, no path',
             f"give the path, or set --config.{name}='' (or leave it out) for none")
  _check_init_from_step(c)
  if job == 'embed':
    _check_embed(c)
    return
  _check_model(c)
  impl, rate = c.get('model.attention_impl'), c.get('model.attention_dropout_rate')
  if (impl in ('splash', 'dot_product_attention') and rate is not _MISSING and rate > 0
      and c.get('mode') in (_MISSING, 'train_eval')):  # Else refused once traced, data read.
    c.fail('model.attention_impl', impl, f'has no attention-probability dropout, and '
           f'model.attention_dropout_rate={rate} trains with it', 'set '
           '--config.model.attention_dropout_rate=0, or attention_impl=auto (xla or cudnn)')
  _check_training(c, job)
  _check_optimizer(c, job)
  _check_mesh_and_checkpoint(c)
  _check_data(c, job)
  _check_export_format(c)
  if job == 'finetune':
    _check_best_metric(c)


def _check_init_from_step(c: _Checker):
  step = c.get('init_from_step')
  if step is _MISSING or step == 'latest':
    return
  if step != 'best' and not (isinstance(step, str) and step.isascii() and step.isdigit()):
    c.fail('init_from_step', step, 'is no checkpoint step',
           "pass latest, best or a step number (one of init_from's checkpoints/<step> folders)")
  if not c.get('init_from'):
    c.fail('init_from_step', step, 'names a checkpoint of init_from, which is empty',
           'set init_from=<a bertjax run> too, or drop init_from_step')


def _check_embed(c: _Checker):
  c.choice('dtype', DTYPES)
  if c.get('max_seq_length') != 0:  # 0: the model's own length (MiniLM's 256).
    c.at_least('max_seq_length', MIN_SEQ_LENGTH, fix='set --config.max_seq_length to 3 or more, '
               'or 0 for the model\'s own length', why='needs room for [CLS], a token and [SEP]')
  c.positive('batch_size', fix='set --config.batch_size to the sentences per forward pass, '
             'e.g. 32')
  config_check_jobs.check_embed(c)


def _check_model(c: _Checker):
  for name in ('vocab_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim',
               'max_position_embeddings', 'type_vocab_size'):
    c.positive(f'model.{name}')
  types = c.get('model.type_vocab_size')
  if c.get('job') == 'pretrain' and c.get('model.nsp') is True and types == 1:
    c.fail('model.type_vocab_size', types, 'gives no embedding to segment B, which every NSP '
           "instance's second sentence is (its lookup would read segment A's row)", 'set '
           '--config.model.type_vocab_size=2, or model.nsp=false for MLM-only instances')
  hidden, heads = c.get('model.hidden_size'), c.get('model.num_heads')
  if hidden is not _MISSING and heads is not _MISSING and hidden % heads:
    c.fail('model.num_heads', heads, f'does not divide model.hidden_size={hidden}',
           'pick a head count that divides it')
  for name in ('dropout_rate', 'attention_dropout_rate'):
    c.fraction(f'model.{name}', closed_high=False, why='a dropout rate must be in [0, 1)',
               fix=f'set --config.model.{name} to e.g. 0.1 (0 = off)')
  c.positive('model.layer_norm_eps', integer=False, fix='set --config.model.layer_norm_eps to '
             'e.g. 1e-12 (BERT)')
  c.positive('model.initializer_range', integer=False, fix='set '
             '--config.model.initializer_range to e.g. 0.02 (BERT)')
  c.choice('model.dtype', DTYPES)
  c.choice('model.attention_impl', ATTENTION_IMPLS)
  c.choice('model.hidden_act', ACTIVATIONS)
  c.choice('model.remat_policy', REMAT_POLICIES)
  scan = c.get('model.scan_layers')
  if scan is not _MISSING and not isinstance(scan, bool) and scan != 'auto':
    # A word such as 'no' would be True to Python: refused before anything reads it.
    c.fail('model.scan_layers', scan, 'is unknown', 'valid: True, False, auto')
  unroll = c.positive('model.scan_unroll', fix='set --config.model.scan_unroll to the scanned '
                      'layers per trip of the layer loop, e.g. 1')
  layers = c.get('model.num_layers')
  if (unroll is not _MISSING and layers is not _MISSING and unroll > layers
      and c.get('model.scan_layers') is True):
    c.fail('model.scan_unroll', unroll, f'exceeds model.num_layers={layers}',
           f'set --config.model.scan_unroll to {layers} or fewer scanned layers per trip')


def _check_training(c: _Checker, job):
  seed = c.number('seed', integer=True)
  if seed is not _MISSING and not 0 <= seed:  # The input pipeline's seed is an int32.
    c.fail('seed', seed, 'must be in [0, 2**31)', 'pass --config.seed=<0 .. 2147483647>')
  c.choice('mode', MODES)
  c.choice('pooling', POOLINGS)
  batch = c.positive('global_batch_size', fix='set --config.global_batch_size to the sequences '
                     'per update over all hosts, e.g. 32')
  accum = c.at_least('grad_accum_steps', 1, fix='set --config.grad_accum_steps=1 (no '
                     'accumulation) or more')
  if batch is not _MISSING and accum is not _MISSING and batch % accum:
    c.fail('grad_accum_steps', accum, f'does not divide global_batch_size={batch}',
           'pick a number of micro-batches that divides the batch')
  c.positive('eval_batch_size', fix='set --config.eval_batch_size to the sequences per eval '
             'batch over all hosts, e.g. 64')
  if job == 'pretrain':
    c.at_least('num_train_steps', 1, fix='set --config.num_train_steps to the optimizer updates '
               'to run (1 or more)')
  else:
    steps = c.at_least('num_train_steps', 0, fix='set --config.num_train_steps to the optimizer '
                       'updates to run, or 0 to run config.num_epochs')
    epochs = c.number('num_epochs', integer=False)
    if steps == 0 and epochs is not _MISSING and not epochs > 0:
      c.fail('num_epochs', epochs, 'must be > 0 when num_train_steps is 0 (the default)',
             'set --config.num_epochs to the passes over the training data, e.g. 3, or '
             '--config.num_train_steps to a step count')
  c.at_least('eval_every_steps', 0, fix='set --config.eval_every_steps to a step count, or 0 '
             '(an eval ' + ('at each epoch' if job == 'finetune' else 'at the end only') + ')')
  c.all_or_positive('max_eval_batches', 'the whole eval set')
  c.at_least('log_every_steps', 1, fix='set --config.log_every_steps to 1 or more')
  c.at_least('peak_tflops', 0, integer=False, fix='set --config.peak_tflops=0 (looked up) or '
             "the device's peak dense TFLOP/s")
  c.at_least('profile_steps', 0, fix='set --config.profile_steps to 0 (no trace) or the '
             'steps to trace')
  c.at_least('profile_start_step', 0, fix='set --config.profile_start_step to the step after '
             'which the trace starts, e.g. 10')


def _check_optimizer(c: _Checker, job):
  c.choice('optimizer.name', OPTIMIZERS)
  c.at_least('optimizer.learning_rate', 0, integer=False,
             why='a negative learning rate climbs the loss (gradient ascent)',
             fix='set --config.optimizer.learning_rate to a positive peak rate, e.g. 1e-4')
  end = c.at_least('optimizer.end_learning_rate', 0, integer=False,
                   fix='set --config.optimizer.end_learning_rate to 0 (BERT) or a small rate')
  peak = c.get('optimizer.learning_rate')
  if peak == 0:  # Legal (a run that moves nothing: tests of init_from do so), rarely meant.
    console.warn_once('config.optimizer.learning_rate=0: the parameters never '
                        'change (every step computes its gradients for nothing); set '
                        '--config.optimizer.learning_rate to a peak rate, e.g. 1e-4')
  if end is not _MISSING and peak is not _MISSING and end > peak:
    c.fail('optimizer.end_learning_rate', end, f'exceeds the peak optimizer.learning_rate={peak}',
           'set it at most to the peak (0 = BERT\'s decay to zero)')
  warmup = c.at_least('optimizer.warmup_steps', 0,
                      fix='set --config.optimizer.warmup_steps to 0 (no warmup) or more')
  total = c.at_least('optimizer.total_steps', 0,
                     fix='set --config.optimizer.total_steps to the step the decay ends at')
  if (job == 'pretrain' and warmup is not _MISSING and total is not _MISSING
      and total and warmup > total):
    # Legal (the rate still ramps up when the run ends): short smoke runs of a recipe do so.
    console.warn_once('config.optimizer.warmup_steps=%d is longer than the '
                        '%d steps of the schedule: the learning rate still rises when the run '
                        'ends (never reaching its peak, never decaying); set '
                        '--config.optimizer.warmup_steps below %d for a warmup and a decay',
                        warmup, total, total)
  c.fraction('optimizer.warmup_proportion', closed_high=True,
             why='the share of the steps spent warming up must be in [0, 1]',
             fix='set --config.optimizer.warmup_proportion to e.g. 0.1 (BERT)')
  c.choice('optimizer.decay_from', DECAY_FROM)
  if c.get('optimizer.trust_ratio_everywhere') is False and c.get('optimizer.name') == 'adamw':
    console.warn_once('config.optimizer.trust_ratio_everywhere=false is read by LAMB only: '
                      'AdamW has no trust ratio (set --config.optimizer.name=lamb, or leave it)')
  c.at_least('optimizer.decay_power', 0, integer=False,
             fix='set --config.optimizer.decay_power to 1 (linear decay, BERT)')
  for name, typical in (('b1', 0.9), ('b2', 0.999)):
    c.fraction(f'optimizer.{name}', closed_high=False,
               fix=f'set --config.optimizer.{name} in [0, 1), e.g. {typical}')
  c.positive('optimizer.eps', integer=False, fix='set --config.optimizer.eps to e.g. 1e-6 '
             '(BERT)')
  c.at_least('optimizer.weight_decay', 0, integer=False,
             fix='set --config.optimizer.weight_decay to 0 (off) or e.g. 0.01 (BERT)')
  c.at_least('optimizer.grad_clip_norm', 0, integer=False,
             fix='set --config.optimizer.grad_clip_norm to 0 (off) or e.g. 1.0 (BERT)')
  c.fraction('optimizer.layer_decay', closed_high=True, open_low=True,
             why='the per-layer learning-rate factor must be in (0, 1]',
             fix='set --config.optimizer.layer_decay=1.0 (off) or e.g. 0.8 (ELECTRA, Base)')


def _check_mesh_and_checkpoint(c: _Checker):
  # Any one axis may be -1: the devices the others leave (sharding.mesh_shape).
  sizes = {name: c.number(f'mesh.{name}', integer=True) for name in MESH_AXES}
  for name, size in sizes.items():
    if size is not _MISSING and size != -1 and size < 1:
      taken = any(v == -1 for v in sizes.values())  # Another axis has the rest: no second -1.
      c.fail(f'mesh.{name}', size, 'must be -1 (all devices the other axes leave) or >= 1',
             f'set --config.mesh.{name}=1 (off) or a device count' if taken else
             'set --config.mesh.data=-1' if name == 'data' else
             f'set --config.mesh.{name}=1 (off), a device count or -1')
  rest = [name for name, size in sizes.items() if size == -1]
  if len(rest) > 1:
    c.fail(f'mesh.{rest[1]}', -1, f'mesh.{rest[0]} is -1 too, and only one axis may take the '
           'devices the others leave', f'set --config.mesh.{rest[0]}=1 (or a device count) to '
           f'give mesh.{rest[1]} the rest')
  rules = c.get('mesh.rules')
  if rules is not _MISSING:  # As training/sharding reads it.
    try:
      parsed = dict(mesh_rules.parse_rules(rules))
    except mesh_rules.RuleError as e:
      c.fail('mesh.rules', rules, f'has an entry {e.entry!r} that {e.why}', e.fix)
    if not parsed.get('batch'):
      c.fail('mesh.rules', rules, 'maps the logical axis batch to no mesh axis, so every device '
             'would compute every example', 'keep batch=data+fsdp in it (as the default does; '
             'the rules not listed are replicated)')
  c.positive('checkpoint.every_steps', fix='set --config.checkpoint.every_steps to a step '
             'count (checkpoints are also saved at every eval and at the end)')
  c.at_least('checkpoint.keep', 1, fix='set --config.checkpoint.keep to 1 or more (the latest '
             'is needed to resume)')
  c.at_least('checkpoint.keep_best', 0, fix='set --config.checkpoint.keep_best to 0 (none) or '
             'more')
  mode = c.get('checkpoint.best_mode')
  if mode is not _MISSING and mode not in ('', *metric_direction.MODES):
    c.fail('checkpoint.best_mode', mode, 'is unknown', "valid: max (higher is better), min, or "
           "'' (min for loss-like metrics, else max)")
  metric = c.get('checkpoint.best_metric')
  if mode is not _MISSING and isinstance(metric, str) and metric:  # '': the job's main metric.
    if (said := metric_direction.contradiction(metric, mode))[0]:
      c.fail('checkpoint.best_mode', mode, *said)
  patience = c.at_least('early_stopping_patience', 0, fix='set --config.early_stopping_patience '
                        'to 0 (off) or the evaluations to wait for an improvement')
  if c.get('job') == 'pretrain' and patience and c.get('eval_every_steps') == 0:
    c.fail('early_stopping_patience', patience, 'counts evaluations, but eval_every_steps=0 '
           'evaluates once, at the end, so it could never stop the run', 'set '
           '--config.eval_every_steps to a step count, or early_stopping_patience=0')


def _check_best_metric(c: _Checker):
  """A best_metric that no eval of the task reports: a typo, otherwise found at the first eval."""
  metric, task = c.get('checkpoint.best_metric'), c.get('task')
  if not metric or metric is _MISSING or task is _MISSING:
    return
  from bertjax.finetune.tasks import metric_names  # pylint: disable=g-import-not-at-top
  valid = metric_names.of_task(task)
  if valid is not None and metric not in valid:
    c.fail('checkpoint.best_metric', metric, f'is not an eval metric of task {task}',
           f"valid: {', '.join(valid)} ('' = the task's main metric)")


def _check_sequence(c: _Checker, path: str, *, position_table: bool):
  seq = c.at_least(path, MIN_SEQ_LENGTH, why='needs room for [CLS], a token and [SEP]',
                   fix=f'set --config.{path} to e.g. 128')
  table = c.get('model.max_position_embeddings')
  if position_table and seq is not _MISSING and table is not _MISSING and seq > table:
    c.fail(path, seq, f'exceeds the position table (model.max_position_embeddings={table})',
           f'set --config.{path} to at most {table}, or a larger '
           'model.max_position_embeddings')
  return seq


def _check_masking_cap(c: _Checker, phase: str, seq, predictions):
  """A full row's share at masked_lm_prob must fit the phase's max_predictions_per_seq (the cap
  would lower the rate without a word) where the job masks: dynamic masking, and the embedded
  corpus it makes (its [CLS] and [SEP]s, as create_pretraining_data counts them). Said here,
  naming the phase's field, not once the corpus is made or the pipeline built."""
  prob, dynamic = c.get('data.masked_lm_prob'), c.get('data.dynamic_masking') is True
  embedded = all(c.get(f'{p}.train_files') in ('', None) for p in {'data', phase})
  if _MISSING in (seq, predictions) or isinstance(prob, bool) or not isinstance(
      prob, numbers.Real) or not (dynamic or embedded):
    return
  maskable, wanted = masking.full_row_budget(
      seq, prob, nsp=not dynamic and c.get('model.nsp') is not False)
  if wanted > predictions:
    c.fail(f'{phase}.max_predictions_per_seq', predictions, f'caps the {wanted} tokens '
           f'data.masked_lm_prob={prob} masks of a full row\'s {maskable} at '
           f'{phase}.max_seq_length={seq}', f'set --config.{phase}.max_predictions_per_seq to '
           f'{wanted} or more (BERT: 20 at 128 tokens, 80 at 512), or a lower masked_lm_prob')


def _check_rows_fit(c: _Checker, job, rows, phase: str, seq):
  """data.max_instances_per_row must fit a row of the phase's max_seq_length: an instance's
  fewest tokens times it. A larger count packs no more, and each packed row's per-instance
  arrays grow with it (pack=9999 wrote 6 GB of rows at 128 tokens); phase 2 reads (and the
  embedded corpus makes) its rows packed as phase 1's."""
  least, what = ((5, '[CLS] A [SEP] B [SEP]') if job == 'pretrain' and c.get('model.nsp')
                 is not False else (MIN_SEQ_LENGTH, '[CLS] A [SEP]'))
  if seq is _MISSING or rows is _MISSING or rows <= max(seq // least, 1):
    return
  most = max(seq // least, 1)
  own = job == 'pretrain' and c.get('data.train_files') not in (_MISSING, '', None)
  fix = (f"set it to the files' value, which can be at most {most} (files made with more: "
         'make them again with fewer)' if own else f'set it to {min(most, 3)} (MLPerf BERT '
         'packs 3) or less; 1 = unpacked')
  if phase == 'phase2':
    fix = (f'set --config.phase2.max_seq_length to {rows * least} or more, or '
           f'data.max_instances_per_row to {most} or less (1 = unpacked)')
  c.fail('data.max_instances_per_row', rows, f'exceeds the {most} instances of {least} tokens '
         f'({what}) a row of {phase}.max_seq_length={seq} could hold'
         f'{" (phase 2 reads rows packed as phase 1)" if phase == "phase2" else ""}', fix)


def _check_data(c: _Checker, job):
  from_init = c.get('model_from_init') is True  # The position table is init_from's.
  seq = _check_sequence(c, 'data.max_seq_length', position_table=not from_init)
  rows = c.at_least('data.max_instances_per_row', 1, fix='set '
                    '--config.data.max_instances_per_row=1 (unpacked) or more')
  _check_rows_fit(c, job, rows, 'data', seq)
  if job == 'pretrain':
    predictions = c.positive('data.max_predictions_per_seq', fix='set '
                             '--config.data.max_predictions_per_seq to the files\' value, e.g. 20')
    if predictions is not _MISSING and seq is not _MISSING and predictions > seq:
      c.fail('data.max_predictions_per_seq', predictions,
             f'exceeds data.max_seq_length={seq}', 'set it to the files\' value, at most the '
             'sequence length')
    c.fraction('data.masked_lm_prob', closed_high=False, open_low=True,
               fix='set --config.data.masked_lm_prob to e.g. 0.15 (BERT)')
    c.choice('data.masking', MASKING_STRATEGIES)
    for name in ('shuffle_window', 'num_lanes', 'dupe_factor'):
      c.at_least(f'data.{name}', 1, fix=f'set --config.data.{name} to 1 or more')
    # The embedded corpus's passes: your own TFRecords were duplicated when they were made.
    if c.get('data.train_files') not in (_MISSING, '', None) and c.get(
        'data.dupe_factor') not in (_MISSING, EMBEDDED_DUPE_FACTOR):
      c.fail('data.dupe_factor', c.get('data.dupe_factor'), 'is read for the embedded corpus '
             'only, and data.train_files names your own TFRecords (their passes were fixed '
             'when they were made)', 'drop it, or make the files again with '
             'create_pretraining_data --dupe_factor=N')
    fraction = c.fraction('phase2.fraction', closed_high=False,
                          why='the share of the steps run at phase2.max_seq_length must be in '
                          '[0, 1)', fix='set --config.phase2.fraction to 0 (one phase) or e.g. '
                          '0.1 (the paper)')
    if fraction == 0:  # Files for a phase no step runs: the user meant two phases.
      for name in ('train_files', 'eval_files'):
        if c.get(f'phase2.{name}') not in (_MISSING, '', None):
          c.fail(f'phase2.{name}', c.get(f'phase2.{name}'), 'is set but phase2.fraction=0: no '
                 'step runs phase 2', 'pass phase2_fraction=0.1 (the paper) in the argument '
                 'string (--config=configs/pretrain.py:...,phase2_fraction=0.1), or drop '
                 f'--config.phase2.{name}')
    _check_masking_cap(c, 'data', seq, predictions)
    config_check_jobs.check_pretrain(c, fraction)
    if fraction is not _MISSING and fraction > 0:
      seq2 = _check_sequence(c, 'phase2.max_seq_length', position_table=True)
      predictions2 = c.positive('phase2.max_predictions_per_seq',
                                fix='set --config.phase2.max_predictions_per_seq to the '
                                'phase 2 files\' value, e.g. 80')
      if predictions2 is not _MISSING and seq2 is not _MISSING and predictions2 > seq2:
        c.fail('phase2.max_predictions_per_seq', predictions2,
               f'exceeds phase2.max_seq_length={seq2}', 'set it to the phase 2 files\' value')
      _check_masking_cap(c, 'phase2', seq2, predictions2)
      _check_rows_fit(c, job, rows, 'phase2', seq2)  # Both phases read packed rows alike.
  elif job == 'finetune':
    config_check_jobs.check_finetune(c, seq)
    c.at_least('data.pad_to_multiple_of', 0, fix='set --config.data.pad_to_multiple_of to 0 '
               '(full rows) or e.g. 32')
    for name in ('packed_rows_multiple_of', 'doc_stride', 'max_query_length',
                 'max_answer_length', 'n_best_size', 'max_windows'):
      c.at_least(f'data.{name}', 1, fix=f'set --config.data.{name} to 1 or more')
    c.number('data.null_score_diff_threshold', integer=False)
    stride, windows = c.get('data.doc_stride'), c.get('data.max_windows')
    if (seq is not _MISSING and windows is not _MISSING and windows > 1
        and stride is not _MISSING and stride > seq - 2):
      c.fail('data.doc_stride', stride, f'exceeds the {seq - 2} pieces a window holds at '
             f'data.max_seq_length={seq}, so the pieces between windows would never be read',
             f'set --config.data.doc_stride={seq - 2} (windows back to back) or less')
    c.fraction('data.eval_fraction', closed_high=False, open_low=True,
               why='the share of a train_file held out for eval must be in (0, 1)',
               fix='set --config.data.eval_fraction to the held-out share, e.g. 0.2 (or name '
               'an eval_file)')
    c.all_or_positive('data.max_train_examples', 'all of them')
    c.all_or_positive('data.max_eval_examples', 'all of them')
    config_check_jobs.check_reads(c)


def export_formats(value: str) -> list[str]:
  """config.export_format's names: a comma list ('' = none asked)."""
  return [name for name in format_names.names(value) if name]


def _check_export_format(c: _Checker):
  """Known format names only; whether they hold the run's head is checked by the job, which
  knows its kind and pooling (finetune/export_formats.py)."""
  value = c.get('export_format')
  if value is _MISSING or not isinstance(value, str):
    return
  for name in export_formats(value):
    if name not in format_names.FORMATS:
      guess = format_names.meant(name)
      c.fail('export_format', value, f'{name!r} is not an export format'
             + (f' (did you mean {guess}?)' if guess else ''),
             f'valid: {", ".join(format_names.FORMATS)}, or a comma list of them (\'\' = none)')

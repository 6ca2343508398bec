"""config_check's rules for what one job reads beyond the fields every job shares: pre-training's
phases and files, fine-tuning's task (its pairs, its packing, its own files' fields), embed's
sentences, and the best checkpoint's metric.

Each was found once the job had started JAX or read its data (exit 1, and a launcher had booked
a slice for it); here it is refused with the config, exit 78. Pure Python, as config_check:
the task modules (they import JAX) only for a fine-tuning config.
"""

from bertjax import config_checker
from bertjax import metric_direction
from bertjax import phase_plan

_MISSING = config_checker.MISSING
_Checker = config_checker.Checker

# A text pair's fewest tokens: [CLS] A [SEP] B [SEP] (one text: [CLS] A [SEP]).
MIN_PAIR_LENGTH = 5
# Tasks whose examples do not pack (finetune/kinds: a span's logits are softmaxed over the whole
# row; a multiple-choice example is several rows), with their kind; every other task packs.
UNPACKABLE = {'squad_v1': 'span', 'squad_v2': 'span', 'span': 'span',
              'multiple_choice': 'multiple_choice', 'swag': 'multiple_choice'}
TEXT_FORMATS = ('csv', 'tsv', 'jsonl')  # user_formats.FORMATS.
# config.data.format's values per task that reads it (data_reads.READS; '' = the extension's), as
# its reader in user_data takes them. The other tasks' files have one format (a preset task's,
# span's SQuAD JSON): a data.format beside them is refused (data_reads.check_reads' rule).
FORMATS = {'classification': TEXT_FORMATS, 'regression': TEXT_FORMATS,
           'tagging': ('conll', 'jsonl', 'tsv'), 'multiple_choice': ('jsonl',),
           'swag': ('csv', 'tsv')}
# config.data.tag_scheme's values (user_tasks.tag_scheme).
TAG_SCHEMES = ('auto', 'plain', 'iob1', 'iob2', 'iob', 'bio', 'iobes', 'ioes', 'bioes', 'bilou')


def check_pretrain(c: _Checker, fraction):
  """Its files and phases (`fraction`: phase2.fraction, checked), and its best metric."""
  own = c.get('data.train_files') not in (_MISSING, '', None)
  for name in ('data.eval_files', 'data.vocab_file', 'phase2.train_files', 'phase2.eval_files'):
    if not own and c.get(name) not in (_MISSING, '', None):
      c.fail(name, c.get(name), 'is set but data.train_files is empty (the embedded corpus, '
             'which brings its own eval split and vocab)', 'set --config.data.train_files to '
             'your TFRecords too, or drop it')
  total = c.get('num_train_steps')
  if isinstance(fraction, float | int) and fraction > 0 and isinstance(total, int):
    first = phase_plan.phase2_start(total, fraction)
    if not 0 < first < total:
      least = next((n for n in range(2, 10**6) if 0 < phase_plan.phase2_start(n, fraction) < n),
                   None)  # None: a fraction so near 0 or 1 that no run of a sane length splits.
      steps = f'set --config.num_train_steps to {least} or more, or ' if least else 'set '
      c.fail('phase2.fraction', fraction, f'of num_train_steps={total} leaves {first} steps in '
             f'phase 1 and {total - first} in phase 2, and each phase needs one at least',
             f'{steps}phase2_fraction=0 (one phase) in the argument string')
    if own and c.get('phase2.train_files') in ('', None):
      c.fail('phase2.train_files', c.get('phase2.train_files'), f'is empty, and '
             f'phase2.fraction={fraction} runs a phase 2 beside your own data.train_files',
             f'set it to files made at max_seq_length={c.get("phase2.max_seq_length")} and '
             f'max_predictions_per_seq={c.get("phase2.max_predictions_per_seq")} (and '
             'phase2.eval_files), or leave data.train_files empty for the embedded corpus')
  patience = c.get('early_stopping_patience')
  phase2_eval = isinstance(fraction, float | int) and fraction > 0 and c.get(
      'phase2.eval_files') not in (_MISSING, '', None)
  if (own and isinstance(patience, int) and patience > 0 and not phase2_eval
      and c.get('data.eval_files') in ('', None)):  # The loop refused it once JAX had started.
    c.fail('early_stopping_patience', patience, 'counts evaluations, but data.eval_files is empty '
           'beside your own data.train_files: this run has no eval data', 'set '
           '--config.data.eval_files to TFRecords of held-out text (create_pretraining_data), or '
           'early_stopping_patience=0')
  metric = c.get('checkpoint.best_metric')
  mode = c.get('checkpoint.best_mode')
  if metric == '' and isinstance(mode, str):  # config_check judges a metric that is named.
    why, fix = metric_direction.contradiction(phase_plan.BEST_METRIC, mode)
    if why:
      c.fail('checkpoint.best_mode', mode, f"with best_metric='' ({phase_plan.BEST_METRIC}): "
             f'{why}', fix)
  if isinstance(metric, str) and metric:
    valid = phase_plan.eval_metric_names(c.get('model.nsp') is not False)
    if metric not in valid:
      c.fail('checkpoint.best_metric', metric, 'is not an eval metric of pre-training',
             f"valid: {', '.join(valid)} ('' = {phase_plan.BEST_METRIC})")


def is_pair_task(c: _Checker) -> bool:
  """Whether the task's examples are text pairs (segment B read)."""
  task = c.get('task')
  if task in ('classification', 'regression'):
    fields = c.get('data.text_fields')
    return isinstance(fields, str) and len([f for f in fields.split(',') if f.strip()]) == 2
  if task in UNPACKABLE:  # Question and context; a context and each ending.
    return True
  if task in ('tagging', 'conll2003', 'bbc', 'wordnet') or not isinstance(task, str):
    return False
  from bertjax.finetune.tasks import glue  # pylint: disable=g-import-not-at-top
  return task in glue.TASKS and glue.TASKS[task].is_pair


def check_finetune(c: _Checker, seq):
  """The task's pairs against `seq` (data.max_seq_length, checked), its packing, and the fields
  of the user's own files it reads."""
  task = c.get('task')
  mode = c.get('checkpoint.best_mode')
  if c.get('checkpoint.best_metric') == '' and isinstance(mode, str):
    # Every task's main metric (task.Task.main_metric) is a score: the loop refused it once
    # the data was read and the step compiled (training/ranking.py).
    why, fix = metric_direction.contradiction(f"task {task}'s main metric, a score,", mode,
                                              known='max')
    if why:
      c.fail('checkpoint.best_mode', mode, f"with best_metric='': {why}",
             f'{fix}, or name a loss-like best_metric (e.g. loss)')
  if isinstance(seq, int) and seq < MIN_PAIR_LENGTH and is_pair_task(c):
    c.fail('data.max_seq_length', seq, f'leaves no token of a pair: task {task} reads text '
           'pairs, and a row needs [CLS] A [SEP] B [SEP] (it trained on [CLS] [SEP] [SEP] alone)',
           f'set --config.data.max_seq_length to {MIN_PAIR_LENGTH} or more, e.g. 128')
  rows = c.get('data.max_instances_per_row')
  if task in UNPACKABLE and isinstance(rows, int) and rows > 1:
    c.fail('data.max_instances_per_row', rows, f'packs examples, which a {UNPACKABLE[task]} '
           f'task ({task}) cannot (classification, regression and tagging can)', 'set it to 1')
  fields = c.get('data.text_fields')
  if task in ('classification', 'regression') and isinstance(fields, str):
    named = [f.strip() for f in fields.split(',') if f.strip()]
    if len(named) not in (1, 2):
      c.fail('data.text_fields', fields, f'names {len(named)} fields', 'name one field (single '
             'texts) or two, comma-separated (sentence pairs), e.g. --config.data.text_fields='
             'sentence1,sentence2')
  fmt = c.get('data.format')
  allowed = FORMATS.get(task, ())
  if isinstance(fmt, str) and fmt and isinstance(task, str) and not allowed:
    c.fail('data.format', fmt, f'is not read by task {task}, whose files have one format (a '
           "preset task's published files; span's SQuAD JSON)", "drop it (or set it to '')")
  if isinstance(fmt, str) and fmt and allowed and fmt not in allowed:
    c.fail('data.format', fmt, f'is not a format task {task} reads', f"valid: "
           f"{', '.join(allowed)}, or '' (the file's extension)")
  scheme = c.get('data.tag_scheme')
  if isinstance(scheme, str) and scheme.lower() not in TAG_SCHEMES:
    c.fail('data.tag_scheme', scheme, 'is unknown', f'valid: {", ".join(TAG_SCHEMES)}')


def check_reads(c: _Checker):
  """A data key the task never reads (label_field beside task=mrpc, a train_file beside bbc),
  once its value is checked: the job refused it only once JAX had started, and never where
  the workdir held a run (eval, predict or a resume ignored it)."""
  task, data = c.get('task'), c.get('data')
  if isinstance(task, str) and hasattr(data, 'get'):
    from bertjax.finetune.tasks import data_reads  # pylint: disable=g-import-not-at-top
    if task in data_reads.READS:  # config_check names an unknown task.
      mode = c.get('mode')
      data_reads.check_reads(task, data, mode if isinstance(mode, str) else 'train_eval')


# The sentences configs/embed.py embeds where none are given (config.sentences' default).
EMBED_EXAMPLES = (
    'The weather is lovely today.',
    "It's so sunny outside!",
    'He drove to the stadium.',
    'A man is playing a guitar.',
    'Someone plays an instrument on stage.',
)


def check_embed(c: _Checker):
  """Its sentences, when no input_file is read: a tuple of texts, at least one; beside an
  input_file, none but the examples (the file is read instead: its sentences were ignored)."""
  sentences = c.get('sentences')
  if (input_file := c.get('input_file')) not in ('', None, _MISSING):
    if sentences not in ((), [], None, _MISSING) and tuple(sentences) != EMBED_EXAMPLES:
      c.fail('sentences', sentences, f'is set beside config.input_file={input_file}, which is '
             'read instead', 'drop one of them')
    return
  quoted = 'quote each sentence, e.g. --config.sentences="(\'The first.\', \'The second.\')"'
  if not isinstance(sentences, (tuple, list)) or not sentences:
    c.fail('sentences', sentences, 'holds no sentence, and no config.input_file is set',
           f'{quoted}, or set --config.input_file=FILE (one per line)')
  for i, sentence in enumerate(sentences):
    if not isinstance(sentence, str):  # --config.sentences="(1, 2)" parses as numbers.
      c.fail(f'sentences[{i}]', sentence, 'is not text', quoted)
    if not sentence.strip():  # --config.sentences= parses to ('',).
      c.fail(f'sentences[{i}]', sentence, 'is empty (its vector would be [CLS] [SEP] alone)',
             f'{quoted}, or drop it')

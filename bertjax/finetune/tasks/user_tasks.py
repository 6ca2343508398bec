"""Tasks read from the user's own files, one per kind: classification and regression (CSV,
TSV, JSON lines), tagging (CoNLL columns or JSON lines, any tag set and scheme) and multiple
choice (JSON lines, SWAG's CSV). The files are read by user_data.py; here the splits (an eval
split held out of train when there is no eval file: example_sampling.py), the label set and each
kind's features, metrics and predictions file.
"""

import collections
import dataclasses
import functools
import json

from absl import logging
import numpy as np

from bertjax import files
from bertjax import paths
from bertjax.finetune import metrics as metrics_lib
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import example_sampling
from bertjax.finetune.tasks import features
from bertjax.finetune.tasks import labelled_split
from bertjax.finetune.tasks import metric_names
from bertjax.finetune.tasks import multiple_choice
from bertjax.finetune.tasks import task as task_lib
from bertjax.finetune.tasks import user_data
from bertjax.finetune.tasks import user_labels
from bertjax.training import kinds

_FLAGS = {'train': 'train_file', 'validation': 'eval_file', 'test': 'test_file'}


def user_files(data) -> dict:
  """{split: path} of config.data.train_file / eval_file / test_file (those that are set)."""
  files = {'train': data.train_file, 'validation': data.eval_file,
           'test': data.predict_file or data.test_file}
  return {split: str(path) for split, path in files.items() if path}


def expand(setting: str, flag: str) -> list[str]:
  """The files of a train_file / eval_file / test_file setting: one path, or comma-separated
  paths and globs (`gs://b/train-*.jsonl`: a bucket is listed through bertjax.files), each
  glob's matches in sorted order. A glob that matches nothing is an error naming it. A file
  named twice (overlapping globs, `./x.csv,x.csv`, a link) is read once, as first spelled:
  read twice, its rows would count double."""
  found = []
  for part in paths.split_list(setting):
    if not any(c in part for c in '*?[') or files.exists(part):
      found.append(part)
    else:
      matches = files.glob(part)
      if not matches:
        raise FileNotFoundError(f'{part} matches no file: check config.data.{flag}.')
      found.extend(matches)
  return paths.each_file_once(found)


def one_file(setting: str, flag: str, why: str) -> str:
  """The one file a setting names (a glob that matches one file is fine) where the task reads one
  file per setting; several are refused, `why` saying what to do."""
  found = expand(setting, flag)
  if len(found) != 1:
    folders = [path for path in found if files.isdir(path)]
    named = (f'{len(found)} paths, {len(folders)} of them a folder ({folders[0]})' if folders
             else f'{len(found)} files')
    raise ValueError(f'config.data.{flag}={setting} names {named}: {why}')
  return found[0]


def check_files_to_predict(data, training: bool = True):
  """Training does not read config.data.test_file / predict_file (mode=predict does, on the run
  it trained): a missing one is said now, not after training, and where it goes is said (not
  where mode=predict checks them before loading its model: `training` False)."""
  for flag in ('test_file', 'predict_file'):
    setting = data.get(flag) or ''
    if not setting:
      continue
    for path in expand(setting, flag):
      files.require_file(path, f'config.data.{flag}: {path} does not exist: fix the path' + (
          ', or drop it (mode=predict reads it after training).' if training else '.'))
    if training:
      logging.info('config.data.%s=%s is predicted by --config.mode=predict on this run once '
                   'it is trained (the same flags, --workdir and --config.mode=predict); '
                   'training does not read it', flag, setting)


class _UserSplits:
  """Reads the user's train / eval / test files once; holds out an eval split when there is
  no eval file (stratified by label for classification, seeded random otherwise)."""

  def __init__(self, name, data, seed, read_file, stratify, text_of, check=None, labels_of=None):
    self.name, self.data, self.seed = name, data, seed
    self.files = user_files(data)
    self._read_file, self._stratify, self._cache = read_file, stratify, {}
    self._paths = {}  # split -> the files its setting named when read (check_labels names them).
    self._text_of = text_of  # An item's texts, normalised: copies are told by it.
    self._check = check  # Of the training items, before any is held out of them.
    # An item's labels (or tags): max_train_examples keeps each where it can; those it could
    # not keep are `dropped`, for the error of an eval label training then lacks.
    self._labels_of, self.dropped = labels_of, frozenset()
    self.held_out_sha256 = None  # example_sampling.texts_digest of every held-out example.
    if 'train' not in self.files and not ('test' in self.files or 'validation' in self.files):
      raise ValueError(f'task={name}: set config.data.train_file (and eval_file, test_file) to '
                       'your data: CSV, TSV or JSON lines.')

  def _read_split(self, split, **kwargs):
    """(items, skipped) of every file the split's setting names, in order."""
    items, skipped = [], collections.Counter()
    flag = 'predict_file' if split == 'test' and self.data.predict_file else _FLAGS[split]
    found = self._paths[split] = expand(self.files[split], flag)
    for path in found:  # A folder, an empty file: user_formats.check_file says what it is.
      if not files.isdir(path):
        files.require_file(path, f'config.data.{flag}: {path} does not exist: fix the path.')
    names = [files.name(path) for path in found]
    for path in found:
      more, more_skipped = self._read_file(path, **kwargs)
      if names.count(files.name(path)) > 1 and more and hasattr(more[0], 'guid'):
        # Guids name a row by its file's name: two files of one name, told by their paths.
        more = [dataclasses.replace(m, guid=f'{path}{m.guid[len(files.name(path)):]}')
                for m in more]
      items += more
      skipped += more_skipped
    return items, skipped

  def _train_and_held_out(self):
    if 'train' in self._cache:
      return
    if 'train' not in self.files:
      raise ValueError(f'task={self.name}: config.data.train_file is empty: training needs it.')
    # Its skipped rows are said once, by the job (job_setup.featurized), with every split's.
    items, skipped = self._read_split('train', is_training=True)
    if self._check:
      self._check(items)
    held_out = None
    read_order = {id(item): i for i, item in enumerate(items)}
    if 'validation' not in self.files:
      data = self.data
      if self._stratify:
        split = functools.partial(labelled_split.split, eval_fraction=data.eval_fraction,
                                  seed=self.seed)
      else:
        split = functools.partial(example_sampling.random_split, fraction=data.eval_fraction,
                                  seed=self.seed)
      items, held_out = example_sampling.split_by_text(split, items, self._text_of)
      self.held_out_sha256 = example_sampling.texts_digest(map(self._text_of, held_out))
      logging.info('%s: no eval_file, %d of its examples held out for eval (eval_fraction %g)',
                   self.files['train'], len(held_out), data.eval_fraction)
    kept = example_sampling.limit(items, self.data.max_train_examples, sample=held_out is None,
                                  labels_of=self._labels_of)
    if self._labels_of is not None and len(kept) < len(items):
      self.dropped = frozenset(label for item in items for label in self._labels_of(item)) - {
          label for item in kept for label in self._labels_of(item)}
    self._cache['train'] = (kept, skipped)
    if held_out is not None:  # A sample of the shuffled split, then in the file's order again:
      # its predictions (a tagging file's `word gold pred` lines have no row name) follow it.
      sample = example_sampling.limit(held_out, self.data.max_eval_examples)
      self._cache['validation'] = (sorted(sample, key=lambda item: read_order[id(item)]),
                                   collections.Counter())

  def check_labels(self, labelled, labels, split):
    """user_labels.check_labels, saying so where max_train_examples left a label out, and
    naming the file by its path (a row's guid names it by its name: `b.csv:3`)."""
    paths_of = collections.defaultdict(set)
    for path in self._paths.get(split, ()):  # As read: a glob expanded again may match more.
      paths_of[files.name(path)].add(path)

    def where(guid):
      name, sep, line = guid.rpartition(':')
      found = paths_of.get(name, ())
      return f'{next(iter(found))}:{line}' if sep and len(found) == 1 else guid

    user_labels.check_labels(
        ((where(guid), values) for guid, values in labelled), labels, split, self.dropped,
        f'config.data.max_train_examples={self.data.max_train_examples} kept no training '
        'example of it, though the training file has some: raise max_train_examples (to one '
        'example per label at least), or set it to -1 for all')

  def _warn_of_copies(self, items):
    trained = {self._text_of(item) for item in self._cache['train'][0]}
    if copies := sum(self._text_of(item) in trained for item in items):
      logging.warning('%d of the %d eval examples (%s) are texts of the training data (%s): '
                      'their score is a free right answer, above what new text would get',
                      copies, len(items), self.files['validation'], self.files['train'])

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
      items, _ = self._read_split(split, is_training=False, require_labels=split != 'test')
      items = example_sampling.limit(
          items, self.data.max_eval_examples if split == 'validation' else -1, sample=True)
      if split == 'validation' and 'train' in self._cache:  # Training: the eval set it scores.
        self._warn_of_copies(items)
      self._cache[split] = (items, collections.Counter())
    return self._cache[split]


def text_task(name, data, seed, labels) -> task_lib.Task:
  """classification / regression on the user's CSV, TSV or JSONL files."""
  regression = kinds.get(name).scored  # The task is named by its kind.
  fields = user_data.text_fields(data.text_fields)

  def read_file(path, is_training, require_labels=True):
    return user_data.read_texts(path, fields=fields, label_field=data.label_field,
                                fmt=data.format, regression=regression,
                                is_training=is_training, require_labels=require_labels)

  def check(examples):  # All of the training files' rows, before any is held out.
    found = user_labels.labels_of(examples)
    if len(found) < 2:
      raise ValueError(f'{splits.files["train"]}: every example has label {found[0]!r}: a '
                       'classifier needs at least two labels.')

  splits = _UserSplits(name, data, seed, read_file, stratify=not regression,
                       text_of=lambda e: labelled_split.normalised(e.text_a, e.text_b),
                       check=None if regression or labels else check,
                       labels_of=None if regression else lambda e: (e.label,))
  if regression:
    labels = ()
  elif not labels:
    labels = user_labels.labels_of(splits.train())

  def read(split):
    examples, skipped = splits.read(split)
    if not regression and split != 'train':
      splits.check_labels(((e.guid, (e.label,)) for e in examples), labels, split)
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
    path = files.join(out_dir, f'{split}_predictions.jsonl')
    lines = []
    for example, row in zip(examples, predictions_of(name, labels, outputs), strict=True):
      gold = {} if example.label is None else {'gold': example.label}
      lines.append(json.dumps({'guid': example.guid, **row, **gold}) + '\n')
    files.write_atomically(path, ''.join(lines))  # A local folder or a URL.
    return path

  return task_lib.Task(
      name, name, tuple(labels), 'pearson' if regression else 'accuracy', splits.eval_splits(),
      splits.test_splits(), read, featurize, evaluate, write,
      held_out=lambda: splits.held_out_sha256)


def predictions_of(kind, labels, outputs) -> list[dict]:
  """predict's JSON fields of classification / regression / multiple-choice outputs (the kind
  table's predictions), probabilities to 6 decimals."""
  return kinds.get(kind).predictions(labels, outputs, logits=False, digits=6)


def tag_scheme(data, labels) -> str:
  """'chunks' (IOB1/IOB2/IOBES/BILOU, scored as conlleval) or 'plain' (per token)."""
  scheme = data.tag_scheme.lower()
  chunk_schemes = ('iob1', 'iob2', 'iob', 'bio', 'iobes', 'ioes', 'bioes', 'bilou')
  if scheme in chunk_schemes:
    bad = [t for t in labels if t != 'O' and not user_labels.chunk_tag(t)]
    if bad:
      raise ValueError(f'config.data.tag_scheme={scheme} but tags {bad[:5]} are not O or '
                       'B-/I-/E-/S-/L-/U-TYPE: set tag_scheme=plain (scored per token).')
    return 'chunks'
  if scheme == 'plain':
    return 'plain'
  if scheme != 'auto':
    raise ValueError(f'config.data.tag_scheme={data.tag_scheme!r} is unknown; valid: auto, '
                     f'plain, {", ".join(chunk_schemes)}.')
  chunky = all(t == 'O' or user_labels.chunk_tag(t) for t in labels)
  return 'chunks' if chunky and 'O' in labels else 'plain'


def tagging_task(name, data, seed, labels, path_of=None) -> task_lib.Task:
  """Tags per word from CoNLL column files or JSONL (tokens, tags), with any tag set."""

  def read_file(path, is_training, require_labels=True):
    return user_data.read_tagged(path, fmt=data.format, token_column=data.token_column,
                                 tag_column=data.tag_column, is_training=is_training,
                                 require_labels=require_labels, tag_scheme=data.tag_scheme)

  if path_of is None:
    splits = _UserSplits(name, data, seed, read_file, stratify=False,
                         text_of=lambda s: labelled_split.normalised(*s.words),
                         labels_of=lambda s: s.tags)
    read_split, check_labels = splits.read, splits.check_labels
    eval_splits, test_splits = splits.eval_splits(), splits.test_splits()
    if not labels:
      labels = user_labels.tags_of(splits.train())
  else:  # A preset: fixed files and tag set; a file to predict may have no tag column.
    def read_split(split):
      return read_file(path_of(split), split == 'train', require_labels=split != 'test')

    def check_labels(labelled, labels, split):  # Its tags are the preset's, not its training's.
      for where, values in labelled:
        if unknown := [v for v in values if v is not None and v not in labels]:
          raise ValueError(f'{where}: {split} tag {unknown[0]!r} is not one of {name}\'s tags '
                           f'{list(labels)}: fix it, or fine-tune with task=tagging, which '
                           'takes the tags its training file has.')
    eval_splits, test_splits = ('validation',), ('test',)
  labels = tuple(labels)
  scheme = tag_scheme(data, labels)

  def read(split):
    sentences, skipped = read_split(split)
    if split != 'train':  # Said at the word: its file:line.
      check_labels(((getattr(s, 'where', lambda _: '')(j) or
                     f'{split} sentence {i} ({" ".join(s.words[:6])}...)', (tag,))
                    for i, s in enumerate(sentences) for j, tag in enumerate(s.tags)),
                   labels, split)
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
    return conll.write_predictions(files.join(out_dir, f'{split}_predictions.txt'), sentences,
                                   tags)

  return task_lib.Task(
      name, 'tagging', labels, 'f1' if scheme == 'chunks' else 'accuracy', eval_splits, test_splits,
      read, featurize, evaluate, write, metric_names=metric_names.tagging(scheme),
      held_out=(lambda: splits.held_out_sha256) if path_of is None else (lambda: None))


def choice_task(name, data, seed, labels) -> task_lib.Task:
  """Multiple choice: SWAG's CSV (task swag) or JSONL context / choices / label."""

  def read_file(path, is_training, require_labels=True):
    if name == 'swag':
      return user_data.read_swag(path, fmt=data.format, is_training=is_training,
                                 require_labels=require_labels)
    return user_data.read_choices(path, fmt=data.format, is_training=is_training,
                                  require_labels=require_labels)

  splits = _UserSplits(name, data, seed, read_file, stratify=False,
                       text_of=lambda q: labelled_split.normalised(q.context, *q.choices))
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
        files.join(out_dir, f'{split}_predictions.jsonl'), outputs, questions)

  return task_lib.Task(
      name, 'multiple_choice', tuple(labels), 'accuracy', splits.eval_splits(),
      splits.test_splits(), read, featurize, evaluate, write,
      held_out=lambda: splits.held_out_sha256)

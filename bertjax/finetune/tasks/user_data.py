"""A user's own task files: CSV, TSV and JSON lines of texts, tags or choices, with any labels.

What transformers' examples read with `train_file` and what the original run_classifier.py
made users write a DataProcessor for. Each reader returns examples in the types the kinds'
feature code takes (the GLUE readers' `Example`, CoNLL's `Sentence`, `Choices` for multiple
choice) plus a Counter of what it skipped.

Every row keeps where it came from (`file:line`), so every error names it. Rules:
* the format is the file's extension (.csv, .tsv, .jsonl/.json, and for tagging .conll/.txt
  columns) unless `data.format` says otherwise, and the content must agree with it;
* a field that is missing is an error naming the file, the line and the fields there are;
* an empty text is skipped and counted in training data (a scraped corpus has some), and is an
  error in eval and test data (every example there must be scored);
* labels are whatever strings the data holds (numbers for regression); an eval or test label
  that training never had is an error listing the ones it had.
"""

import collections
import csv
import dataclasses
import io
import json
import os

import numpy as np

from bertjax import files
from bertjax import paths
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import glue

Example = glue.Example
Sentence = conll.Sentence

FORMATS = ('csv', 'tsv', 'jsonl')
_EXTENSIONS = {'.csv': 'csv', '.tsv': 'tsv', '.jsonl': 'jsonl', '.json': 'jsonl',
               '.ndjson': 'jsonl', '.conll': 'conll', '.txt': 'conll', '.iob': 'conll',
               '.bio': 'conll'}


@dataclasses.dataclass(frozen=True)
class Choices:
  """One multiple-choice question: a context, its candidate continuations, the gold index."""

  guid: str
  context: str
  choices: tuple[str, ...]
  label: int | None  # Index into choices; None in unlabelled (test) data.


def _check_file(path) -> str:
  """`path` (a local path or a URL, as given) when it names a file with something in it."""
  path = os.fspath(path)
  missing = f'{path} does not exist: check config.data.train_file / eval_file / test_file.'
  files.require_file(path, missing)
  if files.size(path) == 0:
    raise ValueError(f'{path} is empty: it holds no examples.')
  return path


def _read_text(path) -> str:
  """The file's text as written (line breaks untranslated, for csv), its BOM removed."""
  try:
    return files.read_bytes(path).decode('utf-8-sig')
  except UnicodeDecodeError as e:
    raise ValueError(f'{path} is not UTF-8 text ({e.reason} at byte {e.start}): convert it, '
                     'e.g. `iconv -f latin1 -t utf-8`.') from None


def _suffix(path) -> str:
  """The extension of the file's name ('.csv'), '' for none."""
  stem, suffix = os.path.splitext(files.name(path))
  return suffix if stem and suffix != '.' else ''


def format_of(path, configured: str = '', allowed=FORMATS) -> str:
  """The file's format: `configured` if set, else its extension's."""
  fmt = configured or _EXTENSIONS.get(_suffix(path).lower(), '')
  if fmt not in allowed:
    raise ValueError(f'{path}: cannot tell the format from the extension '
                     f'{_suffix(path)!r}: name the file .{" / .".join(allowed)} or '
                     f'set config.data.format to one of {", ".join(allowed)}.')
  return fmt


def _first_line(text: str) -> tuple[int, str]:
  for number, line in enumerate(paths.split_lines(text), 1):
    if line.strip():
      return number, line
  return 0, ''


def _check_content(path, fmt, text):
  """An error when the content is plainly another format than the one `fmt` names."""
  number, line = _first_line(text)
  if not line:
    raise ValueError(f'{path} holds only blank lines: it holds no examples.')
  looks_json = line.lstrip().startswith(('{', '['))
  fix = 'rename the file or set config.data.format'
  if fmt == 'jsonl' and not looks_json:
    raise ValueError(f'{path}:{number}: the extension says JSON lines but the line is not a '
                     f'JSON object ({line[:60]!r}): {fix}.')
  if fmt in ('csv', 'tsv', 'conll') and looks_json:
    raise ValueError(f'{path}:{number}: the extension says {fmt.upper()} but the line is JSON '
                     f'({line[:60]!r}): {fix} (jsonl).')
  if fmt == 'tsv' and '\t' not in line and ',' in line:
    raise ValueError(f'{path}:{number}: the extension says TSV but the header has no tab and '
                     f'has commas ({line[:60]!r}): it looks like CSV; {fix}.')
  if fmt == 'csv' and ',' not in line and '\t' in line:
    raise ValueError(f'{path}:{number}: the extension says CSV but the header has no comma and '
                     f'has tabs ({line[:60]!r}): it looks like TSV; {fix}.')


def read_records(path, fmt: str = '') -> list[tuple[int, dict]]:
  """(line number, {field: value}) of every data row of a CSV/TSV (with a header) or JSONL file."""
  path = _check_file(path)
  fmt = format_of(path, fmt)
  text = _read_text(path)
  _check_content(path, fmt, text)
  records = []
  if fmt == 'jsonl':
    for number, line in enumerate(paths.split_lines(text), 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f'{path}:{number}: not valid JSON ({e.msg} at column {e.colno}): '
                         'JSON lines hold one object per line.') from None
      if not isinstance(record, dict):
        raise ValueError(f'{path}:{number}: a JSON {type(record).__name__}, not an object: JSON '
                         'lines hold one {"field": value, ...} object per line.')
      records.append((number, record))
    return records
  # The csv module's own line rules (newline='' semantics): a form feed, U+2028... is text.
  csv.field_size_limit(1 << 30)  # A long document is a valid field (the default stops at 128 KB).
  reader = csv.reader(io.StringIO(text, newline=''),
                      delimiter='\t' if fmt == 'tsv' else ',',
                      quoting=csv.QUOTE_MINIMAL if fmt == 'csv' else csv.QUOTE_NONE)
  header = None
  try:
    for row in reader:
      number = reader.line_num
      if header is None:
        header = [h.strip() for h in row]
        if len(set(header)) != len(header) or '' in header:
          raise ValueError(f'{path}:{number}: the header {header} has an empty or repeated '
                           'column name: the first line names the columns.')
        continue
      if not any(cell.strip() for cell in row):
        continue
      if len(row) != len(header):
        raise ValueError(f'{path}:{number}: {len(row)} columns where the header has '
                         f'{len(header)} ({", ".join(header)}): quote fields that hold the '
                         'separator.')
      records.append((number, dict(zip(header, row, strict=True))))
  except csv.Error as e:
    raise ValueError(f'{path}:{reader.line_num}: {e}') from None
  return records


def _field(path, number, record, name):
  if name not in record:
    raise ValueError(f'{path}:{number}: no field {name!r}; the row has '
                     f'{", ".join(map(repr, record))}. Set config.data.text_fields / '
                     'label_field to the names in your file.')
  return record[name]


def _text(value) -> str:
  if value is None:
    return ''
  return value if isinstance(value, str) else str(value)


def _json_type(value) -> str:
  if isinstance(value, bool):
    return 'boolean'
  if isinstance(value, (int, float)):
    return 'number'
  return {list: 'list', dict: 'object'}.get(type(value), type(value).__name__)


def _text_of(path, number, name, value) -> str:
  """A text field's value: a string, or '' for null; a number, list, object... is an error."""
  if value is None or isinstance(value, str):
    return _text(value)
  raise ValueError(f'{path}:{number}: field {name!r} is a {_json_type(value)} '
                   f'({json.dumps(value)[:40]}), not a text: write it as a JSON string.')


def text_fields(spec: str) -> tuple[str, ...]:
  fields = tuple(f.strip() for f in spec.split(',') if f.strip())
  if len(fields) not in (1, 2):
    raise ValueError(f'config.data.text_fields={spec!r}: name one field (single texts) or two, '
                     'comma-separated (sentence pairs).')
  return fields


def _label_value(path, number, value, regression):
  if regression:
    try:
      label = float(value)
    except (TypeError, ValueError):
      raise ValueError(f'{path}:{number}: label {value!r} is not a number (regression '
                       'labels are numbers).') from None
    if not np.isfinite(label):
      raise ValueError(f'{path}:{number}: label {value!r} is not a finite number.')
    return label
  if isinstance(value, bool) or value is None:
    return str(value).lower() if value is not None else ''
  if isinstance(value, float) and value.is_integer():
    value = int(value)
  return str(value).strip()


def read_texts(path, *, fields, label_field: str, fmt: str = '', regression=False,
               is_training=True, require_labels=True):
  """(examples, skipped Counter) of a classification / regression file."""
  path = _check_file(path)
  examples, skipped, spellings = [], collections.Counter(), {}
  records = read_records(path, fmt)
  has_labels = require_labels or any(label_field in r for _, r in records[:1])
  for number, record in records:
    texts = [_text_of(path, number, f, _field(path, number, record, f)).strip() for f in fields]
    if not all(texts):
      empty = fields[texts.index('')]
      if is_training:
        skipped['empty_text'] += 1
        continue
      raise ValueError(f'{path}:{number}: field {empty!r} is empty: every eval and test example '
                       'must have its text (remove the row or fill it in).')
    label = None
    if has_labels:
      label = _label_value(path, number, _field(path, number, record, label_field), regression)
      if label == '':
        if is_training:
          skipped['empty_label'] += 1
          continue
        raise ValueError(f'{path}:{number}: field {label_field!r} is empty.')
      if not regression:
        _check_spelling(path, number, label, spellings)
    examples.append(Example(f'{files.name(path)}:{number}', texts[0],
                            texts[1] if len(texts) > 1 else None, label))
  if not examples:
    raise ValueError(f'{path} holds no usable examples ({dict(skipped) or "no data rows"}).')
  return examples, skipped


def _as_number(label):
  try:
    return float(label)
  except (TypeError, ValueError):
    return None


def _check_spelling(path, number, label, spellings):
  """An error when `label` is a number another label of the file spells otherwise (`1` and
  `1.0`, `01`): they would be two classes. `spellings`: number -> (label, line) seen first."""
  value = _as_number(label)
  if value is None:
    return
  first, line = spellings.setdefault(value, (label, number))
  if first != label:
    raise ValueError(f'{path}:{number}: label {label!r} is the number that line {line} writes '
                     f'{first!r}: they would be two classes; write every one of them {first!r}.')


def _columns(line: str) -> list[str]:
  """A CoNLL line's columns: separated by spaces or tabs only (as the format is written)."""
  return [c for c in line.replace('\t', ' ').split(' ') if c]


class _TagScheme:
  """Where a file's first chunk tag (B-/I-/E-/S-/L-/U-TYPE) and first other tag (not O) are:
  a file holding both is an error unless config.data.tag_scheme=plain."""

  def __init__(self, path, tag_scheme):
    self.path, self.check, self.first = path, tag_scheme.lower() != 'plain', {}

  def add(self, number, tag):
    if not self.check or tag == 'O':
      return
    kind = 'chunk' if _chunk_tag(tag) else 'plain'
    self.first.setdefault(kind, (number, tag))
    if len(self.first) == 2:
      (chunk_line, chunk), (plain_line, plain) = self.first['chunk'], self.first['plain']
      raise ValueError(f'{self.path}:{plain_line}: tag {plain!r} is not O or a chunk tag, but '
                       f'line {chunk_line} has the chunk tag {chunk!r}: use one tag scheme in a '
                       'file, or set config.data.tag_scheme=plain (scored per token).')


def read_tagged(path, *, fmt: str = '', token_column: int = 0, tag_column: int = -1,
                tokens_field='tokens', tags_field='tags', is_training=True, require_labels=True,
                tag_scheme='auto'):
  """(sentences, skipped Counter) of a CoNLL column file or JSONL with tokens and tags lists.

  Column files: one word per line, blank lines between sentences, `-DOCSTART-` lines skipped;
  the word and tag columns are config.data.token_column / tag_column (negative from the end).
  Every word line must have the columns of the file's first one (columns are separated by
  spaces or tabs; TSV: by tabs). Tags are strings; a file mixing chunk tags (B-X) with other
  tags than O is an error unless `tag_scheme` is 'plain'.
  """
  path = _check_file(path)
  fmt = format_of(path, fmt, allowed=('conll', 'jsonl', 'tsv'))
  text = _read_text(path)
  _check_content(path, 'conll' if fmt == 'tsv' else fmt, text)
  sentences, skipped = [], collections.Counter()
  scheme = _TagScheme(path, tag_scheme)
  if fmt == 'jsonl':
    for number, record in read_records(path, 'jsonl'):
      tokens = _field(path, number, record, tokens_field)
      tags = _field(path, number, record, tags_field) if require_labels else None
      if not isinstance(tokens, list) or (tags is not None and not isinstance(tags, list)):
        raise ValueError(f'{path}:{number}: {tokens_field!r} and {tags_field!r} must be lists.')
      if tags is not None and len(tags) != len(tokens):
        raise ValueError(f'{path}:{number}: {len(tokens)} tokens but {len(tags)} tags: one tag '
                         'per token.')
      for i, tag in enumerate(tags or ()):
        if not isinstance(tag, str) or not tag.strip():
          raise ValueError(f'{path}:{number}: {tags_field}[{i}] is {json.dumps(tag)[:40]}, not '
                           'a tag: every tag is a non-empty JSON string.')
        scheme.add(number, tag.strip())
      for i, token in enumerate(tokens):
        if token is not None and not isinstance(token, str):
          raise ValueError(f'{path}:{number}: {tokens_field}[{i}] is a {_json_type(token)} '
                           f'({json.dumps(token)[:40]}), not a word: write it as a JSON string.')
      if not tokens or not all(_text(t).strip() for t in tokens):
        if is_training:
          skipped['empty_text'] += 1
          continue
        raise ValueError(f'{path}:{number}: an empty token list or token: every eval and test '
                         'sentence must have its words.')
      tokens = tuple(_text(t).strip() for t in tokens)
      sentences.append(Sentence(tokens, tuple(t.strip() for t in tags) if tags is not None
                                else ('O',) * len(tokens)))
    return _nonempty(path, sentences, skipped)
  words, tags = [], []
  width = None  # (columns, line) of the first word line.
  for number, line in enumerate(paths.split_lines(text), 1):
    columns = line.split('\t') if fmt == 'tsv' else _columns(line)
    if not line.strip() or columns[0].strip() == '-DOCSTART-':
      if words:
        sentences.append(Sentence(tuple(words), tuple(tags)))
        words, tags = [], []
      continue
    width = width or (len(columns), number)
    if len(columns) != width[0]:
      raise ValueError(f'{path}:{number}: {len(columns)} columns where line {width[1]} has '
                       f'{width[0]} ({line.strip()[:60]!r}): every word line needs the same '
                       'columns; fix the line (a word holds no space).')
    try:
      word = columns[token_column].strip()
      tag = columns[tag_column].strip() if require_labels else 'O'
    except IndexError:
      raise ValueError(f'{path}:{number}: {len(columns)} columns, but config.data.token_column='
                       f'{token_column} and tag_column={tag_column}: {line.strip()[:60]!r}.'
                       ) from None
    if require_labels and len(columns) < 2:
      raise ValueError(f'{path}:{number}: {line.strip()!r} has no tag column: lines are '
                       '`word ... tag`.')
    if require_labels:
      scheme.add(number, tag)
    words.append(word)
    tags.append(tag)
  if words:
    sentences.append(Sentence(tuple(words), tuple(tags)))
  return _nonempty(path, sentences, skipped)


def _nonempty(path, items, skipped):
  if not items:
    raise ValueError(f'{path} holds no usable examples ({dict(skipped) or "no data rows"}).')
  return items, skipped


SWAG_FIELDS = ('sent1', 'sent2', 'ending0', 'ending1', 'ending2', 'ending3')


def read_swag(path, *, is_training=True, require_labels=True):
  """(questions, skipped) of SWAG's CSV: the context is sent1, a choice is `sent2 ending<i>`."""
  path = _check_file(path)
  questions, skipped = [], collections.Counter()
  records = read_records(path, format_of(path, 'csv'))
  has_labels = require_labels or 'label' in records[0][1]
  for number, record in records:
    context, start, *endings = [_text(_field(path, number, record, f)).strip()
                                for f in SWAG_FIELDS]
    label = None
    if has_labels:
      label = _choice_label(path, number, _field(path, number, record, 'label'), len(endings))
    _add_question(questions, skipped, path, number, context,
                  tuple(f'{start} {ending}'.strip() for ending in endings), label, is_training)
  return _nonempty(path, questions, skipped)


def _add_question(questions, skipped, path, number, context, choices, label, is_training):
  """Appends a complete question; one with an empty context or choice is skipped and counted
  in training, an error (file:line) in eval and test."""
  if not context or not all(choices):
    if not is_training:
      raise ValueError(f'{path}:{number}: an empty context or choice: every eval and test '
                       'question must be complete.')
    skipped['empty_text'] += 1
    return
  questions.append(Choices(f'{files.name(path)}:{number}', context, choices, label))


def _choice_label(path, number, value, num_choices):
  try:
    label = int(value)
  except (TypeError, ValueError):
    raise ValueError(f'{path}:{number}: label {value!r} is not a choice index (0..'
                     f'{num_choices - 1}).') from None
  if not 0 <= label < num_choices:
    raise ValueError(f'{path}:{number}: label {label} is not a choice index (0..'
                     f'{num_choices - 1}).')
  return label


def read_choices(path, *, fmt='', context_field='context', choices_field='choices',
                 label_field='label', is_training=True, require_labels=True):
  """(questions, skipped) of JSONL `{"context": ..., "choices": [...], "label": index}` rows.

  Every row must have as many choices as the first one (the head scores a fixed number).
  """
  path = _check_file(path)
  questions, skipped = [], collections.Counter()
  num_choices, first = None, None
  for number, record in read_records(path, format_of(path, fmt or 'jsonl', ('jsonl',))):
    context = _text(_field(path, number, record, context_field)).strip()
    choices = _field(path, number, record, choices_field)
    if not isinstance(choices, list) or len(choices) < 2:
      raise ValueError(f'{path}:{number}: {choices_field!r} must be a list of at least two '
                       'choices.')
    if num_choices is None:
      num_choices, first = len(choices), number
    elif len(choices) != num_choices:
      raise ValueError(f'{path}:{number}: {len(choices)} choices, but line {first} has '
                       f'{num_choices}: every question needs the same number of choices.')
    label = None
    if require_labels or label_field in record:
      label = _choice_label(path, number, _field(path, number, record, label_field),
                            len(choices))
    _add_question(questions, skipped, path, number, context,
                  tuple(_text(c).strip() for c in choices), label, is_training)
  return _nonempty(path, questions, skipped)


def labels_of(examples, *, attr='label') -> tuple[str, ...]:
  """The label set of training examples, sorted (numeric strings by value)."""
  seen = {getattr(e, attr) for e in examples}

  def key(label):
    try:
      return (0, float(label), label)
    except ValueError:
      return (1, 0.0, label)

  return tuple(sorted(seen, key=key))


def _chunk_tag(tag):
  return len(tag) > 2 and tag[1] == '-' and tag[0] in 'BIESLU'


def tags_of(sentences) -> tuple[str, ...]:
  """The tag set of training sentences: 'O' first (when present), then by type and prefix.

  With chunk tags (B-/I-/E-/S-/L-/U-TYPE), every prefix the data uses is added for every type
  it has: an eval sentence may hold I-X where training only had one-word X chunks.
  """
  seen = {tag for s in sentences for tag in s.tags}
  if all(t == 'O' or _chunk_tag(t) for t in seen):
    prefixes = {t[0] for t in seen if t != 'O'}
    seen |= {f'{p}-{t[2:]}' for t in seen if t != 'O' for p in prefixes}

  def key(tag):
    prefix, _, kind = tag.partition('-')
    return (tag != 'O', kind if kind else prefix, 'BIELSU'.find(prefix), prefix)

  return tuple(sorted(seen, key=key))


def check_labels(labelled, labels, what: str):
  """An error for a label training never had, listing those it had; `labelled` yields
  (where, labels of one example)."""
  known = set(labels)
  for where, values in labelled:
    for value in values:
      if value is not None and value not in known:
        same = [k for k in labels if _as_number(value) is not None and
                _as_number(k) == _as_number(value)]
        fix = (f'write it {same[0]!r} as training does' if same else
               'fix the label or add training examples with it')
        raise ValueError(f'{where}: {what} label {value!r} never occurs in the training data, '
                         f'whose labels are {list(labels)}: {fix}.')

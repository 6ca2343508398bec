"""A user's own task files read into examples: texts, tags or choices, with any labels.

What transformers' examples read with `train_file` and what the original run_classifier.py
made users write a DataProcessor for. Each reader returns examples in the types the kinds'
feature code takes (the GLUE readers' `Example`, CoNLL's `Sentence`, `Choices` for multiple
choice) plus a Counter of what it skipped.

Every row keeps where it came from (`file:line`), so every error names it. Rules:
* the format is the file's extension (.csv, .tsv, .jsonl/.json, and for tagging .conll/.txt
  columns) unless `data.format` says otherwise, and the content must agree with it (the rows
  are read by user_formats.py);
* a field that is missing is an error naming the file, the line and the fields there are;
* an empty text (a CSV / TSV row of only separators too, and a text of only invisible
  characters: zero-width, control, which the model would read as the empty text) is skipped and
  counted in training data (a scraped corpus has some), and is an error in eval and test data
  (every example there must be scored);
* labels are whatever strings the data holds (numbers for regression); an eval or test label
  that training never had is an error listing the ones it had (user_labels.py).
"""

import collections
import dataclasses
import json
import re

from bertjax import console
from bertjax import files
from bertjax import text_files
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import user_formats
from bertjax.finetune.tasks import user_labels
from bertjax.pretraining_data import text_input

Example = glue.Example


@dataclasses.dataclass(frozen=True)
class Sentence(conll.Sentence):
  """conll's sentence with where it was read, so that an error names it: `file:line` of its
  first word (its JSON row), and each word's line. Not compared: a sentence is its words and
  tags."""

  guid: str = dataclasses.field(default='', compare=False)
  lines: tuple[int, ...] = dataclasses.field(default=(), compare=False)

  def where(self, index: int) -> str:
    """`file:line (word N, 'word')` of word `index` ('' when not read from a file)."""
    if not self.guid or not self.lines:
      return ''
    return (f'{self.guid.rpartition(":")[0]}:{self.lines[index]} (word {index + 1}, '
            f'{self.words[index]!r})')


@dataclasses.dataclass(frozen=True)
class Choices:
  """One multiple-choice question: a context, its candidate continuations, the gold index."""

  guid: str
  context: str
  choices: tuple[str, ...]
  label: int | None  # Index into choices; None in unlabelled (test) data.


# A new run names its file's fields; a trained run (its resume, eval and predict) reads the
# fields it was trained with (run_config.RUN_FIELDS refuses another value).
_NAMED_BY_CONFIG = ('A new run: set config.data.text_fields / label_field to the names in your '
                    'file; a trained run (resume, eval, predict) reads the names it was trained '
                    'with: rename the file\'s fields to them.')


def _field(path, number, record, name, fix=_NAMED_BY_CONFIG):
  if name not in record:
    raise ValueError(f'{path}:{number}: no field {name!r}; the row has '
                     f'{", ".join(map(repr, record))}. {fix}')
  return record[name]


def _text(value) -> str:
  if value is None:
    return ''
  return value if isinstance(value, str) else str(value)


def _visible(text) -> bool:
  """Whether `text` holds a character the tokenizer keeps: not only spaces and invisible ones
  (zero-width, control: text_input.has_text's rule), which the model would read as the empty
  text ([CLS] [SEP]), as bertjax.predict refuses them."""
  return bool(text) and text_input.has_text(text)


def _no_text(text) -> str:
  """How an eval or test text without a visible character is said ('' when it has one)."""
  return ('' if _visible(text) else 'is empty' if not text else
          f'holds only invisible characters ({text[:20]!r}: zero-width, control), which the model '
          'would read as the empty text')


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


def read_texts(path, *, fields, label_field: str, fmt: str = '', regression=False,
               is_training=True, require_labels=True):
  """(examples, skipped Counter) of a classification / regression file."""
  path = user_formats.check_file(path)
  examples, skipped, spellings = [], collections.Counter(), {}
  records = user_formats.read_records(path, fmt)
  _warn_of_an_unread_second_text(path, records, fields)
  for number, record in records:
    texts = [_text_of(path, number, f, _field(path, number, record, f)).strip() for f in fields]
    if not all(map(_visible, texts)):
      if is_training:
        skipped['empty_text'] += 1
        continue
      empty = next(i for i, text in enumerate(texts) if not _visible(text))
      raise ValueError(f'{path}:{number}: field {fields[empty]!r} {_no_text(texts[empty])}: every '
                       'eval and test example must have its text (remove the row or fill it in).')
    label = None
    # A test file's rows may each have a label or none (missing, empty: no gold answer).
    if require_labels or _text(record.get(label_field)).strip():
      label = user_labels.label_value(path, number, _field(path, number, record, label_field),
                                      regression)
      if label == '':
        if is_training:
          skipped['empty_label'] += 1
          continue
        raise ValueError(f'{path}:{number}: field {label_field!r} is empty.')
      if not regression:
        user_labels.check_spelling(path, number, label, spellings)
    examples.append(Example(f'{files.name(path)}:{number}', texts[0],
                            texts[1] if len(texts) > 1 else None, label))
  if not examples:
    raise ValueError(f'{path} holds no usable examples ({dict(skipped) or "no data rows"}).')
  return examples, skipped


# Field names of a pair's second text (GLUE's, ours): one of them beside a one-text model's field
# holds a text it would never read (training warns; predict reads it, and such a model refuses).
SECOND_TEXTS = ('text_b', 'sentence2', 'text_pair', 'question2', 'hypothesis')


def _warn_of_an_unread_second_text(path, records, fields):
  if len(fields) != 1:
    return
  unread = next((name for name in SECOND_TEXTS if name != fields[0] and any(
      _text(record.get(name)).strip() for _, record in records[:100])), None)
  if unread:
    console.warn_once('%s has a field %r that config.data.text_fields=%s does not read: the '
                      'model reads %r alone; for text pairs set --config.data.text_fields=%s,%s',
                      path, unread, fields[0], fields[0], fields[0], unread)


def _columns(line: str) -> list[str]:
  """A CoNLL line's columns: separated by spaces or tabs only (as the format is written)."""
  return [c for c in line.replace('\t', ' ').split(' ') if c]


def read_tagged(path, *, fmt: str = '', token_column: int = 0, tag_column: int = -1,
                tokens_field='tokens', tags_field='tags', is_training=True, require_labels=True,
                tag_scheme='auto'):
  """(sentences, skipped Counter) of a CoNLL column file or JSONL with tokens and tags lists.

  Column files: one word per line, blank lines between sentences, `-DOCSTART-` lines skipped;
  the word and tag columns are config.data.token_column / tag_column (negative from the end).
  Every word line must have the columns of the file's first one (columns are separated by
  spaces or tabs; TSV: by tabs). Tags are strings; a file mixing chunk tags (B-X) with other
  tags than O is an error unless `tag_scheme` is 'plain'. Each sentence is named `file:line`
  (its first word's line, its JSON row). A sentence without a visible word (only zero-width or
  control characters) is skipped and counted in training data, an error in eval and test data.

  require_labels=False (test data) keeps the tags a file has and gives a file without them
  (JSONL without the tags field, a column file of one column) the tag None for every word: no
  gold, never invented. A JSONL file with tags in some rows and not in others is an error.
  """
  path = user_formats.check_file(path)
  source = user_formats.said_by(fmt)
  fmt = user_formats.format_of(path, fmt, allowed=('conll', 'jsonl', 'tsv'))
  text = user_formats.file_text(path)
  # A column file has no header: its first line is a word's (a TSV word line may lack a tab).
  user_formats.check_content(path, fmt, text, source, header=False)
  scheme = user_labels.TagScheme(path, tag_scheme)
  if fmt == 'jsonl':
    sentences, skipped = _tagged_records(path, tokens_field, tags_field, scheme, is_training,
                                         require_labels, source)
  else:
    sentences, skipped = _tagged_lines(path, text, fmt, token_column, tag_column, scheme,
                                       is_training, require_labels)
  return _nonempty(path, sentences, skipped)


def _add_sentence(sentences, skipped, path, lines, words, tags, is_training):
  """Appends a sentence whose words are at `lines` (one each) that has a visible word; one
  without is skipped and counted in training, an error in eval and test (predict refuses it)."""
  number = lines[0]
  if not any(map(_visible, words)):
    if not is_training:
      raise ValueError(f'{path}:{number}: the sentence {_no_text(" ".join(words).strip())}: '
                       'every eval and test sentence must have its words.')
    skipped['empty_text'] += 1
    return
  sentences.append(Sentence(tuple(words), tuple(tags), f'{files.name(path)}:{number}',
                            tuple(lines)))


def _tagged_records(path, tokens_field, tags_field, scheme, is_training, require_labels,
                    source):
  """read_tagged's JSONL: (sentences, skipped) of rows with a tokens list and a tags list."""
  sentences, skipped = [], collections.Counter()
  records = user_formats.read_records(path, 'jsonl', source)
  first = None  # (line, has tags) of the first row, where tags are optional.
  for number, record in records:
    tokens = _field(path, number, record, tokens_field)
    if require_labels:
      tags = _field(path, number, record, tags_field)
      if tags is None:
        raise ValueError(f'{path}:{number}: {tags_field!r} is null: every training and eval '
                         'sentence needs its tags (a list, one per token).')
    else:  # Tags all or none: a file read as untagged from its first row dropped later gold.
      tags = record.get(tags_field)
      first = first or (number, tags is not None)
      if (tags is not None) != first[1]:
        has, other = ('has', 'has none') if tags is not None else ('has no', 'has them')
        raise ValueError(f'{path}:{number}: the row {has} {tags_field!r}, but line {first[0]} '
                         f'{other}: a file\'s rows have tags all or none (gold tags in some rows '
                         'would be dropped or missing): write them in every row, or in none.')
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
    _add_sentence(sentences, skipped, path, [number] * len(tokens),
                  [_text(t).strip() for t in tokens],
                  [t.strip() for t in tags] if tags is not None else [None] * len(tokens),
                  is_training)
  return sentences, skipped


def _tagged_lines(path, text, fmt, token_column, tag_column, scheme, is_training,
                  require_labels):
  """read_tagged's column files (CoNLL, TSV): (sentences, skipped), one word per line."""
  sentences, skipped, words, tags, lines = [], collections.Counter(), [], [], []
  width = None  # (columns, line) of the first word line.
  for number, line in enumerate(text_files.split_lines(text), 1):
    columns = line.split('\t') if fmt == 'tsv' else _columns(line)
    if not line.strip() or columns[0].strip() == '-DOCSTART-':
      if words:
        _add_sentence(sentences, skipped, path, lines, words, tags, is_training)
        words, tags, lines = [], [], []
      continue
    width = width or (len(columns), number)
    if len(columns) != width[0]:
      raise ValueError(f'{path}:{number}: {len(columns)} columns where line {width[1]} has '
                       f'{width[0]} ({line.strip()[:60]!r}): every word line needs the same '
                       'columns; fix the line (a word holds no space).')
    # Unlabelled data may have a single column, the words: then no word has a gold tag.
    has_tag = require_labels or len(columns) > 1
    try:
      word = columns[token_column].strip()
      tag = columns[tag_column].strip() if has_tag else None
    except IndexError:
      raise ValueError(f'{path}:{number}: {len(columns)} columns, but config.data.token_column='
                       f'{token_column} and tag_column={tag_column}: {line.strip()[:60]!r}.'
                       ) from None
    if require_labels and len(columns) < 2:
      raise ValueError(f'{path}:{number}: {line.strip()!r} has no tag column: lines are '
                       '`word ... tag`.')
    if has_tag:
      scheme.add(number, tag)
    words.append(word)
    tags.append(tag)
    lines.append(number)
  if words:
    _add_sentence(sentences, skipped, path, lines, words, tags, is_training)
  return sentences, skipped


def _nonempty(path, items, skipped):
  if not items:
    raise ValueError(f'{path} holds no usable examples ({dict(skipped) or "no data rows"}).')
  return items, skipped


SWAG_FIELDS = ('sent1', 'sent2', 'ending0', 'ending1', 'ending2', 'ending3')
_SWAG_NAMES = ('task=swag reads SWAG\'s columns by their names: sent1, sent2, ending0..ending3 '
               'and label (task=multiple_choice reads JSON lines of context, choices, label).')


def read_swag(path, *, fmt='', is_training=True, require_labels=True):
  """(questions, skipped) of SWAG's CSV (or TSV): the context is sent1, a choice is
  `sent2 ending<i>`; an empty ending is an empty choice (skipped in training, an error in eval
  and test, as predict refuses it)."""
  path = user_formats.check_file(path)
  questions, skipped = [], collections.Counter()
  # SWAG's files are CSV: read as CSV whatever their name, but a .tsv (or data.format).
  extension = user_formats.extension_format(path)
  default = 'tsv' if extension == 'tsv' else 'csv'
  named = fmt or extension in ('csv', 'tsv')
  records = user_formats.read_records(path, user_formats.format_of(path, fmt or default,
                                                                   ('csv', 'tsv')),
                                      user_formats.said_by(fmt) if named else
                                      "task=swag (SWAG's CSV)")
  more = sorted(name for name in (records[0][1] if records else ()) if re.fullmatch(
      r'ending\d+', name) and name not in SWAG_FIELDS)
  if more:
    raise ValueError(f'{path}: columns {", ".join(more)} beside ending0..ending3: SWAG\'s '
                     'questions have 4 endings, and the others would be dropped; for another '
                     'number of choices use task=multiple_choice (JSON lines of context, '
                     'choices, label).')
  for number, record in records:
    context, start, *endings = [_text(_field(path, number, record, f, _SWAG_NAMES)).strip()
                                for f in SWAG_FIELDS]
    if not any(_text(value).strip() for value in record.values()):  # A row of separators.
      _add_question(questions, skipped, path, number, '', (), None, is_training)
      continue
    label = _choice_label(path, number, _field(path, number, record, 'label', _SWAG_NAMES)
                          if require_labels else record.get('label'), len(endings),
                          require_labels)
    _add_question(questions, skipped, path, number, context,
                  tuple(f'{start} {ending}'.strip() if ending else '' for ending in endings),
                  label, is_training)
  return _nonempty(path, questions, skipped)


def _add_question(questions, skipped, path, number, context, choices, label, is_training):
  """Appends a complete question; one with an empty context or choice (or one of only
  invisible characters) is skipped and counted in training, an error (file:line) in eval and
  test."""
  if not _visible(context) or not all(map(_visible, choices)):
    if not is_training:
      empty = next(text for text in (context, *choices) if not _visible(text))
      said = f' (one {_no_text(empty)})' if empty else ''
      raise ValueError(f'{path}:{number}: an empty context or choice{said}: every eval and test '
                       'question must be complete.')
    skipped['empty_text'] += 1
    return
  questions.append(Choices(f'{files.name(path)}:{number}', context, choices, label))


def _choice_label(path, number, value, num_choices, required=True):
  """A choice index: an integer (a JSON number, or its digits in a CSV cell); None for a row
  without one where labels are not `required` (a test file's)."""
  if not required and (value is None or (isinstance(value, str) and not value.strip())):
    return None
  try:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
      raise ValueError  # true is not 1, nor 0.9 choice 0.
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
  path = user_formats.check_file(path)
  questions, skipped = [], collections.Counter()
  num_choices, first = None, None
  named = fmt or user_formats.extension_format(path) == 'jsonl'
  source = user_formats.said_by(fmt) if named else 'task=multiple_choice (JSON lines)'
  fmt = user_formats.format_of(path, fmt or 'jsonl', ('jsonl',))
  names = (f'task=multiple_choice reads the fields {context_field}, {choices_field} and '
           f'{label_field} (task=swag reads SWAG\'s CSV).')
  for number, record in user_formats.read_records(path, fmt, source):
    context = _text_of(path, number, context_field,
                       _field(path, number, record, context_field, names)).strip()
    choices = _field(path, number, record, choices_field, names)
    if not isinstance(choices, list) or len(choices) < 2:
      raise ValueError(f'{path}:{number}: {choices_field!r} must be a list of at least two '
                       'choices.')
    choices = [_text_of(path, number, f'{choices_field}[{i}]', c) for i, c in enumerate(choices)]
    if num_choices is None:
      num_choices, first = len(choices), number
    elif len(choices) != num_choices:
      raise ValueError(f'{path}:{number}: {len(choices)} choices, but line {first} has '
                       f'{num_choices}: every question needs the same number of choices.')
    label = _choice_label(path, number, _field(path, number, record, label_field, names)
                          if require_labels else record.get(label_field), len(choices),
                          require_labels)
    _add_question(questions, skipped, path, number, context,
                  tuple(_text(c).strip() for c in choices), label, is_training)
  return _nonempty(path, questions, skipped)


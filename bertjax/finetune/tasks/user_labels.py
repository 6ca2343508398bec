"""Labels and tags of a user's data: their values, one spelling each, their sets from training
data, one tag scheme per file, and an eval or test label training never had refused.
"""

import collections
import json
import math

from absl import logging
import numpy as np


def label_value(path, number, value, regression):
  if regression:
    try:
      # Python's float reads 1_000 as 1000, where no CSV or JSON reader does.
      if isinstance(value, str) and '_' in value:
        raise ValueError
      label = float(value)
    except (TypeError, ValueError):
      raise ValueError(f'{path}:{number}: label {value!r} is not a number (regression '
                       'labels are numbers, written without _: 1000, not 1_000).') from None
    if not np.isfinite(label):
      raise ValueError(f'{path}:{number}: label {value!r} is not a finite number.')
    with np.errstate(over='ignore'):
      beyond = np.isinf(np.float32(label))
    if beyond:  # Finite as a Python float, infinite as the float32 the model computes in.
      raise ValueError(f'{path}:{number}: label {value!r} is beyond float32\'s range (about '
                       '3.4e38), which the model computes in: scale the labels down.')
    return label
  if isinstance(value, (list, dict)):  # Its repr would become a class named "['negative']".
    kind = 'object' if isinstance(value, dict) else 'list'
    raise ValueError(f'{path}:{number}: the label is a {kind} ({json.dumps(value)[:40]}), not '
                     'a single value: write it as a JSON string or number.')
  if isinstance(value, bool) or value is None:
    return str(value).lower() if value is not None else ''
  if isinstance(value, float) and value.is_integer():
    value = int(value)
  return str(value).strip()


def _as_number(label):
  if isinstance(label, str) and '_' in label:  # float('1_0') is 10: '1_0' is not the number.
    return None
  try:
    return float(label)
  except (TypeError, ValueError):
    return None


def check_spelling(path, number, label, spellings):
  """An error when `label` is a number another label of the file spells otherwise (`1` and
  `1.0`, `01`), or a label another one writes in another case (`pos` and `Pos`, `nan` and `NaN`):
  they would be two classes. `spellings`: number or casefolded text -> (label, line) seen first."""
  first, line = _first_spelling(label, number, spellings)
  if first != label:
    raise _two_spellings(f'{path}:{number}', label, f'line {line}', first)


def _first_spelling(label, where, spellings):
  """(label, where) of the first label that is `label`'s number, or `label` in any case;
  `label` itself if none. NaN is told by its text: it equals no number, not even itself."""
  value = _as_number(label)
  key = ('text', label.casefold()) if value is None or math.isnan(value) else value
  return spellings.setdefault(key, (label, where))


def _two_spellings(where, label, first_where, first) -> ValueError:
  if label.casefold() == first.casefold():
    return ValueError(f'{where}: label {label!r} is {first!r} at {first_where} in another case: '
                      f'they would be two classes; write each label one way ({first!r}).')
  return ValueError(f'{where}: label {label!r} is the number that {first_where} writes '
                    f'{first!r}: they would be two classes; write every one of them {first!r}.')


def labels_of(examples, *, attr='label') -> tuple[str, ...]:
  """The label set of training examples, sorted (numeric strings by value). A number spelled
  two ways, or a label written in two cases, is an error across files (examples named
  `file:line`) as it is within one."""
  spellings = {}
  for example in examples:
    label = getattr(example, attr)
    first, where = _first_spelling(label, example.guid, spellings)
    if first != label:
      raise _two_spellings(example.guid, label, where, first)
  seen = collections.Counter(getattr(e, attr) for e in examples)
  _warn_of_cut_labels(examples, attr, seen)

  def key(label):
    # nan and inf sort as text: NaN compares false both ways, which made the order depend on
    # the set's (hash-seeded) order, and a resumed run then saw its labels as changed.
    value = _as_number(label)
    if value is None or not math.isfinite(value):
      return (1, 0.0, label)
    return (0, value, label)

  return tuple(sorted(seen, key=key))


def _warn_of_cut_labels(examples, attr: str, counts: collections.Counter):
  """Warns of a label given once that begins another label: the signature of a file cut short
  in its last row (`...,pos` cut to `...,po` made a third class without a word). Numbers are
  left alone (1 and 10 are labels of their own)."""
  for label, count in counts.items():
    if count != 1 or not isinstance(label, str) or _as_number(label) is not None:
      continue
    longer = sorted(other for other in counts if other != label and other.startswith(label))
    if longer:
      where = next(e.guid for e in examples if getattr(e, attr) == label)
      logging.warning('label %r is given once (%s) and begins label %r (%d examples): a row cut '
                      'short (a file copied in part?); fix that row, or go on if %r is a label '
                      'of its own', label, where, longer[0], counts[longer[0]], label)


def chunk_tag(tag) -> bool:
  """A chunk tag: B-/I-/E-/S-/L-/U- and a type (IOB1/IOB2/IOBES/BILOU)."""
  return len(tag) > 2 and tag[1] == '-' and tag[0] in 'BIESLU'


class TagScheme:
  """Where a file's first chunk tag (B-/I-/E-/S-/L-/U-TYPE) and first other tag (not O) are:
  a file holding both is an error unless config.data.tag_scheme=plain."""

  def __init__(self, path, tag_scheme):
    self.path, self.check, self.first = path, tag_scheme.lower() != 'plain', {}

  def add(self, number, tag):
    if not self.check or tag == 'O':
      return
    kind = 'chunk' if chunk_tag(tag) else 'plain'
    self.first.setdefault(kind, (number, tag))
    if len(self.first) == 2:
      (chunk_line, chunk), (plain_line, plain) = self.first['chunk'], self.first['plain']
      raise ValueError(f'{self.path}:{plain_line}: tag {plain!r} is not O or a chunk tag, but '
                       f'line {chunk_line} has the chunk tag {chunk!r}: use one tag scheme in a '
                       'file, or set config.data.tag_scheme=plain (scored per token).')


def tags_of(sentences) -> tuple[str, ...]:
  """The tag set of training sentences: 'O' first (when present), then by type and prefix.

  With chunk tags (B-/I-/E-/S-/L-/U-TYPE), every prefix the data uses is added for every type
  it has: an eval sentence may hold I-X where training only had one-word X chunks.
  """
  seen = {tag for s in sentences for tag in s.tags}
  if all(t == 'O' or chunk_tag(t) for t in seen):
    prefixes = {t[0] for t in seen if t != 'O'}
    seen |= {f'{p}-{t[2:]}' for t in seen if t != 'O' for p in prefixes}

  def key(tag):
    prefix, _, kind = tag.partition('-')
    return (tag != 'O', kind if kind else prefix, 'BIELSU'.find(prefix), prefix)

  return tuple(sorted(seen, key=key))


def check_labels(labelled, labels, what: str, dropped=(), dropped_fix=''):
  """An error for a label training never had, listing those it had; `labelled` yields
  (where, labels of one example). `dropped`: labels the training file has that
  config.data.max_train_examples left out (`dropped_fix` says what to do)."""
  known = set(labels)
  for where, values in labelled:
    for value in values:
      if value is not None and value not in known:
        same = [k for k in labels if _as_number(value) is not None and
                _as_number(k) == _as_number(value)] or [
                    k for k in labels if str(k).casefold() == str(value).casefold()]
        fix = (f'write it {same[0]!r} as training does' if same else dropped_fix
               if value in dropped else 'fix the label or add training examples with it')
        raise ValueError(f'{where}: {what} label {value!r} never occurs in the training data, '
                         f'whose labels are {list(labels)}: {fix}.')

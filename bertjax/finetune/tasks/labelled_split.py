"""A deterministic train/eval split, stratified by label, of labelled texts with no official one.

Duplicates are what would make such a split lie: a copy in train and one in eval is a free
correct answer. So a reader keeps one copy of every text (compared lowercased with whitespace
collapsed, as the uncased tokenizer and TF-IDF see it) and drops every copy of a text that
carries different labels (unlearnable), counting what it dropped into the caller's `stats`.

Examples have the fields of the GLUE readers' (guid, text_a, text_b, label), so the same
feature conversion applies.
"""

import collections
import typing

from absl import logging
import numpy as np

# Held-out share used by the fine-tuning config (config.data.eval_fraction) and the benchmark.
DEFAULT_EVAL_FRACTION = 0.2


class Example(typing.NamedTuple):
  """One labelled text; the fields (and their meaning) of the GLUE readers' examples."""

  guid: str  # Unique id, e.g. 'bbc-<topic>-<file stem>' or 'wordnet-<pos>-<offset>'.
  text_a: str
  text_b: str | None = None  # None for BBC News and WordNet: they classify a single text.
  label: str | None = None  # A name, e.g. from bbc_news.BBC_LABELS or wordnet_glosses.SUPERSENSES.


def normalised(*texts) -> tuple:
  """Texts as the uncased tokenizer and TF-IDF see them: lowercased, whitespace collapsed (how
  copies of a text are told apart)."""
  return tuple(' '.join(t.lower().split()) if t else t for t in texts)


def _dedup_key(example):
  return normalised(example.text_a, example.text_b)


def keep_one_per_group(examples, group_of) -> tuple[list, int, int]:
  """(kept, copies dropped, ambiguous dropped): the first example of each group (`group_of(i)`
  names example i's) when the whole group shares one label; none of a group whose labels differ
  (unlearnable)."""
  keys = [group_of(i) for i in range(len(examples))]
  groups = collections.defaultdict(list)
  for i, key in enumerate(keys):
    groups[key].append(i)
  kept, copies, ambiguous = [], 0, 0
  for i, example in enumerate(examples):
    group = groups[keys[i]]
    if len({examples[j].label for j in group}) > 1:
      ambiguous += 1
    elif group[0] == i:
      kept.append(example)
    else:
      copies += 1
  return kept, copies, ambiguous


def drop_duplicates(examples, stats, what):
  """Keeps the first copy of each text; drops all copies of a text that has different labels."""
  keys = [_dedup_key(example) for example in examples]
  kept, duplicates, ambiguous = keep_one_per_group(examples, keys.__getitem__)
  stats['duplicate_dropped'] += duplicates
  stats['ambiguous_dropped'] += ambiguous
  if duplicates or ambiguous:
    logging.info('%s: dropped %d repeated copies of a text and %d copies of texts that carry '
                 'different labels; %d examples kept.', what, duplicates, ambiguous, len(kept))
  return kept


def _quotas(sizes, total):
  """Per-label counts summing to `total`, proportional to sizes (largest remainder)."""
  count = sum(sizes.values())
  if total is None or total >= count:
    return dict(sizes)
  quotas = {label: size * total // count for label, size in sizes.items()}
  # The leftover goes to the largest fractional parts; ties by label, so the result is stable.
  order = sorted(sizes, key=lambda label: (-(sizes[label] * total % count), label))
  for label in order[:total - sum(quotas.values())]:
    quotas[label] += 1
  return quotas


def _check_max(name, value):
  """None (or -1, the config's spelling) = all; otherwise a positive int."""
  if value is None or value == -1:
    return None
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
    raise ValueError(f'{name}={value!r}: pass a positive number of examples, or None / -1 for '
                     'all of them.')
  return int(value)


def split(examples, *, eval_fraction, seed, max_train=None, max_eval=None):
  """(train, eval): a deterministic split stratified by label, optionally subsampled.

  Each label's examples (ordered by guid, so the input order does not matter) are shuffled with
  `seed`; the first round(eval_fraction * n) go to eval, the rest to train. max_train / max_eval
  then keep that many examples of each side, spread over the labels in proportion to their size
  (None or -1 = all). The subsample is a subset of the full split, so an eval set is the same
  whatever max_train is. Both lists come back shuffled, so a prefix mixes the labels too.
  """
  if not examples:
    raise ValueError('split() got no examples: the reader returned nothing to split.')
  if not 0 < eval_fraction < 1:
    raise ValueError(f'eval_fraction={eval_fraction!r} must be strictly between 0 and 1.')
  max_train, max_eval = _check_max('max_train', max_train), _check_max('max_eval', max_eval)
  by_label = collections.defaultdict(list)
  guids = set()
  for example in examples:
    if example.label is None:
      raise ValueError(f'example {example.guid!r} has no label: split() stratifies by label.')
    if example.guid in guids:
      raise ValueError(f'guid {example.guid!r} occurs twice: guids must be unique to split.')
    guids.add(example.guid)
    by_label[example.label].append(example)
  rng = np.random.default_rng(seed)
  train_by_label, eval_by_label = {}, {}
  for label in sorted(by_label):
    group = sorted(by_label[label], key=lambda e: e.guid)
    group = [group[i] for i in rng.permutation(len(group))]
    # Round half up (not Python's half-to-even), so equal-sized labels get equal eval shares.
    num_eval = int(np.floor(len(group) * eval_fraction + 0.5))
    eval_by_label[label], train_by_label[label] = group[:num_eval], group[num_eval:]

  def take(groups, total, stream):
    quotas = _quotas({label: len(group) for label, group in groups.items()}, total)
    chosen = [e for label in sorted(groups) for e in groups[label][:quotas[label]]]
    # Own generator per side: the eval order does not depend on how much train was kept.
    order = np.random.default_rng([seed, stream]).permutation(len(chosen))
    return [chosen[i] for i in order]

  train = take(train_by_label, max_train, 1)
  evaluation = take(eval_by_label, max_eval, 2)
  if not train or not evaluation:
    largest = max(len(group) for group in by_label.values())
    raise ValueError(f'{len(examples)} examples at eval_fraction={eval_fraction} leave '
                     f'{len(train)} for training and {len(evaluation)} for eval: both need some '
                     f'(each of the {len(by_label)} labels holds out its own share, and the '
                     f'largest has {largest} examples): set config.data.eval_file, or another '
                     'eval_fraction.')
  logging.info('split: %d train, %d eval examples over %d labels (seed %d).', len(train),
               len(evaluation), len(by_label), seed)
  return train, evaluation

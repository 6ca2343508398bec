"""Which of a user's examples a task reads: the eval split held out of training when there is
no eval file (seeded random here, or labelled_split.py's stratified one; a text's copies kept on
one side) and the max_train_examples / max_eval_examples samples (each label kept where they
allow).

user_tasks.py's splits call these on the rows user_data.py read; the samples are fixed (not
config.seed's), so a resume with another seed reads the same examples.
"""

import collections
import hashlib

from absl import logging
import numpy as np


def random_split(items, fraction, seed):
  """(train, eval) of unlabelled-for-stratifying items: a seeded permutation, eval first."""
  if not 0 < fraction < 1:
    raise ValueError(f'config.data.eval_fraction={fraction!r} must be strictly between 0 and 1.')
  order = np.random.default_rng(seed).permutation(len(items))
  num_eval = max(1, int(np.floor(len(items) * fraction + 0.5)))
  if num_eval >= len(items):
    raise ValueError(f'{len(items)} training examples are too few to hold out '
                     f'eval_fraction={fraction}: set config.data.eval_file.')
  return [items[i] for i in order[num_eval:]], [items[i] for i in order[:num_eval]]


def limit(items, maximum, sample=False, labels_of=None):
  """At most `maximum` items (None or -1: all): the first of items shuffled already; with
  `sample`, a fixed sample kept in file order, not the file's first rows (a file sorted by label
  would lose whole labels). Fixed, not config.seed's: a resume with another seed reads the same.
  With `labels_of` (an item's labels or tags), a label those left out is kept where `maximum`
  allows (the label set is read from what is kept): _keep_every_label."""
  if maximum is None or maximum < 0 or maximum >= len(items):
    return items
  if not sample:
    chosen = list(range(maximum))
  else:
    chosen = sorted(np.random.default_rng(0).permutation(len(items))[:maximum].tolist())
  if labels_of is not None:
    chosen = _keep_every_label(items, chosen, labels_of)
  return [items[i] for i in chosen]


def _keep_every_label(items, chosen, labels_of):
  """`chosen` (ascending indices into items) with the first item of each label it lacks in
  place of the last chosen item whose every label another chosen item has too; as `chosen`
  where it holds every label (so the runs that lost none read what they read before), and short
  of some where there is no such item left (`maximum` below the number of labels)."""
  counts = collections.Counter(label for i in chosen for label in set(labels_of(items[i])))
  kept = set(chosen)
  for i, item in enumerate(items):
    labels = set(labels_of(item))
    if i in kept or all(counts[label] for label in labels):
      continue
    spare = next((j for j in sorted(kept, reverse=True)
                  if all(counts[label] > 1 for label in set(labels_of(items[j])))), None)
    if spare is None:
      break
    kept.remove(spare)
    counts.subtract(set(labels_of(items[spare])))
    kept.add(i)
    counts.update(labels)
  return sorted(kept)


def texts_digest(keys) -> str:
  """sha256 over a set of examples' texts (their normalised keys, in sorted order): which
  examples a split held out, whatever order or sample of them was read."""
  digest = hashlib.sha256()
  for key in sorted(repr(key) for key in keys):
    digest.update(key.encode() + b'\n')
  return digest.hexdigest()


def split_by_text(split, items, key):
  """`split` over the first item of each text (`key`), its copies following it: a held-out
  text has no copy in training (a free right answer), and no row is dropped."""
  groups = collections.defaultdict(list)
  for item in items:
    groups[key(item)].append(item)
  if len(groups) == len(items):
    return split(items)
  copies = {id(group[0]): group for group in groups.values()}
  try:
    train, held_out = split([group[0] for group in groups.values()])
  except ValueError as e:  # Its counts are of texts: said so.
    raise ValueError(f'{len(items)} rows hold {len(groups)} distinct texts (the copies of a '
                     f'text stay on one side of the held-out split): {e}') from None
  logging.info('%d rows repeat a text: the copies of each text kept on one side of the held-out '
               'split', len(items) - len(groups))
  return ([c for first in train for c in copies[id(first)]],
          [c for first in held_out for c in copies[id(first)]])

"""WordNet 3.0 glosses as labelled texts: a synset's definition -> its supersense.

Debian's wordnet-base: `data.{noun,verb,adj,adv}`; the label is the synset's lexicographer
file, one of the 45 supersenses (`noun.artifact`, `verb.motion`, ...). The text is the
definition alone (the gloss before its first `; "example"`). The synset's words are left out on
purpose: polysemous words have senses in the same lexicographer file, so with them the eval set
could be solved by remembering which words went where in training, and the task would stop
measuring whether the model understands the definition. WordNet repeats definitions ("the act
of swimming") across synsets: repeats are dropped before a split (labelled_split.py).
"""

import collections
import os
import re

from absl import logging

from bertjax import files
from bertjax.finetune.tasks import labelled_split

# WordNet's lexicographer files in file-number order (the `lexnames` file of WordNet 3.0): the
# 2-digit lex_filenum of a data line indexes this tuple.
SUPERSENSES = (
    'adj.all', 'adj.pert', 'adv.all', 'noun.Tops', 'noun.act', 'noun.animal', 'noun.artifact',
    'noun.attribute', 'noun.body', 'noun.cognition', 'noun.communication', 'noun.event',
    'noun.feeling', 'noun.food', 'noun.group', 'noun.location', 'noun.motive', 'noun.object',
    'noun.person', 'noun.phenomenon', 'noun.plant', 'noun.possession', 'noun.process',
    'noun.quantity', 'noun.relation', 'noun.shape', 'noun.state', 'noun.substance', 'noun.time',
    'verb.body', 'verb.change', 'verb.cognition', 'verb.communication', 'verb.competition',
    'verb.consumption', 'verb.contact', 'verb.creation', 'verb.emotion', 'verb.motion',
    'verb.perception', 'verb.possession', 'verb.social', 'verb.stative', 'verb.weather',
    'adj.ppl')

# data.<file> -> the ss_type letters its synsets may have ('s': adjective satellite).
_WORDNET_FILES = {'noun': 'n', 'verb': 'v', 'adj': 'as', 'adv': 'r'}
# ss_type -> the supersense prefix its lexicographer file must have.
_POS_PREFIX = {'n': 'noun.', 'v': 'verb.', 'a': 'adj.', 's': 'adj.', 'r': 'adv.'}
# `offset lex_filenum ss_type ...`: an 8-digit byte offset, a 2-digit file number, a type letter.
_SYNSET_HEAD = re.compile(r'(\d{8}) (\d{2}) ([nvasr]) ')
# Where a gloss's examples start: `; "` (a few glosses have ` ; "` or `;"`). A quote inside a
# definition ('in the phrase "make strides"') has no semicolon before it.
_EXAMPLE_START = re.compile(r'\s*;\s*"')


def parse_synset(line, path, line_number):
  """(offset, ss_type, supersense, definition) of one data.<pos> line; raises if malformed."""
  head = _SYNSET_HEAD.match(line)
  if not head or ' | ' not in line:
    raise ValueError(
        f'{path}:{line_number}: not a WordNet data line ("offset lex_filenum ss_type ... | '
        f'gloss"): {line[:60]!r}. Pass the folder of WordNet 3.0\'s data.* files.')
  offset, lex_filenum, ss_type = head.group(1), int(head.group(2)), head.group(3)
  if lex_filenum >= len(SUPERSENSES) or not SUPERSENSES[lex_filenum].startswith(
      _POS_PREFIX[ss_type]):
    raise ValueError(
        f'{path}:{line_number}: lexicographer file {lex_filenum:02d} is not a '
        f'{_POS_PREFIX[ss_type]}* supersense of WordNet 3.0 for synset type {ss_type!r}: is this '
        'WordNet 3.0 (Debian wordnet-base)?')
  gloss = line.split(' | ', 1)[1].strip()
  definition = _EXAMPLE_START.split(gloss, maxsplit=1)[0].rstrip('; ')
  if definition.startswith('"'):
    definition = ''  # A gloss that is only an example sentence has no definition.
  return offset, ss_type, SUPERSENSES[lex_filenum], definition


def read_wordnet(directory, *, stats=None):
  """WordNet synsets as Examples: definition -> supersense; duplicates and ambiguity dropped.

  stats (a collections.Counter, optional) receives 'synsets_read', 'no_definition_dropped',
  'duplicate_dropped' and 'ambiguous_dropped'.
  """
  stats = collections.Counter() if stats is None else stats
  root = os.fspath(directory)  # A local folder or a URL.
  examples = []
  for pos, ss_types in _WORDNET_FILES.items():
    path = files.join(root, f'data.{pos}')
    if not files.isfile(path):
      raise FileNotFoundError(
          f'{path} does not exist: pass the folder of WordNet 3.0\'s data.{{noun,verb,adj,adv}} '
          '(apt-get install wordnet-base puts them in /usr/share/wordnet).')
    synsets = 0
    with files.open(path, 'rb') as f:
      for line_number, raw in enumerate(f, start=1):
        try:
          line = raw.decode('utf-8')
        except UnicodeDecodeError as error:
          raise ValueError(f'{path}:{line_number}: not UTF-8 ({error}): the file is damaged; '
                           'reinstall wordnet-base.') from None
        if line.startswith('  '):  # The licence header: lines start with two spaces.
          continue
        offset, ss_type, supersense, definition = parse_synset(line, path, line_number)
        if ss_type not in ss_types:
          raise ValueError(f'{path}:{line_number}: synset type {ss_type!r} in data.{pos}, '
                           f'which holds only {ss_types!r}: the data files are mixed up.')
        synsets += 1
        if not definition:
          stats['no_definition_dropped'] += 1
          continue
        examples.append(labelled_split.Example(f'wordnet-{pos}-{offset}', definition, None,
                                               supersense))
    if not synsets:
      raise ValueError(f'{path} holds no synsets: the file is truncated; reinstall wordnet-base.')
    stats['synsets_read'] += synsets
  if stats['no_definition_dropped']:
    logging.info('WordNet: %d glosses without a definition skipped.',
                 stats['no_definition_dropped'])
  return labelled_split.drop_duplicates(examples, stats, f'WordNet ({root})')

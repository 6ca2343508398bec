"""How much of its training text a learned vocab leaves unknown, said (or refused) before it is
written: WordPiece's characters past --max_alphabet, SentencePiece's past --character_coverage
(a script of thousands of characters, emoji, accents lost to [UNK] without a word)."""

from absl import logging

# Words lost to [UNK] by the characters past max_alphabet: refused over the share of [UNK]
# tokens create_pretraining_data refuses by default, said over a tenth of a percent.
_MAX_UNK_WORDS, _SAID_UNK_WORDS = 0.05, 0.001


def check_alphabet(words, kept, max_alphabet):
  """Refuses (or warns of) characters past `max_alphabet` that turn many words into [UNK]: a
  script of thousands of characters (CJK) lost silently to the default of 1000."""
  kept = set(kept)
  lost = sum(count for word, count in words.items() if not kept.issuperset(word))
  share = lost / sum(words.values())
  if share <= _SAID_UNK_WORDS:
    return
  distinct = len(set().union(*words))
  said = (f'the corpus has {distinct} distinct characters and --max_alphabet={max_alphabet} keeps '
          f'the {max_alphabet} most frequent: the rest make {share:.1%} of the words [UNK]')
  if share > _MAX_UNK_WORDS:
    raise ValueError(f'{said}, more than {_MAX_UNK_WORDS:.0%}: the vocab would not fit the '
                     'text (create_pretraining_data refuses more than 5% of the tokens [UNK]); '
                     f'pass --max_alphabet={distinct} (and a --vocab_size that holds them and '
                     'their ##-forms)')
  logging.warning('%s; pass --max_alphabet=%d to keep them all', said, distinct)


# The lines of the training text SentencePiece's pieces are checked on (its first ones).
_SAMPLE_LINES = 20_000


def sampled(lines, sample: list):
  """`lines`, the first _SAMPLE_LINES of them kept in `sample` as they go by."""
  for line in lines:
    if len(sample) < _SAMPLE_LINES:
      sample.append(line)
    yield line


def check_pieces(model: bytes, sample: list, character_coverage: float):
  """Warns of a SentencePiece `model` that leaves many of the tokens of `sample`
  (its training text's first lines) <unk>: the characters --character_coverage left out."""
  if character_coverage >= 1 or not sample:
    return
  import sentencepiece  # pylint: disable=g-import-not-at-top
  processor = sentencepiece.SentencePieceProcessor(model_proto=model)
  unk = processor.unk_id()
  ids = processor.encode(sample)
  share = sum(i == unk for line in ids for i in line) / max(sum(map(len, ids)), 1)
  if share <= _SAID_UNK_WORDS:
    return
  left = sorted({c for line in sample for c in line if not c.isspace()
                 and processor.piece_to_id(c) == unk})
  shown = ''.join(left[:20]) + ('...' if len(left) > 20 else '')
  said = (f'--character_coverage={character_coverage:g} leaves {len(left)} characters out of '
          f'the pieces ({shown}): {share:.1%} of the tokens of the training text are <unk>')
  # Said, not refused: a coverage of 0.98 or more leaves at most 2% of the characters out, and
  # create_pretraining_data refuses data with more than 5% of its tokens unknown.
  logging.warning('%s; pass --character_coverage=1.0 to keep them all', said)

"""A vocab's casing told from its tokens (cased, uncased, or a script without case) and checked
against do_lower_case: a cased vocab read lower-cased never produces its upper-case tokens, an
uncased one read cased turns capitalised words into [UNK] or odd pieces.
"""

import re

# A vocab is taken as cased when at least this fraction of its word tokens has upper case.
_CASED_FRACTION = 0.01
# SentencePiece's byte pieces (byte_fallback): upper-case hex whatever the model's casing.
_BYTE_PIECE = re.compile(r'<0x[0-9A-F]{2}>')


def _words(vocab):
  """The tokens of `vocab` that tell its casing: not specials ([CLS]) nor byte pieces."""
  return [t for t in vocab if not (t.startswith('[') and t.endswith(']'))
          and not _BYTE_PIECE.fullmatch(t)]


def vocab_looks_cased(vocab):
  """Whether enough word tokens of `vocab` contain upper case to call it a cased vocab."""
  words = _words(vocab)
  upper = sum(1 for t in words if t != t.lower())
  return upper >= max(1, _CASED_FRACTION * len(words))


def _casing_fix(lower: bool) -> str:
  """What validate_case_matches_vocab tells a data or training run to pass."""
  if lower:
    return ('pass do_lower_case=True for an uncased checkpoint (--do_lower_case for '
            'create_pretraining_data, --config.data.do_lower_case=true for fine-tuning)')
  return ('pass do_lower_case=False for a cased checkpoint (--nodo_lower_case for '
          'create_pretraining_data, --config.data.do_lower_case=false for fine-tuning)')


def validate_case_matches_vocab(vocab, do_lower_case, vocab_name='vocab', fix=None):
  """Raises ValueError when the casing of `vocab` contradicts `do_lower_case`; `fix(lower)`
  says what to pass for the casing that reads it (lower: do_lower_case=True) in the tool that
  set it (None: the data and training runs' settings)."""
  fix = fix or _casing_fix
  if do_lower_case and vocab_looks_cased(vocab):
    examples = [t for t in _words(vocab) if t != t.lower()][:5]
    raise ValueError(
        f'{vocab_name} is a cased vocab (upper-case tokens such as {examples}) but '
        f'do_lower_case=True, so those tokens could never be produced: {fix(False)}')
  # Uncased: no upper-case word token at all (a cased vocab learned from mostly lower-case
  # text holds a few, under the cased fraction: either casing reads it), but lower-case ones.
  # A vocab of scripts without case (CJK, Thai, Arabic, ...) is neither: either setting reads
  # it, and --nodo_lower_case keeps accents such as kana's voicing marks.
  words = _words(vocab)
  if (not do_lower_case and not any(t != t.lower() for t in words)
      and any(t != t.upper() for t in words)):
    raise ValueError(
        f'{vocab_name} is an uncased vocab (no upper-case word tokens) but do_lower_case=False, '
        f'so capitalised words would become [UNK] or odd pieces: {fix(True)}')

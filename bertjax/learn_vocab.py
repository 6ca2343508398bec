r"""Learns a WordPiece vocab.txt (BERT) or a SentencePiece .model (ALBERT) from text files.

  python -m bertjax.learn_vocab --input_file='corpus/*.txt,more.txt.gz' \
      --output_file=vocab.txt --vocab_size=8192 --do_lower_case

Input: one sentence per line, blank lines between documents (create_pretraining_data's format);
`.gz` files are read decompressed. The WordPiece vocab has [PAD] [UNK] [CLS] [SEP] [MASK] at ids
0-4 and exactly --vocab_size lines (keep it a multiple of 128 for TPU-friendly matmuls); the
SentencePiece model has <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4, as ALBERT's. The
console's last line says how many entries were written where.
"""

import sys
import time

from absl import app
from absl import flags
from absl import logging

from bertjax import console
from bertjax import paths
from bertjax.text import vocab_learner

MODELS = ('wordpiece', 'sentencepiece')

_INPUT_FILE = flags.DEFINE_string('input_file', None, 'Comma-separated text files and globs.')
_OUTPUT_FILE = flags.DEFINE_string(
    'output_file', None, 'Where to write: vocab.txt (wordpiece) or a .model (sentencepiece).')
_VOCAB_SIZE = flags.DEFINE_integer(
    'vocab_size', None, 'Entries in the vocab, special tokens included; a multiple of 128.',
    lower_bound=8)
_DO_LOWER_CASE = flags.DEFINE_boolean(
    'do_lower_case', True, 'Lower-case and strip accents first (uncased); --nodo_lower_case '
    'for a cased vocab. Must match the --do_lower_case the vocab is later used with.')
_MODEL = flags.DEFINE_enum('model', 'wordpiece', MODELS, 'What to learn.')
_NUM_UNUSED = flags.DEFINE_integer(
    'num_unused', 0, 'wordpiece: [unusedN] slots after the special tokens, for tokens added '
    'when fine-tuning without resizing the embeddings.', lower_bound=0)
_MIN_FREQUENCY = flags.DEFINE_integer(
    'min_frequency', 2, 'wordpiece: pieces seen fewer times are not learned (slots left over '
    'become [unusedN]).', lower_bound=1)
_MAX_ALPHABET = flags.DEFINE_integer(
    'max_alphabet', 1000, 'wordpiece: characters kept, most frequent first; words with other '
    'characters become [UNK]. Raise it for corpora in scripts with many characters (CJK).',
    lower_bound=1)
_CHARACTER_COVERAGE = flags.DEFINE_float(
    'character_coverage', 1.0, 'sentencepiece: fraction of characters covered (ALBERT: '
    '0.99995; ~0.9995 for CJK).', lower_bound=0.0, upper_bound=1.0)
_SPM_MODEL_TYPE = flags.DEFINE_enum('spm_model_type', 'unigram', ['unigram', 'bpe'],
                                    'sentencepiece: the algorithm (ALBERT: unigram).')
_INPUT_SENTENCE_SIZE = flags.DEFINE_integer(
    'input_sentence_size', 0, 'sentencepiece: train on this many sampled lines (0: all).',
    lower_bound=0)
_NUM_THREADS = flags.DEFINE_integer('num_threads', 1, 'sentencepiece: trainer threads.',
                                    lower_bound=1)
flags.mark_flags_as_required(['input_file', 'output_file', 'vocab_size'])


def main(argv):
  start = time.perf_counter()
  console.refuse_arguments(argv, '--input_file=..., --output_file=..., --vocab_size=...')
  try:
    vocab_learner.check_output_name(_MODEL.value, _OUTPUT_FILE.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  except OSError as e:  # A bucket that does not exist, no network: one line.
    _fail(_one_line(e))
  try:
    metrics, outputs = _learn()
  except UnicodeDecodeError as e:
    _fail(f'the input is not UTF-8 text ({e.reason} at byte {e.start}): convert it '
          f'first, {paths.reencode_hint(e.object[:64])}')
  except (ValueError, OSError, RuntimeError, EOFError) as e:
    # Bad input or settings (a missing or empty file, a vocab_size the text cannot fill, an
    # output folder that cannot be written): one line, not a traceback.
    if logging.get_verbosity() >= logging.DEBUG:
      raise
    _fail(_one_line(e))
  if _VOCAB_SIZE.value % 128:
    logging.warning('vocab_size=%d is not a multiple of 128: the embedding and MLM-decoder '
                    'matmuls pad it on TPUs', _VOCAB_SIZE.value)
  console.summary('learn_vocab', time.perf_counter() - start, metrics=metrics, outputs=outputs)


def _learn() -> tuple[list, list]:
  """Learns and writes the vocab; (metrics, outputs) for the summary line."""
  output = paths.absolute(_OUTPUT_FILE.value)
  if _MODEL.value == 'wordpiece':
    vocab = vocab_learner.learn_wordpiece(
        _INPUT_FILE.value, _OUTPUT_FILE.value, _VOCAB_SIZE.value, _DO_LOWER_CASE.value,
        num_unused=_NUM_UNUSED.value, min_frequency=_MIN_FREQUENCY.value,
        max_alphabet=_MAX_ALPHABET.value)
    return [('tokens', len(vocab))], [('vocab', output)]
  vocab_learner.learn_sentencepiece(
      _INPUT_FILE.value, _OUTPUT_FILE.value, _VOCAB_SIZE.value, _DO_LOWER_CASE.value,
      model_type=_SPM_MODEL_TYPE.value, character_coverage=_CHARACTER_COVERAGE.value,
      input_sentence_size=_INPUT_SENTENCE_SIZE.value, num_threads=_NUM_THREADS.value)
  return [('pieces', _VOCAB_SIZE.value)], [('SentencePiece model', output)]


def _one_line(error: BaseException) -> str:
  if isinstance(error, OSError) and error.filename and error.strerror:
    return f'{error.strerror}: {error.filename}'
  text = ' '.join(str(error).split()) or type(error).__name__
  return text


def _fail(message: str):
  sys.stderr.flush()
  print(f'learn_vocab: error: {message}', file=sys.stderr)
  sys.exit(1)


if __name__ == '__main__':
  app.run(main)

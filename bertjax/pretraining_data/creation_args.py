"""create_pretraining_data's settings checked before any file is read or any worker starts:
the numbers in range, exactly one tokenizer and one input, the vocab complete and fit for the
masking, and the worker count and input format resolved. Each refusal names the flag at fault.
"""

import os

from bertjax.pretraining_data import text_input
from bertjax.text import vocab_files

TOKENIZERS = ('auto', 'fast', 'reference')
# The fast tokenizer needs TensorFlow, whose import takes ~2.5 s per worker; the reference
# tokenizer runs at ~2M tokens (~8 MB) per second. Below this much input per worker, 'auto'
# takes the reference path.
FAST_TOKENIZER_MIN_BYTES = 24 << 20
# Above this fraction of [UNK] tokens the vocab does not fit the text (a truncated vocab, the
# wrong casing or script): refused unless --max_unk_fraction is raised.
MAX_UNK_FRACTION = 0.05


def default_num_workers() -> int:
  """The cores this process may use."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not Linux.
    return os.cpu_count() or 1


def check_numbers(random_seed, num_output_shards, max_line_bytes, max_unk_fraction,
                  shuffle_buffer=1):
  """Refuses settings out of range before any work, naming the flag."""
  for name, value, low in (('random_seed', random_seed, 0), ('num_output_shards',
                           num_output_shards, 0), ('max_line_bytes', max_line_bytes, 1),
                           ('shuffle_buffer', shuffle_buffer, 1)):
    if value < low:
      raise ValueError(f'--{name}={value}: need >= {low}')
  if not 0 <= max_unk_fraction <= 1:  # nan too: it would let any vocab through.
    raise ValueError(f'--max_unk_fraction={max_unk_fraction}: a fraction of the tokens, in '
                     f'[0, 1] (default {MAX_UNK_FRACTION})')


def check_sources(tokenizer, vocab_file, spm_model_file, input_file, tfds):
  """Refuses a tokenizer choice, vocab pair or input pair that names not exactly one."""
  if tokenizer not in TOKENIZERS:
    raise ValueError(f'tokenizer={tokenizer!r}: pass one of {TOKENIZERS}')
  if (not vocab_file) == (not spm_model_file):
    raise ValueError('pass exactly one of --vocab_file (WordPiece) and --spm_model_file')
  if spm_model_file and tokenizer != 'auto':  # Not silently the one path it has.
    raise ValueError(f'--tokenizer={tokenizer} chooses the WordPiece path, but --spm_model_file '
                     'is tokenized by SentencePiece itself: drop --tokenizer')
  if (not input_file) == (tfds is None):
    raise ValueError('pass exactly one input: --input_file (text files) or --tfds_name (a '
                     f'TFDS dataset); got {"both" if input_file else "neither"}')


def checked_vocab(vocab_file, spm_model_file, do_lower_case, settings) -> dict:
  """The vocab, refused here, in the parent, before any worker starts, when it is missing, its
  casing contradicts do_lower_case, it lacks a token every instance needs, or (SentencePiece)
  its pieces end words where static masking finds words by their starts."""
  vocab = vocab_files.from_files(vocab_file or None, spm_model_file or None,
                                 do_lower_case=do_lower_case).vocab
  missing = [t for t in ('[CLS]', '[SEP]', '[MASK]') if t not in vocab]
  if missing:
    raise ValueError(f'the vocab has no {missing}: instances need [CLS], [SEP] and [MASK]')
  if spm_model_file and settings.static_masking:
    vocab_files.check_word_starts(vocab, settings.masking, f'--spm_model_file={spm_model_file}',
                                  '--masking=wordpiece')
  return vocab


def checked_workers_and_format(num_workers, input_format, input_file) -> tuple[int, str]:
  """num_workers (None: the cores available) and input_format (None: 'lines' for files, 'text'
  for a TFDS dataset), refused where they name nothing."""
  num_workers = default_num_workers() if num_workers is None else num_workers
  if num_workers < 1:
    raise ValueError(f'num_workers={num_workers}: need at least 1')
  input_format = ('lines' if input_file else 'text') if input_format is None else input_format
  if input_format not in text_input.INPUT_FORMATS:
    raise ValueError(f'input_format={input_format!r}: pass one of {text_input.INPUT_FORMATS}')
  return num_workers, input_format

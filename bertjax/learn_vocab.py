r"""Learns a WordPiece vocab.txt (BERT) or a SentencePiece .model (ALBERT) from text files.

  python -m bertjax.learn_vocab --input_file='corpus/*.txt,more.txt.gz' \
      --output_file=vocab.txt --vocab_size=8192 --do_lower_case

Input: one sentence per line, blank lines between documents (create_pretraining_data's format);
`.gz` files are read decompressed. The WordPiece vocab has [PAD] [UNK] [CLS] [SEP] [MASK] at ids
0-4 and exactly --vocab_size lines (keep it a multiple of 128 for TPU-friendly matmuls); the
SentencePiece model has <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4, as ALBERT's. The
console's last line says how many entries were written where.

Every input is checked before any is read, as create_pretraining_data checks them (empty,
binary, pipes and folders skipped and said); lines over --max_line_bytes are skipped and
counted, and so are a few lines that are not UTF-8 (a file with more than 3 of them that are
over 1% of its lines is refused, as create_pretraining_data refuses it). An existing
--output_file is replaced only with --overwrite, and only once the new vocab is whole; a
second run on the same local output at once is refused (its lock).
"""

import sys
import time

from absl import app
from absl import flags
from absl import logging

from bertjax import command_flags
from bertjax import console
from bertjax import job_lines
from bertjax import output_lock
from bertjax import paths
from bertjax import text_files
from bertjax.pretraining_data import text_input
from bertjax.text import vocab_learner

MODELS = ('wordpiece', 'sentencepiece')
# The flags only one --model reads; the others are read by both.
MODEL_FLAGS = {'wordpiece': ('num_unused', 'min_frequency', 'max_alphabet'),
               'sentencepiece': ('character_coverage', 'spm_model_type', 'input_sentence_size',
                                 'num_threads', 'random_seed')}
FLAGS = flags.FLAGS


def _define_flags():
  """Flags exist only when this module is the program (create_pretraining_data, imported in the
  same process, defines some of the same names)."""
  flags.DEFINE_string('input_file', None, 'Comma-separated text files and globs.')
  flags.DEFINE_string(
      'output_file', None, 'Where to write: vocab.txt (wordpiece) or a .model (sentencepiece).')
  flags.DEFINE_integer(
      'vocab_size', None, 'Entries in the vocab, special tokens included; a multiple of 128.',
      lower_bound=8, upper_bound=vocab_learner.MAX_VOCAB_SIZE)
  flags.DEFINE_boolean('overwrite', False, 'Replace an existing --output_file (once the new '
                       'vocab is whole); without it an existing file is refused.')
  flags.DEFINE_integer(
      'max_line_bytes', vocab_learner.MAX_LINE_BYTES, 'Longer lines are skipped and counted '
      "(create_pretraining_data's default).", lower_bound=1,
      upper_bound=vocab_learner.SPM_MAX_LINE_BYTES)
  flags.DEFINE_boolean(
      'do_lower_case', True, 'Lower-case and strip accents first (uncased); --nodo_lower_case '
      'for a cased vocab. Must match the --do_lower_case the vocab is later used with.')
  flags.DEFINE_enum('model', 'wordpiece', MODELS, 'What to learn.')
  flags.DEFINE_integer(
      'num_unused', 0, 'wordpiece: [unusedN] slots after the special tokens, for tokens added '
      'when fine-tuning without resizing the embeddings.', lower_bound=0)
  flags.DEFINE_integer(
      'min_frequency', 2, 'wordpiece: pieces seen fewer times are not learned (slots left over '
      'become [unusedN]).', lower_bound=1)
  flags.DEFINE_integer(
      'max_alphabet', 1000, 'wordpiece: characters kept, most frequent first; words with other '
      'characters become [UNK]. Raise it for corpora in scripts with many characters (CJK).',
      lower_bound=1)
  flags.DEFINE_float(
      'character_coverage', 1.0, 'sentencepiece: fraction of characters covered, 0.98 to 1 '
      '(ALBERT: 0.99995; ~0.9995 for CJK).')
  flags.DEFINE_enum(
      'spm_model_type', 'unigram', ['unigram', 'bpe'], 'sentencepiece: the algorithm (ALBERT: '
      "unigram). Export to hf, onnx or sentence_transformers needs unigram (transformers' "
      'AlbertTokenizer reads unigram models only): a bpe model exports to tf1 and saved_model '
      'only.')
  flags.DEFINE_integer(
      'input_sentence_size', 0, 'sentencepiece: train on this many lines sampled with '
      '--random_seed (0: all; else more than 100).')
  flags.DEFINE_integer('random_seed', 12345, 'sentencepiece, with --input_sentence_size: the '
                       "sample's seed; same inputs and seed, same bytes.", lower_bound=0,
                       upper_bound=2**32 - 1)
  flags.DEFINE_integer('num_threads', 1, 'sentencepiece: trainer threads, 1 to 1024. The same '
                       'count gives the same bytes; another may learn a few pieces apart.')


def main(argv):
  start = time.perf_counter()
  command_flags.refuse_arguments(argv, '--input_file=..., --output_file=..., --vocab_size=...')
  console.install()  # Libraries' INFO lines (TFDS's reader) only at --verbosity=1.
  # Ctrl-C or SIGTERM: one line, status 130 / 143, the temporary file and the lock removed; a
  # vocab is put in place whole by a rename, so one already there is kept.
  console.exit_on_interrupt(console.nothing_written(
      'no vocab was written (a file already at --output_file is kept)'), terminate=True)
  _check_flags()
  output = _checked_output()
  if FLAGS.model == 'sentencepiece' and FLAGS.spm_model_type != 'unigram':
    logging.warning('--spm_model_type=%s: transformers reads unigram models only, so this '
                    'model exports to tf1 and saved_model, not to hf, onnx or '
                    'sentence_transformers (pass --spm_model_type=unigram for those)',
                    FLAGS.spm_model_type)
  skips = text_input.Skips()
  try:
    # Before the corpus is read (its glob skips the lock: a hidden name).
    with output_lock.held(output, 'learn_vocab', f'writing {output}'):
      metrics, outputs = _learn(_inputs(skips), skips, output)
  except UnicodeDecodeError as e:
    _fail(f'the input is not UTF-8 text ({e.reason} at byte {e.start}): convert it '
          f'first, {text_files.reencode_hint(e.object[:64], e.object)}')
  except OSError as e:
    if said := paths.write_error(e, output):  # A full disk, or a file or folder not writable.
      _fail(said.rstrip('.'))
    if logging.get_verbosity() >= logging.DEBUG:
      raise
    _fail(_one_line(e))
  except (ValueError, RuntimeError, EOFError) as e:
    # Bad input or settings (a missing or empty file, a vocab_size the text cannot fill, an
    # output folder that cannot be written): one line, not a traceback.
    if logging.get_verbosity() >= logging.DEBUG:
      raise
    _fail(_one_line(e))
  if FLAGS.vocab_size % 128:
    logging.warning('vocab_size=%d is not a multiple of 128: the embedding and MLM-decoder '
                    'matmuls pad it on TPUs', FLAGS.vocab_size)
  job_lines.summary('learn_vocab', time.perf_counter() - start, metrics=metrics, outputs=outputs)


def _check_flags():
  """Refuses a flag the chosen --model does not read, and numbers its trainer would refuse."""
  other = next(m for m in MODELS if m != FLAGS.model)
  unread = [f'--{name}' for name in MODEL_FLAGS[other] if FLAGS[name].present]
  if unread:
    one = len(unread) == 1
    raise app.UsageError(f'{" and ".join(unread)} {"is" if one else "are"} read with '
                         f'--model={other} only: leave {"it" if one else "them"} out')
  if FLAGS['random_seed'].present and not FLAGS.input_sentence_size:
    raise app.UsageError('--random_seed seeds the sample of --input_sentence_size lines: pass '
                         'that too, or leave --random_seed out (every line is read)')
  try:
    vocab_learner.check_sentencepiece_settings(FLAGS.character_coverage,
                                               FLAGS.input_sentence_size, FLAGS.num_threads,
                                               FLAGS.max_line_bytes)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def _checked_output() -> str:
  """The output's absolute path (a link's target), refused before the corpus is read where
  writing it would lose something."""
  try:
    vocab_learner.check_output_name(FLAGS.model, FLAGS.output_file)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  except OSError as e:  # A bucket that does not exist, no network: one line.
    _fail(_one_line(e))
  try:  # Not into a bertjax run nor over a model's file, nor over a report.
    output = paths.check_output_file(FLAGS.output_file)
    vocab_learner.check_not_json(FLAGS.output_file)
    return output
  except (ValueError, OSError) as e:
    _fail(_one_line(e))


def _inputs(skips) -> list:
  """The input files, every one checked before any is read (create_pretraining_data's checks:
  empty, binary, pipes and folders skipped, counted in `skips`, and said)."""
  files = vocab_learner.resolve_inputs(FLAGS.input_file, FLAGS.output_file, FLAGS.overwrite)
  usable = text_input.usable_files(files, skips)
  what = ('words to learn a vocab' if FLAGS.model == 'wordpiece' else
          'text to learn a SentencePiece model')
  if not usable:
    raise ValueError(f'the input has no {what} from: {skips.described()}; pass files of UTF-8 '
                     'text')
  if skips.counts:
    logging.warning('skipped %s', skips.described())
  return usable


def _learn(files, skips, output: str) -> tuple[list, list]:
  """Learns and writes the vocab at `output` (the path checked and locked: a link's target);
  (metrics, outputs) for the summary line."""
  common = dict(files=files, overwrite=FLAGS.overwrite, max_line_bytes=FLAGS.max_line_bytes,
                skips=skips)
  if FLAGS.model == 'wordpiece':
    vocab = vocab_learner.learn_wordpiece(
        FLAGS.input_file, output, FLAGS.vocab_size, FLAGS.do_lower_case,
        num_unused=FLAGS.num_unused, min_frequency=FLAGS.min_frequency,
        max_alphabet=FLAGS.max_alphabet, **common)
    metrics, outputs = [('tokens', len(vocab))], [('vocab', output)]
  else:
    vocab_learner.learn_sentencepiece(
        FLAGS.input_file, output, FLAGS.vocab_size, FLAGS.do_lower_case,
        model_type=FLAGS.spm_model_type, character_coverage=FLAGS.character_coverage,
        input_sentence_size=FLAGS.input_sentence_size, num_threads=FLAGS.num_threads,
        seed=FLAGS.random_seed, **common)
    metrics, outputs = [('pieces', FLAGS.vocab_size)], [('SentencePiece model', output)]
  if skips.counts:
    metrics.append(('skipped', ' + '.join(f'{n} {why}' for why, n in sorted(
        skips.counts.items()))))
  return metrics, outputs


def _one_line(error: BaseException) -> str:
  if isinstance(error, OSError) and error.filename and error.strerror:
    return f'{error.strerror}: {error.filename}'
  text = ' '.join(str(error).split()) or type(error).__name__
  return text


def _fail(message: str):
  sys.stderr.flush()
  console.fail(f'learn_vocab: error: {message}')


if __name__ == '__main__':
  _define_flags()
  flags.mark_flags_as_required(['input_file', 'output_file', 'vocab_size'])
  prefix = 'learn_vocab: error: '
  app.run(command_flags.usage_said(main, prefix), flags_parser=command_flags.flags_parser(prefix))

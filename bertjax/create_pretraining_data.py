r"""Pre-training TFRecords from text, with the flags of google-research/bert's script.

  python -m bertjax.create_pretraining_data \
    --input_file='corpus/*.txt' --output_file=data/train --num_output_shards=8 \
    --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
    --max_predictions_per_seq=20 --dupe_factor=5 --num_workers=2

Input: one sentence per line and a blank line between documents (the original's format), or
with --input_format=text one paragraph per line, split into sentences here; files may be gzip,
bzip2 or xz compressed (bertjax/pretraining_data/text_input.py). Output: shards with
the original's features (files from either tool are interchangeable), or with
--nostatic_masking unmasked `input_ids, input_mask, segment_ids, next_sentence_labels` for
masking in the input pipeline; --masking=wordpiece|whole_word|ngram|span picks what the static
masks cover (bertjax/pretraining_data/masking.py; the original's --do_whole_word_mask is
--masking=whole_word, accepted with a warning); --nsp=false writes MLM-only instances (one
segment of contiguous sentences, no next_sentence_labels) for model.nsp=False. Beside them,
`<output>.json` holds the settings, the vocab's sha256 and the counts, skipped input included;
the console's last line sums them up (instances, documents, shards, where they are).
--tokenizer picks the WordPiece path (both exact, the same bytes): auto takes the pure-Python
reference for small inputs and tensorflow-text past 24 MiB per worker, where TensorFlow's
start-up pays off. Semantics and deliberate differences are in
bertjax/pretraining_data/instances.py; parallelism, determinism and atomic shards in
bertjax/pretraining_data/writer.py. On Shakespeare + KJV (8.5 MB, dupe_factor 5) expect about
116k instances in seconds; bench/create_pretraining_data_bench.py has the figures.

Instead of --input_file, --tfds_name reads a prepared TFDS dataset (Wikipedia, C4, your own
builder), one document per example's --tfds_text_field, each worker its own part of
--tfds_split (bertjax/pretraining_data/tfds_source.py); the report records the dataset.
"""

import time

from absl import app
from absl import flags

from bertjax import command_flags
from bertjax import console
from bertjax import job_lines
from bertjax import log_file
from bertjax import paths
from bertjax.pretraining_data import creation_args
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import masking
from bertjax.pretraining_data import shard_outputs
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import tfds_source
from bertjax.pretraining_data import writer

_D = instances.Settings()
_INPUT_FILE = flags.DEFINE_string('input_file', None, 'Comma-separated input files and globs.')
_TFDS_NAME = flags.DEFINE_string(
    'tfds_name', None, 'Instead of --input_file: a prepared TFDS dataset (wikipedia/20230601.en, '
    'your builder\'s name; name:version pins one), one document per example.')
_TFDS_SPLIT = flags.DEFINE_string('tfds_split', 'train', 'With --tfds_name: the split, in '
                                  "TFDS's syntax (train, train[:10%]).")
_TFDS_TEXT_FIELD = flags.DEFINE_string('tfds_text_field', 'text',
                                       'With --tfds_name: the text feature of each example.')
_TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'With --tfds_name: where it is '
                                     "prepared (default: TFDS's, ~/tensorflow_datasets).")
_OUTPUT_FILE = flags.DEFINE_string(
    'output_file', None, 'Comma-separated output files, or a prefix with --num_output_shards.')
_VOCAB_FILE = flags.DEFINE_string('vocab_file', None, 'WordPiece vocab.txt of the model.')
_SPM_MODEL_FILE = flags.DEFINE_string('spm_model_file', None,
                                      'SentencePiece .model instead of --vocab_file (ALBERT).')
_DO_LOWER_CASE = flags.DEFINE_bool('do_lower_case', True,
                                   'Lower-case the text; must match the vocab (checked).')
_MASKING = flags.DEFINE_enum(
    'masking', _D.masking, masking.STRATEGIES, 'What is masked, 15% of the tokens: wordpiece '
    '(BERT: each piece on its own), whole_word (every piece of a word), ngram (n-grams of 1-3 '
    "whole words, TF Model Garden's), span (SpanBERT's: whole-word spans of mean 3.8 words).")
_DO_WHOLE_WORD_MASK = flags.DEFINE_bool(
    'do_whole_word_mask', None, "The original script's name: --do_whole_word_mask is "
    '--masking=whole_word (accepted with a warning, so its command lines run).')
_MAX_SEQ_LENGTH = flags.DEFINE_integer('max_seq_length', _D.max_seq_length,
                                       'Tokens per instance, [CLS] and [SEP]s included.')
_MAX_PREDICTIONS = flags.DEFINE_integer('max_predictions_per_seq', _D.max_predictions_per_seq,
                                        'Most masked positions per instance.')
_RANDOM_SEED = flags.DEFINE_integer('random_seed', 12345, 'Seed; same seed and workers, '
                                    'same bytes.')
_DUPE_FACTOR = flags.DEFINE_integer('dupe_factor', _D.dupe_factor,
                                    'Passes over the input, each with new packing and masks.')
_MASKED_LM_PROB = flags.DEFINE_float('masked_lm_prob', _D.masked_lm_prob,
                                     'Fraction of tokens chosen for prediction, in (0, 1).')
_SHORT_SEQ_PROB = flags.DEFINE_float('short_seq_prob', _D.short_seq_prob,
                                     'Probability of a shorter target length.')
_NUM_WORKERS = flags.DEFINE_integer(
    'num_workers', 0, 'Worker processes; 0 = one per core available. The bytes written depend '
    'on the seed and the worker count (recorded in the report).')
_MAX_UNK_FRACTION = flags.DEFINE_float(
    'max_unk_fraction', creation_args.MAX_UNK_FRACTION,
    'Refuse (write nothing) when more of the tokens are [UNK]: the vocab does not fit the text.')
_NUM_OUTPUT_SHARDS = flags.DEFINE_integer(
    'num_output_shards', 0, 'Write <output_file>-0000i-of-0000N; 0: --output_file is a list.')
_INPUT_FORMAT = flags.DEFINE_enum('input_format', 'lines', text_input.INPUT_FORMATS,
                                  'lines: a sentence per line; text: a paragraph per line.')
_STATIC_MASKING = flags.DEFINE_bool(
    'static_masking', True, 'Mask here (the original); false: unmasked instances for the '
    "input pipeline's dynamic masking.")
_NSP = flags.DEFINE_bool(
    'nsp', _D.nsp, 'Sentence pairs with next_sentence_labels (BERT); false: MLM-only instances, '
    '[CLS] contiguous sentences of a document up to max_seq_length [SEP] (RoBERTa).')
_POOL_DOCUMENTS = flags.DEFINE_integer('pool_documents', _D.pool_documents,
                                       'NotNext segments come from this many nearby documents.')
_POOL_TOKENS = flags.DEFINE_integer('pool_tokens', _D.pool_tokens,
                                    'Most tokens held in that pool (bounds memory).')
_SHUFFLE_BUFFER = flags.DEFINE_integer('shuffle_buffer', 10_000,
                                       'Records shuffled per worker before writing.')
_OVERWRITE = flags.DEFINE_bool(
    'overwrite', False, 'Replace a set on --output_file made otherwise (other flags, vocab or '
    'input), or files there that no set claims; the same command run again remakes its set '
    'without it.')
_TOKENIZER = flags.DEFINE_enum(
    'tokenizer', 'auto', creation_args.TOKENIZERS,
    'WordPiece path (same ids either way): fast (tensorflow-text, needs TF: ~2.5 s to start '
    'per worker), reference (pure Python, ~4x slower per token), auto: fast past '
    f'{creation_args.FAST_TOKENIZER_MIN_BYTES >> 20} MiB of input per worker.')
_PACK = flags.DEFINE_bool(
    'pack', False, 'Pack several instances into each row of max_seq_length (first-fit '
    'decreasing within batches of 1024 instances): far less padding; train with '
    '--config.data.max_instances_per_row set to --max_instances_per_row.')
_MAX_INSTANCES_PER_ROW = flags.DEFINE_integer(
    'max_instances_per_row', 3, 'With --pack: the most instances in one row (MLPerf BERT: 3).')
_MAX_LINE_BYTES = flags.DEFINE_integer('max_line_bytes', 100_000,
                                       'Longer lines are skipped and counted.')


def masking_strategy(strategy: str, strategy_given: bool, do_whole_word_mask: bool | None):
  """--masking, with the original's --[no]do_whole_word_mask read as whole_word (wordpiece);
  returns (strategy, a warning or ''); raises app.UsageError when the two disagree."""
  if do_whole_word_mask is None:
    return strategy, ''
  whole = strategy != 'wordpiece'
  if strategy_given and whole != do_whole_word_mask:
    flag = '--do_whole_word_mask' if do_whole_word_mask else '--nodo_whole_word_mask'
    raise app.UsageError(f'{flag} contradicts --masking={strategy}: pass --masking alone '
                         f'(one of {", ".join(masking.STRATEGIES)})')
  flag = f'--{"" if do_whole_word_mask else "no"}do_whole_word_mask'
  if strategy_given:  # Agreeing with it: it chose nothing.
    return strategy, (f'warning: {flag} (the original\'s flag) adds nothing to --masking='
                      f'{strategy}, which masks {"whole words" if whole else "wordpieces"}: '
                      'drop it')
  strategy = 'whole_word' if do_whole_word_mask else 'wordpiece'
  return strategy, (f'warning: {flag} is the original\'s flag: masking={strategy} (pass '
                    f'--masking={strategy} instead)')


def check_unmasked(static_masking: bool, given: list[str]):
  """Refuses masking flags given with --nostatic_masking: unmasked instances are masked by the
  trainer, at its config.data settings, so these would be recorded but never read."""
  # Each flag, and the trainer's field that does its work on unmasked instances.
  trainer = {'masking': 'masking', 'do_whole_word_mask': 'masking',
             'masked_lm_prob': 'masked_lm_prob',
             'max_predictions_per_seq': 'max_predictions_per_seq'}
  unread = [name for name in trainer if name in given]
  if not static_masking and unread:
    one = len(unread) == 1
    fields = dict.fromkeys(f'--config.data.{trainer[n]}' for n in unread)
    raise app.UsageError(
        f'{" and ".join(f"--{n}" for n in unread)} {"is" if one else "are"} read with static '
        'masking only, but --nostatic_masking writes unmasked instances: choose '
        f'{"it" if one else "them"} where they are masked ({" ".join(fields)}), or leave '
        f'{"it" if one else "them"} out here')


def check_tfds_flags(given: list[str]):
  """Refuses --tfds_* flags without --tfds_name: the text files are read, and they would not be."""
  unread = [f'--{name}' for name in ('tfds_split', 'tfds_text_field', 'tfds_data_dir')
            if name in given]
  if unread and 'tfds_name' not in given:
    raise app.UsageError(f'{", ".join(unread)} {"is" if len(unread) == 1 else "are"} read with '
                         '--tfds_name only: add --tfds_name=<dataset>, or leave '
                         f'{"it" if len(unread) == 1 else "them"} out to read --input_file')


def check_paths(output_file: str, num_output_shards: int):
  """Refuses, before any work, shards or a report that would be written into a bertjax run (its
  checkpoints/ too) or over a model's file."""
  outputs = shard_outputs.output_paths(output_file, num_output_shards)
  report = (output_file.strip() if num_output_shards else outputs[0]) + '.json'
  # N shards share their prefix's folder: the first stands for them all.
  for path in outputs[:1] if num_output_shards else outputs:
    named = path == output_file.strip()  # Else a shard's path, which the errors name.
    paths.check_output_file(path, shown=f'--output_file={output_file}' if named
                            else f'{path} of --output_file={output_file}')
  paths.check_output_file(report, shown=f'the report {report} of --output_file={output_file}')


def main(argv):
  start = time.perf_counter()
  command_flags.refuse_arguments(argv, '--input_file=..., --output_file=..., --vocab_file=...')
  console.install()  # Libraries' INFO lines (TFDS's reader) only at --verbosity=1.
  # Ctrl-C or SIGTERM (a scheduler's): the run's hidden temporary folder removed and the
  # workers ended, one line, status 130 / 143; a SIGKILL ends the workers too (writer.py).
  nothing = console.nothing_written(
      'no shard was written (a set is put in place only once all its shards are made; an '
      'earlier set there is kept)')
  console.exit_on_interrupt(lambda: (  # Or, as the interrupt waited for the renames, whole.
      f'interrupted as the set was put in place: it is whole ({shard_outputs.PUT_IN_PLACE[-1]})'
      if shard_outputs.PUT_IN_PLACE else nothing()), terminate=True)
  given = [n for n in flags.FLAGS if flags.FLAGS[n].present]
  check_unmasked(_STATIC_MASKING.value, given)
  check_tfds_flags(given)
  strategy, warning = masking_strategy(_MASKING.value, flags.FLAGS['masking'].present,
                                       _DO_WHOLE_WORD_MASK.value)
  if warning:
    log_file.say(warning)
  if _PACK.value and _MAX_INSTANCES_PER_ROW.value == 1:
    raise app.UsageError('--pack with --max_instances_per_row=1 packs nothing: pass 2 or more '
                         '(MLPerf BERT: 3), or leave --pack out for one instance per row')
  if not _PACK.value and flags.FLAGS['max_instances_per_row'].present:
    raise app.UsageError('--max_instances_per_row is read with --pack only: add --pack, or '
                         'leave it out for one instance per row')
  settings = instances.Settings(
      max_seq_length=_MAX_SEQ_LENGTH.value, max_predictions_per_seq=_MAX_PREDICTIONS.value,
      masked_lm_prob=_MASKED_LM_PROB.value, short_seq_prob=_SHORT_SEQ_PROB.value,
      dupe_factor=_DUPE_FACTOR.value, masking=strategy,
      static_masking=_STATIC_MASKING.value, nsp=_NSP.value,
      pool_documents=_POOL_DOCUMENTS.value,
      pool_tokens=_POOL_TOKENS.value,
      max_instances_per_row=_MAX_INSTANCES_PER_ROW.value if _PACK.value else 1)
  tfds = None
  if _TFDS_NAME.value:
    tfds = tfds_source.Source(_TFDS_NAME.value, _TFDS_SPLIT.value, _TFDS_TEXT_FIELD.value,
                              _TFDS_DATA_DIR.value or '')
  if (not _INPUT_FILE.value) == (tfds is None):
    raise app.UsageError('pass exactly one input: --input_file (text files) or --tfds_name '
                         f'(a prepared TFDS dataset); got {"both" if tfds else "neither"}')
  try:
    check_paths(_OUTPUT_FILE.value, _NUM_OUTPUT_SHARDS.value)
    report = writer.create(
        _INPUT_FILE.value, _OUTPUT_FILE.value, settings, vocab_file=_VOCAB_FILE.value,
        spm_model_file=_SPM_MODEL_FILE.value, do_lower_case=_DO_LOWER_CASE.value,
        num_output_shards=_NUM_OUTPUT_SHARDS.value, num_workers=_NUM_WORKERS.value or None,
        random_seed=_RANDOM_SEED.value,
        # A TFDS text is paragraphs, unless --input_format says otherwise.
        input_format=_INPUT_FORMAT.value if tfds is None or flags.FLAGS['input_format'].present
        else 'text', tfds=tfds,
        max_line_bytes=_MAX_LINE_BYTES.value, shuffle_buffer=_SHUFFLE_BUFFER.value,
        tokenizer=_TOKENIZER.value, max_unk_fraction=_MAX_UNK_FRACTION.value,
        overwrite=_OVERWRITE.value)
  except (ValueError, OSError, RuntimeError) as e:
    # Bad input or settings: one clear line, not a traceback.
    console.fail(f'create_pretraining_data: error: {e}')
  counts, skipped = report['counts'], report['skipped']['counts']
  shards, num_shards = report['output_files'], _NUM_OUTPUT_SHARDS.value
  rows = [('rows', counts['rows'])] if settings.max_instances_per_row > 1 else []
  skipped = ' + '.join(f'{n} {why}' for why, n in sorted(skipped.items())) or 'nothing'
  metrics = [('instances', counts['instances']), *rows, ('documents', counts['documents']),
             ('shards', len(shards)), ('workers', report['settings']['num_workers']),
             ('[UNK]', f"{report['unk_fraction']:.2%} of {counts['document_tokens']} tokens"),
             *([('masked', f"{report['masked_fraction']:.1%} of the maskable tokens")]
               if 'masked_fraction' in report else []),
             ('padding', f"{report['padding_fraction']:.1%} of the token slots"),
             ('skipped', skipped)]
  # N shards named <prefix>-0000i-of-0000N: shown as the glob that matches them.
  suffix = f'-00000-of-{num_shards:05d}'
  where = (f'{shards[0][:-len(suffix)]}-?????-of-{num_shards:05d}' if num_shards
           else ','.join(shards))
  job_lines.summary('create_pretraining_data', time.perf_counter() - start, metrics=metrics,
                  outputs=[('shards', where), ('report', report['report_file'])])

if __name__ == '__main__':
  flags.mark_flags_as_required(['output_file'])
  prefix = 'create_pretraining_data: error: '
  app.run(command_flags.usage_said(main, prefix), flags_parser=command_flags.flags_parser(prefix))

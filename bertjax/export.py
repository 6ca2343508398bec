"""Export a model to the formats other tools load.

  python -m bertjax.export --from=<bertjax workdir | workdir/checkpoints/N | transformers dir |
      TF1 checkpoint> --format=hf|tf1|saved_model|sentence_transformers|onnx --output=DIR \
      [--step=best|latest|N]

Several formats, comma-separated (--format=hf,saved_model,onnx), are written from one read of
the model into DIR/<format> each (DIR/hf, DIR/saved_model, ...); every check of every format
runs before the first is written, and a format that fails later names those already written.

--step picks a bertjax run's checkpoint (default: the latest; best: the one its evals ranked
best, kept by checkpoint.keep_best).

--from and --output may be URLs (gs://bucket/run) as well as local paths: every file goes
through bertjax.files; TensorFlow's writers write into a local temporary folder.

  hf           a transformers directory (config.json, model.safetensors, vocab and tokenizer files):
               BertModel, BertForPreTraining, BertForSequenceClassification (classification and
               regression), BertForQuestionAnswering, BertForTokenClassification or
               BertForMultipleChoice, as the model is for. A vocab padded for tensor
               parallelism is cut back to the vocab file. An encoder from a
               sentence-transformers model (or a mean-pooled one) is written as one too (below).
  tf1          google-research/bert's layout: bert_config.json, bert_model.ckpt.*, vocab.txt
               (a SentencePiece model: spiece.model beside it, as google-research/albert's
               30k-clean.model)
               (encoders, pre-training heads, run_classifier.py and run_squad.py heads).
  saved_model  a TensorFlow SavedModel with the tokenizer inside: serving_default
               takes raw strings (and pairs for pair tasks) and returns what the model is for.
               A SentencePiece model's in-graph tokenizer gives bertjax's ids (sentence-level
               kinds; span and tagging models of a SentencePiece vocab are refused).
  sentence_transformers  a folder SentenceTransformer(DIR) loads with no custom code: the
               encoder's transformers files, its pooling, max_seq_length, prompts, Normalize
               (a source's own, or --normalize), and a sequence-level head (classification,
               regression, multiple choice; mean- or [CLS]-pooled) as Dense layers, so that
               encode(texts) returns its logits ((text_a, text_b) tuples for pair tasks).
               A SentencePiece model's tokenizer is written as for hf (AlbertTokenizer's).
  onnx         model.onnx, which onnxruntime runs: transformers' class of the hf export,
               converted by torch.onnx.export (pip install bertjax[onnx]); ids in, what the
               SavedModel's model part computes out (interop/onnx_export.py); the tokenizer
               outside the graph, its files beside it as hf writes them.

The output is written into a hidden folder beside DIR and renamed into place when complete, so a
crash or a full disk never leaves a half-written DIR; an existing non-empty DIR is replaced only
with --overwrite. An object store has no rename: there the export is written to a local temporary
folder, then uploaded under a manifest that says it is in progress (listing the old files and
the new), and the manifest of the complete export is written last (interop/export_writing.py).

The command prints the lines that load what it wrote (saved_model: `import tensorflow_text`
first, and each signature's inputs and outputs as saved_model.pb records them;
sentence_transformers: its modules) and ends on its summary line:

  export finished in 14.2 s: kind encoder, layers 6, max_seq_length 256; saved_model DIR
"""

import contextlib
import errno
import functools
import numbers
import os
import re
import sys
import time
import traceback

from absl import app
from absl import flags
from absl import logging

from bertjax import command_flags
from bertjax import console
from bertjax import files
from bertjax import format_names
from bertjax import job_lines
from bertjax import keywords
from bertjax import log_file
from bertjax import output_lock
from bertjax import paths
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import export_folder
from bertjax.interop import export_writing
from bertjax.interop import format_writers
from bertjax.interop import sentence_transformers
from bertjax.interop import sources
from bertjax.training import checkpoint_reader

FORMATS = format_names.FORMATS


# The command's flags that export() and export_formats() take as keywords (keywords.named).
_KEYWORDS = {'from': 'source', 'output': 'output', 'overwrite': 'overwrite=True',
             'vocab_file': 'vocab_file', 'max_seq_length': 'max_seq_length', 'labels': 'labels',
             'normalize': 'normalize=True', 'nonormalize': 'normalize=False', 'step': 'step',
             'do_lower_case': 'do_lower_case=True', 'nodo_lower_case': 'do_lower_case=False'}


def export(source, fmt: str, output, *, overwrite: bool = False, vocab_file: str = '',
           do_lower_case: bool | None = None, max_seq_length: int = 0,
           labels: tuple = (), normalize: bool | None = None, step=None):
  """Writes the model at `source` to `output` (local paths or URLs) in format `fmt`; returns
  the output directory (a str, or a Path object where `output` was one). `step` picks a bertjax
  run's checkpoint: 'best', 'latest' (None) or a step number."""
  if not isinstance(fmt, str) or ',' in fmt:
    raise ValueError(f'fmt={fmt!r}: export() writes one format, one of {", ".join(FORMATS)}; '
                     'export_formats() writes several.')
  with keywords.named(_KEYWORDS | {'format': 'fmt'}), _several_said_as_export_formats():
    targets, _ = _export(source, (fmt,), output, overwrite=overwrite, vocab_file=vocab_file,
                         do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                         labels=labels, normalize=normalize, step=step)
  written = targets[0][1]
  return written if isinstance(output, str) else type(output)(written)


@contextlib.contextmanager
def _several_said_as_export_formats():
  """export() writes one format: replacing a folder of several, it advises export_formats()."""
  try:
    yield
  except FileExistsError as error:
    error.args = (re.sub(r'several with --format=(\S+) --output=(.+)\.$',
                         r"several with export_formats(source, '\1', '\2', overwrite=True).",
                         str(error)),)
    raise


def export_formats(source, formats, output, *, overwrite: bool = False, vocab_file: str = '',
                   do_lower_case: bool | None = None, max_seq_length: int = 0,
                   labels: tuple = (), normalize: bool | None = None,
                   step=None) -> dict:
  """Writes the model at `source` in each of `formats` (names, or one comma-separated str),
  read once, into `output`/<format> each (into `output` itself for one format); returns
  {format: folder} (str folders, or Path objects where `output` was one). Every format's checks
  run before the first is written."""
  with keywords.named(_KEYWORDS | {'format': 'formats'}):
    targets, _ = _export(source, formats, output, overwrite=overwrite, vocab_file=vocab_file,
                         do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                         labels=labels, normalize=normalize, step=step)
  return {fmt: out if isinstance(output, str) else type(output)(out) for fmt, out in targets}


def _export(source, formats, output, *, overwrite: bool, vocab_file: str,
            do_lower_case: bool | None, max_seq_length: int, labels: tuple,
            normalize: bool | None, step=None, written: list | None = None):
  """Writes each of `formats` (parse_formats); returns the (format, folder) pairs written and
  the Bundle. `written` (when given) gets each pair as soon as its folder is complete."""
  formats = format_names.parse(formats)
  vocab_file, max_seq_length, labels = _checked_types(
      source, output, overwrite, vocab_file, do_lower_case, max_seq_length, labels, normalize)
  checkpoint_reader.parse_step(step)  # A step of the wrong type, before the source is looked at.
  written = [] if written is None else written
  if 'onnx' in formats:  # torch and the exporter are an extra: said before anything is read.
    from bertjax.interop import onnx_export  # pylint: disable=g-import-not-at-top
    onnx_export.check_installed()
  if not os.fspath(source or '').strip():
    raise ValueError('--from is empty: name the model to export (a bertjax workdir or '
                     'checkpoint, a transformers folder or a TF1 checkpoint).')
  if not os.fspath(output or '').strip():
    raise ValueError('--output is empty: name the folder to write the export into.')
  paths.refuse_dash(os.fspath(output), '--output', 'folder', 'an export is a folder of files, '
                    'not a stream', 'exported')
  if max_seq_length and 'tf1' in formats:
    raise ValueError('--max_seq_length is the SavedModel\'s maximum length, sentence-'
                     'transformers\' max_seq_length and the transformers tokenizer\'s '
                     'model_max_length (hf, onnx): tf1 keeps no length; drop it' +
                     ('.' if len(formats) == 1 else ', or export tf1 by itself.'))
  if max_seq_length and max_seq_length < 3:
    raise ValueError(f'--max_seq_length={max_seq_length} leaves no room for a token between '
                     '[CLS] and [SEP]: pass 3 or more (the model\'s own length when left out).')
  output = paths.absolute(os.fspath(output)).rstrip('/') or '/'
  source = paths.absolute(os.fspath(source))
  source = source.rstrip('/') if files.is_remote(source) else source
  sources.format_of(source)  # A source that does not exist, named first.
  source = checkpoint_reader.step_path(source, step)
  targets = export_folder.targets(formats, output)
  export_folder.check_folder_of_formats(targets, output)
  with export_folder.made_folders_removed(output):  # A refusal leaves no empty folder behind.
    return _export_into(targets, source, overwrite=overwrite, vocab_file=vocab_file,
                        do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                        labels=labels, normalize=normalize, written=written,
                        folder=output if len(targets) > 1 else None)


def _checked_types(source, output, overwrite, vocab_file, do_lower_case, max_seq_length, labels,
                   normalize):
  """The command's flag types, asked of export() and export_formats() too (a notebook's
  max_seq_length=7.5 was written into the tokenizer's files, labels='neg,pos' read letter by
  letter, overwrite='no' true); returns vocab_file as a str, max_seq_length as an int and
  labels as a tuple."""
  if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, numbers.Integral):
    raise TypeError(f'--max_seq_length={max_seq_length!r} is not a whole number: pass an int '
                    '(0 = the length the source records).')
  if max_seq_length < 0:
    raise ValueError(f'--max_seq_length={max_seq_length} is negative: pass 3 or more, or 0 for '
                     'the length the source records.')
  if not isinstance(overwrite, bool):
    raise TypeError(f'--overwrite={overwrite!r}: pass True or False.')
  for name, value in (('do_lower_case', do_lower_case), ('normalize', normalize)):
    if value is not None and not isinstance(value, bool):
      raise TypeError(f'--{name}={value!r}: pass True or False (None: the source\'s own).')
  for name, value in (('from', source), ('output', output)):
    if value is not None and not isinstance(value, (str, os.PathLike)):
      raise TypeError(f'--{name}={value!r}: pass a path (a str or a Path) or a URL.')
  vocab_file = '' if vocab_file is None else vocab_file  # None: left out
  labels = () if labels is None else labels
  if not isinstance(vocab_file, (str, os.PathLike)):
    raise TypeError(f'--vocab_file={vocab_file!r}: pass a path (a str), or leave it out.')
  # A set's or a dict's order is not the classes' (a set's changes with PYTHONHASHSEED).
  if not isinstance(labels, (list, tuple)) or not all(isinstance(x, str) for x in labels):
    raise TypeError(f'--labels={labels!r}: pass the class names as a list of str, class 0 first '
                    "(e.g. ['negative', 'positive']).")
  return os.fspath(vocab_file), int(max_seq_length), tuple(labels)


def _folder_replaceable(folder: str | None) -> bool:
  """Whether an export of one format could replace `folder` (that of several formats) while
  they are written into it, so its lock is held: not where the folder above it cannot be
  written (no export can replace it there; its lock, beside it, could not be made)."""
  if not folder:
    return False
  if files.is_remote(folder) or not os.path.isdir(folder):  # local: the folder's parent
    return True
  return os.access(os.path.dirname(os.path.realpath(folder)), os.W_OK)  # local: as above


def _export_into(targets, source, *, overwrite: bool, vocab_file: str,
                 do_lower_case: bool | None, max_seq_length: int, labels: tuple,
                 normalize: bool | None, written: list, folder: str | None):
  """_export's work once its arguments are checked: holds each folder (and `folder`, that of
  several formats), loads the model once, checks it for every format, then writes them in
  turn."""
  formats = tuple(fmt for fmt, _ in targets)
  # One export per output at a time: a second is refused at its start, not after its work
  # (with --overwrite, the later one replaced the other's export, both saying done).
  for _, out in targets:
    export_folder.check(out, overwrite, source, folder)  # Before the lock makes its folder.
  with contextlib.ExitStack() as locks:
    # The folder of several formats too: an export of one format to that folder is refused
    # while they are written, as they are while it writes.
    for out in ([folder] if _folder_replaceable(folder) else []) + [out for _, out in targets]:
      locked = out if files.is_remote(out) else os.path.realpath(out)  # local: links
      locks.enter_context(output_lock.held(locked, 'export', f'writing {out}', '--output'))
    for _, out in targets:
      export_folder.check(out, overwrite, source, folder)  # Again: one that ended meanwhile.
    with console.library_lines_held():  # orbax's restore lines, in Python as on the command line
      result = sources.load(source, vocab_file=vocab_file, do_lower_case=do_lower_case)
    if result.not_computed:  # Written as bertjax computes it, it would embed otherwise.
      raise ValueError(f'{result.source} is a sentence-transformers model bertjax cannot export: '
                       f'{result.not_computed}, so its export would give other embeddings.')
    for fmt in formats:
      format_writers.check(result, fmt)
      bundle_lib.check_tokenizer(result, fmt)
    format_writers.check_casing(result, do_lower_case)
    if labels:
      bundle_lib.relabel(result, labels)
    # A folder of formats never holds two models (several formats, or DIR/hf beside others).
    export_folder.check_one_model(targets, result.source, result.labels, folder)
    if max_seq_length:  # No longer than its position embeddings: what every writer uses.
      positions = result.config['max_position_embeddings']
      if max_seq_length > positions:
        logging.warning('--max_seq_length=%d is past the model\'s %d positions: %d is used',
                        max_seq_length, positions, positions)
      result.max_seq_length = min(max_seq_length, positions)
      result.tokenizer_max_length = result.max_seq_length
    if normalize is not None:
      for fmt in formats:
        if fmt != 'sentence_transformers' and not (
            fmt == 'hf' and sentence_transformers.is_written_for(result)):
          given = '--normalize adds' if normalize else '--nonormalize drops'
          article = 'an' if result.kind[0] in 'aeiou' else 'a'
          raise ValueError(f'{given} sentence-transformers\' Normalize module, which '
                           f'--format={fmt} of {article} {result.kind} model does not write: use '
                           '--format=sentence_transformers, or drop it.')
      result.normalize = normalize
    for fmt, out in targets:
      write_into = functools.partial(format_writers.writer(fmt), result)
      record = {'labels': list(result.labels), **({'several_formats': True} if folder else {})}
      export_writing.write(out, fmt, result.source, write_into, overwrite, record)
      written.append((fmt, out))
      logging.info('exported %s (%s, %d layers) to %s as %s', result.source, result.kind,
                   result.config['num_layers'], out, fmt)
    return targets, result


FLAGS = flags.FLAGS


def _define_flags():
  """Flags exist only when this module is the program (tests import the library part)."""
  flags.DEFINE_string('from', None, 'The model: a bertjax workdir or checkpoint, a '
                              'transformers BERT directory or an original TF checkpoint.')
  flags.DEFINE_list('format', None, f'What to write: {", ".join(FORMATS)}; several '
                    'comma-separated, each into --output/<format>.')
  flags.DEFINE_string('output', None, 'The directory to write (for several formats, the one '
                      'that holds a folder per format).')
  flags.DEFINE_string('step', None, 'A bertjax run\'s checkpoint: best (as the run ranked its '
                      'evals; needs checkpoint.keep_best), latest (the default) or a step number.')
  flags.DEFINE_bool('overwrite', False, 'Replace a non-empty --output.')
  flags.DEFINE_string('vocab_file', '', 'The vocab, where the source has none beside it.')
  # A bool flag as the original's (--do_lower_case=False, --nodo_lower_case, ...); unset = the
  # casing the source records.
  flags.DEFINE_bool('do_lower_case', None, 'Override the casing the source records.')
  flags.DEFINE_integer('max_seq_length', 0, 'saved_model: the maximum length; '
                       'sentence_transformers, and hf and onnx\'s tokenizer (model_max_length): '
                       'the length longer texts are cut to (0 = the length the source records: '
                       'a run\'s, a sentence-transformers model\'s, a transformers folder\'s '
                       'tokenizer\'s model_max_length or else its positions, a TF1 checkpoint '
                       '128; the position table for a model with no task).', lower_bound=0)
  flags.DEFINE_list('labels', [], 'Class names, for a classifier whose source has none '
                              '(a TF1 run_classifier.py checkpoint).')
  # Unset = the source's own: normalised where its modules.json lists a Normalize module.
  flags.DEFINE_bool('normalize', None, 'sentence_transformers: L2-normalise the embeddings '
                    '(a Normalize module), or --nonormalize to drop the source\'s.')


def _left(written: list, formats) -> list[str]:
  """The formats of `formats` not yet written."""
  done = {fmt for fmt, _ in written}
  return [fmt for fmt in format_names.parse(formats) if fmt not in done]


def _disk_error(e: OSError, written: list, output: str, formats) -> str:
  """One line for an output the disk cannot take: full, read-only or not ours; '' otherwise.
  After some of several formats were written: the folder of the one that failed."""
  what, lost = f'--output={output}', 'nothing more was' if written else 'nothing was'
  left = _left(written, formats) if written else []
  if left:  # (All written: a failure after them, e.g. reading one back, names --output.)
    fmt = left[0]
    what, lost = files.join(files.parent(written[0][1]), fmt), f'nothing of {fmt} was'
  if e.errno in (errno.ENOSPC, errno.EDQUOT):
    return (f'error: the disk holding {what} is full ({e.strerror}): {lost} replaced. Free '
            'space (replacing an export needs room for both until the old one is removed) or '
            'pass another --output.')
  if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
    return (f'error: {what} cannot be written ({e.strerror}): {lost} written; pass a '
            'folder you may write to.')
  return ''


def _written_first(written: list, error: str, formats) -> str:
  """`error`, with the formats written complete before it (several formats) and the command's
  flags that write the rest: one line."""
  if not written:
    return error
  left, folder = _left(written, formats), files.parent(written[0][1])
  done = ', '.join(f'{fmt} {out}' for fmt, out in written)
  if not left:  # After the last one (its loading lines, an interrupt).
    return f'{error} Every format was written before it, complete: {done}.'
  # One format left is written into --output itself: its own folder is named.
  rest = (f'--format={left[0]} --output={files.join(folder, left[0])}' if len(left) == 1 else
          f'--format={",".join(left)} --output={folder}')
  return f'{error} Written before it, complete: {done}; the rest: {rest}.'


def _interrupted(written: list, nothing) -> str:
  """The interrupt line before _written_first's part: `nothing()` while none is written."""
  if not written:
    return nothing()
  if _left(written, FLAGS.format):
    return ('interrupted: the format in progress was not written (an export is renamed into '
            'place only when complete).')
  return 'interrupted.'


def _step(flag):
  """--step parsed ('latest' kept: a step folder named with it is refused unless newest)."""
  return flag if flag == 'latest' else checkpoint_reader.parse_step(flag, text=True)


def main(argv):
  command_flags.refuse_arguments(argv, '--from=..., --format=..., --output=...')
  console.install()
  written = []  # (format, folder) of each export complete, named if a later one fails.
  if files.is_remote(FLAGS.output or ''):
    console.exit_on_interrupt(lambda: _written_first(written, (
        f'interrupted: an upload to {FLAGS.output} cut short leaves files that its manifest '
        'lists as in progress; rerun the same command with --overwrite.'), FLAGS.format),
                              terminate=True)
  else:
    nothing = console.nothing_written(
        'nothing was written (an export is renamed into place only when complete)')
    console.exit_on_interrupt(lambda: _written_first(written, _interrupted(written, nothing),
                                                     FLAGS.format), terminate=True)
  start = time.perf_counter()
  try:
    targets, result = _export(FLAGS['from'].value, FLAGS.format, FLAGS.output,
                              overwrite=FLAGS.overwrite, vocab_file=FLAGS.vocab_file,
                              do_lower_case=FLAGS.do_lower_case,
                              max_seq_length=FLAGS.max_seq_length, labels=tuple(FLAGS.labels),
                              normalize=FLAGS.normalize,
                              step=_step(FLAGS.step),
                              written=written)
    lines = [line for fmt, out in targets for line in format_writers.loading_lines(fmt, out)]
  except OSError as e:
    console.fail(_written_first(written, _disk_error(e, written, FLAGS.output, FLAGS.format) or
                                f'error: {e}',
                                FLAGS.format))
  except ValueError as e:
    console.fail(_written_first(written, f'error: {e}', FLAGS.format))
  except Exception as e:  # pylint: disable=broad-except  # A writer's own: said with the rest.
    if not written:
      raise
    traceback.print_exc()
    log_file.write(traceback.format_exc().rstrip('\n'))
    console.fail(_written_first(written, f'error: {type(e).__name__}: {str(e).rstrip(".")}.',
                                FLAGS.format))
  for line in lines:
    log_file.say(line, sys.stdout)
  metrics = [('kind', result.kind), ('layers', result.config['num_layers'])]
  step = files.name(result.source)  # A run's <checkpoints>/<step>: said, as predict says it.
  if step.isdigit() and files.name(files.parent(result.source)) == 'checkpoints':
    metrics.insert(0, ('step', int(step)))
  if {'saved_model', 'sentence_transformers'} & {fmt for fmt, _ in targets}:
    metrics.append(('max_seq_length', result.max_seq_length))
  job_lines.summary('export', time.perf_counter() - start, metrics=metrics, outputs=targets)


if __name__ == '__main__':
  _define_flags()
  flags.mark_flags_as_required(['from', 'format', 'output'])
  app.run(command_flags.usage_said(main), flags_parser=command_flags.flags_parser())

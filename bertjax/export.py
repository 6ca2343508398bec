"""Export a model to the formats other tools load.

  python -m bertjax.export --from=<bertjax workdir | workdir/checkpoints/N | transformers dir |
      TF1 checkpoint> --format=hf|tf1|saved_model|sentence_transformers|onnx --output=DIR \
      [--step=best|latest|N]

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
the new), and the manifest of the complete export is written last.

The command prints the lines that load what it wrote (saved_model: `import tensorflow_text`
first, and each signature's inputs and outputs as saved_model.pb records them;
sentence_transformers: its modules) and ends on its summary line:

  export finished in 14.2 s: kind encoder, layers 6, max_seq_length 256; saved_model DIR
"""

import contextlib
import json
import os
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

from bertjax import console  # noqa: E402
from bertjax import files  # noqa: E402
from bertjax import paths  # noqa: E402
from bertjax.interop import bundle as bundle_lib  # noqa: E402
from bertjax.interop import hf_checkpoint  # noqa: E402
from bertjax.interop import init_from  # noqa: E402
from bertjax.interop import sentence_transformers  # noqa: E402
from bertjax.interop import sources  # noqa: E402
from bertjax.interop import tf1_checkpoint  # noqa: E402
from bertjax.text import tokenizer  # noqa: E402
from bertjax.training import checkpoint_reader  # noqa: E402

FORMATS = tuple(bundle_lib.FORMAT_KINDS)
# Written last into every export: the files it wrote. --overwrite replaces a folder only when it
# holds this manifest and nothing else than the files it lists (never a model downloaded by
# hand, a run, or a user's notes added to an export).
MANIFEST = '.bertjax_export_manifest.json'


def _check_kind(result: bundle_lib.Bundle, fmt: str):
  bundle_lib.check_holds(result, fmt)
  if fmt == 'tf1' and result.pooling != 'cls':
    logging.warning('%s is %s-pooled: in google-research/bert, %s-pool get_sequence_output() '
                    'over the input mask (get_pooled_output() is the [CLS] pooler)',
                    result.source, result.pooling, result.pooling)


def _check_casing(result: bundle_lib.Bundle):
  if result.vocab_file:
    tokenizer.validate_case_matches_vocab(
        tokenizer.load_vocab(result.vocab_file), result.do_lower_case,
        f'vocab file {result.vocab_file}')


def _writer(fmt: str):
  if fmt == 'hf':
    return _save_hf
  if fmt == 'sentence_transformers':
    return sentence_transformers.save
  if fmt == 'tf1':
    return _save_tf1
  if fmt == 'onnx':
    from bertjax.interop import onnx_export  # pylint: disable=g-import-not-at-top
    return onnx_export.save
  from bertjax.interop import saved_model  # pylint: disable=g-import-not-at-top
  return saved_model.save


def _save_hf(result: bundle_lib.Bundle, output: str):
  hf_checkpoint.save(result, output)
  # An embedding model stays one: SentenceTransformer(DIR) finds its pooling, length and
  # normalisation instead of guessing them (mean, 512, none).
  if sentence_transformers.is_written_for(result):
    sentence_transformers.write_modules(result, output)


def _save_tf1(result: bundle_lib.Bundle, output: str):
  bundle_lib.check_tokenizer(result, 'tf1')
  tf1_checkpoint.save(result, output)
  if result.vocab_file:
    # A SentencePiece model beside the checkpoint as google-research/albert ships its
    # 30k-clean.model (its scripts take --spm_model_file); a WordPiece vocab as vocab.txt.
    name = (tf1_checkpoint.SENTENCEPIECE_MODEL if result.is_sentencepiece() else 'vocab.txt')
    files.copy(result.vocab_file, files.join(output, name))
  # What google-research/bert's scripts are told by flags, kept for bertjax's importer.
  files.write_atomically(files.join(output, 'bertjax_export.json'), json.dumps(
      {'kind': result.kind, 'labels': list(result.labels), 'pooling': result.pooling,
       'do_lower_case': result.do_lower_case, 'max_seq_length': result.max_seq_length,
       # A sentence-transformers model's own, so that it comes back as one.
       'embedding': result.embedding, 'normalize': result.normalize,
       'prompts': result.prompts, 'similarity_fn_name': result.similarity_fn_name},
      indent=2) + '\n')


def _normalised(path: str) -> str:
  """A URL without a trailing '/'; a local path absolute, links resolved (as the OS sees it)."""
  return path.rstrip('/') if files.is_remote(path) else os.path.realpath(path)


def _inside(path: str, folder: str) -> bool:
  """Whether normalised `path` lies under normalised `folder` (compared as strings)."""
  if files.is_remote(path) != files.is_remote(folder) or path == folder:
    return False
  separator = '/' if files.is_remote(path) else os.sep
  return path.startswith(folder.rstrip(separator) + separator)


def _run_around(path: str) -> str | None:
  """The bertjax run folder `path` (normalised) is or is inside, if any."""
  for folder in init_from.folders_up(path):
    if init_from.is_run(folder):
      return folder
  return None


def check_output(output, overwrite: bool, source: str = ''):
  """Refuses, before anything is read or written, an --output that would lose something: the
  source itself, a folder inside or around it, a bertjax run or a folder inside one, or (without
  --overwrite) any non-empty folder; --overwrite replaces only what an earlier export wrote.
  Local paths and URLs alike (URLs compared as strings)."""
  output = os.fspath(output)
  files.check_bucket(output)
  if files.isfile(output):
    raise FileExistsError(f'--output={output} is a file: pass a directory.')
  out = _normalised(output)
  if source:
    src = source if files.exists(source) else files.parent(source)  # A TF1 prefix: its folder.
    src = _normalised(src)
    if out == src or _inside(out, src) or _inside(src, out):
      where = 'is' if out == src else 'is inside' if _inside(out, src) else 'holds'
      raise FileExistsError(f'--output={output} {where} the source {source}: an export is '
                            f'written beside its source, never over or around it; pass e.g. '
                            f'--output={src}_export.')
  if (run := _run_around(out)) is not None:
    raise FileExistsError(f'--output={output} is {"" if run == out else "inside "}'
                          f'the bertjax run {run}: an export is never written into a run; '
                          'choose a directory outside it.')
  if not files.isdir(output) or not files.listdir(output):
    return
  if not overwrite:
    raise FileExistsError(f'--output={output} exists and is not empty: pass --overwrite to '
                          'replace it, or choose another directory.')
  listed = _listed(output)
  if listed is None:
    raise FileExistsError(f'--output={output} was not written by bertjax.export (no {MANIFEST}): '
                          '--overwrite replaces only an earlier export; choose another '
                          'directory, or empty it yourself.')
  extra = sorted(set(files.walk_files(output)) - listed - {MANIFEST})
  if extra:
    raise FileExistsError(f'--output={output} holds files the earlier export did not write '
                          f'({", ".join(extra[:5])}): --overwrite would delete them; move them '
                          'out, or choose another directory.')


def _listed(folder: str) -> set | None:
  """The files an earlier export's manifest in `folder` lists; None without a readable one."""
  try:
    return set(json.loads(files.read_text(files.join(folder, MANIFEST)))['files'])
  except (FileNotFoundError, IsADirectoryError, ValueError, KeyError, TypeError):
    return None


def _manifest(fmt: str, source: str, written, in_progress: bool = False) -> str:
  manifest = {'format': fmt, 'source': source, 'files': sorted(written)}
  if in_progress:  # An upload cut short: every file there is listed, so --overwrite replaces it.
    manifest['in_progress'] = True
  return json.dumps(manifest, indent=1) + '\n'


def _write_manifest(folder: str, fmt: str, source: str):
  """The manifest of a complete export in local `folder` (the temporary folder it was written
  to), every file made as readable as the rest."""
  written = files.walk_files(folder)
  files.write_atomically(os.path.join(folder, MANIFEST), _manifest(fmt, source, written))
  mask = _umask()
  for name in written:  # Some writers (safetensors) create 0600 files: as readable as the rest.
    path = os.path.join(folder, *name.split('/'))  # local temp
    os.chmod(path, os.stat(path).st_mode | (0o644 & ~mask))  # local temp


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _upload(local: str, output: str, fmt: str, source: str):
  """Puts the export written in `local` at URL `output`, replacing an earlier export there: an
  in-progress manifest listing the old files and the new first, then the files, then the old
  ones the new export lacks removed, and the complete manifest last. Cut short anywhere, the
  folder holds only files its manifest lists (a rerun with --overwrite replaces it)."""
  written = files.walk_files(local)
  old = set(files.walk_files(output)) - {MANIFEST} if files.isdir(output) else set()
  manifest = files.join(output, MANIFEST)
  files.write_atomically(manifest, _manifest(fmt, source, old | set(written), in_progress=True))
  for name in written:
    files.copy(os.path.join(local, *name.split('/')), files.join(output, *name.split('/')))
  for name in sorted(old - set(written)):
    files.remove(files.join(output, *name.split('/')))
  files.write_atomically(manifest, _manifest(fmt, source, written))


def _write_remote(result: bundle_lib.Bundle, fmt: str, output: str):
  with tempfile.TemporaryDirectory(prefix='bertjax_export_') as local:  # local temp
    with console.temporary(local):  # Ctrl-C removes it too.
      _writer(fmt)(result, local)
      _upload(local, output, fmt, result.source)


def _write_local(result: bundle_lib.Bundle, fmt: str, output: str):
  """Writes into a hidden folder beside `output`, renamed into place when complete (a local
  rename is atomic; object stores have none, see _upload)."""
  parent, name = files.parent(output), files.name(output)
  files.makedirs(parent)
  temp = files.join(parent, f'.{name}.export-{os.getpid()}-{time.time_ns()}')
  files.makedirs(temp)
  try:
    with console.temporary(temp):  # Ctrl-C removes it: nothing half-written is left.
      _writer(fmt)(result, temp)
      _write_manifest(temp, fmt, result.source)
    if files.exists(output):
      old = files.join(parent, f'.{name}.replaced-{os.getpid()}')
      os.rename(output, old)  # local only: a rename, atomic (files has none: object stores)
      os.rename(temp, output)  # local only
      files.rmtree(old)
    else:
      os.rename(temp, output)  # local only
  finally:
    with contextlib.suppress(OSError):  # What failed is reported, not this clean-up.
      files.rmtree(temp)


def export(source, fmt: str, output, *, overwrite: bool = False, vocab_file: str = '',
           do_lower_case: bool | None = None, max_seq_length: int = 0,
           labels: tuple = (), normalize: bool | None = None, step=None):
  """Writes the model at `source` to `output` (local paths or URLs) in format `fmt`; returns
  the output directory (a str, or a Path object where `output` was one). `step` picks a bertjax
  run's checkpoint: 'best', 'latest' (None) or a step number."""
  written, _ = _export(source, fmt, output, overwrite=overwrite, vocab_file=vocab_file,
                       do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                       labels=labels, normalize=normalize, step=step)
  return written


def _export(source, fmt: str, output, *, overwrite: bool, vocab_file: str,
            do_lower_case: bool | None, max_seq_length: int, labels: tuple,
            normalize: bool | None, step=None):
  """export(), also returning the Bundle it wrote."""
  if fmt not in FORMATS:
    raise ValueError(f'--format={fmt!r} is unknown; valid: {", ".join(FORMATS)}.')
  if fmt == 'onnx':  # torch and the exporter are an extra: said before anything is read.
    from bertjax.interop import onnx_export  # pylint: disable=g-import-not-at-top
    onnx_export.check_installed()
  given = output
  output = paths.absolute(os.fspath(output)).rstrip('/') or '/'
  source = paths.absolute(os.fspath(source))
  source = source.rstrip('/') if files.is_remote(source) else source
  sources.format_of(source)  # A source that does not exist, named first.
  source = checkpoint_reader.step_path(source, step)
  check_output(output, overwrite, source)
  with console.library_lines_held():  # orbax's restore lines, in Python as on the command line
    result = sources.load(source, vocab_file=vocab_file, do_lower_case=do_lower_case)
  _check_kind(result, fmt)
  bundle_lib.check_tokenizer(result, fmt)
  _check_casing(result)
  if labels:
    if len(labels) != len(result.labels):
      raise ValueError(f'--labels names {len(labels)} classes but the model has '
                       f'{len(result.labels)}.')
    if tuple(labels) != tuple(result.labels) and result.labels_named:
      raise ValueError(f'{result.source} records its labels {list(result.labels)} (class 0 '
                       f'first): --labels={",".join(labels)} would rename or reorder them; drop '
                       '--labels.')
    result.labels = tuple(labels)
  if max_seq_length and fmt not in ('saved_model', 'sentence_transformers'):
    raise ValueError('--max_seq_length is the SavedModel\'s padded length and '
                     'sentence-transformers\' max_seq_length: hf and tf1 keep no length; drop '
                     'it.')
  if max_seq_length:  # No longer than its position embeddings: what both writers use.
    result.max_seq_length = min(max_seq_length, result.config['max_position_embeddings'])
  if normalize is not None:
    if fmt != 'sentence_transformers' and not (
        fmt == 'hf' and sentence_transformers.is_written_for(result)):
      raise ValueError(f'--normalize adds sentence-transformers\' Normalize module, which '
                       f'--format={fmt} of a {result.kind} model does not write: use '
                       '--format=sentence_transformers, or drop it.')
    result.normalize = normalize
  if files.is_remote(output):
    _write_remote(result, fmt, output)
  else:
    _write_local(result, fmt, output)
  logging.info('exported %s (%s, %d layers) to %s as %s', result.source, result.kind,
               result.config['num_layers'], output, fmt)
  return (output if isinstance(given, str) else type(given)(output)), result


FLAGS = flags.FLAGS


def _define_flags():
  """Flags exist only when this module is the program (tests import the library part)."""
  flags.DEFINE_string('from', None, 'The model: a bertjax workdir or checkpoint, a '
                              'transformers BERT directory or an original TF checkpoint.')
  flags.DEFINE_enum('format', None, FORMATS, 'What to write.')
  flags.DEFINE_string('output', None, 'The directory to write.')
  flags.DEFINE_string('step', None, 'A bertjax run\'s checkpoint: best (as the run ranked its '
                      'evals; needs checkpoint.keep_best), latest (the default) or a step number.')
  flags.DEFINE_bool('overwrite', False, 'Replace a non-empty --output.')
  flags.DEFINE_string('vocab_file', '', 'The vocab, where the source has none beside it.')
  # A bool flag as the original's (--do_lower_case=False, --nodo_lower_case, ...); unset = the
  # casing the source records.
  flags.DEFINE_bool('do_lower_case', None, 'Override the casing the source records.')
  flags.DEFINE_integer('max_seq_length', 0, 'saved_model: the padded length; '
                       'sentence_transformers: the length longer texts are cut to (0 = the '
                       'length the source records, else 128).', lower_bound=0)
  flags.DEFINE_list('labels', [], 'Class names, for a classifier whose source has none '
                              '(a TF1 run_classifier.py checkpoint).')
  # Unset = the source's own: normalised where its modules.json lists a Normalize module.
  flags.DEFINE_bool('normalize', None, 'sentence_transformers: L2-normalise the embeddings '
                    '(a Normalize module), or --nonormalize to drop the source\'s.')


def _quiet_tensorflow(fmt: str, source: str):
  """Imports TensorFlow, where this export needs it, with its C++ start-up lines (oneDNN,
  cuInit, absl::InitializeLog) held back: shown if the import fails or at --verbosity=1."""
  if fmt in ('tf1', 'saved_model') or sources.format_of(source) == 'tf1':
    from bertjax.text import fast_tokenizer  # pylint: disable=g-import-not-at-top
    with console.stderr_held():
      fast_tokenizer.import_tf()


def loading_lines(fmt: str, output: str) -> list[str]:
  """What a user types to load the export (read from what was written)."""
  if fmt == 'saved_model':
    from bertjax.interop import saved_model  # pylint: disable=g-import-not-at-top
    return saved_model.loading_lines(output)
  if fmt == 'sentence_transformers':
    return sentence_transformers.loading_lines(output)
  if fmt == 'onnx':
    from bertjax.interop import onnx_export  # pylint: disable=g-import-not-at-top
    return onnx_export.loading_lines(output)
  return []


def main(argv):
  if len(argv) > 1:  # `predict --workdir=RUN in.txt` would otherwise read stdin and wait.
    raise app.UsageError(f'unexpected arguments {argv[1:]}: every input is a --flag '
                         '(--input_file=..., --output_file=...).')
  console.install()
  if files.is_remote(FLAGS.output or ''):
    console.exit_on_interrupt(lambda: (
        f'interrupted: an upload to {FLAGS.output} cut short leaves files that its manifest '
        'lists as in progress; rerun the same command with --overwrite'))
  else:
    console.exit_on_interrupt(console.nothing_written(
        'nothing was written (an export is renamed into place only when complete)'))
  start = time.perf_counter()
  try:
    _quiet_tensorflow(FLAGS.format, paths.absolute(FLAGS['from'].value))
    out, result = _export(FLAGS['from'].value, FLAGS.format, FLAGS.output,
                          overwrite=FLAGS.overwrite, vocab_file=FLAGS.vocab_file,
                          do_lower_case=FLAGS.do_lower_case,
                          max_seq_length=FLAGS.max_seq_length, labels=tuple(FLAGS.labels),
                          normalize=FLAGS.normalize,
                          step=checkpoint_reader.parse_step(FLAGS.step, text=True))
    lines = loading_lines(FLAGS.format, out)
  except (ValueError, FileNotFoundError, FileExistsError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(1)
  for line in lines:
    print(line)
  metrics = [('kind', result.kind), ('layers', result.config['num_layers'])]
  if FLAGS.format in ('saved_model', 'sentence_transformers'):
    metrics.append(('max_seq_length', result.max_seq_length))
  console.summary('export', time.perf_counter() - start, metrics=metrics,
                  outputs=[(FLAGS.format, out)])


if __name__ == '__main__':
  _define_flags()
  flags.mark_flags_as_required(['from', 'format', 'output'])
  app.run(main)

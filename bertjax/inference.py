"""The one inference path of every tool that reads a model (predict, embed, extract_features):
the platform's encoder (+ head) over a model from interop/sources.load, in padded batches.

Its three outputs are predict's logits, embed's pooled vectors and extract_features' hidden
states. It reads no checkpoint (tests/checkpoint_reads_test.py keeps sources.load the only
reader).
"""

import functools

from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.finetune import kinds
from bertjax.interop import bundle as bundle_lib
from bertjax.model import encoder
from bertjax.model import platform_defaults
from bertjax.text import vocab_files

OUTPUTS = ('logits', 'hidden_states', 'pooled')
# sentence-transformers' Pooling modes bertjax computes: the mean of the tokens, the [CLS]
# token's output, the largest value of each dimension over the tokens.
POOLINGS = ('mean', 'cls', 'max')


def tokenizer(model: bundle_lib.Bundle, missing: str, casing_fix=None):
  """The loaded model's tokenizer (its vocab and casing; the text lower-cased first where a
  sentence-transformers model says so); FileNotFoundError(missing) without a vocab;
  `casing_fix(lower)`: what to pass where a casing given contradicts the vocab (None: the data
  and training runs' settings)."""
  if not model.vocab_file:
    raise FileNotFoundError(missing)
  tok = vocab_files.for_model(model.vocab_file, model.do_lower_case,
                              max_chars_per_word=model.max_chars_per_word, casing_fix=casing_fix)
  vocab_files.check_input_tokens(tok)  # [CLS] and [SEP]: one line, not a KeyError later.
  return _LowerCased(tok) if model.lowercase_input else tok


class _LowerCased:
  """A tokenizer that lower-cases the text first, character by character as the tokenizers
  library's Lowercase normalizer does (sentence-transformers' do_lower_case), accents kept:
  the cased tokenizer's do_lower_case would strip them too."""

  def __init__(self, tok):
    self._tok = tok

  def encode(self, text):
    return self._tok.encode(''.join(c.lower() for c in text))

  def tokenize(self, text):
    return self._tok.tokenize(''.join(c.lower() for c in text))

  def __getattr__(self, name):
    return getattr(self._tok, name)


def encoder_params(model: bundle_lib.Bundle) -> dict:
  """The loaded model's encoder as a nested tree without the 'bert' level (one per layer).

  A model without BERT's pooler (BertForMaskedLM, a span or tagging model, BertModel without
  its pooling layer) gets a zero placeholder: the encoder module always computes a pooled
  output, but what this module serves (hidden states, and embed's mean, [CLS] or max pooling of the
  sequence output) never reads it, so no output depends on the placeholder."""
  params = {k[len('bert/'):]: v for k, v in model.encoder_params().items()}
  if 'pooler/kernel' not in params:
    d = model.config['hidden_size']
    params.update({'pooler/kernel': np.zeros((d, d), np.float32),
                   'pooler/bias': np.zeros((d,), np.float32)})
  return traverse_util.unflatten_dict(params, sep='/')


def model_config(recorded, params):
  """The recorded model config as this platform runs `params` (a tree with the encoder under
  'bert'): a kernel the platform cannot run becomes its own, the layout is the params'."""
  return platform_defaults.for_inference(recorded, jax.default_backend(),
                                         saved_scan=platform_defaults.scanned_layout(params))


def forward(config, output: str, *, head=None, pooling: str = 'mean', normalize: bool = False):
  """jit(params, batch) -> `output` (OUTPUTS) of the model `config` describes (for_inference'd):
  'logits' runs `head` (a task head module), the others the encoder (params without 'bert')."""
  if output not in OUTPUTS:
    raise ValueError(f'output={output!r}; valid: {", ".join(OUTPUTS)}.')
  if output == 'logits':
    return jax.jit(functools.partial(_logits, head))
  if pooling not in POOLINGS:
    raise ValueError(f'pooling={pooling!r}; valid: {", ".join(POOLINGS)}.')
  bert = encoder.BertEncoder(config)
  if output == 'hidden_states':
    return jax.jit(functools.partial(_hidden_states, bert))
  return jax.jit(functools.partial(_pooled, bert, pooling, normalize))


def _logits(head, params, batch):
  return head.apply({'params': params}, *(batch[k] for k in kinds.MODEL_INPUTS),
                    deterministic=True)


def _hidden_states(bert, params, batch):
  return bert.apply({'params': params}, **batch, return_hidden_states=True)[2].astype(
      jnp.float32)


def _pooled(bert, pooling, normalize, params, batch):
  x_BxLxD, _ = bert.apply({'params': params}, **batch)
  x_BxLxD = x_BxLxD.astype(jnp.float32)
  if pooling == 'cls':
    pooled_BxD = x_BxLxD[:, 0]
  elif pooling == 'max':  # Padding set to -1e9 first, as sentence-transformers' Pooling does.
    pooled_BxD = jnp.max(jnp.where(batch['input_mask'][..., None] > 0, x_BxLxD, -1e9), 1)
  else:
    mask_BxLx1 = batch['input_mask'][..., None].astype(jnp.float32)
    pooled_BxD = jnp.sum(x_BxLxD * mask_BxLx1, 1) / jnp.maximum(jnp.sum(mask_BxLx1, 1), 1e-9)
  if not normalize:
    return pooled_BxD
  return pooled_BxD / jnp.maximum(jnp.linalg.norm(pooled_BxD, axis=-1, keepdims=True), 1e-12)


def rows_per_batch(n: int, batch_size: int) -> int:
  """Rows padded to a power of two up to batch_size: a few compiled shapes whatever the inputs,
  and 2 inputs with batch_size=100000 never allocate 100000 rows."""
  return min(batch_size, 1 << max(0, n - 1).bit_length())


def padded(arrays: dict, rows: int, length: int | None = None) -> dict:
  """[n, ...] arrays padded with zeros to `rows` rows (and `length` tokens where given): the
  padding is masked out (input_mask 0) and its rows cut off by the caller."""
  out = {}
  for key, value in arrays.items():
    pad = [(0, rows - len(value))] + [(0, 0)] * (value.ndim - 1)
    if length is not None:
      pad[1] = (0, length - value.shape[1])
    out[key] = np.pad(value, pad)
  return out


def outputs(fn, params, arrays: dict, batch_size: int) -> np.ndarray:
  """fn's outputs for every row of `arrays` (the model inputs, [N, L]), batch-major, in
  batches of rows_per_batch rows; N may be 0 (e.g. span inputs whose contexts have no
  wordpieces: no windows), giving [0, ...] outputs."""
  n = len(arrays['input_ids'])
  if not n:  # The outputs' shape and dtype, traced for one row, nothing run.
    shape = jax.eval_shape(fn, params, padded(arrays, 1))
    return np.zeros((0, *shape.shape[1:]), shape.dtype)
  rows = rows_per_batch(n, batch_size)
  out = []
  for start in range(0, n, rows):
    chunk = {k: v[start:start + rows] for k, v in arrays.items()}
    out.append(np.asarray(fn(params, padded(chunk, rows)))[:min(rows, n - start)])
  return np.concatenate(out)

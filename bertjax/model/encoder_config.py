"""The encoder's config: its fields and BERT-Base defaults; the checks of a config and a batch.

Both checks run on the host before anything is compiled. configs/common.py picks the sizes;
bertjax/config_check.py checks the values of a job's config (ranges, types) before JAX starts,
these the model's own choices (kernels, activations, layer scanning) and the batches it is given.
"""

import jax
import ml_collections
import numpy as np

from bertjax.model import attention
from bertjax.model import kernels
from bertjax.model import platform_defaults

Config = ml_collections.ConfigDict


ATTENTION_IMPLS = attention.IMPLEMENTATIONS
REMAT_POLICIES = {
    'full': None,  # Recompute everything in the backward pass.
    'dots': jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


def default_config(**overrides) -> Config:
  """The encoder's fields with BERT-Base defaults; configs/common.py picks sizes."""
  m = ml_collections.ConfigDict()
  m.size = 'base'  # Name of the size preset; informative, the fields below are what counts.
  m.vocab_size = 30522  # WordPiece vocabulary size; must equal the vocab file's line count.
  m.hidden_size = 768  # D: width of the residual stream.
  m.num_layers = 12  # Transformer blocks.
  m.num_heads = 12  # H: attention heads; head dim K = hidden_size / H.
  m.mlp_dim = 3072  # F: feed-forward ("intermediate") width.
  m.max_position_embeddings = 512  # Rows of the position table: the longest sequence allowed.
  m.type_vocab_size = 2  # Segment (token type) ids: A and B.
  m.hidden_act = 'gelu'  # 'gelu' (exact erf, as BERT), 'gelu_tanh', 'gelu_rational' or 'relu'.
  m.dropout_rate = 0.1  # On embeddings and block outputs (BERT: 0.1).
  m.attention_dropout_rate = 0.1  # On attention probabilities (BERT: 0.1; 0 for fused kernels).
  m.layer_norm_eps = 1e-12  # BERT's LayerNorm epsilon (the TF original's value).
  m.initializer_range = 0.02  # Stddev of the truncated-normal initialiser.
  m.dtype = 'float32'  # Compute dtype: 'float32' or 'bfloat16'; parameters always stay float32.
  # 'xla': explicit einsum + softmax (supports attention dropout); 'dot_product_attention':
  # jax.nn.dot_product_attention letting XLA choose; 'cudnn': the fused cuDNN flash kernel (GPU);
  # 'splash': the Pallas splash kernel (TPU). model/attention.py says how each sees padding.
  # 'auto' (the configs' default): the platform's choice, model/platform_defaults.py.
  m.attention_impl = 'xla'
  # Stack the layers with nn.scan: compile time independent of depth, a slower step on a GPU.
  # True, False or 'auto' (the configs' default; model/platform_defaults.py): any type, so
  # that --config.model.scan_layers=false and =auto both parse.
  m.scan_layers = ml_collections.FieldReference(False, field_type=object)
  # Scanned layers only: layers per trip of the loop (lax.scan's unroll). Each trip compiles
  # its layers one after another, as unrolled layers are, so k > 1 trades compile time for
  # fewer trips; num_layers runs the loop once, its layers in the stacked layout.
  m.scan_unroll = 1
  # Pre-training heads: MLM + NSP (BERT); False = MLM only (RoBERTa, ModernBERT): no NSP head,
  # no NSP loss, data without pairs (create_pretraining_data --nsp=false) or with them ignored.
  m.nsp = True
  m.remat_policy = 'none'  # Rematerialise each layer: 'none', 'full' or 'dots' (save matmuls).
  for key, value in overrides.items():
    if key not in m:
      raise ValueError(f'unknown model field {key!r}; valid: {", ".join(m)}.')
    m[key] = value
  return m


def check_config(config: Config):
  """Raises ValueError, before anything is compiled, for model settings that cannot work."""
  if config.hidden_size % config.num_heads:
    raise ValueError(
        f'hidden_size {config.hidden_size} is not divisible by num_heads {config.num_heads}: '
        'pick a head count that divides it.')
  for field, valid in (('hidden_act', kernels.ACTIVATIONS), ('attention_impl', ATTENTION_IMPLS),
                       ('remat_policy', ('none', *REMAT_POLICIES))):
    if config[field] not in valid and not (field == 'attention_impl'
                                           and platform_defaults.is_auto(config[field])):
      raise ValueError(f'model.{field}={config[field]!r} is unknown; valid: {", ".join(valid)}'
                       f'{", auto" * (field == "attention_impl")}.')
  if not (isinstance(config.scan_layers, bool) or platform_defaults.is_auto(config.scan_layers)):
    raise ValueError(f'model.scan_layers={config.scan_layers!r} is unknown; valid: True, False, '
                     'auto.')
  unroll = config.get('scan_unroll', 1)
  if (isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1
      or (unroll > config.num_layers and config.scan_layers is True)):
    raise ValueError(f'model.scan_unroll={unroll!r}: scanned layers per trip of the layer '
                     f'loop, an integer from 1 to num_layers ({config.num_layers}).')
  if config.dtype not in ('float32', 'bfloat16'):
    raise ValueError(f'model.dtype={config.dtype!r}; valid: float32, bfloat16.')


def check_segments(type_vocab_size: int, segment_ids, what: str):
  """Refuses sentence-B tokens for a model without a segment B embedding (type_vocab_size 1):
  the lookup would clamp them to segment A's row, silently (transformers raises)."""
  top = int(np.max(segment_ids, initial=0))
  if top >= type_vocab_size:
    raise ValueError(
        f'{what} hold text pairs (segment id {top}), but the model has type_vocab_size='
        f'{type_vocab_size}: it was trained on single texts and has no embedding for a second '
        'one. Give it single texts, or a model with type_vocab_size 2.')


def check_inputs(config: Config, input_ids, segment_ids=None, input_mask=None):
  """Checks a host batch against the model; raises ValueError saying what is wrong.

  The original BERT silently gathers out of bounds for ids >= vocab_size (XLA clamps or fills);
  we refuse such batches on the host, before compiling anything.
  """
  input_ids = np.asarray(input_ids)
  if input_ids.ndim != 2:
    raise ValueError(f'input_ids must be [batch, length], got shape {input_ids.shape}.')
  length = input_ids.shape[1]
  if length > config.max_position_embeddings:
    raise ValueError(
        f'sequence length {length} exceeds max_position_embeddings '
        f'{config.max_position_embeddings}: truncate the inputs (max_seq_length) or use a model '
        'with a longer position table.')
  bad = (input_ids < 0) | (input_ids >= config.vocab_size)
  if bad.any():
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(
        f'token id {int(input_ids[where])} at position {where} is outside the vocabulary '
        f'[0, {config.vocab_size}): the data was made with a different (larger) vocab than the '
        'model config; re-tokenise with the model\'s vocab.txt or fix model.vocab_size.')
  if segment_ids is not None:
    segment_ids = np.asarray(segment_ids)
    bad = (segment_ids < 0) | (segment_ids >= config.type_vocab_size)
    if bad.any():
      raise ValueError(
          f'segment id {int(segment_ids[bad][0])} is outside [0, {config.type_vocab_size}): '
          'segment_ids must be 0 (sentence A) or 1 (sentence B).')
    if segment_ids.shape != input_ids.shape:
      raise ValueError(f'segment_ids shape {segment_ids.shape} != input_ids {input_ids.shape}.')
  if input_mask is not None and np.shape(input_mask) != input_ids.shape:
    raise ValueError(f'input_mask shape {np.shape(input_mask)} != input_ids {input_ids.shape}.')

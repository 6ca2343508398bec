"""The BERT encoder in Flax linen: embeddings, post-LN transformer layers, pooler.

Shape legend for tensor names: B batch, L length, D hidden, H heads, K head dim, F mlp,
V vocab, P predictions, C classes, T token types.

Every parameter carries logical axis names (`vocab, embed, heads, kv, mlp`, and `layers` for the
stacked axis under nn.scan); activations are constrained at block edges with `batch, length,
activation_embed`. `bertjax/sharding.py` maps these names to mesh axes; this file never names a
mesh axis. Parameters are float32; `config.dtype` is the compute dtype.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

Config = ml_collections.ConfigDict


def gelu(x):
  """BERT's exact GELU, written as the original and PyTorch do: x / 2 * (1 + erf(x / sqrt(2))).

  jax.nn.gelu(approximate=False) computes the same function through erfc, which XLA:CPU
  evaluates ~2.5x slower than erf (values agree to ~1e-6).
  """
  return 0.5 * x * (1.0 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))


def _einsum_f32(spec, lhs, rhs):
  out = jnp.einsum(spec, lhs, rhs, preferred_element_type=jnp.float32)
  return out.astype(jnp.result_type(lhs, rhs))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def einsum(spec, lhs, rhs):
  """jnp.einsum of two operands accumulating in float32, returned in the operands' dtype.

  Identical to jnp.einsum for float32. For bfloat16 it is what TPUs and GPUs do anyway, and
  XLA:CPU runs bf16 dots that return float32 at about twice the speed of those returning bf16.
  The gradient is written out so that its two dots also take bf16 operands (the cotangent in
  the compute dtype) and accumulate in float32: autodiff of a float32-returning dot would
  instead hand them a float32 cotangent and turn them into float32 matmuls.
  """
  return _einsum_f32(spec, lhs, rhs)


def _einsum_fwd(spec, lhs, rhs):
  return _einsum_f32(spec, lhs, rhs), (lhs, rhs)


def _einsum_bwd(spec, residuals, g):
  lhs, rhs = residuals
  operands, out = spec.split('->')
  lhs_spec, rhs_spec = operands.split(',')
  # Each index of an operand is in the other operand or in the output (no reduction within
  # one operand, no repeated index), so each gradient is one einsum.
  assert all(set(s) <= set(out) | set(o) and len(set(s)) == len(s)
             for s, o in ((lhs_spec, rhs_spec), (rhs_spec, lhs_spec))), spec
  g = g.astype(jnp.result_type(lhs, rhs))
  return (_einsum_f32(f'{out},{rhs_spec}->{lhs_spec}', g, rhs).astype(lhs.dtype),
          _einsum_f32(f'{lhs_spec},{out}->{rhs_spec}', lhs, g).astype(rhs.dtype))


einsum.defvjp(_einsum_fwd, _einsum_bwd)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
  """jax.lax.dot_general (flax's Dense and DenseGeneral call it) as model.einsum."""
  del precision, kwargs  # Default precision; flax passes no other option.
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  letters = iter('abcdefghijklmnopqrstuvwxyz')
  lhs_idx, rhs_idx = [None] * lhs.ndim, [None] * rhs.ndim
  for i, j in (*zip(lhs_batch, rhs_batch, strict=True),
               *zip(lhs_contract, rhs_contract, strict=True)):
    lhs_idx[i] = rhs_idx[j] = next(letters)
  lhs_idx = [x or next(letters) for x in lhs_idx]
  rhs_idx = [x or next(letters) for x in rhs_idx]

  def free(idx, contract, batch):
    return [x for i, x in enumerate(idx) if i not in (*contract, *batch)]
  out_idx = ([lhs_idx[i] for i in lhs_batch] + free(lhs_idx, lhs_contract, lhs_batch)
             + free(rhs_idx, rhs_contract, rhs_batch))
  out = einsum(f'{"".join(lhs_idx)},{"".join(rhs_idx)}->{"".join(out_idx)}', lhs, rhs)
  return out if preferred_element_type is None else out.astype(preferred_element_type)


def in_float32(fn):
  """fn applied in float32 and cast back: XLA:CPU evaluates bfloat16 elementwise math ~3x
  slower than float32 (element by element conversions); on TPU/GPU the casts fuse away."""

  @functools.wraps(fn)
  def wrapped(x):
    return fn(x.astype(jnp.float32)).astype(x.dtype)
  return wrapped


ACTIVATIONS = {
    'gelu': in_float32(gelu),  # BERT's erf GELU.
    'gelu_tanh': in_float32(functools.partial(jax.nn.gelu, approximate=True)),
    'relu': jax.nn.relu,
}
ATTENTION_IMPLS = ('xla', 'dot_product_attention', 'cudnn')
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
  m.hidden_act = 'gelu'  # 'gelu' (exact erf, as BERT), 'gelu_tanh' (approximate) or 'relu'.
  m.dropout_rate = 0.1  # On embeddings and block outputs (BERT: 0.1).
  m.attention_dropout_rate = 0.1  # On attention probabilities (BERT: 0.1; 0 for fused kernels).
  m.layer_norm_eps = 1e-12  # BERT's LayerNorm epsilon (the TF original's value).
  m.initializer_range = 0.02  # Stddev of the truncated-normal initialiser.
  m.dtype = 'float32'  # Compute dtype: 'float32' or 'bfloat16'; parameters always stay float32.
  # 'xla': explicit einsum + softmax (supports attention dropout); 'dot_product_attention':
  # jax.nn.dot_product_attention letting XLA choose; 'cudnn': its fused cuDNN flash kernel (GPU).
  m.attention_impl = 'xla'
  m.scan_layers = False  # Stack the layers with nn.scan: compile time independent of depth.
  m.remat_policy = 'none'  # Rematerialise each layer: 'none', 'full' or 'dots' (save matmuls).
  for key, value in overrides.items():
    if key not in m:
      raise ValueError(f'unknown model field {key!r}; valid: {", ".join(m)}.')
    m[key] = value
  return m


def compute_dtype(config: Config):
  """The jnp dtype activations are computed in."""
  return jnp.dtype(config.dtype)


class ParamAxes(nn.LogicallyPartitioned):
  """A parameter's logical axis names, never turned into a constraint inside the model.

  Parameters get their shardings from jit's in/out shardings. Flax's DenseGeneral unboxes its
  flat 2-D kernel at init (and in the shape check of every apply) with the 3-axis names, which
  jax rejects once a mesh is set; so unboxing here only drops the box.
  """

  def unbox(self, apply_constraint=True):
    del apply_constraint
    return self.value


def with_axes(init, names):
  """Wraps an initializer so that its value carries logical axis names."""
  return functools.wraps(init)(lambda *args, **kwargs: ParamAxes(init(*args, **kwargs), names))


def initializer(config: Config, names):
  """BERT's truncated normal (stddev initializer_range, cut at 2 stddev) with logical axes."""
  return with_axes(nn.initializers.truncated_normal(stddev=config.initializer_range), names)


def zeros(names):
  return with_axes(nn.initializers.zeros_init(), names)


def layer_norm(config: Config, name: str) -> nn.LayerNorm:
  # Flax computes the statistics in float32 even when dtype is bfloat16.
  return nn.LayerNorm(
      epsilon=config.layer_norm_eps,
      dtype=compute_dtype(config),
      param_dtype=jnp.float32,
      scale_init=with_axes(nn.initializers.ones_init(), ('embed',)),
      bias_init=zeros(('embed',)),
      name=name,
  )


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(key1, key2, count1, count2):
  """jax's threefry2x32 hash, unrolled: jax lowers it to a 5-trip loop on CPU, whose passes
  over the counters made dropout ~10% of a small model's training step on XLA:CPU."""
  keys = (key1, key2, key1 ^ key2 ^ np.uint32(0x1BD11BDA))
  x1, x2 = count1 + keys[0], count2 + keys[1]
  for i in range(5):
    for rotation in _THREEFRY_ROTATIONS[i % 2]:
      x1 = x1 + x2
      x2 = x1 ^ ((x2 << np.uint32(rotation)) | (x2 >> np.uint32(32 - rotation)))
    x1 = x1 + keys[(i + 1) % 3]
    x2 = x2 + keys[(i + 2) % 3] + np.uint32(i + 1)
  return x1, x2


def _uniform_bits(key, shape):
  """jax.random.bits(key, shape, uint32) for a partitionable threefry key, same values."""
  key1, key2 = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) \
      else key
  # The row-major element index from per-axis iotas, which SPMD partitioning keeps local.
  index = jnp.zeros(shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(len(shape))):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(stride)
    stride *= shape[axis]
  bits1, bits2 = _threefry2x32(key1, key2, jnp.zeros(shape, jnp.uint32), index)
  return bits1 ^ bits2


class Dropout(nn.Dropout):
  """nn.Dropout with the same masks (bit for bit), drawn with an unrolled threefry.

  Falls back to nn.Dropout for anything but a partitionable threefry2x32 key (the default)
  and for arrays of 2^32 elements or more.
  """

  def __call__(self, inputs, deterministic=None, rng=None):
    deterministic = nn.merge_param('deterministic', self.deterministic, deterministic)
    if self.rate == 0.0 or deterministic or self.rate == 1.0 or self.broadcast_dims:
      return super().__call__(inputs, deterministic, rng)
    rng = self.make_rng(self.rng_collection) if rng is None else rng
    impl = (str(jax.random.key_impl(rng)) if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
            else jax.config.jax_default_prng_impl)
    if (impl != 'threefry2x32' or not jax.config.jax_threefry_partitionable
        or inputs.size >= 2**32):
      return super().__call__(inputs, deterministic, rng)
    keep_prob = 1.0 - self.rate
    # jax.random.bernoulli(rng, keep_prob): a uniform float32 from the top 23 bits, < p.
    floats = jax.lax.bitcast_convert_type(
        (_uniform_bits(rng, inputs.shape) >> np.uint32(9)) | np.uint32(0x3F800000),
        jnp.float32) - np.float32(1.0)
    mask = floats < np.float32(keep_prob)
    return jax.lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))


def check_config(config: Config):
  """Raises ValueError, before anything is compiled, for model settings that cannot work."""
  if config.hidden_size % config.num_heads:
    raise ValueError(
        f'hidden_size {config.hidden_size} is not divisible by num_heads {config.num_heads}: '
        'pick a head count that divides it.')
  for field, valid in (('hidden_act', ACTIVATIONS), ('attention_impl', ATTENTION_IMPLS),
                       ('remat_policy', ('none', *REMAT_POLICIES))):
    if config[field] not in valid:
      raise ValueError(f'model.{field}={config[field]!r} is unknown; valid: {", ".join(valid)}.')
  if config.dtype not in ('float32', 'bfloat16'):
    raise ValueError(f'model.dtype={config.dtype!r}; valid: float32, bfloat16.')


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


def xla_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, dropout):
  """Plain softmax attention written out, so that attention dropout can be applied."""
  depth = q_BxLxHxK.shape[-1]
  # jnp.einsum, not model.einsum: XLA:CPU (jax 0.10.2) has no kernel for the batched bf16 x
  # bf16 -> f32 dots of its gradient ("Unsupported element type for DotThunk").
  logits_BxHxLxL = jnp.einsum('bqhk,bshk->bhqs', q_BxLxHxK, k_BxLxHxK) / np.sqrt(depth)
  # Softmax in float32: bfloat16's 8-bit mantissa loses the small probabilities.
  logits_BxHxLxL = logits_BxHxLxL.astype(jnp.float32)
  neg = jnp.finfo(jnp.float32).min
  logits_BxHxLxL = jnp.where(mask_BxL[:, None, None, :], logits_BxHxLxL, neg)
  probs_BxHxLxL = jax.nn.softmax(logits_BxHxLxL, axis=-1).astype(v_BxLxHxK.dtype)
  probs_BxHxLxL = dropout(probs_BxHxLxL)
  return jnp.einsum('bhqs,bshk->bqhk', probs_BxHxLxL, v_BxLxHxK)


def fused_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, implementation):
  """jax.nn.dot_product_attention; implementation='cudnn' selects the flash kernel on GPU."""
  return jax.nn.dot_product_attention(
      q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask=mask_BxL[:, None, None, :],
      implementation=implementation)


class ProjectionParams(nn.Module):
  """The [D, H, K] kernel and [H, K] bias of one attention projection, returned unapplied.

  Created as nn.DenseGeneral(features=(H, K)) creates its own (the same names, logical axes
  and initial values, drawn flat as [D, H*K]), so checkpoints and initialisation are unchanged.
  """

  config: Config

  @nn.compact
  def __call__(self):
    cfg = self.config
    head_dim = cfg.hidden_size // cfg.num_heads
    kernel_DxHxK = self.param(
        'kernel', _drawn_flat(initializer(cfg, ('embed', 'heads', 'kv')), 1),
        (cfg.hidden_size, cfg.num_heads, head_dim), jnp.float32)
    bias_HxK = self.param('bias', _drawn_flat(zeros(('heads', 'kv')), 0),
                          (cfg.num_heads, head_dim), jnp.float32)
    return kernel_DxHxK, bias_HxK


def _drawn_flat(init, leading_dims):
  """An initializer that draws [prod(leading), prod(rest)] and reshapes, as DenseGeneral does."""

  def init_fn(key, shape, dtype=jnp.float32):
    flat_shape = tuple(int(np.prod(part)) for part in (shape[:leading_dims],
                                                       shape[leading_dims:]) if part)
    boxed = init(key, flat_shape, dtype)
    return boxed.replace_boxed(jnp.reshape(boxed.unbox(), shape))
  return init_fn


class SelfAttention(nn.Module):
  """Multi-head self-attention over a padding mask."""

  config: Config

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, deterministic: bool):
    cfg = self.config
    dtype = compute_dtype(cfg)
    # One matmul for query, key and value (a 3x wider one runs closer to the CPU's peak and
    # reads x once); the parameters stay three DenseGeneral-style [D, H, K] kernels.
    projections = [ProjectionParams(cfg, name=name)() for name in ('query', 'key', 'value')]
    kernels, biases = zip(*projections, strict=True)
    x_BxLxD, kernel_Dx3xHxK, bias_3xHxK = nn.dtypes.promote_dtype(
        x_BxLxD, jnp.stack(kernels, axis=1), jnp.stack(biases), dtype=dtype)
    qkv_BxLx3xHxK = einsum('bld,dthk->blthk', x_BxLxD, kernel_Dx3xHxK) + bias_3xHxK
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = (qkv_BxLx3xHxK[:, :, i] for i in range(3))
    if cfg.attention_impl == 'xla':
      dropout = functools.partial(
          Dropout(rate=cfg.attention_dropout_rate),
          deterministic=deterministic)
      out_BxLxHxK = xla_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, dropout)
    else:
      if not deterministic and cfg.attention_dropout_rate > 0:
        raise ValueError(
            f'attention_impl={cfg.attention_impl!r} has no attention-probability dropout: set '
            'model.attention_dropout_rate=0 or use attention_impl=xla for training.')
      implementation = 'cudnn' if cfg.attention_impl == 'cudnn' else None
      out_BxLxHxK = fused_attention(
          q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask_BxL, implementation)
    return nn.DenseGeneral(
        features=cfg.hidden_size, axis=(-2, -1), dtype=dtype, param_dtype=jnp.float32,
        dot_general=dot_general,
        kernel_init=initializer(cfg, ('heads', 'kv', 'embed')), bias_init=zeros(('embed',)),
        name='out')(out_BxLxHxK)


class Mlp(nn.Module):
  """The position-wise feed-forward block: dense(F), activation, dense(D)."""

  config: Config

  @nn.compact
  def __call__(self, x_BxLxD):
    cfg = self.config
    dense = functools.partial(nn.Dense, dtype=compute_dtype(cfg), param_dtype=jnp.float32,
                              dot_general=dot_general)
    h_BxLxF = dense(cfg.mlp_dim, kernel_init=initializer(cfg, ('embed', 'mlp')),
                    bias_init=zeros(('mlp',)), name='intermediate')(x_BxLxD)
    h_BxLxF = ACTIVATIONS[cfg.hidden_act](h_BxLxF)
    return dense(cfg.hidden_size, kernel_init=initializer(cfg, ('mlp', 'embed')),
                 bias_init=zeros(('embed',)), name='output')(h_BxLxF)


class TransformerLayer(nn.Module):
  """One post-LN BERT block: x = LN(x + drop(attn(x))); x = LN(x + drop(mlp(x)))."""

  config: Config
  scanned: bool = False  # nn.scan wants (carry, output); unscanned callers want just x.

  @nn.compact
  def __call__(self, x_BxLxD, mask_BxL, deterministic: bool):
    cfg = self.config
    drop = functools.partial(Dropout(rate=cfg.dropout_rate), deterministic=deterministic)
    y_BxLxD = SelfAttention(cfg, name='attention')(x_BxLxD, mask_BxL, deterministic)
    x_BxLxD = layer_norm(cfg, 'attention_layer_norm')(x_BxLxD + drop(y_BxLxD))
    y_BxLxD = Mlp(cfg, name='mlp')(x_BxLxD)
    x_BxLxD = layer_norm(cfg, 'output_layer_norm')(x_BxLxD + drop(y_BxLxD))
    x_BxLxD = nn.with_logical_constraint(x_BxLxD, ('batch', 'length', 'activation_embed'))
    return (x_BxLxD, None) if self.scanned else x_BxLxD


class Embeddings(nn.Module):
  """Word + position + token-type embeddings, LayerNorm, dropout."""

  config: Config

  def setup(self):
    cfg = self.config
    # float32 lookups and sum (as the original), cast to the compute dtype by the LayerNorm.
    embed = functools.partial(nn.Embed, features=cfg.hidden_size, dtype=jnp.float32,
                              param_dtype=jnp.float32)
    self.word_embeddings = embed(cfg.vocab_size,
                                 embedding_init=initializer(cfg, ('vocab', 'embed')))
    self.position_embeddings = embed(cfg.max_position_embeddings,
                                     embedding_init=initializer(cfg, (None, 'embed')))
    self.token_type_embeddings = embed(cfg.type_vocab_size,
                                       embedding_init=initializer(cfg, (None, 'embed')))
    self.layer_norm = layer_norm(cfg, 'layer_norm')
    self.dropout = Dropout(rate=cfg.dropout_rate)

  def __call__(self, input_ids_BxL, segment_ids_BxL, deterministic: bool):
    length = input_ids_BxL.shape[1]
    x_BxLxD = (self.word_embeddings(input_ids_BxL)
               + self.position_embeddings(jnp.arange(length))[None]
               + self.token_type_embeddings(segment_ids_BxL))
    x_BxLxD = self.layer_norm(x_BxLxD)
    return self.dropout(x_BxLxD, deterministic=deterministic)


def _layer_class(cfg: Config):
  """TransformerLayer, wrapped in remat as the config asks."""
  if cfg.remat_policy == 'none':
    return TransformerLayer
  # Argument 3 (counting self) is `deterministic`, a Python bool.
  return nn.remat(TransformerLayer, policy=REMAT_POLICIES[cfg.remat_policy],
                  prevent_cse=not cfg.scan_layers, static_argnums=(3,))


class BertEncoder(nn.Module):
  """Embeddings, num_layers transformer blocks, and the [CLS] pooler."""

  config: Config

  def setup(self):
    cfg = self.config
    check_config(cfg)
    self.embeddings = Embeddings(cfg)
    layer = _layer_class(cfg)
    if cfg.scan_layers:
      stack = nn.scan(layer, variable_axes={'params': 0}, split_rngs={'params': True,
                      'dropout': True}, in_axes=(nn.broadcast, nn.broadcast),
                      length=cfg.num_layers, metadata_params={nn.PARTITION_NAME: 'layers'})
      self.layers = stack(cfg, scanned=True)
    else:
      self.layers = [layer(cfg) for _ in range(cfg.num_layers)]
    # Square hidden->hidden projections shard their output like an MLP's input.
    self.pooler = nn.Dense(cfg.hidden_size, dtype=compute_dtype(cfg), param_dtype=jnp.float32,
                           dot_general=dot_general,
                           kernel_init=initializer(cfg, ('embed', 'mlp')),
                           bias_init=zeros(('mlp',)))

  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True):
    """[B, L] ids, mask, segments -> (sequence_output_BxLxD, pooled_output_BxD), compute dtype."""
    mask_BxL = input_mask.astype(bool)
    x_BxLxD = self.embeddings(input_ids, segment_ids, deterministic)
    x_BxLxD = nn.with_logical_constraint(x_BxLxD, ('batch', 'length', 'activation_embed'))
    if self.config.scan_layers:
      x_BxLxD, _ = self.layers(x_BxLxD, mask_BxL, deterministic)
    else:
      for layer in self.layers:
        x_BxLxD = layer(x_BxLxD, mask_BxL, deterministic)
    pooled_BxD = jnp.tanh(self.pooler(x_BxLxD[:, 0]))
    return x_BxLxD, pooled_BxD

  def word_embedding_table(self):
    """The [V, D] word embeddings, to tie the MLM decoder to."""
    return self.embeddings.word_embeddings.embedding


def param_count(params) -> int:
  """Number of scalars in a (possibly boxed) parameter tree."""
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.unbox(params)))

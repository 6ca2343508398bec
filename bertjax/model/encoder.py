"""The BERT encoder in Flax linen: embeddings, post-LN transformer layers, pooler.

Shape legend for tensor names: B batch, L length, D hidden, H heads, K head dim, F mlp,
V vocab, P predictions, C classes, T token types.

Every parameter carries logical axis names (`vocab, embed, heads, kv, mlp`, and `layers` for the
stacked axis under nn.scan); activations are constrained at block edges with `batch, length,
activation_embed`. `bertjax/training/sharding.py` maps these names to mesh axes; this file never
names a mesh axis. Parameters are float32; `config.dtype` is the compute dtype. The config's
fields and the checks of a config and a batch are model/encoder_config.py's.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bertjax.model import attention
from bertjax.model import cudnn_dropout
from bertjax.model import encoder_config
from bertjax.model import kernels
from bertjax.model import platform_defaults

Config = ml_collections.ConfigDict


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


def packed_positions(instance_ids_BxL):
  """Position ids restarting at 0 at each instance's first token (instances are contiguous)."""
  batch, length = instance_ids_BxL.shape
  index_BxL = jnp.broadcast_to(jnp.arange(length), (batch, length))
  starts_BxL = jnp.concatenate([jnp.ones((batch, 1), bool),
                                instance_ids_BxL[:, 1:] != instance_ids_BxL[:, :-1]], axis=1)
  return index_BxL - jax.lax.cummax(jnp.where(starts_BxL, index_BxL, 0), axis=1)


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
  """Multi-head self-attention within each instance of a row (rows: see TransformerLayer)."""

  config: Config
  layer_index: int = 0  # Seeds cuDNN's attention dropout (cudnn_dropout.layer_seed).
  scanned: bool = False

  @nn.compact
  def __call__(self, x_BxLxD, rows, deterministic: bool):
    cfg = self.config
    dtype = compute_dtype(cfg)
    # One matmul for query, key and value (a 3x wider one runs closer to the CPU's peak and
    # reads x once); the parameters stay three DenseGeneral-style [D, H, K] kernels.
    projections = [ProjectionParams(cfg, name=name)() for name in ('query', 'key', 'value')]
    weights, biases = zip(*projections, strict=True)
    x_BxLxD, kernel_Dx3xHxK, bias_3xHxK = nn.dtypes.promote_dtype(
        x_BxLxD, jnp.stack(weights, axis=1), jnp.stack(biases), dtype=dtype)
    qkv_BxLx3xHxK = kernels.einsum('bld,dthk->blthk', x_BxLxD, kernel_Dx3xHxK) + bias_3xHxK
    q_BxLxHxK, k_BxLxHxK, v_BxLxHxK = (qkv_BxLx3xHxK[:, :, i] for i in range(3))
    ids_BxL = rows['input_mask']
    packed = 'instance_starts' in rows
    if cfg.attention_impl == 'xla':
      dropout = functools.partial(
          kernels.Dropout(rate=cfg.attention_dropout_rate),
          deterministic=deterministic)
      mask = attention.packed_mask(ids_BxL) if packed else ids_BxL > 0
      out_BxLxHxK = attention.xla(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, dropout)
    elif cfg.attention_impl == 'cudnn':
      instances = rows['instance_starts'].shape[-1] if packed else 0
      rate = 0.0 if deterministic else cfg.attention_dropout_rate
      if rate and self.scanned:
        raise ValueError(
            "attention_impl='cudnn' draws attention dropout inside the kernel, which needs "
            'unrolled layers (model/cudnn_dropout.py): set model.scan_layers=False, or '
            'model.attention_dropout_rate=0, or attention_impl=xla.')
      out_BxLxHxK = attention.cudnn(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL, instances,
                                    dropout_rate=rate,
                                    seed=cudnn_dropout.layer_seed(self.layer_index))
    elif not deterministic and cfg.attention_dropout_rate > 0:
      raise ValueError(
          f'attention_impl={cfg.attention_impl!r} has no attention-probability dropout: set '
          'model.attention_dropout_rate=0 or use attention_impl=xla or cudnn for training.')
    elif cfg.attention_impl == 'splash':
      platform = attention.target_platform()
      if platform == 'gpu':
        raise ValueError('attention_impl=splash is a TPU kernel: use cudnn on a GPU.')
      out_BxLxHxK = attention.splash(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL,
                                     interpret=platform != 'tpu')
    else:
      out_BxLxHxK = attention.dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL,
                                                    packed)
    return nn.DenseGeneral(
        features=cfg.hidden_size, axis=(-2, -1), dtype=dtype, param_dtype=jnp.float32,
        dot_general=kernels.dot_general,
        kernel_init=initializer(cfg, ('heads', 'kv', 'embed')), bias_init=zeros(('embed',)),
        name='out')(out_BxLxHxK)


class Mlp(nn.Module):
  """The position-wise feed-forward block: dense(F), activation, dense(D)."""

  config: Config

  @nn.compact
  def __call__(self, x_BxLxD):
    cfg = self.config
    dense = functools.partial(nn.Dense, dtype=compute_dtype(cfg), param_dtype=jnp.float32,
                              dot_general=kernels.dot_general)
    h_BxLxF = dense(cfg.mlp_dim, kernel_init=initializer(cfg, ('embed', 'mlp')),
                    bias_init=zeros(('mlp',)), name='intermediate')(x_BxLxD)
    h_BxLxF = kernels.ACTIVATIONS[cfg.hidden_act](h_BxLxF)
    return dense(cfg.hidden_size, kernel_init=initializer(cfg, ('mlp', 'embed')),
                 bias_init=zeros(('embed',)), name='output')(h_BxLxF)


class TransformerLayer(nn.Module):
  """One post-LN BERT block: x = LN(x + drop(attn(x))); x = LN(x + drop(mlp(x)))."""

  config: Config
  scanned: bool = False  # nn.scan wants (carry, output); unscanned callers want just x.
  layer_index: int = 0  # Unrolled layers only (under nn.scan one module serves every layer).

  @nn.compact
  def __call__(self, x_BxLxD, rows, deterministic: bool):
    """rows: {'input_mask': [B, L]} (1 real, 0 padding), with 'instance_starts' [B, N] for
    packed rows (input_mask then holds instance ids)."""
    cfg = self.config
    drop = functools.partial(kernels.Dropout(rate=cfg.dropout_rate), deterministic=deterministic)
    y_BxLxD = SelfAttention(cfg, self.layer_index, self.scanned, name='attention')(
        x_BxLxD, rows, deterministic)
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
    self.dropout = kernels.Dropout(rate=cfg.dropout_rate)

  def __call__(self, input_ids_BxL, segment_ids_BxL, deterministic: bool, positions_BxL=None):
    length = input_ids_BxL.shape[1]
    positions = jnp.arange(length)[None] if positions_BxL is None else positions_BxL
    x_BxLxD = (self.word_embeddings(input_ids_BxL)
               + self.position_embeddings(positions)
               + self.token_type_embeddings(segment_ids_BxL))
    x_BxLxD = self.layer_norm(x_BxLxD)
    return self.dropout(x_BxLxD, deterministic=deterministic)


def _layer_class(cfg: Config):
  """TransformerLayer, wrapped in remat as the config asks."""
  if cfg.remat_policy == 'none':
    return TransformerLayer
  # Argument 3 (counting self) is `deterministic`, a Python bool.
  return nn.remat(TransformerLayer, policy=encoder_config.REMAT_POLICIES[cfg.remat_policy],
                  prevent_cse=not cfg.scan_layers, static_argnums=(3,))


class BertEncoder(nn.Module):
  """Embeddings, num_layers transformer blocks, and the [CLS] pooler."""

  config: Config

  def setup(self):
    cfg = self.config
    encoder_config.check_config(cfg)
    if any(platform_defaults.is_auto(cfg[k]) for k in ('attention_impl', 'scan_layers')):
      # Built outside a run (the loop settles 'auto' before the first trace): the choice for the
      # platform this is compiled for.
      cfg = platform_defaults.resolve(cfg, attention.target_platform())[0]
    self.scanned = cfg.scan_layers
    self.embeddings = Embeddings(cfg)
    layer = _layer_class(cfg)
    if self.scanned:
      stack = nn.scan(layer, variable_axes={'params': 0}, split_rngs={'params': True,
                      'dropout': True}, in_axes=(nn.broadcast, nn.broadcast),
                      length=cfg.num_layers, unroll=cfg.get('scan_unroll', 1),
                      metadata_params={nn.PARTITION_NAME: 'layers'})
      self.layers = stack(cfg, scanned=True)
    else:
      self.layers = [layer(cfg, layer_index=i) for i in range(cfg.num_layers)]
    # Square hidden->hidden projections shard their output like an MLP's input.
    self.pooler = nn.Dense(cfg.hidden_size, dtype=compute_dtype(cfg), param_dtype=jnp.float32,
                           dot_general=kernels.dot_general,
                           kernel_init=initializer(cfg, ('embed', 'mlp')),
                           bias_init=zeros(('mlp',)))

  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True,
               return_hidden_states=False, instance_starts=None):
    """[B, L] ids, mask, segments -> (sequence_output_BxLxD, pooled_output_BxD), compute dtype.

    Packed rows (several instances each): input_mask holds instance ids (1, 2, ...; 0 = padding)
    and instance_starts [B, N] the position of each instance's [CLS]. Attention then stays
    inside an instance, positions restart at each, and the pooled output is [B, N, D], one per
    instance: the same numbers as the instances run one per row.

    return_hidden_states=True adds a third output, every layer's output stacked [N+1, B, L, D]
    (the embeddings first, as transformers' output_hidden_states); a trace-time switch, so off
    costs nothing. It needs unscanned layers.
    """
    packed = instance_starts is not None
    rows = {'input_mask': jnp.asarray(input_mask)}
    if packed:
      rows['instance_starts'] = instance_starts
    x_BxLxD = self.embeddings(input_ids, segment_ids, deterministic,
                              packed_positions(input_mask) if packed else None)
    x_BxLxD = nn.with_logical_constraint(x_BxLxD, ('batch', 'length', 'activation_embed'))
    hidden = [x_BxLxD]
    if self.scanned:
      if return_hidden_states:
        raise ValueError('return_hidden_states needs model.scan_layers=False (the weights load '
                         'either way).')
      x_BxLxD, _ = self.layers(x_BxLxD, rows, deterministic)
    else:
      for layer in self.layers:
        x_BxLxD = layer(x_BxLxD, rows, deterministic)
        hidden.append(x_BxLxD)
    if packed:
      cls_BxNxD = jnp.take_along_axis(x_BxLxD, instance_starts[..., None], axis=1)
      pooled_BxD = jnp.tanh(self.pooler(cls_BxNxD))  # [B, N, D] when packed.
    else:
      pooled_BxD = jnp.tanh(self.pooler(x_BxLxD[:, 0]))
    if return_hidden_states:
      return x_BxLxD, pooled_BxD, jnp.stack(hidden)
    return x_BxLxD, pooled_BxD

  def word_embedding_table(self):
    """The [V, D] word embeddings, to tie the MLM decoder to."""
    return self.embeddings.word_embeddings.embedding


def param_count(params) -> int:
  """Number of scalars in a (possibly boxed) parameter tree."""
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.unbox(params)))

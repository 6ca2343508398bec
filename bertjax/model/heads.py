"""Heads on the BERT encoder, and the encoder+head models the trainers run.

Pre-training: the masked-LM head (dense + activation + LayerNorm, then a decoder tied to the
word embeddings plus a per-token bias) evaluated only at `masked_lm_positions`, as the original
BERT does; and next-sentence prediction on the pooled [CLS]. Fine-tuning: classification or
regression on the pooled [CLS], SQuAD start/end spans, token tagging; each model keeps the
encoder under `bert` so pre-trained weights load by name. Shape legend as in model.py.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.model import encoder
from bertjax.model import kernels

Config = encoder.Config


def gather_positions(x_BxLxD, positions_BxP):
  """Rows of x at the given sequence positions: [B, L, D], [B, P] -> [B, P, D]."""
  return jnp.take_along_axis(x_BxLxD, positions_BxP[..., None].astype(jnp.int32), axis=1)


def _tied_logits(h_NxD, embedding_VxD, bias_V):
  logits_NxV = jnp.einsum('nd,vd->nv', h_NxD, embedding_VxD, preferred_element_type=jnp.float32)
  return logits_NxV + bias_V


@jax.custom_vjp
def tied_logits(h_NxD, embedding_VxD, bias_V):
  """float32 logits h @ embedding.T + bias, with the gradients autodiff gives, computed cheaper.

  The backward only picks better forms for XLA:CPU: the bias gradient as a [1, N] x [N, V]
  product (its column reduction of the [N, V] cotangent took ~30% of a tiny model's step), and
  the embedding gradient as one dot contracting N, without a transposed copy of the cotangent.
  """
  return _tied_logits(h_NxD, embedding_VxD, bias_V)


def _tied_logits_fwd(h_NxD, embedding_VxD, bias_V):
  return _tied_logits(h_NxD, embedding_VxD, bias_V), (h_NxD, embedding_VxD)


def _tied_logits_bwd(residuals, g_NxV):
  h_NxD, embedding_VxD = residuals
  # As autodiff does: the cotangent goes back through the cast to the compute dtype.
  gc_NxV = g_NxV.astype(h_NxD.dtype)
  dh_NxD = kernels.einsum('nv,vd->nd', gc_NxV, embedding_VxD)
  dembedding_VxD = kernels.einsum('nv,nd->vd', gc_NxV, h_NxD)
  dbias_V = jnp.einsum('n,nv->v', jnp.ones(g_NxV.shape[:1], g_NxV.dtype), g_NxV)
  return dh_NxD, dembedding_VxD, dbias_V


tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)


class MaskedLmHead(nn.Module):
  """Transform, then logits against the (tied) word embeddings plus an output bias."""

  config: Config

  @nn.compact
  def __call__(self, x_BxPxD, embedding_VxD):
    cfg = self.config
    dtype = encoder.compute_dtype(cfg)
    h_BxPxD = nn.Dense(cfg.hidden_size, dtype=dtype, param_dtype=jnp.float32,
                       dot_general=kernels.dot_general,
                       kernel_init=encoder.initializer(cfg, ('embed', 'mlp')),
                       bias_init=encoder.zeros(('mlp',)), name='transform')(x_BxPxD)
    h_BxPxD = kernels.ACTIVATIONS[cfg.hidden_act](h_BxPxD)
    h_BxPxD = encoder.layer_norm(cfg, 'layer_norm')(h_BxPxD)
    # Keep the hidden dim whole here (as at the encoder's block edges). Left to propagation,
    # XLA (jax 0.10.2, Shardy and GSPMD alike) shards it over `tensor` from the transform
    # kernel and, on meshes with data, fsdp and tensor all > 1, returns wrong gradients for
    # everything below this point (tests/training/loop_test.py: sharded equals unsharded).
    h_BxPxD = nn.with_logical_constraint(h_BxPxD, ('batch', None, 'activation_embed'))
    bias_V = self.param('output_bias', encoder.zeros(('vocab',)), (cfg.vocab_size,), jnp.float32)
    # Logits leave in float32 so the softmax cross-entropy is computed in full precision.
    b, p, d = h_BxPxD.shape
    logits_NxV = tied_logits(h_BxPxD.reshape(b * p, d), embedding_VxD.astype(dtype), bias_V)
    return logits_NxV.reshape(b, p, -1)


class NextSentenceHead(nn.Module):
  """IsNext / NotNext logits from the pooled [CLS] output."""

  config: Config

  @nn.compact
  def __call__(self, pooled_BxD):
    cfg = self.config
    logits_Bx2 = nn.Dense(2, dtype=encoder.compute_dtype(cfg), param_dtype=jnp.float32,
                          dot_general=kernels.dot_general,
                          kernel_init=encoder.initializer(cfg, ('embed', None)),
                          bias_init=encoder.zeros((None,)), name='dense')(pooled_BxD)
    return logits_Bx2.astype(jnp.float32)


class BertForPreTraining(nn.Module):
  """Encoder + MLM + NSP: returns (mlm_logits_BxPxV, nsp_logits_Bx2); nsp_logits is None (and
  no NSP head exists) when config.nsp is False."""

  config: Config

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, masked_lm_positions,
               deterministic=True, instance_starts=None):
    """Packed rows (instance_starts [B, N], input_mask = instance ids): one NSP prediction per
    instance, [B, N, 2], read at its own [CLS]."""
    cfg = self.config
    bert = encoder.BertEncoder(cfg, name='bert')
    x_BxLxD, pooled_BxD = bert(input_ids, input_mask, segment_ids, deterministic,
                               instance_starts=instance_starts)
    x_BxPxD = gather_positions(x_BxLxD, masked_lm_positions)
    mlm_logits_BxPxV = MaskedLmHead(cfg, name='mlm')(x_BxPxD, bert.word_embedding_table())
    if not cfg.nsp:
      return mlm_logits_BxPxV, None
    nsp_logits_Bx2 = NextSentenceHead(cfg, name='nsp')(pooled_BxD)
    return mlm_logits_BxPxV, nsp_logits_Bx2


# ---------------------------------------------------------------------------------------------
# Fine-tuning heads. Names follow transformers' (classifier, qa_outputs) so that exports map
# one to one. Kernels are drawn as BERT draws them (truncated normal, initializer_range).


def _output_dense(cfg: Config, features: int, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=encoder.compute_dtype(cfg), param_dtype=jnp.float32,
                  dot_general=kernels.dot_general,
                  kernel_init=encoder.initializer(cfg, ('embed', None)),
                  bias_init=encoder.zeros((None,)), name=name)


POOLINGS = ('cls', 'mean')


class BertForSequenceClassification(nn.Module):
  """Pooled text -> dropout -> dense: logits [B, C] (C = num_labels; 1 for regression).

  pooling 'cls' is BERT's pooler (dense + tanh on [CLS]); 'mean' averages the last hidden
  states over the input mask, the pooling sentence-transformers checkpoints are trained with
  (their pooler weights are left over, untrained). Packed rows (instance_starts [B, N], input
  mask = instance ids) give [B, N, C], each instance pooled on its own.
  """

  config: Config
  num_labels: int
  pooling: str = 'cls'

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True,
               instance_starts=None):
    return _pooled_logits(self.config, self.num_labels, self.pooling, input_ids, input_mask,
                          segment_ids, deterministic, instance_starts)


def mean_pool(x_BxLxD, instance_ids_BxL, instances: int):
  """Each instance's mean hidden state, [B, N, D]: instance ids 1..N (0 = padding; an unpacked
  row is instance 1). Summed in float32: up to 512 bf16 rows otherwise."""
  member_BxLxN = (jnp.asarray(instance_ids_BxL)[..., None]
                  == jnp.arange(1, instances + 1)).astype(jnp.float32)
  sums_BxNxD = jnp.einsum('bln,bld->bnd', member_BxLxN, x_BxLxD.astype(jnp.float32))
  counts_BxNx1 = jnp.sum(member_BxLxN, axis=1)[..., None]
  return (sums_BxNxD / jnp.maximum(counts_BxNx1, 1)).astype(x_BxLxD.dtype)


def _pooled_logits(cfg: Config, num_labels: int, pooling: str, input_ids, input_mask,
                   segment_ids, deterministic, instance_starts=None):
  """The sequence-level head's body, called inside a compact module: submodules `bert` and
  `classifier` (transformers' names for both sequence classification and multiple choice)."""
  x_BxLxD, pooled_BxD = encoder.BertEncoder(cfg, name='bert')(
      input_ids, input_mask, segment_ids, deterministic, instance_starts=instance_starts)
  if pooling == 'mean':
    if instance_starts is None:
      pooled_BxD = mean_pool(x_BxLxD, input_mask, 1)[:, 0]
    else:
      pooled_BxD = mean_pool(x_BxLxD, input_mask, instance_starts.shape[-1])  # [B, N, D].
  elif pooling != 'cls':
    raise ValueError(f'pooling={pooling!r} is unknown; valid: {", ".join(POOLINGS)}.')
  pooled_BxD = kernels.Dropout(rate=cfg.dropout_rate)(pooled_BxD, deterministic)
  logits_BxC = _output_dense(cfg, num_labels, 'classifier')(pooled_BxD)
  return logits_BxC.astype(jnp.float32)


class BertForQuestionAnswering(nn.Module):
  """Every position -> dense(2): start and end logits, [B, L, 2] (run_squad: no dropout)."""

  config: Config

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True):
    cfg = self.config
    x_BxLxD, _ = encoder.BertEncoder(cfg, name='bert')(input_ids, input_mask, segment_ids,
                                                     deterministic)
    return _output_dense(cfg, 2, 'qa_outputs')(x_BxLxD).astype(jnp.float32)


class BertForTokenClassification(nn.Module):
  """Every position -> dropout -> dense: tag logits [B, L, C]. Packed rows (instance_starts
  [B, N], input_mask = instance ids) give the same [B, L, C], each token's logits those of its
  own instance run alone."""

  config: Config
  num_labels: int

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True,
               instance_starts=None):
    cfg = self.config
    x_BxLxD, _ = encoder.BertEncoder(cfg, name='bert')(input_ids, input_mask, segment_ids,
                                                     deterministic, instance_starts=instance_starts)
    x_BxLxD = kernels.Dropout(rate=cfg.dropout_rate)(x_BxLxD, deterministic)
    return _output_dense(cfg, self.num_labels, 'classifier')(x_BxLxD).astype(jnp.float32)


class BertForMultipleChoice(nn.Module):
  """Each [CLS] context [SEP] choice [SEP] row -> pooled -> dropout -> dense(1): logits [B, C].

  Inputs are [B, C, L] (C choices per question); the rows run through the encoder as B*C
  sequences and one shared linear layer scores each, as the BERT paper's SWAG head; the softmax
  over a question's C scores is the loss's.
  """

  config: Config
  pooling: str = 'cls'

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True):
    batch, choices, length = input_ids.shape
    flat = [jnp.reshape(x, (batch * choices, length))
            for x in (input_ids, input_mask, segment_ids)]
    scores_Nx1 = _pooled_logits(self.config, 1, self.pooling, *flat, deterministic)
    return jnp.reshape(scores_Nx1, (batch, choices))


def dummy_batch(batch_size: int, seq_len: int, max_predictions: int):
  """A zero batch with the pre-training features' shapes and dtypes (for init and tracing)."""
  return dict(
      input_ids=np.zeros((batch_size, seq_len), np.int32),
      input_mask=np.ones((batch_size, seq_len), np.int32),
      segment_ids=np.zeros((batch_size, seq_len), np.int32),
      masked_lm_positions=np.zeros((batch_size, max_predictions), np.int32),
  )

"""Heads on the BERT encoder, and the encoder+head models the trainer runs.

Pre-training: the masked-LM head (dense + activation + LayerNorm, then a decoder tied to the
word embeddings plus a per-token bias) evaluated only at `masked_lm_positions`, as the original
BERT does; and next-sentence prediction on the pooled [CLS]. Shape legend as in model.py.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax import model

Config = model.Config


def gather_positions(x_BxLxD, positions_BxP):
  """Rows of x at the given sequence positions: [B, L, D], [B, P] -> [B, P, D]."""
  return jnp.take_along_axis(x_BxLxD, positions_BxP[..., None].astype(jnp.int32), axis=1)


def _tied_logits(h_NxD, embedding_VxD, bias_V):
  logits_NxV = jnp.einsum('nd,vd->nv', h_NxD, embedding_VxD)
  return logits_NxV.astype(jnp.float32) + bias_V


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
  dh_NxD = jnp.einsum('nv,vd->nd', gc_NxV, embedding_VxD)
  dembedding_VxD = jnp.einsum('nv,nd->vd', gc_NxV, h_NxD)
  dbias_V = jnp.einsum('n,nv->v', jnp.ones(g_NxV.shape[:1], g_NxV.dtype), g_NxV)
  return dh_NxD, dembedding_VxD, dbias_V


tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)


class MaskedLmHead(nn.Module):
  """Transform, then logits against the (tied) word embeddings plus an output bias."""

  config: Config

  @nn.compact
  def __call__(self, x_BxPxD, embedding_VxD):
    cfg = self.config
    dtype = model.compute_dtype(cfg)
    h_BxPxD = nn.Dense(cfg.hidden_size, dtype=dtype, param_dtype=jnp.float32,
                       kernel_init=model.initializer(cfg, ('embed', 'mlp')),
                       bias_init=model.zeros(('mlp',)), name='transform')(x_BxPxD)
    h_BxPxD = model.ACTIVATIONS[cfg.hidden_act](h_BxPxD)
    h_BxPxD = model.layer_norm(cfg, 'layer_norm')(h_BxPxD)
    # Keep the hidden dim whole here (as at the encoder's block edges). Left to propagation,
    # XLA (jax 0.10.2, Shardy and GSPMD alike) shards it over `tensor` from the transform
    # kernel and, on meshes with data, fsdp and tensor all > 1, returns wrong gradients for
    # everything below this point (tests/train_test.py: sharded equals unsharded).
    h_BxPxD = nn.with_logical_constraint(h_BxPxD, ('batch', None, 'activation_embed'))
    bias_V = self.param('output_bias', model.zeros(('vocab',)), (cfg.vocab_size,), jnp.float32)
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
    logits_Bx2 = nn.Dense(2, dtype=model.compute_dtype(cfg), param_dtype=jnp.float32,
                          kernel_init=model.initializer(cfg, ('embed', None)),
                          bias_init=model.zeros((None,)), name='dense')(pooled_BxD)
    return logits_Bx2.astype(jnp.float32)


class BertForPreTraining(nn.Module):
  """Encoder + MLM + NSP: returns (mlm_logits_BxPxV, nsp_logits_Bx2)."""

  config: Config

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, masked_lm_positions,
               deterministic=True):
    cfg = self.config
    encoder = model.BertEncoder(cfg, name='bert')
    x_BxLxD, pooled_BxD = encoder(input_ids, input_mask, segment_ids, deterministic)
    x_BxPxD = gather_positions(x_BxLxD, masked_lm_positions)
    mlm_logits_BxPxV = MaskedLmHead(cfg, name='mlm')(x_BxPxD, encoder.word_embedding_table())
    nsp_logits_Bx2 = NextSentenceHead(cfg, name='nsp')(pooled_BxD)
    return mlm_logits_BxPxV, nsp_logits_Bx2


def dummy_batch(batch_size: int, seq_len: int, max_predictions: int):
  """A zero batch with the pre-training features' shapes and dtypes (for init and tracing)."""
  return dict(
      input_ids=np.zeros((batch_size, seq_len), np.int32),
      input_mask=np.ones((batch_size, seq_len), np.int32),
      segment_ids=np.zeros((batch_size, seq_len), np.int32),
      masked_lm_positions=np.zeros((batch_size, max_predictions), np.int32),
  )

"""Heads on the BERT encoder, and the encoder+head models the trainer runs.

Pre-training: the masked-LM head (dense + activation + LayerNorm, then a decoder tied to the
word embeddings plus a per-token bias) evaluated only at `masked_lm_positions`, as the original
BERT does; and next-sentence prediction on the pooled [CLS]. Shape legend as in model.py.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bertjax import model

Config = model.Config


def gather_positions(x_BxLxD, positions_BxP):
  """Rows of x at the given sequence positions: [B, L, D], [B, P] -> [B, P, D]."""
  return jnp.take_along_axis(x_BxLxD, positions_BxP[..., None].astype(jnp.int32), axis=1)


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
    logits_BxPxV = jnp.einsum('bpd,vd->bpv', h_BxPxD, embedding_VxD.astype(dtype))
    bias_V = self.param('output_bias', model.zeros(('vocab',)), (cfg.vocab_size,), jnp.float32)
    # Logits leave in float32 so the softmax cross-entropy is computed in full precision.
    return logits_BxPxV.astype(jnp.float32) + bias_V


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

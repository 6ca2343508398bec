"""The pre-training heads: the tied logits' hand-written gradients."""

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.model import heads


def test_tied_logits_gradients_equal_autodiff():
  """heads.tied_logits's hand-written backward must give what autodiff of the plain form gives."""
  rng = np.random.default_rng(0)
  h, emb, bias = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((6, 8), (11, 8), (11,)))
  g = jnp.asarray(rng.normal(size=(6, 11)), jnp.float32)

  def plain(h, emb, bias):
    return jnp.sum((jnp.einsum('nd,vd->nv', h, emb) + bias) * g)

  def ours(h, emb, bias):
    return jnp.sum(heads.tied_logits(h, emb, bias) * g)

  np.testing.assert_allclose(ours(h, emb, bias), plain(h, emb, bias), rtol=1e-6)
  for got, want in zip(jax.grad(ours, (0, 1, 2))(h, emb, bias),
                       jax.grad(plain, (0, 1, 2))(h, emb, bias), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

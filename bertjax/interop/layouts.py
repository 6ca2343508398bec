"""How one tensor is laid out in bertjax and in a foreign format, both ways.

A name table (hf_names.names, tf1_checkpoint.names) maps each bertjax parameter path, in
the unscanned flat form `bert/layers_<i>/...`, to (foreign name, layout). A layout is a pair of
functions: `to_ours` turns the foreign array into bertjax's, `to_theirs` turns it back; every pair
is exact (a reshape or a transpose), so round trips are bit-identical.

bertjax keeps attention projections split by head: query/key/value kernels [D, H, K] and biases
[H, K], the output kernel [H, K, D]. Dense kernels are [in, out] as in TF; torch stores [out, in].
"""

import dataclasses
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
  to_ours: Callable[[np.ndarray], np.ndarray]
  to_theirs: Callable[[np.ndarray], np.ndarray]


SAME = Layout(lambda w: w, lambda w: w)
TRANSPOSED = Layout(lambda w: w.T, lambda w: w.T)


def heads_kernel(num_heads: int, transposed: bool) -> Layout:
  """A [D, D] q/k/v kernel ([out, in] when transposed) <-> bertjax's [D, H, K]."""
  def to_ours(w):
    w = w.T if transposed else w
    return w.reshape(w.shape[0], num_heads, -1)

  def to_theirs(w):
    w = w.reshape(w.shape[0], -1)
    return w.T if transposed else w
  return Layout(to_ours, to_theirs)


def heads_bias(num_heads: int) -> Layout:
  """A [D] q/k/v bias <-> [H, K]."""
  return Layout(lambda b: b.reshape(num_heads, -1), lambda b: b.reshape(-1))


def heads_output_kernel(num_heads: int, transposed: bool) -> Layout:
  """The attention output's [D, D] kernel ([out, in] when transposed) <-> [H, K, D]."""
  def to_ours(w):
    w = w.T if transposed else w
    return w.reshape(num_heads, -1, w.shape[-1])

  def to_theirs(w):
    w = w.reshape(-1, w.shape[-1])
    return w.T if transposed else w
  return Layout(to_ours, to_theirs)


def unstack_layers(flat: dict) -> dict:
  """nn.scan's `bert/layers/...` [num_layers, ...] -> `bert/layers_<i>/...`; others unchanged."""
  out = {}
  for key, value in flat.items():
    prefix, _, rest = key.partition('layers/')
    if prefix in ('bert/', '') and rest and key.startswith(prefix + 'layers/'):
      for i in range(value.shape[0]):
        out[f'{prefix}layers_{i}/{rest}'] = value[i]
    else:
      out[key] = value
  return out


def stack_layers(flat: dict, num_layers: int) -> dict:
  """`bert/layers_<i>/...` -> `bert/layers/...` with a leading layer axis (nn.scan's layout)."""
  out = {k: v for k, v in flat.items() if not k.startswith('bert/layers_')}
  suffixes = {k.split('/', 2)[2] for k in flat if k.startswith('bert/layers_0/')}
  for suffix in suffixes:
    out[f'bert/layers/{suffix}'] = np.stack(
        [flat[f'bert/layers_{i}/{suffix}'] for i in range(num_layers)])
  return out

"""The encoder's two parameter layouts: scanned layers stacked on a leading axis
(`bert/layers/...` [num_layers, ...], nn.scan's) and unrolled ones, one subtree per layer
(`bert/layers_<i>/...`). Flat dicts keyed by '/'-joined paths go from one to the other exactly.
"""

import flax.linen as nn
import numpy as np


def unstack_layers(flat: dict) -> dict:
  """`bert/layers/...` [num_layers, ...] -> `bert/layers_<i>/...`; other keys unchanged. A value
  boxed with its logical axis names (nn.LogicallyPartitioned) keeps them, less the layer axis."""
  out = {}
  for key, value in flat.items():
    prefix, _, rest = key.partition('layers/')
    if prefix in ('bert/', '') and rest and key.startswith(prefix + 'layers/'):
      boxed = isinstance(value, nn.LogicallyPartitioned)
      for i in range((value.value if boxed else value).shape[0]):
        out[f'{prefix}layers_{i}/{rest}'] = (
            value.replace(value=value.value[i], names=value.names[1:]) if boxed else value[i])
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

"""Pieces shared by every config: the one size table, argument parsing, the model block.

`get_config(arg)` files take an argument string such as `size=base,dtype=bfloat16`; the keys a
file accepts and their defaults are given by the file itself.
"""

import ml_collections

from bertjax.model import encoder

# layers, hidden, heads, mlp (intermediate). tiny..medium are the compact BERTs of Turc et al.
# (2019); base and large are the BERT paper's.
SIZES = {
    'tiny': dict(num_layers=2, hidden_size=128, num_heads=2, mlp_dim=512),
    'mini': dict(num_layers=4, hidden_size=256, num_heads=4, mlp_dim=1024),
    'small': dict(num_layers=4, hidden_size=512, num_heads=8, mlp_dim=2048),
    'medium': dict(num_layers=8, hidden_size=512, num_heads=8, mlp_dim=2048),
    'base': dict(num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072),
    'large': dict(num_layers=24, hidden_size=1024, num_heads=16, mlp_dim=4096),
}


def parse_arg(arg, **defaults):
  """Parses `k=v,k=v` into a ConfigDict over `defaults`, values cast to the defaults' types."""
  parsed = ml_collections.ConfigDict(defaults)
  if not arg:
    return parsed
  for item in arg.split(','):
    if not item:
      continue
    key, sep, value = item.partition('=')
    if not sep:
      raise ValueError(f'config argument {item!r} is not key=value (got {arg!r}).')
    if key not in defaults:
      raise ValueError(f'unknown config argument {key!r}; valid ones: {sorted(defaults)}.')
    default = defaults[key]
    if isinstance(default, bool):
      parsed[key] = value.lower() in ('1', 'true', 'yes')
    elif default is None:
      parsed[key] = value
    else:
      parsed[key] = type(default)(value)
  return parsed


def model_config(size: str, **overrides) -> ml_collections.ConfigDict:
  """The encoder's hyper-parameters for one of SIZES; overrides set any field."""
  if size not in SIZES:
    raise ValueError(f'unknown model size {size!r}; valid sizes: {", ".join(SIZES)}.')
  return encoder.default_config(size=size, **{**SIZES[size], **overrides})

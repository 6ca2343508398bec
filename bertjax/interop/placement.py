"""A model's parameters filled from a flat dict of loaded arrays: checked by name and shape,
placed into the model's shardings, the encoder's layers stacked (nn.scan) or unstacked as the
model lays them out. The loaders (init_from for training, the fine-tuning job's reading of its
own run) read the arrays; this places them.
"""

from absl import logging
import jax
import numpy as np

from bertjax.training import checkpoint


def place(loaded: dict, abstract_tree, shardings, source: str, *, missing_hint: str,
          shape_hint: str):
  """`abstract_tree` filled from the flat `loaded` dict (checked by name and shape), placed
  into `shardings`."""
  wanted = checkpoint.flatten(abstract_tree)
  missing = sorted(set(wanted) - set(loaded))
  if missing:
    raise ValueError(f'{source} lacks {len(missing)} parameters of the model, e.g. '
                     f'{missing[:3]}: {missing_hint}')
  bad = [f'{k}: checkpoint {tuple(np.shape(loaded[k]))} vs model {tuple(wanted[k].shape)}'
         for k in wanted if tuple(np.shape(loaded[k])) != tuple(wanted[k].shape)]
  if bad:
    raise ValueError(f'{source} does not fit the config ({len(bad)} shapes differ, e.g. '
                     f'{bad[:3]}): {shape_hint}')
  flat_shardings = checkpoint.flatten(shardings)
  placed = {k: jax.device_put(np.asarray(loaded[k], wanted[k].dtype), flat_shardings[k])
            for k in wanted}
  return jax.tree.map(lambda _, path: placed[path], dict(abstract_tree),
                      _paths_tree(dict(abstract_tree)))


def _paths_tree(tree, prefix=''):
  return {k: _paths_tree(v, f'{prefix}{k}/') if isinstance(v, dict) else f'{prefix}{k}'
          for k, v in tree.items()}


def encoder_layout_of(loaded: dict, wanted: dict, source: str) -> dict:
  """`loaded` (flat, the encoder under bert/) with its layers laid out as `wanted`'s: continued
  pre-training may scan where the base run unrolled (model/platform_defaults.py: a TPU run
  scans base, a GPU run unrolls it); the weights are the same either way."""
  def encoder_of(flat):
    return {k[len('bert/'):]: v for k, v in flat.items() if k.startswith('bert/')}
  bert = encoder_of(loaded)
  # Stacked, the layers it has (a count that differs from the model's shows in the shapes).
  num_layers = len({k.split('/', 1)[0] for k in bert if k.startswith('layers_')})
  converted = convert_layer_layout(bert, encoder_of(wanted), num_layers)
  if converted is bert:
    return loaded
  logging.info('init_from %s: its encoder layers %s for this model', source,
               'stacked (nn.scan)' if num_layers else 'unstacked from nn.scan')
  return {**{k: v for k, v in loaded.items() if not k.startswith('bert/')},
          **{f'bert/{k}': v for k, v in converted.items()}}


def convert_layer_layout(loaded: dict, wanted: dict, num_layers: int) -> dict:
  """Stacks per-layer tensors (layers_i/...) into nn.scan's layers/... or the reverse."""
  stacked_wanted = any(k.startswith('layers/') for k in wanted)
  stacked_loaded = any(k.startswith('layers/') for k in loaded)
  if stacked_wanted == stacked_loaded:
    return loaded
  out = {k: v for k, v in loaded.items() if not k.startswith('layers')}
  if stacked_wanted:
    suffixes = {k.split('/', 1)[1] for k in loaded if k.startswith('layers_0/')}
    for suffix in suffixes:
      out[f'layers/{suffix}'] = np.stack([loaded[f'layers_{i}/{suffix}']
                                          for i in range(num_layers)])
  else:
    for key, value in loaded.items():
      if key.startswith('layers/'):
        for i in range(value.shape[0]):
          out[f'layers_{i}/{key.split("/", 1)[1]}'] = value[i]
  return out

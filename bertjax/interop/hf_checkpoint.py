"""Import a transformers BERT directory (config.json + weights) into bertjax params and config.

Accepted: `model.safetensors` (preferred, read without torch) or `pytorch_model.bin` (needs
torch); parameter names with or without the `bert.` prefix; with or without the `cls.*`
pre-training heads. What the checkpoint lacks is initialised fresh and listed in the report;
a shape that does not fit, or a vocabulary that disagrees with the vocab file, is an error that
names the tensor.
"""

import dataclasses
import json
import pathlib

from flax import traverse_util
import flax.linen as nn
import jax
import numpy as np

from bertjax.model import encoder
from bertjax.model import heads
from bertjax.text import tokenizer

_ACTIVATIONS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh',
                'gelu_fast': 'gelu_tanh', 'relu': 'relu'}


@dataclasses.dataclass
class ImportReport:
  """What an import took from the checkpoint and what it had to make up."""

  loaded: list  # bertjax parameter paths filled from the checkpoint.
  initialised: list  # bertjax parameter paths absent from the checkpoint, freshly initialised.
  unused: list  # checkpoint tensors that map to nothing in the target model.

  def summary(self) -> str:
    lines = [f'loaded {len(self.loaded)} tensors from the checkpoint']
    if self.initialised:
      lines.append(f'initialised fresh ({len(self.initialised)}): ' + ', '.join(self.initialised))
    if self.unused:
      lines.append(f'not used ({len(self.unused)}): ' + ', '.join(self.unused))
    return '\n'.join(lines)


def config_from_hf(hf_config: dict, **overrides):
  """A bertjax model config block from a transformers BertConfig dict."""
  if hf_config.get('model_type', 'bert') != 'bert':
    raise ValueError(f'model_type {hf_config.get("model_type")!r} is not bert: only BERT '
                     'checkpoints (BertModel / BertForPreTraining) can be imported.')
  if hf_config.get('position_embedding_type', 'absolute') != 'absolute':
    raise ValueError('only absolute position embeddings are supported, got '
                     f'{hf_config["position_embedding_type"]!r}.')
  act = hf_config.get('hidden_act', 'gelu')
  if act not in _ACTIVATIONS:
    raise ValueError(f'hidden_act {act!r} is not supported; known: {", ".join(_ACTIVATIONS)}.')
  fields = dict(
      vocab_size=hf_config['vocab_size'],
      hidden_size=hf_config['hidden_size'],
      num_layers=hf_config['num_hidden_layers'],
      num_heads=hf_config['num_attention_heads'],
      mlp_dim=hf_config['intermediate_size'],
      max_position_embeddings=hf_config.get('max_position_embeddings', 512),
      type_vocab_size=hf_config.get('type_vocab_size', 2),
      hidden_act=_ACTIVATIONS[act],
      dropout_rate=hf_config.get('hidden_dropout_prob', 0.1),
      attention_dropout_rate=hf_config.get('attention_probs_dropout_prob', 0.1),
      layer_norm_eps=hf_config.get('layer_norm_eps', 1e-12),
      initializer_range=hf_config.get('initializer_range', 0.02),
  )
  fields.update(overrides)
  return encoder.default_config(size='imported', **fields)


def _read_state_dict(directory: pathlib.Path) -> dict:
  safetensors_file = directory / 'model.safetensors'
  bin_file = directory / 'pytorch_model.bin'
  if safetensors_file.exists():
    from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
    try:
      return st_numpy.load_file(str(safetensors_file))
    except Exception as e:  # safetensors raises its own error types for truncated files.
      raise ValueError(f'{safetensors_file} could not be read ({e}): the file is corrupt or '
                       'truncated; download or save it again.') from e
  if bin_file.exists():
    try:
      import torch  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError(f'{bin_file} is a PyTorch pickle and needs torch to read: '
                        '`pip install torch`, or convert it to model.safetensors.') from e
    state = torch.load(str(bin_file), map_location='cpu', weights_only=True)
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}
  raise FileNotFoundError(f'{directory} has neither model.safetensors nor pytorch_model.bin: '
                          'point at a transformers BERT directory (save_pretrained output).')


def _name_map(cfg) -> dict:
  """bertjax path (unscanned) -> (HF name, how to convert the [out, in] torch layout)."""
  d, h = cfg.hidden_size, cfg.num_heads
  k = d // h
  t = lambda w: w.T  # noqa: E731  torch Linear stores [out, in]; flax Dense [in, out].
  m = {
      'bert/embeddings/word_embeddings/embedding': ('embeddings.word_embeddings.weight', None),
      'bert/embeddings/position_embeddings/embedding': (
          'embeddings.position_embeddings.weight', None),
      'bert/embeddings/token_type_embeddings/embedding': (
          'embeddings.token_type_embeddings.weight', None),
      'bert/embeddings/layer_norm/scale': ('embeddings.LayerNorm.weight', None),
      'bert/embeddings/layer_norm/bias': ('embeddings.LayerNorm.bias', None),
      'bert/pooler/kernel': ('pooler.dense.weight', t),
      'bert/pooler/bias': ('pooler.dense.bias', None),
      'mlm/transform/kernel': ('cls.predictions.transform.dense.weight', t),
      'mlm/transform/bias': ('cls.predictions.transform.dense.bias', None),
      'mlm/layer_norm/scale': ('cls.predictions.transform.LayerNorm.weight', None),
      'mlm/layer_norm/bias': ('cls.predictions.transform.LayerNorm.bias', None),
      'mlm/output_bias': ('cls.predictions.bias', None),
      'nsp/dense/kernel': ('cls.seq_relationship.weight', t),
      'nsp/dense/bias': ('cls.seq_relationship.bias', None),
  }
  for i in range(cfg.num_layers):
    ours, theirs = f'bert/layers_{i}', f'encoder.layer.{i}'
    for name in ('query', 'key', 'value'):
      m[f'{ours}/attention/{name}/kernel'] = (
          f'{theirs}.attention.self.{name}.weight', lambda w: w.T.reshape(d, h, k))
      m[f'{ours}/attention/{name}/bias'] = (
          f'{theirs}.attention.self.{name}.bias', lambda b: b.reshape(h, k))
    m[f'{ours}/attention/out/kernel'] = (
        f'{theirs}.attention.output.dense.weight', lambda w: w.T.reshape(h, k, d))
    m[f'{ours}/attention/out/bias'] = (f'{theirs}.attention.output.dense.bias', None)
    for ln, hf_ln in (('attention_layer_norm', 'attention.output.LayerNorm'),
                      ('output_layer_norm', 'output.LayerNorm')):
      m[f'{ours}/{ln}/scale'] = (f'{theirs}.{hf_ln}.weight', None)
      m[f'{ours}/{ln}/bias'] = (f'{theirs}.{hf_ln}.bias', None)
    m[f'{ours}/mlp/intermediate/kernel'] = (f'{theirs}.intermediate.dense.weight', t)
    m[f'{ours}/mlp/intermediate/bias'] = (f'{theirs}.intermediate.dense.bias', None)
    m[f'{ours}/mlp/output/kernel'] = (f'{theirs}.output.dense.weight', t)
    m[f'{ours}/mlp/output/bias'] = (f'{theirs}.output.dense.bias', None)
  return m


def _strip_prefix(state: dict) -> dict:
  """Drops `bert.` (BertForPreTraining) so both layouts use BertModel's names."""
  out = {}
  for name, value in state.items():
    out[name[len('bert.'):] if name.startswith('bert.') else name] = value
  return out


def _stack_layers(flat: dict, num_layers: int) -> dict:
  """Turns bert/layers_i/... into bert/layers/... with a leading layer axis (nn.scan layout)."""
  out = {k: v for k, v in flat.items() if not k.startswith('bert/layers_')}
  suffixes = {k.split('/', 2)[2] for k in flat if k.startswith('bert/layers_0/')}
  for suffix in suffixes:
    out[f'bert/layers/{suffix}'] = np.stack(
        [flat[f'bert/layers_{i}/{suffix}'] for i in range(num_layers)])
  return out


def load(directory, *, with_heads=True, vocab_file=None, rng=None, **config_overrides):
  """Reads a transformers BERT directory.

  Returns (model_config, params, report): params is the tree of `heads.BertForPreTraining`
  (with_heads=True) or `encoder.BertEncoder`, as float32 numpy arrays; heads the checkpoint lacks
  are initialised from `rng` (default key 0) and listed in report.initialised.
  """
  directory = pathlib.Path(directory)
  config_file = directory / 'config.json'
  if not directory.is_dir():
    raise FileNotFoundError(f'checkpoint directory {directory} does not exist: pass the folder '
                            'that holds config.json and model.safetensors.')
  if not config_file.exists():
    raise FileNotFoundError(f'{config_file} not found: {directory} is not a transformers BERT '
                            'directory (expected config.json + model.safetensors).')
  cfg = config_from_hf(json.loads(config_file.read_text()), **config_overrides)
  state = _strip_prefix(_read_state_dict(directory))

  embedding = state.get('embeddings.word_embeddings.weight')
  if embedding is not None and embedding.shape[0] != cfg.vocab_size:
    raise ValueError(f'embeddings.word_embeddings.weight has {embedding.shape[0]} rows but '
                     f'config.json says vocab_size={cfg.vocab_size}: the checkpoint is '
                     'inconsistent.')
  vocab_entries = None if vocab_file is None else len(tokenizer.load_vocab(vocab_file))
  if vocab_entries is not None and vocab_entries != cfg.vocab_size:
    raise ValueError(
        f'vocab file {vocab_file} has {vocab_entries} entries but the checkpoint\'s '
        f'embeddings.word_embeddings.weight has {cfg.vocab_size} rows: use the vocab.txt that '
        'was saved with this checkpoint.')

  module = heads.BertForPreTraining(cfg) if with_heads else encoder.BertEncoder(cfg)
  batch = heads.dummy_batch(1, 2, 1)
  if not with_heads:
    batch.pop('masked_lm_positions')
  rng = jax.random.key(0) if rng is None else rng
  fresh = nn.unbox(jax.jit(module.init)(rng, **batch)['params'])
  fresh = traverse_util.flatten_dict(fresh, sep='/')
  if not with_heads:  # the encoder's own tree has no 'bert/' level.
    fresh = {f'bert/{k}': v for k, v in fresh.items()}

  names = _name_map(cfg)
  converted, loaded, initialised = {}, [], []
  for path in sorted(_unscanned_paths(fresh, cfg)):
    hf_name, convert = names[path]
    if hf_name not in state and path == 'mlm/output_bias':
      hf_name = 'cls.predictions.decoder.bias'  # Some exporters store the bias only here.
    if hf_name not in state:
      initialised.append(path)
      continue
    value = np.asarray(state[hf_name], np.float32)
    value = convert(value) if convert else value
    converted[path] = value
    loaded.append(path)
  decoder = state.get('cls.predictions.decoder.weight')
  if decoder is not None and embedding is not None and not np.array_equal(decoder, embedding):
    raise ValueError('cls.predictions.decoder.weight differs from '
                     'embeddings.word_embeddings.weight:'
                     ' bertjax ties the MLM decoder to the word embeddings, as BERT does.')
  if cfg.scan_layers:
    converted = _stack_layers(converted, cfg.num_layers)
  params = {}
  for path, value in fresh.items():
    if path in converted:
      if converted[path].shape != value.shape:
        raise ValueError(f'{path} (from {_hf_names(names, path)}) has shape '
                         f'{converted[path].shape}, the model expects {value.shape}: config.json '
                         'does not '
                         'describe these weights (or the overrides change the architecture).')
      params[path] = converted[path]
    else:
      params[path] = np.asarray(value)
  used = {names[p][0] for p in loaded} | {'cls.predictions.decoder.bias',
                                          'cls.predictions.decoder.weight'}
  unused = sorted(n for n in state if n not in used and not n.endswith('position_ids'))
  if not with_heads:
    params = {k[len('bert/'):]: v for k, v in params.items()}
  report = ImportReport(loaded=loaded, initialised=initialised, unused=unused)
  return cfg, traverse_util.unflatten_dict(params, sep='/'), report


def _unscanned_paths(fresh: dict, cfg) -> list:
  if not cfg.scan_layers:
    return list(fresh)
  paths = [p for p in fresh if not p.startswith('bert/layers/')]
  for p in fresh:
    if p.startswith('bert/layers/'):
      suffix = p[len('bert/layers/'):]
      paths += [f'bert/layers_{i}/{suffix}' for i in range(cfg.num_layers)]
  return paths


def _hf_names(names: dict, path: str) -> str:
  if path.startswith('bert/layers/'):
    return names[path.replace('bert/layers/', 'bert/layers_0/')][0].replace('.0.', '.<i>.')
  return names[path][0]

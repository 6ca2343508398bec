"""How one tensor is laid out in bertjax and in a foreign format, both ways.

A name table (hf_names.names, tf1_checkpoint.names) maps each bertjax parameter path, in
the unscanned flat form `bert/layers_<i>/...`, to (foreign name, layout). A layout is a pair of
functions: `to_ours` turns the foreign array into bertjax's, `to_theirs` turns it back; every pair
is exact (a reshape or a transpose), so round trips are bit-identical. names() is the one walk
over BERT's tensors; a format gives only its Spelling of them and its heads (the kind table's).

bertjax keeps attention projections split by head: query/key/value kernels [D, H, K] and biases
[H, K], the output kernel [H, K, D]. Dense kernels are [in, out] as in TF; torch stores [out, in].
"""

import dataclasses
import json
from typing import Callable

import numpy as np

# The fields of a BERT config file (transformers' config.json and TF1's bert_config.json spell
# them alike) that have no default: the model's shape.
SHAPE_FIELDS = ('vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads',
                'intermediate_size')


def check_config_file(config, source: str, expected: str):
  """Refuses in one line a config file's JSON that is not an object, lacks SHAPE_FIELDS, gives
  a field bertjax reads a value of the wrong type, or says the model is not BERT's own
  (auto_map: custom code; quantization_config), naming `source` and the file `expected`."""
  if not isinstance(config, dict):
    raise ValueError(f'{source} holds a JSON {type(config).__name__}, not an object: pass '
                     f'{expected}.')
  missing = [field for field in SHAPE_FIELDS if field not in config]
  if missing:
    raise ValueError(f'{source} lacks {", ".join(missing)}: not a BERT config (it sets '
                     f'{", ".join(SHAPE_FIELDS)}); pass {expected}.')
  for field, (check, wanted) in _FIELD_VALUES.items():
    if (field in SHAPE_FIELDS or field in config) and not check(config[field]):
      raise ValueError(f'{source} says {field}: {json.dumps(config[field])}, not {wanted}: '
                       f'fix the file (or pass {expected}).')
  if config.get('auto_map'):
    # trust_remote_code: the model is the code it names, not BERT's (MosaicBERT, DNABERT-2...).
    raise ValueError(f'{source} has an auto_map ({", ".join(sorted(config["auto_map"]))}): its '
                     'model is custom code shipped with it (transformers\' trust_remote_code), '
                     'not BERT\'s, which is all bertjax runs; convert it to a BERT checkpoint '
                     'first, or use a BERT one.')
  if config.get('quantization_config'):
    raise ValueError(f'{source} has a quantization_config: its weights are quantized '
                     '(int8 / 4-bit with scales), which bertjax would read as plain numbers; pass '
                     'the checkpoint in float32, bfloat16 or float16.')


def _whole(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


# A config file's fields whose value bertjax reads, and what each must be: a type the model
# cannot take failed deep in the model build (ml_collections' override, jit's static shapes).
_FIELD_VALUES = {
    **{field: (_whole, 'a positive whole number') for field in (
        *SHAPE_FIELDS, 'max_position_embeddings', 'type_vocab_size')},
    'hidden_act': (lambda v: isinstance(v, str), 'a name such as "gelu"'),
    'layer_norm_eps': (lambda v: _number(v) and v > 0, 'a positive number'),
    'hidden_dropout_prob': (lambda v: _number(v) and v < 1, 'a probability below 1'),
    'attention_probs_dropout_prob': (lambda v: _number(v) and v < 1, 'a probability below 1'),
    'initializer_range': (_number, 'a number'),
}


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


@dataclasses.dataclass(frozen=True)
class Spelling:
  """How a format names BERT's encoder tensors (transformers: `encoder.layer.0.output.dense.weight`;
  TF1: `bert/encoder/layer_0/output/dense/kernel`)."""
  sep: str                # between the parts of a name
  root: str               # before `embeddings`, `encoder` and `pooler` ('' for none)
  layer: str              # one layer's prefix, `{i}` its index
  table: str              # an embedding table's last part ('' for none)
  kernel: str             # a dense kernel's last part (a dense bias is `bias` everywhere)
  transposed: bool        # dense kernels [out, in] (torch) instead of [in, out] (TF, bertjax)
  norm: tuple[str, str]   # a LayerNorm's scale and bias


def names(config, spelling: Spelling, head: dict) -> dict:
  """bertjax path (unscanned) -> (foreign name, Layout): the encoder and pooler spelled by
  `spelling`, then `head` (a kind holder's {bertjax path: (foreign name, transposed)})."""
  s, h = spelling, config['num_heads']
  dense = TRANSPOSED if s.transposed else SAME
  m = {}

  def name(*parts):
    return s.sep.join(p for p in (s.root, *parts) if p)

  def linear(ours, theirs, kernel=dense, bias=SAME):
    m[f'{ours}/kernel'] = (name(*theirs, s.kernel), kernel)
    m[f'{ours}/bias'] = (name(*theirs, 'bias'), bias)

  def norm(ours, theirs):
    m[f'{ours}/scale'] = (name(*theirs, s.norm[0]), SAME)
    m[f'{ours}/bias'] = (name(*theirs, s.norm[1]), SAME)

  for table in ('word', 'position', 'token_type'):
    m[f'bert/embeddings/{table}_embeddings/embedding'] = (
        name('embeddings', f'{table}_embeddings', s.table), SAME)
  norm('bert/embeddings/layer_norm', ('embeddings', 'LayerNorm'))
  linear('bert/pooler', ('pooler', 'dense'))
  for i in range(config['num_layers']):
    ours, theirs = f'bert/layers_{i}', s.layer.format(i=i)
    for qkv in ('query', 'key', 'value'):
      linear(f'{ours}/attention/{qkv}', (theirs, 'attention', 'self', qkv),
             heads_kernel(h, s.transposed), heads_bias(h))
    linear(f'{ours}/attention/out', (theirs, 'attention', 'output', 'dense'),
           heads_output_kernel(h, s.transposed))
    norm(f'{ours}/attention_layer_norm', (theirs, 'attention', 'output', 'LayerNorm'))
    norm(f'{ours}/output_layer_norm', (theirs, 'output', 'LayerNorm'))
    linear(f'{ours}/mlp/intermediate', (theirs, 'intermediate', 'dense'))
    linear(f'{ours}/mlp/output', (theirs, 'output', 'dense'))
  m.update({ours: (theirs, TRANSPOSED if transposed else SAME)
            for ours, (theirs, transposed) in head.items()})
  return m


def expected_shapes(config) -> dict:
  """bertjax path (unscanned) -> (shape, the config file's fields it follows) of the encoder,
  the pooler and the pre-training heads `config` (bertjax's fields) describes: a task head's
  outputs follow its labels, not the config's shape fields, and are not here."""
  d, h, f, vocab = (config['hidden_size'], config['num_heads'], config['mlp_dim'],
                    config['vocab_size'])
  hidden, heads = ('hidden_size',), ('hidden_size', 'num_attention_heads')
  m = {'bert/embeddings/word_embeddings/embedding': ((vocab, d), ('vocab_size', 'hidden_size')),
       'bert/embeddings/position_embeddings/embedding': (
           (config['max_position_embeddings'], d), ('max_position_embeddings', 'hidden_size')),
       'bert/embeddings/token_type_embeddings/embedding': (
           (config['type_vocab_size'], d), ('type_vocab_size', 'hidden_size')),
       'bert/pooler/kernel': ((d, d), hidden), 'mlm/transform/kernel': ((d, d), hidden),
       'mlm/output_bias': ((vocab,), ('vocab_size',)), 'nsp/dense/kernel': ((d, 2), hidden),
       'nsp/dense/bias': ((2,), ())}
  for norm in ('bert/embeddings/layer_norm', 'mlm/layer_norm'):
    m.update({f'{norm}/scale': ((d,), hidden), f'{norm}/bias': ((d,), hidden)})
  m.update({'bert/pooler/bias': ((d,), hidden), 'mlm/transform/bias': ((d,), hidden)})
  for i in range(config['num_layers']):
    layer = f'bert/layers_{i}'
    for qkv in ('query', 'key', 'value'):
      m[f'{layer}/attention/{qkv}/kernel'] = ((d, h, d // h), heads)
      m[f'{layer}/attention/{qkv}/bias'] = ((h, d // h), heads)
    m[f'{layer}/attention/out/kernel'] = ((h, d // h, d), heads)
    m[f'{layer}/mlp/intermediate/kernel'] = ((d, f), ('hidden_size', 'intermediate_size'))
    m[f'{layer}/mlp/intermediate/bias'] = ((f,), ('intermediate_size',))
    m[f'{layer}/mlp/output/kernel'] = ((f, d), ('intermediate_size', 'hidden_size'))
    for part in ('attention/out/bias', 'mlp/output/bias', 'attention_layer_norm/scale',
                 'attention_layer_norm/bias', 'output_layer_norm/scale', 'output_layer_norm/bias'):
      m[f'{layer}/{part}'] = ((d,), hidden)
  return m

"""Which transformers name and layout each bertjax tensor has, and config.json <-> our config.

The pure mapping between bertjax and transformers' BERT classes, with no file read or written
(hf_checkpoint loads and saves through it): the name table (our unscanned parameter path ->
transformers' tensor name and layout, the heads' names from the kind table), the config.json
fields both ways, and what a config.json says of the model's kind and labels.
"""

from bertjax.interop import bundle as bundle_lib
from bertjax.interop import layouts
from bertjax.model import encoder_config
from bertjax.training import kinds

_ACTIVATIONS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh',
                'gelu_fast': 'gelu_tanh', 'relu': 'relu'}


def config_from_hf(hf_config: dict, source: str = 'config.json', **overrides):
  """A bertjax model config block from a transformers BertConfig dict (read from `source`,
  named in the errors)."""
  if isinstance(hf_config, dict) and hf_config.get('model_type', 'bert') != 'bert':
    raise ValueError(f'{source}: model_type {hf_config.get("model_type")!r} is not bert: only BERT '
                     'checkpoints (BertModel / BertForPreTraining) can be imported.')
  layouts.check_config_file(hf_config, source, 'the config.json saved with the weights')
  if hf_config.get('position_embedding_type', 'absolute') != 'absolute':
    raise ValueError(f'{source}: only absolute position embeddings are supported, got '
                     f'{hf_config["position_embedding_type"]!r}.')
  for field in ('is_decoder', 'add_cross_attention'):
    # A decoder's self-attention is causal (and cross-attends to an encoder): bertjax's encoder
    # attends both ways, so its outputs would differ.
    if hf_config.get(field):
      raise ValueError(f'{source} sets {field}: true (a BertLMHeadModel / decoder): bertjax '
                       'imports bidirectional BERT encoders only; use a BERT encoder checkpoint.')
  act = hf_config.get('hidden_act', 'gelu')
  if act not in _ACTIVATIONS:
    raise ValueError(f'{source}: hidden_act {act!r} is not supported; known: '
                     f'{", ".join(_ACTIVATIONS)}.')
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
  return encoder_config.default_config(size='imported', **fields)


def holder(kind: str) -> kinds.Transformers:
  """How the kind table says a transformers directory holds `kind`."""
  found = kinds.get(kind).holder('hf')
  if found is None:
    raise ValueError(f'transformers cannot hold a {kind} model: {kinds.get(kind).why_not("hf")}.')
  return found


# transformers' BertModel names (BertForPreTraining's add `bert.`: strip_prefix drops it).
SPELLING = layouts.Spelling(sep='.', root='', layer='encoder.layer.{i}', table='weight',
                            kernel='weight', transposed=True, norm=('weight', 'bias'))


def names(config, kind: str = 'pretraining') -> dict:
  """bertjax path (unscanned) -> (transformers name without `bert.`, layout): the encoder, and
  the head of `kind` (one of training/kinds.KINDS)."""
  return layouts.names(config, SPELLING, holder(kind).head)


# The integer buffers BertModel keeps beside its weights (names ending so): not weights.
BUFFERS = ('position_ids', 'token_type_ids')


def strip_prefix(state: dict) -> dict:
  """BertModel's names, as transformers' from_pretrained reads a checkpoint: drops `bert.`
  (BertForPreTraining and the task classes), and renames the old `LayerNorm.gamma` / `.beta`
  (the original bert-base-uncased pytorch_model.bin) to `.weight` / `.bias`. Any other prefix
  (a wrapper's `model.`) is kept: transformers does not load it either."""
  out = {}
  for name, value in state.items():
    name = name[len('bert.'):] if name.startswith('bert.') else name
    name = name.replace('LayerNorm.gamma', 'LayerNorm.weight').replace('LayerNorm.beta',
                                                                       'LayerNorm.bias')
    out[name] = value
  return out


def kind_of(hf_config: dict, state: dict) -> str:
  """A task head is told by its class (a BertForSequenceClassification with one output is a
  regression); the pre-training heads by the weights: bert-base-uncased says BertForMaskedLM
  but holds the NSP head too."""
  architecture = (hf_config.get('architectures') or [''])[0]
  if hf_config.get('problem_type') == 'multi_label_classification':
    # Its classes are independent sigmoids: read as one softmax, every format would answer
    # single-label probabilities.
    raise ValueError('config.json says problem_type: multi_label_classification: bertjax holds '
                     'single-label classifiers only (one softmax over the classes); it cannot '
                     'import this model.')
  if architecture.startswith('Bert') and architecture not in _READ_ARCHITECTURES:
    raise ValueError(f'config.json names {architecture}, whose head bertjax does not hold '
                     f'(it reads {", ".join(sorted(_READ_ARCHITECTURES))}): its head would be '
                     'dropped.')
  scored = (hf_config.get('problem_type') == 'regression' or hf_config.get('num_labels') == 1
            or len(hf_config.get('id2label') or {}) == 1)
  tasks = [name for name, kind in kinds.KINDS.items()
           if kind.task and getattr(kind.holder('hf'), 'architecture', '') == architecture]
  if tasks:  # Classification and regression share their class: its outputs tell them apart.
    return next((n for n in tasks if kinds.get(n).scored == scored), tasks[0])
  return kinds.told_by(state, 'hf')


# The classes whose heads the kind table reads (BertForMaskedLM and BertModel included).
_READ_ARCHITECTURES = frozenset(kind.holder('hf').architecture for kind in kinds.KINDS.values()
                                if kind.holder('hf') is not None)


def labels_of(hf_config: dict, kind: str, width: int = 0) -> tuple:
  """The class names of a kind with named labels, in class-id order (id2label); () otherwise.
  A config.json without id2label (transformers 5 leaves its default out) has transformers'
  names for the head's `width` classes, LABEL_0 ..., as transformers reads it."""
  if not kinds.get(kind).named_labels:
    return ()
  id2label = hf_config.get('id2label') or {
      str(i): f'LABEL_{i}' for i in range(hf_config.get('num_labels') or width)}
  return tuple(id2label[k] for k in sorted(id2label, key=int))


def config_to_hf(result: bundle_lib.Bundle, vocab_rows: int) -> dict:
  """transformers' config.json of `result`, its word embeddings `vocab_rows` long."""
  cfg = result.config
  act = {'gelu': 'gelu', 'gelu_tanh': 'gelu_new', 'relu': 'relu'}[cfg['hidden_act']]
  hf = {'architectures': [holder(result.kind).architecture], 'model_type': 'bert',
        'vocab_size': vocab_rows, 'hidden_size': cfg['hidden_size'],
        'num_hidden_layers': cfg['num_layers'], 'num_attention_heads': cfg['num_heads'],
        'intermediate_size': cfg['mlp_dim'], 'hidden_act': act,
        'hidden_dropout_prob': cfg['dropout_rate'],
        'attention_probs_dropout_prob': cfg['attention_dropout_rate'],
        'max_position_embeddings': cfg['max_position_embeddings'],
        'type_vocab_size': cfg['type_vocab_size'], 'initializer_range': cfg['initializer_range'],
        'layer_norm_eps': cfg['layer_norm_eps'], 'pad_token_id': 0,
        'position_embedding_type': 'absolute', 'tie_word_embeddings': True,
        'torch_dtype': 'float32'}
  if kinds.get(result.kind).named_labels:
    hf['id2label'] = {str(i): label for i, label in enumerate(result.labels)}
    hf['label2id'] = {label: i for i, label in enumerate(result.labels)}
  hf.update(holder(result.kind).config)  # What the class reads besides (problem_type, ...).
  hf.update(result.hf_fields)
  return hf


# config.json fields kept through a transformers source (Bundle.hf_fields).
KEPT_FIELDS = ('pad_token_id', 'classifier_dropout')


def kept_fields(hf_config: dict) -> dict:
  return {k: hf_config[k] for k in KEPT_FIELDS if hf_config.get(k) is not None}

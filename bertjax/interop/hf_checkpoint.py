"""Transformers BERT directories in and out: read into bertjax params and config, or written.

Which transformers name and layout each tensor has, and the config.json fields, are hf_names'.

Accepted: `model.safetensors` (preferred, read without torch) or `pytorch_model.bin` (needs
torch), each whole or sharded (`*.index.json` names the shards); parameter names with or without
the `bert.` prefix, the old LayerNorm `gamma`/`beta` as `weight`/`bias` (as from_pretrained reads
them); with or without the `cls.*` pre-training heads. The vocab is `vocab.txt`, else
`spiece.model`, else tokenizer.json's WordPiece vocab (transformers 5.x saves no vocab.txt). A
missing pooler or head is initialised fresh and listed in the report; a missing encoder tensor
(another prefix, an incomplete file), a shape that does not fit config.json, or a vocabulary that
disagrees with the vocab file (bundle.vocab_misfit: padding allowed) is an error that names the
tensor. What bertjax
would change rather than hold is refused, naming the field or tensors: weights the model does
not read (layers past num_hidden_layers, another kind's head), an untied MLM decoder, tokens
added past the vocab, tokenizer settings bertjax's tokenizer does not reproduce.

A directory may be a URL (gs://bucket/model) as well as a local path: every file is read and
written through bertjax.files (the weights as bytes: safetensors and torch read from memory).
"""

import dataclasses
import functools
import json
import os
import re

from absl import logging
from flax import traverse_util
import flax.linen as nn
import jax
import numpy as np

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import hf_names
from bertjax.interop import hf_sentencepiece
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import hf_weights
from bertjax.interop import layouts
from bertjax.model import encoder
from bertjax.model import heads
from bertjax.model import layer_stack
from bertjax.text import tokenizer
from bertjax.text import vocab_files
from bertjax.training import kinds


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


def load(directory, *, with_heads=True, vocab_file=None, rng=None, **config_overrides):
  """Reads a transformers BERT directory.

  Returns (model_config, params, report): params is the tree of `heads.BertForPreTraining`
  (with_heads=True) or `encoder.BertEncoder`, as float32 numpy arrays; heads the checkpoint lacks
  are initialised from `rng` (default key 0) and listed in report.initialised.
  """
  cfg, state = _read_checked(os.fspath(directory), vocab_file, config_overrides)

  module = heads.BertForPreTraining(cfg) if with_heads else encoder.BertEncoder(cfg)
  batch = heads.dummy_batch(1, 2, 1)
  if not with_heads:
    batch.pop('masked_lm_positions')
  rng = jax.random.key(0) if rng is None else rng

  def model_tree(init):
    tree = traverse_util.flatten_dict(nn.unbox(init(rng, **batch)['params']), sep='/')
    # The encoder's own tree has no 'bert/' level.
    return tree if with_heads else {f'bert/{k}': v for k, v in tree.items()}

  # Shapes only: drawing the initial values (a compile and a run, seconds for a small model)
  # is needed only for parameters the checkpoint lacks.
  fresh = model_tree(functools.partial(jax.eval_shape, module.init))

  table = {k: (v[0], v[1].to_ours) for k, v in hf_names.names(cfg).items()}
  converted, loaded, initialised = _convert(state, _unscanned_paths(fresh, cfg), table)
  if cfg.scan_layers:
    converted = layer_stack.stack_layers(converted, cfg.num_layers)
  if initialised:
    fresh = model_tree(jax.jit(module.init))
  params = {}
  for path, value in fresh.items():
    if path in converted:
      if converted[path].shape != value.shape:
        raise ValueError(f'{path} (from {_hf_names(table, path)}) has shape '
                         f'{converted[path].shape}, the model expects {value.shape}: config.json '
                         'does not '
                         'describe these weights (or the overrides change the architecture).')
      params[path] = converted[path]
    else:
      params[path] = np.asarray(value)
  used = {table[p][0] for p in loaded} | {'cls.predictions.decoder.bias',
                                          'cls.predictions.decoder.weight'}
  unused = sorted(n for n in state if n not in used and not n.endswith('position_ids'))
  if not with_heads:
    params = {k[len('bert/'):]: v for k, v in params.items()}
  report = ImportReport(loaded=loaded, initialised=initialised, unused=unused)
  return cfg, traverse_util.unflatten_dict(params, sep='/'), report


def read_config(config_file: str):
  """config.json's JSON, or one line naming the file and what is wrong with it."""
  try:
    return json.loads(files.read_text(config_file))
  except ValueError as e:  # Not UTF-8 (files says which byte), or not JSON.
    raise ValueError(f'{config_file} is not a transformers config (JSON) file: {e}.') from None


def _read_checked(directory: str, vocab_file, config_overrides: dict):
  """(model config, state dict without `bert.`) of a transformers directory, checked against
  itself (vocab rows, the tied decoder) and the vocab file."""
  config_file = files.join(directory, 'config.json')
  if not files.isdir(directory):
    raise FileNotFoundError(f'checkpoint directory {directory} does not exist: pass the folder '
                            'that holds config.json and model.safetensors.')
  if not files.exists(config_file):
    raise FileNotFoundError(f'{config_file} not found: {directory} is not a transformers BERT '
                            'directory (expected config.json + model.safetensors).')
  cfg = hf_names.config_from_hf(read_config(config_file), config_file, **config_overrides)
  state, weights_file = hf_weights.read_state_dict(directory)
  _check_encoder_present(state, hf_names.names(cfg), weights_file)
  _check_no_foreign_encoder_tensors(state, hf_names.names(cfg), weights_file)
  hf_tokenizer_files.check_tokenizer_settings(directory)
  extra = [n for n in _weights_not_read(state, hf_names.names(cfg), cfg.num_layers)
           if n.startswith('encoder.layer.')]
  if extra:
    raise ValueError(f'{directory} holds layers past the {cfg.num_layers} its config.json '
                     f'describes, e.g. {", ".join(extra[:3])}: they would be dropped; fix '
                     'num_hidden_layers in config.json.')

  embedding = state.get('embeddings.word_embeddings.weight')
  if embedding is not None and embedding.shape[0] != cfg.vocab_size:
    raise ValueError(f'embeddings.word_embeddings.weight has {embedding.shape[0]} rows but '
                     f'config.json says vocab_size={cfg.vocab_size}: the checkpoint is '
                     'inconsistent.')
  vocab_entries = None if vocab_file is None else len(vocab_files.load_vocab(vocab_file))
  if vocab_entries is not None and (
      why := bundle_lib.vocab_misfit(vocab_entries, cfg.vocab_size)):  # Padding allowed.
    raise ValueError(
        f'vocab file {vocab_file} has {vocab_entries} entries but the checkpoint\'s '
        f'embeddings.word_embeddings.weight has {cfg.vocab_size} rows ({why}): use the '
        'vocab.txt that was saved with this checkpoint.')
  _check_tied_decoder(state)
  return cfg, state


def _check_encoder_present(state: dict, table: dict, weights_file: str):
  """Refuses a checkpoint that lacks any of the encoder's tensors (the embeddings, the layers):
  they would start at random. The pooler and the heads may be absent (read says which)."""
  missing = [theirs for ours, (theirs, _) in table.items()
             if ours.startswith('bert/') and not ours.startswith('bert/pooler/')
             and theirs not in state]
  if not missing:
    return
  word = 'embeddings.word_embeddings.weight'
  prefixed = sorted(n for n in state if n.endswith('.' + word))
  if prefixed:
    prefix = prefixed[0][:-len(word)]
    raise ValueError(f'{weights_file} names its tensors under {prefix!r} ({prefixed[0]}, ...), '
                     "which transformers' BertModel does not load either (it reads them with or "
                     f'without `bert.`): rename them without {prefix!r}, or save the BERT model '
                     'itself with save_pretrained.')
  raise ValueError(f'{weights_file} lacks {len(missing)} of the encoder\'s tensors, e.g. '
                   f'{", ".join(missing[:3])}: the checkpoint is incomplete (they would start at '
                   'random); convert or save the whole model again.')


def _check_shapes(state: dict, table: dict, config: dict, weights_file: str, config_file: str):
  """Refuses a tensor whose shape is not the one config.json implies, naming both and the
  fields (what BertModel.from_pretrained refuses too)."""
  for ours, (shape, fields) in layouts.expected_shapes(config).items():
    if ours not in table or table[ours][0] not in state:
      continue
    theirs, layout = table[ours]
    want = tuple(jax.eval_shape(layout.to_theirs,
                                jax.ShapeDtypeStruct(shape, np.float32)).shape)
    if tuple(state[theirs].shape) != want:
      said = ', '.join(f'{f}={config[_OURS.get(f, f)]}' for f in fields)
      raise ValueError(f'{theirs} in {weights_file} has shape {tuple(state[theirs].shape)}, but '
                       f'{config_file} implies {want}' + (f' ({said})' if said else '') +
                       ': fix config.json to describe these weights (use the one saved with '
                       'them).')


# The config file's shape fields bertjax names otherwise.
_OURS = {'num_attention_heads': 'num_heads', 'intermediate_size': 'mlp_dim'}


def _check_tied_decoder(state: dict):
  """Refuses an MLM decoder that is not the word embeddings (tie_word_embeddings=False): bertjax
  ties them, as BERT does, so its own decoder would be replaced."""
  decoder = state.get('cls.predictions.decoder.weight')
  embedding = state.get('embeddings.word_embeddings.weight')
  if decoder is not None and embedding is not None and not np.array_equal(decoder, embedding):
    raise ValueError('cls.predictions.decoder.weight differs from '
                     'embeddings.word_embeddings.weight:'
                     ' bertjax ties the MLM decoder to the word embeddings, as BERT does.')


def _convert(state: dict, paths, table: dict) -> tuple[dict, list, list]:
  """(our path -> converted float32 array, loaded paths, paths the checkpoint lacks)."""
  converted, loaded, initialised = {}, [], []
  for path in sorted(paths):
    hf_name, convert = table[path]
    if hf_name not in state and path == 'mlm/output_bias':
      hf_name = 'cls.predictions.decoder.bias'  # Some exporters store the bias only here.
    if hf_name not in state:
      initialised.append(path)
      continue
    value = np.asarray(state[hf_name], np.float32)
    value = convert(value) if convert else value
    converted[path] = value
    loaded.append(path)
  return converted, loaded, initialised


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


# The encoder's own names (BertModel's, without `bert.`).
_ENCODER_SCOPES = ('embeddings.', 'encoder.', 'pooler.')


def _names_read(table: dict) -> set:
  """The checkpoint names `table` reads, the MLM decoder (tied: read as the embeddings) too."""
  return {theirs for theirs, _ in table.values()} | {'cls.predictions.decoder.weight',
                                                    'cls.predictions.decoder.bias'}


def _any_heads() -> set:
  """The checkpoint names of every kind's head (the kind table's)."""
  return {theirs for kind in kinds.KINDS.values() if kind.holder('hf') is not None
          for theirs, _ in kind.holder('hf').head.values()}


def _check_no_foreign_encoder_tensors(state: dict, table: dict, weights_file: str):
  """Refuses tensors inside the encoder that BERT has none of (relative position tables,
  adapters, a variant's extra norms): the encoder would run without them, giving other
  outputs, as transformers' BertModel would (it only warns). Layers past num_hidden_layers are
  _weights_not_read's."""
  read = _names_read(table)
  foreign = sorted(
      name for name in state if name.startswith(_ENCODER_SCOPES) and name not in read
      and not name.endswith(hf_names.BUFFERS) and not (
          (layer := re.fullmatch(r'encoder\.layer\.\d+\.(.*)', name))
          and f'encoder.layer.0.{layer.group(1)}' in read))
  if foreign:
    raise ValueError(f'{weights_file} holds {len(foreign)} tensors inside the encoder that BERT '
                     f'has none of, e.g. {", ".join(foreign[:3])}: a variant of BERT (relative '
                     'positions, adapters, ...) that bertjax would run without them, giving '
                     'other outputs; use a checkpoint of BERT itself.')


def _not_bert(state: dict, table: dict) -> list:
  """Tensors outside the encoder that neither `table` nor any kind's head reads (a custom
  head, a wrapper's extras): not read, and said so."""
  known = _names_read(table) | _any_heads()
  return sorted(name for name in state if name not in known
                and not name.startswith(_ENCODER_SCOPES) and not name.endswith(hf_names.BUFFERS))


def _weights_not_read(state: dict, table: dict, num_layers: int) -> list:
  """Weights of BERT's own layout in `state` that `table` does not read: layers past
  num_layers, and any kind's head but this kind's. Buffers (position_ids) and whatever else
  a checkpoint keeps are not weights of the model and are left alone."""
  read, heads_ = _names_read(table), _any_heads()
  unread = []
  for name in state:
    if name in read:
      continue
    layer = re.fullmatch(r'encoder\.layer\.(\d+)\.(.*)', name)
    if name in heads_ or (layer and int(layer.group(1)) >= num_layers
                          and f'encoder.layer.0.{layer.group(2)}' in read):
      unread.append(name)
  return sorted(unread)


def read(directory) -> bundle_lib.Bundle:
  """A transformers BERT directory as a Bundle (the head its `architectures` names, if any)."""
  directory = os.fspath(directory)
  config_file = files.join(directory, 'config.json')
  if not files.isfile(config_file):
    raise FileNotFoundError(f'{config_file} not found: not a transformers BERT '
                            'directory (expected config.json + model.safetensors).')
  hf_config = read_config(config_file)
  config = hf_names.config_from_hf(hf_config, config_file).to_dict()
  state, weights_file = hf_weights.read_state_dict(directory)
  _check_tied_decoder(state)
  if 'cls.predictions.bias' not in state and 'cls.predictions.decoder.bias' in state:
    state['cls.predictions.bias'] = state['cls.predictions.decoder.bias']
  kind = hf_names.kind_of(hf_config, state)
  table = hf_names.names(config, kind)
  _check_encoder_present(state, table, weights_file)
  _check_no_foreign_encoder_tensors(state, table, weights_file)
  _check_shapes(state, table, config, weights_file, config_file)
  if others := _not_bert(state, table):
    logging.warning('%s: %d tensors are not BERT\'s and are not read (the model runs without '
                    'them, as transformers\' BertModel would), e.g. %s', weights_file,
                    len(others), ', '.join(others[:4]))
  unread = _weights_not_read(state, table, config['num_layers'])
  if unread:
    raise ValueError(f'{directory} holds {len(unread)} weights that its config.json\'s model '
                     f'({kind}, {config["num_layers"]} layers) does not read, e.g. '
                     f'{", ".join(unread[:3])}: they would be dropped; fix config.json '
                     '(num_hidden_layers, architectures) to describe these weights.')
  params = {}
  for ours, (theirs, layout) in table.items():
    if theirs not in state:
      if ours.startswith('bert/pooler/'):
        continue  # Span and tagging models (and some exports) have no pooler.
      raise ValueError(f'{directory} lacks {theirs}, which a '
                       f'{hf_names.holder(kind).architecture} of its config.json has: the '
                       'checkpoint is incomplete.')
    params[ours] = np.asarray(layout.to_ours(np.asarray(state[theirs], np.float32)))
  present = set(files.walk_files(directory))  # One listing, not a request per file.
  vocab_file = hf_tokenizer_files.checked_vocab(
      directory, params['bert/embeddings/word_embeddings/embedding'].shape[0], present)
  head = params.get('classifier/kernel')  # Its width: the classes, where no id2label names them.
  labels = hf_names.labels_of(hf_config, kind, head.shape[-1] if head is not None else 0)
  result = bundle_lib.Bundle(
      config=config, params=params, kind=kind, vocab_file=vocab_file,
      do_lower_case=hf_tokenizer_files.do_lower_case_of(directory, present, vocab_file),
      labels=labels, pooling='cls',
      labels_named=not all(re.fullmatch(r'LABEL_\d+', x) for x in labels),
      max_chars_per_word=hf_tokenizer_files.word_limit(directory, present), source=directory,
      hf_fields=hf_names.kept_fields(hf_config))
  # What runs after the encoder in sentence-transformers (its length too, where it says one):
  # sentence_transformers.read_modules. Here, what the folder's tokenizer cuts texts at.
  result.source_tokenizer_length = hf_tokenizer_files.cut_length(
      directory, config['max_position_embeddings'], present)
  result.max_seq_length = hf_tokenizer_files.json_beside(
      directory, 'sentence_bert_config.json', present).get('max_seq_length') or (
          result.source_tokenizer_length)
  bundle_lib.check_vocab(result)
  return result


def save(result: bundle_lib.Bundle, output_dir):
  """Writes a transformers directory (a folder or a URL): config.json, model.safetensors, vocab
  and tokenizer."""
  bundle_lib.check_holds(result, 'hf')
  if not result.vocab_file:
    raise ValueError(f'{result.source} has no vocab file: pass --vocab_file, the vocab its '
                     'weights were trained with.')
  from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
  params = bundle_lib.cut_vocab_padding(result)
  # BertModel's own names; a class with a head keeps the encoder under `bert.`.
  prefix = 'bert.' if kinds.get(result.kind).head_params else ''
  tensors = {}
  for ours, (theirs, layout) in hf_names.names(result.config, result.kind).items():
    if ours.startswith('bert/pooler/') and not hf_names.holder(result.kind).pooler:
      continue
    if ours not in params and ours.startswith('bert/pooler/'):
      raise ValueError(f'{result.source} has no pooler (a masked-LM, span or tagging model, or '
                       'a BertModel without its pooling layer), which the '
                       f'{hf_names.holder(result.kind).architecture} this export writes carries: '
                       'use --format=onnx, or --format=hf for a masked-LM, span or tagging model.')
    if ours not in params:
      raise ValueError(f'{result.source} has no {ours}, which a '
                       f'{hf_names.holder(result.kind).architecture} needs.')
    name = prefix + theirs if ours.startswith('bert/') else theirs
    tensors[name] = np.ascontiguousarray(layout.to_theirs(params[ours]), np.float32)
  vocab_rows = tensors[f'{prefix}embeddings.word_embeddings.weight'].shape[0]
  output_dir = os.fspath(output_dir)
  files.write_atomically(files.join(output_dir, 'config.json'), json.dumps(
      hf_names.config_to_hf(result, vocab_rows), indent=2, sort_keys=True) + '\n')
  files.write_atomically(files.join(output_dir, 'model.safetensors'),
                         st_numpy.save(tensors, metadata={'format': 'pt'}))
  write_tokenizer(result, output_dir)


def write_tokenizer(result: bundle_lib.Bundle, output_dir):
  """vocab.txt (the file's own entries), tokenizer_config.json with the casing, and the fast
  tokenizer's tokenizer.json, built by the tokenizers library from the same vocab; a
  SentencePiece model as AlbertTokenizer's files (hf_sentencepiece)."""
  if result.is_sentencepiece():
    hf_sentencepiece.write(result, output_dir)
    return
  import tokenizers  # pylint: disable=g-import-not-at-top
  vocab = list(tokenizer.load_vocab(result.vocab_file))
  files.write_atomically(files.join(output_dir, 'vocab.txt'),
                         ''.join(f'{token}\n' for token in vocab))
  fast = tokenizers.BertWordPieceTokenizer(
      {token: i for i, token in enumerate(vocab)}, lowercase=result.do_lower_case,
      strip_accents=result.do_lower_case, clean_text=True, handle_chinese_chars=True)
  # The model's limit (a longer word is [UNK]): the original's 200 unless its source set
  # another; the library's default is 100.
  fast._tokenizer.model.max_input_chars_per_word = result.max_chars_per_word  # pylint: disable=protected-access
  files.write_atomically(files.join(output_dir, 'tokenizer.json'), fast.to_str(pretty=True))
  files.write_atomically(files.join(output_dir, 'tokenizer_config.json'), json.dumps(
      {'tokenizer_class': 'BertTokenizer', 'do_lower_case': result.do_lower_case,
       'strip_accents': None if result.do_lower_case else False,
       'tokenize_chinese_chars': True, **bundle_lib.tokenizer_settings(result),
       'unk_token': '[UNK]', 'sep_token': '[SEP]', 'pad_token': '[PAD]', 'cls_token': '[CLS]',
       'mask_token': '[MASK]'}, indent=2) + '\n')
  files.write_atomically(files.join(output_dir, 'special_tokens_map.json'), json.dumps(
      {'unk_token': '[UNK]', 'sep_token': '[SEP]', 'pad_token': '[PAD]', 'cls_token': '[CLS]',
       'mask_token': '[MASK]'}, indent=2) + '\n')

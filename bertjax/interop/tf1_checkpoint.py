"""The original BERT checkpoint format (google-research/bert, TF Model Garden's TF1 checkpoints,
NVIDIA's): `bert_config.json`, `bert_model.ckpt.{index,data-*}`, `vocab.txt`.

Read with `tf.train.load_checkpoint` and written with TensorFlow's SaveV2 op, so no TF1 graph
code is involved. Heads in the original layouts: pre-training (`cls/predictions/*`,
`cls/seq_relationship/*`), run_classifier.py's `output_weights`/`output_bias` and run_squad.py's
`cls/squad/*`. Optimizer slots (`*/adam_m`, `*/adam_v`) and counters (`global_step`, NVIDIA's
loss-scale variables) are not weights: they are skipped and reported. Weights the model of
`bert_config.json` does not read (layers past its num_hidden_layers, another kind's head) are
refused, naming them. `layer_norm_eps` is the original's fixed 1e-12 both ways: a model with
another is refused for export.

A checkpoint may be read from a URL (gs://bucket/bert) and written to one: TensorFlow's reader and
writer get local files (the checkpoint's own files downloaded, or written to a temporary folder
then uploaded); the config, vocab and metadata beside it go through bertjax.files.

`hidden_act: gelu` is read as the exact (erf) GELU, which the released checkpoints were trained
with and transformers uses; `gelu_new` (the tanh approximation) is kept apart.
"""

import contextlib
import json
import os
import re
import tempfile

from absl import logging
import numpy as np

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import export_writing
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import layouts
from bertjax.text import tokenizer
from bertjax.training import kinds

CONFIG_FILE = 'bert_config.json'
CHECKPOINT_PREFIX = 'bert_model.ckpt'
# A SentencePiece model beside the checkpoint (bertjax's export writes this name; ALBERT's own
# releases name theirs 30k-clean.model: any one *.model is read).
SENTENCEPIECE_MODEL = 'spiece.model'
_ACTIVATIONS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'relu': 'relu'}
_NOT_WEIGHTS = ('adam_m', 'adam_v', 'global_step', 'loss_scale', 'good_steps',
                'current_loss_scale')
# google-research/bert's modeling.py: layer_norm() uses tf.contrib's fixed epsilon.
_TF1_LAYER_NORM_EPS = 1e-12
SPELLING = layouts.Spelling(sep='/', root='bert', layer='encoder/layer_{i}', table='',
                            kernel='kernel', transposed=False, norm=('gamma', 'beta'))


def names(config: dict, kind: str) -> dict:
  """bertjax path (unscanned) -> (TF1 variable name, layout), for the encoder and kind's head
  (the kind table's TF1 layout)."""
  return layouts.names(config, SPELLING, kinds.get(kind).holder('tf1').head)


def read_config(config_file: str) -> dict:
  """A bert_config.json's JSON, or one line naming the file and what is wrong with it."""
  try:
    return json.loads(files.read_text(config_file))
  except ValueError as e:  # Not UTF-8 (files says which byte), or not JSON.
    raise ValueError(f'{config_file} is not a BERT config (JSON) file: {e}.') from None


def config_from_tf1(tf1_config: dict, source: str = CONFIG_FILE) -> dict:
  """bertjax encoder fields from a bert_config.json (read from `source`, named in the errors)."""
  layouts.check_config_file(tf1_config, source, f'the {CONFIG_FILE} released with the checkpoint')
  act = tf1_config.get('hidden_act', 'gelu')
  if act not in _ACTIVATIONS:
    raise ValueError(f'hidden_act {act!r} in {source} is not supported; known: '
                     f'{", ".join(_ACTIVATIONS)}.')
  eps = tf1_config.get('layer_norm_eps', _TF1_LAYER_NORM_EPS)
  if eps != _TF1_LAYER_NORM_EPS:  # Read by transformers' converter, not by modeling.py.
    raise ValueError(f'{source} says layer_norm_eps: {eps}, which google-research/bert\'s '
                     f'modeling.py does not read (it fixes {_TF1_LAYER_NORM_EPS}) but '
                     'transformers\' converter does: which one the weights were trained with '
                     f'is not known; set it to {_TF1_LAYER_NORM_EPS} (google-research/bert\'s '
                     'code) or remove it, or convert the checkpoint with transformers and pass '
                     'its folder.')
  return dict(
      vocab_size=tf1_config['vocab_size'], hidden_size=tf1_config['hidden_size'],
      num_layers=tf1_config['num_hidden_layers'], num_heads=tf1_config['num_attention_heads'],
      mlp_dim=tf1_config['intermediate_size'],
      max_position_embeddings=tf1_config.get('max_position_embeddings', 512),
      type_vocab_size=tf1_config.get('type_vocab_size', 2), hidden_act=_ACTIVATIONS[act],
      dropout_rate=tf1_config.get('hidden_dropout_prob', 0.1),
      attention_dropout_rate=tf1_config.get('attention_probs_dropout_prob', 0.1),
      layer_norm_eps=_TF1_LAYER_NORM_EPS,
      initializer_range=tf1_config.get('initializer_range', 0.02))


def config_to_tf1(config: dict, vocab_size: int) -> dict:
  act = {v: k for k, v in _ACTIVATIONS.items()}[config['hidden_act']]
  return {'attention_probs_dropout_prob': config['attention_dropout_rate'], 'hidden_act': act,
          'hidden_dropout_prob': config['dropout_rate'], 'hidden_size': config['hidden_size'],
          'initializer_range': config['initializer_range'],
          'intermediate_size': config['mlp_dim'],
          'max_position_embeddings': config['max_position_embeddings'],
          'num_attention_heads': config['num_heads'],
          'num_hidden_layers': config['num_layers'],
          'type_vocab_size': config['type_vocab_size'], 'vocab_size': vocab_size}


def find(path, with_config: bool = True) -> tuple[str, str] | None:
  """(folder holding bert_config.json, checkpoint prefix) when `path` is a TF1 BERT checkpoint:
  a folder with bert_config.json and one `*.index`, or a prefix such as .../bert_model.ckpt.
  with_config=False: the config is given apart (--bert_config_file), not needed beside it."""
  path = os.fspath(path)
  if files.isdir(path):
    if with_config and not files.isfile(files.join(path, CONFIG_FILE)):
      return None
    indexes = sorted(files.join(path, files.name(p))
                     for p in files.glob(files.join(path, '*.index')))
    if not indexes:
      return None
    if len(indexes) > 1:  # bert_model.ckpt beside a fine-tuned model.ckpt-N: either is meant.
      listed = ', '.join(files.name(p) for p in indexes[:4])
      raise ValueError(f'{path} holds {len(indexes)} checkpoints ({listed}): pass the prefix of '
                       f'the one to read, e.g. {indexes[-1][:-len(".index")]}')
    return path, indexes[0][:-len('.index')]
  if files.isfile(f'{path}.index'):
    return files.parent(path), path
  return None


@contextlib.contextmanager
def local_checkpoint(prefix: str):
  """A local prefix for TensorFlow's reader: `prefix` itself, or (a URL) the checkpoint's own
  files (.index, .data-*) downloaded to a temporary folder; never the rest of its folder, which
  may hold other, larger checkpoints."""
  if not files.is_remote(prefix):
    yield prefix
    return
  with tempfile.TemporaryDirectory(prefix='bertjax_tf1_') as temp:  # local temp
    for url in files.glob(f'{prefix}.index') + files.glob(f'{prefix}.data-*'):
      files.copy(url, os.path.join(temp, files.name(url)))  # local temp
    yield os.path.join(temp, files.name(prefix))  # local temp


def vocab_beside(folder: str) -> str:
  """The checkpoint's vocab.txt, else its one SentencePiece *.model; '' when it has neither."""
  vocab = files.join(folder, 'vocab.txt')
  if files.isfile(vocab):
    return vocab
  models = sorted(files.glob(files.join(folder, '*.model')))
  if len(models) > 1:
    raise ValueError(f'{folder} holds {len(models)} SentencePiece models '
                     f'({", ".join(map(files.name, models))}): keep the one the checkpoint was '
                     'trained with, or pass --vocab_file.')
  return models[0] if models else ''


def _do_lower_case(folder: str, vocab_file: str) -> bool:
  """bertjax's own TF1 export records its casing in bertjax_export.json; else what a
  transformers folder's reader takes (hf_tokenizer_files.do_lower_case_of: a tokenizer config
  beside the checkpoint, else the vocab's casing, else lower case)."""
  recorded = files.join(folder, 'bertjax_export.json')
  if files.isfile(recorded):
    value = json.loads(files.read_text(recorded)).get('do_lower_case')
    if value is not None:
      return bool(value)
  return hf_tokenizer_files.do_lower_case_of(folder, vocab_file=vocab_file)


def load(path, config_file=None) -> bundle_lib.Bundle:
  """A TF1 BERT checkpoint (folder or prefix) as a Bundle; errors name the tensor at fault.
  config_file: its bert_config.json when not beside it (the original scripts' flag)."""
  found = find(path, with_config=not config_file)
  if found is None:
    raise FileNotFoundError(f'{path} is not a TF1 BERT checkpoint: expected a folder with '
                            f'{CONFIG_FILE} and {CHECKPOINT_PREFIX}.index/.data-*, or a '
                            'checkpoint prefix.')
  folder, prefix = found
  config_file = os.fspath(config_file) if config_file else files.join(folder, CONFIG_FILE)
  if files.isdir(config_file) and not files.isfile(config_file):
    raise IsADirectoryError(f'{config_file} is a folder: name the bert_config.json in it (the '
                            f'checkpoint {prefix} needs the one released with it).')
  if not files.isfile(config_file):
    raise FileNotFoundError(f'{config_file} not found: the checkpoint {prefix} needs the '
                            'bert_config.json released with it.')
  # Its errors name the file and field.
  config = config_from_tf1(read_config(config_file), config_file)
  with local_checkpoint(prefix) as local_prefix:
    params, shapes, kind, table = _read_tensors(local_prefix, prefix, config)
  _check_shapes(params, config, prefix, table)
  used = {theirs for theirs, _ in table.values()}
  _check_all_read(shapes, used, config, prefix, kind)
  ignored = sorted(n for n in shapes if n not in used)
  if others := [n for n in ignored if not _not_weight(n)]:
    logging.warning('%s: %d tensors are not BERT\'s and are not read (the model runs without '
                    'them, as google-research/bert would), e.g. %s', prefix, len(others),
                    ', '.join(others[:4]))
  vocab_file = vocab_beside(folder)
  # run_classifier.py keeps no class names: a classifier's are its class numbers.
  named = kinds.get(kind).named_labels
  num_labels = params['classifier/kernel'].shape[1] if named else 0
  result = bundle_lib.Bundle(
      config=config, params=params, kind=kind, vocab_file=vocab_file,
      do_lower_case=_do_lower_case(folder, vocab_file),
      labels=tuple(str(i) for i in range(num_labels)), labels_named=False, source=prefix,
      ignored=tuple(ignored))
  _read_export_meta(folder, result)
  bundle_lib.check_vocab(result)
  return result


def _read_tensors(local_prefix: str, prefix: str, config: dict):
  """(params, {name: shape} of every tensor, kind, name table) read by TensorFlow's checkpoint
  reader from `local_prefix`; errors name `prefix`, the checkpoint as the user gave it."""
  from bertjax.text import fast_tokenizer  # pylint: disable=g-import-not-at-top
  tf, _ = fast_tokenizer.import_tf()
  try:
    reader = tf.train.load_checkpoint(local_prefix)
  except Exception as e:  # TF raises DataLossError, NotFoundError, ... for damaged files.
    raise ValueError(f'{prefix} could not be read ({type(e).__name__}: {str(e)[:200]}): the '
                     'checkpoint is incomplete or damaged; download or export it again.') from e
  shapes = reader.get_variable_to_shape_map()
  kind = kinds.told_by(shapes, 'tf1')
  table = names(config, kind)
  params = {}
  word = 'bert/embeddings/word_embeddings'
  if word not in shapes and (prefixed := sorted(n for n in shapes if n.endswith('/' + word))):
    under = prefixed[0][:-len(word)]
    raise ValueError(f'{prefix} names its tensors under {under!r} ({prefixed[0]}, ...), where '
                     "google-research/bert's checkpoints have none: write them again without "
                     f'{under!r} (google-research/bert and transformers read bert/...).')
  for ours, (theirs, layout) in sorted(table.items()):
    if theirs not in shapes:
      raise ValueError(f'{prefix} lacks the tensor {theirs} that a {kind} BERT of '
                       f'{CONFIG_FILE} ({config["num_layers"]} layers) has: the checkpoint is '
                       f'incomplete, or {CONFIG_FILE} is not the one released with it.')
    try:
      value = reader.get_tensor(theirs)
    except Exception as e:  # A short or corrupt data file: IndexError, DataLossError, ...
      raise ValueError(f'{theirs} in {prefix} could not be read ({type(e).__name__}: '
                       f'{str(e)[:200]}): the checkpoint is incomplete or damaged; download or '
                       'export it again.') from e
    params[ours] = np.asarray(layout.to_ours(value), np.float32)
  return params, shapes, kind, table


def _check_all_read(shapes: dict, used: set, config: dict, prefix: str, kind: str):
  """Refuses weights of BERT's own layout the `kind` model does not read: layers past
  bert_config.json's num_hidden_layers, another kind's head. Optimizer slots (`.../adam_m`) and
  counters have other names and stay skipped."""
  heads_ = {theirs for k in kinds.KINDS.values() if k.holder('tf1') is not None
            for theirs, _ in k.holder('tf1').head.values()}
  unread, foreign = [], []
  for name in sorted(shapes):
    if name in used or _not_weight(name):
      continue
    layer = re.fullmatch(r'bert/encoder/layer_(\d+)/(.*)', name)
    if name in heads_ or (layer and int(layer.group(1)) >= config['num_layers']
                          and f'bert/encoder/layer_0/{layer.group(2)}' in used):
      unread.append(name)
    elif name.startswith('bert/'):
      foreign.append(name)
  if unread:
    raise ValueError(f'{prefix} holds {len(unread)} weights that the model of {CONFIG_FILE} '
                     f'({kind}, {config["num_layers"]} layers) does not read, e.g. '
                     f'{", ".join(unread[:3])}: they would be dropped; use the {CONFIG_FILE} '
                     'released with this checkpoint.')
  if foreign:
    raise ValueError(f'{prefix} holds {len(foreign)} tensors inside the encoder (bert/) that '
                     f'BERT has none of, e.g. {", ".join(foreign[:3])}: a variant of BERT '
                     '(relative positions, adapters, ...) that bertjax would run without them, '
                     'giving other outputs; use a checkpoint of BERT itself.')


def _not_weight(name: str) -> bool:
  """An optimizer slot (.../adam_m) or a training counter: not the model's."""
  return name.rsplit('/', 1)[-1] in _NOT_WEIGHTS


def _read_export_meta(folder: str, result: bundle_lib.Bundle):
  """Labels, pooling and length that bertjax's export wrote beside the checkpoint."""
  meta_file = files.join(folder, 'bertjax_export.json')
  if files.isfile(meta_file):
    meta = json.loads(files.read_text(meta_file))
    result.labels = tuple(meta.get('labels', result.labels))
    result.labels_named = result.labels_named or 'labels' in meta
    result.max_seq_length = meta.get('max_seq_length', result.max_seq_length)
    if meta.get('pooling') in ('cls', 'mean'):
      result.pooling = meta['pooling']
    result.embedding = bool(meta.get('embedding', result.embedding))
    result.normalize = bool(meta.get('normalize', result.normalize))
    result.prompts = dict(meta.get('prompts') or {})
    result.default_prompt_name = meta.get('default_prompt_name') or ''
    result.similarity_fn_name = meta.get('similarity_fn_name') or result.similarity_fn_name
    result.include_prompt = bool(meta.get('include_prompt', True))
  result.max_chars_per_word = word_limit(folder)


def word_limit(folder: str) -> int:
  """WordPiece's longest word for a TF1 checkpoint in `folder`: what bertjax's export recorded
  of its source (bertjax_export.json), else the original's 200."""
  meta_file = files.join(folder, 'bertjax_export.json')
  limit = (json.loads(files.read_text(meta_file)).get('max_chars_per_word')
           if files.isfile(meta_file) else None)
  if limit is None:
    return tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD
  if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
    raise ValueError(f'{meta_file} records max_chars_per_word {json.dumps(limit)}, not a '
                     'positive whole number: it was edited; restore the file the export wrote.')
  return limit


def _check_shapes(params: dict, config: dict, prefix: str, table: dict):
  d, h = config['hidden_size'], config['num_heads']
  expected = {
      'bert/embeddings/word_embeddings/embedding': (config['vocab_size'], d),
      'bert/embeddings/position_embeddings/embedding': (config['max_position_embeddings'], d),
      'bert/embeddings/token_type_embeddings/embedding': (config['type_vocab_size'], d),
      'bert/layers_0/mlp/intermediate/kernel': (d, config['mlp_dim']),
      'bert/layers_0/attention/query/kernel': (d, h, d // h),
  }
  for layer in range(config['num_layers']):
    expected[f'bert/layers_{layer}/mlp/output/kernel'] = (config['mlp_dim'], d)
    expected[f'bert/layers_{layer}/attention/out/kernel'] = (h, d // h, d)
    expected[f'bert/layers_{layer}/output_layer_norm/scale'] = (d,)
  for ours, shape in expected.items():
    if params[ours].shape != shape:
      raise ValueError(f'{table[ours][0]} in {prefix} has shape {params[ours].shape}, but '
                       f'{CONFIG_FILE} implies {shape}: the config is not the one released '
                       'with this checkpoint.')


def save(result: bundle_lib.Bundle, output_dir):
  """Writes bert_config.json and bert_model.ckpt.* into output_dir (a folder or a URL: TF's
  writer writes into a local folder, uploaded when complete)."""
  bundle_lib.check_holds(result, 'tf1')  # Its kinds, [CLS]-pooled (get_pooled_output()).
  if result.config['layer_norm_eps'] != _TF1_LAYER_NORM_EPS:
    raise ValueError(f'{result.source} has layer_norm_eps={result.config["layer_norm_eps"]}: '
                     f"google-research/bert's modeling.py fixes it at {_TF1_LAYER_NORM_EPS} and "
                     f'{CONFIG_FILE} has no field for it, so --format=tf1 cannot hold this '
                     'model; use --format=hf.')
  if result.max_chars_per_word != tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD and (
      not result.is_sentencepiece()):  # What its importer reads back (bertjax_export.json).
    logging.warning('%s reads a word of over %d characters as [UNK]; google-research/bert\'s '
                    'tokenization.py reads up to %d: a longer word tokenizes otherwise there',
                    result.source, result.max_chars_per_word,
                    tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD)
  if result.config['hidden_act'] == 'gelu_tanh':
    logging.warning("%s: hidden_act gelu_new (the tanh GELU) is written as it is: transformers' "
                    "converter and bertjax read it, but google-research/bert's modeling.py "
                    'knows only gelu (erf), relu, tanh and linear, and refuses it.', output_dir)
  from bertjax.text import fast_tokenizer  # pylint: disable=g-import-not-at-top
  tf, _ = fast_tokenizer.import_tf()
  table = names(result.config, result.kind)
  tensors = {theirs: np.ascontiguousarray(layout.to_theirs(result.params[ours]))
             for ours, (theirs, layout) in table.items()}
  vocab_rows = tensors['bert/embeddings/word_embeddings'].shape[0]
  order = sorted(tensors)
  with files.staged_folder(output_dir) as local, tf.device('/cpu:0'):
    try:
      tf.raw_ops.SaveV2(prefix=os.path.join(local, CHECKPOINT_PREFIX), tensor_names=order,
                        shape_and_slices=[''] * len(order),
                        tensors=[tf.constant(tensors[n]) for n in order])
    except tf.errors.OpError as e:  # A full disk (ResourceExhaustedError), no permission, ...
      if full := export_writing.tf_disk_full(tf, e, output_dir):
        raise full from None
      raise OSError(f'{output_dir}: the checkpoint could not be written ({type(e).__name__}: '
                    f'{e.message[:200]}); free space or pick another --output.') from None
  files.write_atomically(files.join(output_dir, CONFIG_FILE), json.dumps(
      config_to_tf1(result.config, vocab_rows), indent=2, sort_keys=True) + '\n')
  # The `checkpoint` file lets tf.train.latest_checkpoint (and the original scripts) find it.
  files.write_atomically(files.join(output_dir, 'checkpoint'),
                         f'model_checkpoint_path: "{CHECKPOINT_PREFIX}"\n'
                         f'all_model_checkpoint_paths: "{CHECKPOINT_PREFIX}"\n')

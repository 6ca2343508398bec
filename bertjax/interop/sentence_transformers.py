"""A sentence-transformers model folder: `SentenceTransformer(dir)` loads it with no custom code.

The folder is the transformers export of the encoder (config.json says BertModel,
model.safetensors, the tokenizer files) plus the modules sentence-transformers runs after it:

  modules.json                      the pipeline: Transformer ('' = this folder), Pooling,
                                    Dense layers for a head, Normalize
  sentence_bert_config.json         max_seq_length (longer texts are truncated), do_lower_case
  config_sentence_transformers.json prompts, similarity function
  1_Pooling/config.json             mean of the last layer over real tokens, or its [CLS] row,
                                    a prompt's tokens included (a source with prompts that
                                    its Pooling leaves out, include_prompt false, is refused)
  2_Dense/, 3_Dense/                a sequence-level head: BERT's pooler (dense + tanh) where
                                    the head reads it, then the classifier (identity activation),
                                    so that encode() returns the head's logits
  N_Normalize                       listed, never written: every release (3.0 to 6.x) builds a
                                    Normalize without reading its folder, as the published
                                    all-MiniLM-L6-v2 has none (an empty folder cannot be stored in
                                    a bucket or a git repository)

The layout is the one sentence-transformers 3.0 to 5.x save (legacy key names that 6.x reads
too), so every release since 3.0 loads it (3.4.1, 5.1.2 and 6.2.0 tested). An encoder from a
sentence-transformers source keeps its pooling, normalisation, length and prompts; any other
encoder (a pre-training run, a plain BERT) gets mean pooling, what SentenceTransformer builds
around a plain transformers model. read_modules reads these files back (and the layout 6.x
saves: `pooling_mode`, the length in tokenizer_config.json).

A pair task's encode takes (text_a, text_b) tuples, tokenised [CLS] a [SEP] b [SEP] with
segment ids. A pair cut to fit max_seq_length with both texts longer than half of it keeps one
token more of the second text (transformers' tokenizers) where BERT's scripts and bertjax keep
it of the first.
"""

import dataclasses
import json

from absl import logging
import numpy as np

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import hf_checkpoint
from bertjax.model import heads
from bertjax.training import kinds

# The oldest release whose layout this is (similarity_fn_name came in 3.0); a loader warns only
# when the folder claims a newer release than its own.
LAYOUT_VERSION = '3.0.0'
_MODULE = 'sentence_transformers.models.'
_IDENTITY = 'torch.nn.modules.linear.Identity'
_TANH = 'torch.nn.modules.activation.Tanh'
# A pair task's head reads [CLS] a [SEP] b [SEP]: encode([(a, b), ...]) tokenises it so.
PAIR_NOTE = 'encode() takes (text_a, text_b) tuples for a pair task'


def _head_as_dense(kind: str) -> bool:
  """Whether the kind table says the folder runs `kind`'s head as Dense layers after pooling
  (a sequence-level head), rather than giving the encoder's embedding."""
  return getattr(kinds.get(kind).holder('sentence_transformers'), 'head_as_dense', False)


def is_written_for(result: bundle_lib.Bundle) -> bool:
  """Whether a transformers export of `result` is also a sentence-transformers model: an
  encoder from one, or a mean-pooled one (a run fine-tuned from one)."""
  return not kinds.get(result.kind).head_params and (result.embedding or result.pooling == 'mean')


def embedding_pooling(result: bundle_lib.Bundle) -> str:
  """The Pooling module's mode: a sequence-level head's own, a sentence-transformers source's,
  else mean (sentence-transformers' default around a plain transformers model)."""
  if _head_as_dense(result.kind) or result.embedding:
    return result.pooling
  return 'mean'


def _pooling_config(dimension: int, mode: str, include_prompt: bool = True) -> dict:
  """Every key sentence-transformers 3.x-5.x write (6.x reads them as its `pooling_mode`)."""
  return {'word_embedding_dimension': dimension,
          'pooling_mode_cls_token': mode == 'cls',
          'pooling_mode_mean_tokens': mode == 'mean',
          'pooling_mode_max_tokens': mode == 'max',
          'pooling_mode_mean_sqrt_len_tokens': False,
          'pooling_mode_weightedmean_tokens': False,
          'pooling_mode_lasttoken': False,
          # The source's: a prompt it has and leaves out of the pooling is refused (bertjax
          # pools it); a prompt passed to encode() of the export is pooled as the source's was.
          'include_prompt': include_prompt}


def _json(value) -> str:
  return json.dumps(value, indent=2) + '\n'


def _write_dense(folder: str, kernel_DxC, bias_C, activation: str):
  """A sentence-transformers Dense module: config.json and the torch Linear's weights."""
  from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
  files.write_atomically(files.join(folder, 'config.json'), _json(
      {'in_features': int(kernel_DxC.shape[0]), 'out_features': int(kernel_DxC.shape[1]),
       'bias': True, 'activation_function': activation}))
  # torch.nn.Linear keeps its weight as [out, in].
  files.write_atomically(files.join(folder, 'model.safetensors'), st_numpy.save(
      {'linear.weight': np.ascontiguousarray(np.asarray(kernel_DxC, np.float32).T),
       'linear.bias': np.ascontiguousarray(np.asarray(bias_C, np.float32))},
      metadata={'format': 'pt'}))


def _check_computed(result: bundle_lib.Bundle):
  """Refuses a source that computes what bertjax does not (Bundle.not_computed: a Pooling that
  leaves its prompts out, a Dense), as the export command does: written as bertjax computes it,
  it would embed otherwise."""
  if result.not_computed:
    raise ValueError(f'{result.source} is a sentence-transformers model bertjax cannot export: '
                     f'{result.not_computed}, so its export would give other embeddings.')


def write_modules(result: bundle_lib.Bundle, output_dir):
  """The sentence-transformers files beside a transformers export of `result`'s encoder."""
  _check_computed(result)
  output_dir = str(output_dir)
  mode = embedding_pooling(result)
  modules = [('Transformer', ''), ('Pooling', '1_Pooling')]
  files.write_atomically(files.join(output_dir, '1_Pooling', 'config.json'),
                         _json(_pooling_config(result.config['hidden_size'], mode,
                                               result.include_prompt)))
  if _head_as_dense(result.kind):
    if mode == 'cls':  # The head reads BERT's pooler, which sentence-transformers' cls lacks.
      path = f'{len(modules)}_Dense'
      _write_dense(files.join(output_dir, path), result.params['bert/pooler/kernel'],
                   result.params['bert/pooler/bias'], _TANH)
      modules.append(('Dense', path))
    path = f'{len(modules)}_Dense'
    _write_dense(files.join(output_dir, path), result.params['classifier/kernel'],
                 result.params['classifier/bias'], _IDENTITY)
    modules.append(('Dense', path))
  if result.normalize:
    modules.append(('Normalize', f'{len(modules)}_Normalize'))
  files.write_atomically(files.join(output_dir, 'modules.json'), _json(
      [{'idx': i, 'name': str(i), 'path': path, 'type': _MODULE + kind}
       for i, (kind, path) in enumerate(modules)]))
  length = min(result.max_seq_length, result.config['max_position_embeddings'])
  # do_lower_case here lowercases before the tokenizer; the tokenizer files fold case as the
  # model was trained (tokenizer_config.json); a source that lower-cased first keeps doing so.
  files.write_atomically(files.join(output_dir, 'sentence_bert_config.json'), _json(
      {'max_seq_length': length, 'do_lower_case': result.lowercase_input}))
  files.write_atomically(files.join(output_dir, 'config_sentence_transformers.json'), _json(
      {'__version__': {'sentence_transformers': LAYOUT_VERSION},
       'model_type': 'SentenceTransformer', 'prompts': dict(result.prompts),
       'default_prompt_name': result.default_prompt_name or None,
       'similarity_fn_name': result.similarity_fn_name}))
  if _head_as_dense(result.kind):  # What the head is for, for bertjax's importer.
    files.write_atomically(files.join(output_dir, 'bertjax_export.json'), _json(
        {'kind': result.kind, 'labels': list(result.labels), 'pooling': result.pooling,
         'do_lower_case': result.do_lower_case, 'max_seq_length': length}))


def save(result: bundle_lib.Bundle, output_dir):
  """Writes a sentence-transformers folder (a local folder or a URL): the encoder's
  transformers files and the modules after it (a head as Dense layers)."""
  _check_computed(result)  # Before any file is written.
  bundle_lib.check_holds(result, 'sentence_transformers')
  bundle_lib.check_tokenizer(result, 'sentence_transformers')
  # Its tokenizer is a sentence-embedding model's whatever the kind (embedding=True: see
  # bundle.tokenizer_settings): SentenceTransformer reads texts, so `[SEP]`, `[MASK]`... typed
  # in one are split as bertjax splits them, and the length is the run's, not a bare encoder's.
  encoder = dataclasses.replace(result, kind='encoder', params=result.encoder_params(),
                                labels=(), embedding=True)
  hf_checkpoint.save(encoder, output_dir)
  if kinds.get(result.kind).named_labels:  # transformers' config keeps the class names.
    config_file = files.join(str(output_dir), 'config.json')
    config = json.loads(files.read_text(config_file))
    config['id2label'] = {str(i): label for i, label in enumerate(result.labels)}
    config['label2id'] = {label: i for i, label in enumerate(result.labels)}
    files.write_atomically(config_file, json.dumps(config, indent=2, sort_keys=True) + '\n')
  write_modules(result, output_dir)
  logging.info('sentence-transformers modules: pooling %s%s%s, max_seq_length %d',
               embedding_pooling(result),
               f', {result.kind} head as Dense' if _head_as_dense(result.kind) else '',
               ', normalised' if result.normalize else '', result.max_seq_length)


# sentence-transformers' Pooling modes bertjax computes (its embed job: inference.POOLINGS), by
# either layout's name; fine-tuning's heads pool by mean or [CLS] only (heads.POOLINGS).
_POOLINGS = {'mean': 'mean', 'cls': 'cls', 'max': 'max', 'pooling_mode_mean_tokens': 'mean',
             'pooling_mode_cls_token': 'cls', 'pooling_mode_max_tokens': 'max'}


def _pooling_mode(pooling_config: dict) -> str:
  """The mode of a Pooling module's config.json: 6.x's `pooling_mode`, or the older bools."""
  if 'pooling_mode' in pooling_config:
    mode = pooling_config['pooling_mode']
    return mode if isinstance(mode, str) else '+'.join(mode)
  modes = [k for k, v in pooling_config.items() if k.startswith('pooling_mode_') and v is True]
  return '+'.join(modes) or 'mean'  # No mode set: sentence-transformers' default.


def _json_files(directory):
  """read(*parts) -> the JSON file at `directory`/parts, or None: one listing of the folder,
  not a request per file."""
  present = set(files.walk_files(directory))

  def read(*parts) -> dict | list | None:
    if '/'.join(parts) not in present:
      return None
    return json.loads(files.read_text(files.join(directory, *parts)))
  read.present = present
  return read


def _steps(beside) -> list[tuple[str, str]]:
  """(module type, path) of each module SentenceTransformer(dir) runs: modules.json's; without
  it, Transformer + Pooling where 1_Pooling/ exists (bertjax's exports before modules.json)."""
  modules = beside('modules.json')
  if modules is None:
    modules = ([{'type': 'Transformer', 'path': ''}, {'type': 'Pooling', 'path': '1_Pooling'}]
               if beside('1_Pooling', 'config.json') is not None else [])
  return [(str(m.get('type', '')).rsplit('.', 1)[-1], m.get('path', '')) for m in modules]


def _first_pooling(beside, steps) -> dict | None:
  """The config.json of the first Pooling module ({} where its folder has none), or None
  without one."""
  pooling = [path for kind, path in steps if kind == 'Pooling']
  return (beside(*pooling[0].split('/'), 'config.json') or {}) if pooling else None


def _mode_of(beside, steps) -> str:
  """The raw pooling mode of the first Pooling module ('' when there is none)."""
  config = _first_pooling(beside, steps)
  return '' if config is None else _pooling_mode(config)


def pooling_of(directory) -> str | None:
  """'mean' or 'cls': how the sentence-transformers folder `directory` pools (either layout of
  its Pooling config), as fine-tuning's heads read it; None without a Pooling module;
  ValueError for a mode the heads lack (max pooling: embed computes it, the heads do not)."""
  beside = _json_files(directory)
  _check_not_a_module(directory, beside.present)  # A 1.x module folder: its parent pools.
  mode = _mode_of(beside, _steps(beside))
  if mode and _POOLINGS.get(mode) not in heads.POOLINGS:
    raise ValueError(f'{directory} pools by {mode}, which bertjax\'s fine-tuning heads do not '
                     'compute: set config.pooling=mean or cls (its embeddings then differ).')
  return _POOLINGS.get(mode)


def transformer_folder(directory) -> str:
  """The Transformer module's folder (relative) where `directory`'s modules.json puts it in a
  subfolder (sentence-transformers 1.x: 0_Transformer/), else ''."""
  if not files.exists(files.join(directory, 'modules.json')):
    return ''
  steps = _steps(_json_files(directory))
  return next((path for kind, path in steps if kind == 'Transformer'), '')


def _check_not_a_module(directory, present: set):
  """Refuses the Transformer module folder of a sentence-transformers 1.x model (its parent's
  modules.json names it): the pooling and Normalize are the parent's."""
  if 'modules.json' in present or 'sentence_bert_config.json' not in present:
    return
  parent = files.parent(str(directory).rstrip('/'))
  name = str(directory).rstrip('/').rsplit('/', 1)[-1]
  if parent and transformer_folder(parent).strip('/') == name:
    raise ValueError(f'{directory} is the Transformer module of the sentence-transformers model '
                     f'{parent} (whose modules.json holds its pooling and Normalize): pass '
                     f'{parent}.')


def read_modules(result: bundle_lib.Bundle, root=None):
  """Sets what SentenceTransformer(root) runs after the encoder (read from `result.source`; the
  root is that folder unless a 1.x layout keeps the encoder in a subfolder): pooling,
  normalisation, length, lower-casing, prompts, similarity, and a head bertjax's export wrote
  as Dense layers. A folder without modules.json that has 1_Pooling/ (bertjax's transformers
  export before it wrote modules.json) is read as SentenceTransformer builds it: Transformer +
  Pooling. A plain transformers folder is left as it is; a 1.x Transformer module folder is
  refused (its pooling is its parent's). What bertjax does not compute (a pooling mode, prompts
  left out of the pooling, a Dense) is said in not_computed."""
  root = result.source if root is None else root
  beside = _json_files(root)
  steps = _steps(beside)
  if not steps:
    if root == result.source:
      _check_not_a_module(root, beside.present)
    return
  in_model = beside if root == result.source else _json_files(result.source)
  result.embedding = True
  # The length the loader read (hf_checkpoint.read: sentence_bert_config.json's, where earlier
  # releases keep it, else the tokenizer's model_max_length, where 6.x does), within the table.
  settings = in_model('sentence_bert_config.json') or {}
  result.max_seq_length = min(int(result.max_seq_length), result.config['max_position_embeddings'])
  result.lowercase_input = bool(settings.get('do_lower_case'))
  result.normalize = any(kind == 'Normalize' for kind, _ in steps)
  model_config = beside('config_sentence_transformers.json') or {}
  result.prompts = dict(model_config.get('prompts') or {})
  name = model_config.get('default_prompt_name') or ''
  if name and name not in result.prompts:  # SentenceTransformer refuses such a folder too.
    raise ValueError(f'{root}/config_sentence_transformers.json: default_prompt_name {name!r} is '
                     f'not one of its prompts ({", ".join(map(repr, result.prompts)) or "none"})'
                     ': fix the file.')
  result.default_prompt_name = name
  result.similarity_fn_name = model_config.get('similarity_fn_name') or 'cosine'
  mode = _mode_of(beside, steps)
  if mode and mode not in _POOLINGS:
    result.not_computed = f'it pools by {mode}, which bertjax does not compute'
    logging.warning('%s pools by %s, which bertjax does not compute: read as mean pooling '
                    '(its embeddings differ from SentenceTransformer\'s)', root, mode)
  result.pooling = _POOLINGS.get(mode, 'mean')
  _note_prompt_left_out(result, root, _first_pooling(beside, steps) or {})
  denses = [path for kind, path in steps if kind == 'Dense']
  meta = beside('bertjax_export.json')
  if denses and meta is not None and meta.get('kind') in kinds.KINDS and _head_as_dense(
      meta['kind']):
    _read_head(result, meta, files.join(root, *denses[-1].split('/')))
    return
  _note_modules_not_run(result, root, steps, beside)


def _note_prompt_left_out(result: bundle_lib.Bundle, root, pooling_config: dict):
  """Says (not_computed, and a warning) that the Pooling module leaves a prompt's tokens out
  (include_prompt false: SentenceTransformer masks the prompt's tokens, [CLS] included, out of
  the pooling) where bertjax prepends one, its default prompt: bertjax pools them with the
  text. Another prompt is never prepended by bertjax (its exports keep include_prompt for
  SentenceTransformer's encode(prompt_name=...)); an empty one masks nothing."""
  # Pooling(**config)'s default, read as it is; kept by the exports.
  result.include_prompt = bool(pooling_config.get('include_prompt', True))
  default = result.prompts.get(result.default_prompt_name, '')
  if result.include_prompt or not default:
    return
  why = (f'its Pooling leaves the prompt out (include_prompt false) but bertjax pools its '
         f'default prompt {default!r} with the text')
  result.not_computed = '; '.join(filter(None, [result.not_computed, why]))
  logging.warning('%s: %s, so its embeddings of prompted text differ from '
                  'SentenceTransformer\'s and its exports are refused', root, why)


def _note_modules_not_run(result: bundle_lib.Bundle, root, steps, beside):
  """Says (not_computed, and a warning) which modules after pooling bertjax does not run, and
  the dimension SentenceTransformer's vectors have where a Dense changes it."""
  others = [kind for kind, _ in steps if kind not in ('Transformer', 'Pooling', 'Normalize')]
  if not others:
    return
  hidden = result.config['hidden_size']
  dims = [(beside(*path.split('/'), 'config.json') or {}).get('out_features')
          for kind, path in steps if kind == 'Dense']
  theirs = (f' ({hidden}-dimensional, where SentenceTransformer\'s are {dims[-1]}-dimensional)'
            if dims and dims[-1] and dims[-1] != hidden else '')
  result.not_computed = '; '.join(filter(None, [
      result.not_computed, f'it runs {", ".join(others)} after pooling, which bertjax does '
      f'not import: these are the pooled vectors before it{theirs}']))
  logging.warning('%s runs %s after pooling, which bertjax does not import: its vectors are '
                  'the pooled ones before it%s, not SentenceTransformer\'s embeddings', root,
                  ', '.join(others), theirs)


def _read_head(result: bundle_lib.Bundle, meta: dict, dense: str):
  """The sequence-level head bertjax's export wrote: the classifier is the last Dense (the
  folder `dense`; BERT's pooler, a Dense before it, is also in the encoder's weights)."""
  from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
  weights = st_numpy.load(files.read_bytes(files.join(dense, 'model.safetensors')))
  result.kind, result.pooling = meta['kind'], meta.get('pooling', result.pooling)
  result.labels = tuple(meta.get('labels', ()))
  result.labels_named = bool(result.labels)
  result.params['classifier/kernel'] = np.asarray(weights['linear.weight'], np.float32).T
  result.params['classifier/bias'] = np.asarray(weights['linear.bias'], np.float32)
  result.embedding = False  # Its pooling is bertjax's ('cls' is BERT's pooler).


def loading_lines(output) -> list[str]:
  """The lines that load the folder at `output` with sentence-transformers, and the modules
  its modules.json lists."""
  output = str(output)
  modules = json.loads(files.read_text(files.join(output, 'modules.json')))
  length = json.loads(files.read_text(files.join(output, 'sentence_bert_config.json')))[
      'max_seq_length']
  chain = []
  for module in modules:
    kind = module['type'].rsplit('.', 1)[-1]
    if kind == 'Pooling':
      config = json.loads(files.read_text(files.join(output, module['path'], 'config.json')))
      kind += f' ({"mean" if config["pooling_mode_mean_tokens"] else "cls"})'
    elif kind == 'Dense':
      config = json.loads(files.read_text(files.join(output, module['path'], 'config.json')))
      kind += (f' ({config["in_features"]} -> {config["out_features"]}, '
               f'{config["activation_function"].rsplit(".", 1)[-1]})')
    chain.append(kind)
  head = files.exists(files.join(output, 'bertjax_export.json'))
  what = 'logits = model.encode(texts)  # the head\'s outputs' if head else (
      'embeddings = model.encode(texts)')
  lines = ['load it with:', '  from sentence_transformers import SentenceTransformer',
           f'  model = SentenceTransformer({output!r})', f'  {what}']
  if head:
    lines.append(f'  # {PAIR_NOTE}')
  return lines + [f'modules: {" -> ".join(chain)}; max_seq_length {length}']

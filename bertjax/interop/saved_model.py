"""A TensorFlow SavedModel with the tokenizer inside: raw strings in, answers out.

The model is the JAX function itself, converted by jax2tf (StableHLO inside an XlaCallModule op,
for CPU, CUDA and TPU), with its weights as TF variables; tokenization is tensorflow-text's
FastBertTokenizer with the in-graph clean-up of bertjax's fast path (text/fast_tokenizer.py), so
ids equal bertjax's wherever its fast path is exact (all text in fast_tokenizer's safe blocks).
A SentencePiece model's tokenizer is tensorflow-text's SentencepieceTokenizer fed the model's
bytes, after ALBERT's normalisation in TF ops (text/sentencepiece_graph.py): bertjax's ids on
all text; sentence-level kinds only (answers and tags need WordPiece's offsets and words).

Signatures (batch size dynamic, the length padded to the longest input of the batch, at most
`max_seq_length` tokens; longer inputs are truncated as BERT's scripts do, pairs longest first):
  serving_default  `text` [B] strings (SQuAD models: `question`, `context`);
  pairs            `text_a`, `text_b` [B] (sentence-level models);
and outputs by what the model is for:
  encoder, pretraining,  sequence_output [B, L, D], pooled_output [B, D] (BERT's pooler),
  masked_lm              mean_pooled_output [B, D] (mean of the last layer over real tokens),
                         input_mask [B, L];
  classification         probabilities [B, C], label [B] (string);
  regression             score [B];
  span                   answer [B] (text of the context), score [B] (start + end logits);
  tagging                words [B, W] (whitespace-split, '' padding), tags [B, W] ('' for
                         the words truncated away: bertjax.predict tags those too, over
                         several windows).
"""

import contextlib
import errno
import functools
import json

from flax import traverse_util
import jax
import numpy as np

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import export_writing
from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.text import fast_tokenizer
from bertjax.text import sentencepiece_graph
from bertjax.text import tokenizer
from bertjax.text import vocab_files
from bertjax.training import kinds

MAX_ANSWER_TOKENS = 30  # run_squad.py's max_answer_length.
PLATFORMS = ('cpu', 'cuda', 'tpu')


def _served(result: bundle_lib.Bundle) -> kinds.Served:
  """How the kind table says a SavedModel serves `result`'s kind."""
  bundle_lib.check_holds(result, 'saved_model')
  return kinds.get(result.kind).holder('saved_model')


def _module(result: bundle_lib.Bundle, cfg):
  if _served(result).encoder:  # The pre-training heads are not served.
    return encoder.BertEncoder(cfg)
  return kinds.get(result.kind).head(cfg, len(result.labels), result.pooling)


def _params_tree(result: bundle_lib.Bundle) -> dict:
  params = bundle_lib.cut_vocab_padding(result)
  if _served(result).encoder:  # The encoder's own tree, without `bert/`.
    params = {k[len('bert/'):]: v for k, v in params.items() if k.startswith('bert/')}
  return traverse_util.unflatten_dict(params, sep='/')


def jax_function(result: bundle_lib.Bundle):
  """(params, input_ids, input_mask, segment_ids) -> dict of outputs, in float32."""
  act = result.config['hidden_act']
  cfg = encoder_config.default_config(**{**result.config, 'dtype': 'float32', 'scan_layers': False,
                                         'attention_impl': 'xla', 'remat_policy': 'none',
                                         'hidden_act': 'gelu_rational' if act == 'gelu' else act})
  module = _module(result, cfg)
  compute = _served(result).compute

  def fn(params, input_ids, input_mask, segment_ids):
    out = module.apply({'params': params}, input_ids, input_mask, segment_ids,
                       deterministic=True)
    return compute(out, input_mask)
  return fn


class _Inputs:
  """In-graph WordPiece (or ALBERT's SentencePiece) and BERT's input assembly ([CLS] a [SEP]
  b [SEP], truncation)."""

  def __init__(self, tf, tf_text, result: bundle_lib.Bundle, max_seq_length: int):
    bundle_lib.check_tokenizer(result, 'saved_model')
    self.tf = tf
    self.whitespace = fast_tokenizer.whitespace_pattern()
    self.max_len = max_seq_length
    self.sentencepiece = None
    if result.is_sentencepiece():
      # The model's bytes go into the graph; sentencepiece_graph gives bertjax's ids.
      vocab = vocab_files.for_model(result.vocab_file, result.do_lower_case).vocab
      self.sentencepiece = sentencepiece_graph.Tokenizer(
          tf, tf_text, files.read_bytes(result.vocab_file), result.do_lower_case)
      self.fast = self.sentencepiece.sp  # What the module keeps (its model resource).
      self.cls, self.sep = vocab['[CLS]'], vocab['[SEP]']
      return
    vocab = tokenizer.load_vocab(result.vocab_file)
    self.fast = tf_text.FastBertTokenizer(
        vocab=list(vocab), suffix_indicator='##',
        # A word within the model's limit in characters is within this in bytes; a longer one
        # is made [UNK] by clean() (its limit counts bytes, the original's characters).
        max_bytes_per_word=min(4 * result.max_chars_per_word, 2**31 - 1),
        token_out_type=tf.int64, unknown_token='[UNK]',
        lower_case_nfd_strip_accents=result.do_lower_case)
    self.drop_pattern = fast_tokenizer.drop_pattern()
    # A word past the limit in characters becomes one character WordPiece cannot cover (a
    # private-use one outside the vocab): [UNK], as the original reads it, in any script.
    self.tf_text, self.max_chars = tf_text, result.max_chars_per_word
    self.word_break = fast_tokenizer.word_break_class()
    self.too_long = next(chr(cp) for cp in range(0xE000, 0xF900) if chr(cp) not in vocab)
    self.cls, self.sep, self.unk = vocab['[CLS]'], vocab['[SEP]'], vocab['[UNK]']

  def clean(self, texts):
    if self.sentencepiece is not None:  # preprocess_text does its own clean-up.
      return texts
    tf = self.tf
    texts = tf.strings.regex_replace(texts, self.drop_pattern, '')
    # Words and the characters between them (kept: joined back, the text is unchanged).
    parts = self.tf_text.regex_split(texts, self.word_break, self.word_break)
    long = tf.strings.length(parts.flat_values, unit='UTF8_CHAR') > self.max_chars
    return tf.strings.reduce_join(parts.with_flat_values(
        tf.where(long, tf.constant(self.too_long), parts.flat_values)), axis=-1)

  def _keep(self, pieces, lengths):
    tf = self.tf
    positions = tf.ragged.range(pieces.row_lengths())
    return tf.ragged.boolean_mask(pieces, positions < tf.expand_dims(lengths, 1))

  def assemble(self, a, b=None):
    """Ragged ids a (and b) -> dense input_ids, input_mask, segment_ids [B, L]."""
    tf = self.tf
    n = a.nrows()
    cls = tf.fill([n, 1], tf.constant(self.cls, tf.int64))
    sep = tf.fill([n, 1], tf.constant(self.sep, tf.int64))
    if b is None:
      a = self._keep(a, tf.fill([n], tf.constant(self.max_len - 2, tf.int64)))
      ids = tf.concat([cls, a, sep], 1)
      segments = tf.zeros_like(ids)
    else:
      # The original's _truncate_seq_pair: drop from the longer until they fit (b on a tie).
      la, lb, budget = a.row_lengths(), b.row_lengths(), self.max_len - 3
      fits = la + lb <= budget
      ta = tf.where(fits, la, tf.minimum(la, tf.maximum(budget - lb, (budget + 1) // 2)))
      tb = tf.where(fits, lb, budget - ta)
      a, b = self._keep(a, ta), self._keep(b, tb)
      ids = tf.concat([cls, a, sep, b, sep], 1)
      segments = tf.concat([tf.zeros_like(cls), tf.zeros_like(a), tf.zeros_like(sep),
                            tf.ones_like(b), tf.ones_like(sep)], 1)
    mask = tf.ones_like(ids)
    return (tf.cast(ids.to_tensor(), tf.int32), tf.cast(mask.to_tensor(), tf.int32),
            tf.cast(segments.to_tensor(), tf.int32))

  def tokenize(self, texts):
    if self.sentencepiece is not None:
      return self.sentencepiece.tokenize(texts)
    return self.fast.tokenize(self.clean(texts))


@contextlib.contextmanager
def _stablehlo_tensorflow_reads():
  """jax2tf serializes StableHLO that consumers 4 weeks old can read (1.15 for jax 0.10.2);
  TensorFlow 2.21's XlaCallModule reads up to 1.13.7. Serialize for 12 weeks back instead, which
  StableHLO's compatibility rules allow (jax exposes no option for it, hence the patch)."""
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  from jax._src.export import _export  # pylint: disable=g-import-not-at-top
  from jax._src.lib import _jax  # pylint: disable=g-import-not-at-top
  from jax._src.lib.mlir.dialects import hlo  # pylint: disable=g-import-not-at-top

  def to_bytecode(module):
    version = hlo.get_version_from_compatibility_requirement(
        hlo.StablehloCompatibilityRequirement.WEEK_12)
    return _jax.mlir.serialize_portable_artifact(
        module, version, xla_bridge.get_backend().serialize_with_sdy)
  original = _export._module_to_bytecode  # pylint: disable=protected-access
  _export._module_to_bytecode = to_bytecode  # pylint: disable=protected-access
  try:
    yield
  finally:
    _export._module_to_bytecode = original  # pylint: disable=protected-access


def save(result: bundle_lib.Bundle, output, max_seq_length: int = 0):
  """Writes the SavedModel into `output`, a folder or a URL (TensorFlow writes it into a local
  folder, uploaded when complete), and bertjax_export.json beside its files."""
  with _stablehlo_tensorflow_reads():
    _save(result, output, max_seq_length)


def _save(result: bundle_lib.Bundle, output, max_seq_length: int):
  _served(result)  # What it refuses, before TensorFlow starts.
  if not result.vocab_file:
    raise ValueError(f'{result.source} has no vocab file: pass --vocab_file, the vocab its '
                     'weights were trained with.')
  tf, tf_text = fast_tokenizer.import_tf()
  from jax.experimental import jax2tf  # pylint: disable=g-import-not-at-top
  max_len = max_seq_length or result.max_seq_length
  max_len = min(max_len, result.config['max_position_embeddings'])
  inputs = _Inputs(tf, tf_text, result, max_len)
  flat = traverse_util.flatten_dict(_params_tree(result), sep='/')
  variables = {k: tf.Variable(v, trainable=False, name=k.replace('/', '.')) for k, v in
               flat.items()}
  fn = jax_function(result)
  converted = jax2tf.convert(
      lambda flat_params, ids, mask, seg: fn(traverse_util.unflatten_dict(flat_params, sep='/'),
                                             ids, mask, seg),
      polymorphic_shapes=[None, '(b, l)', '(b, l)', '(b, l)'], with_gradient=False,
      native_serialization_platforms=PLATFORMS)
  module = tf.Module()
  module.variables_by_name = variables
  module.tokenizer = inputs.fast
  labels = tf.constant(list(result.labels) or [''], tf.string)

  def run(ids, mask, seg):
    return converted(variables, ids, mask, seg)

  served = _served(result)
  signatures = _SIGNATURES[served.signature](tf, module, inputs, run, labels, served.outputs)
  with files.staged_folder(output) as local:
    try:
      tf.saved_model.save(module, local, signatures=signatures)
    except tf.errors.OpError as e:  # A full disk (ResourceExhausted), no permission, ...
      if full := export_writing.tf_disk_full(tf, e, output):
        raise full from None
      raise OSError(errno.EIO, f'the SavedModel could not be written ({type(e).__name__}: '
                    f'{e.message.splitlines()[-1][:200]})', str(output)) from None
  files.write_atomically(files.join(output, 'bertjax_export.json'), json.dumps(
      {'kind': result.kind, 'labels': list(result.labels), 'pooling': result.pooling,
       'do_lower_case': result.do_lower_case, 'max_seq_length': max_len,
       'tokenizer': 'sentencepiece' if result.is_sentencepiece() else 'wordpiece',
       'signatures': sorted(signatures), 'platforms': list(PLATFORMS)}, indent=2) + '\n')


def _texts(tf, module, inputs: _Inputs, run, labels, served: tuple) -> dict:
  """serving_default (text) and pairs (text_a, text_b): the `served` outputs per text or pair."""
  outputs = _sentence_outputs(tf, run, labels, served)

  def single(texts):
    return outputs(*inputs.assemble(inputs.tokenize(texts)))

  def pairs(text_a, text_b):
    return outputs(*inputs.assemble(inputs.tokenize(text_a), inputs.tokenize(text_b)))
  text = tf.TensorSpec([None], tf.string)
  module.serve = tf.function(lambda text: single(text), input_signature=[text], autograph=False)
  module.serve_pairs = tf.function(lambda text_a, text_b: pairs(text_a, text_b),
                                   input_signature=[text, text], autograph=False)
  return {'serving_default': module.serve.get_concrete_function(),
          'pairs': module.serve_pairs.get_concrete_function()}


def _sentence_outputs(tf, run, labels, served: tuple):
  """(ids, mask, seg) -> the sentence signatures' outputs: the model's, and where the kind
  table's `served` outputs list them, the input mask and the label's name."""
  def outputs(ids, mask, seg):
    out = run(ids, mask, seg)
    if 'input_mask' in served:
      out = {**out, 'input_mask': mask}
    if 'label' in served:
      out = {**out, 'label': tf.gather(labels, tf.argmax(out['probabilities'], -1))}
    return out
  return outputs


def _answer_signature(tf, module, inputs: _Inputs, run, labels, served: tuple) -> dict:
  """serving_default (question, context): the answer's text in the context."""
  del labels, served  # The answer and its score, always.
  text = tf.TensorSpec([None], tf.string)
  module.serve = tf.function(functools.partial(_answer, tf, inputs, run),
                             input_signature=[text, text], autograph=False)
  return {'serving_default': module.serve.get_concrete_function()}


def _tags_signature(tf, module, inputs: _Inputs, run, labels, served: tuple) -> dict:
  """serving_default (text): a tag per whitespace-separated word."""
  del served  # The words and their tags, always.
  text = tf.TensorSpec([None], tf.string)
  module.serve = tf.function(functools.partial(_tags, tf, inputs, run, labels),
                             input_signature=[text], autograph=False)
  return {'serving_default': module.serve.get_concrete_function()}


def _answer(tf, inputs: _Inputs, run, question, context):
  """The best span of `context` (start <= end < start + 30 tokens, inside the context)."""
  context = inputs.clean(context)
  q = inputs.tokenize(question)
  c_ids, c_starts, c_ends = inputs.fast.tokenize_with_offsets(context)
  ids, mask, seg = inputs.assemble(q, c_ids)
  out = run(ids, mask, seg)
  length = tf.shape(ids)[1]
  # Token positions of the context: after [CLS] q [SEP]; its kept length from the segment ids.
  first = tf.reduce_sum(mask * (1 - seg), 1)  # [CLS] q [SEP]

  c_len = tf.reduce_sum(seg, 1) - 1
  pos = tf.range(length)[None]
  in_context = (pos >= first[:, None]) & (pos < (first + c_len)[:, None])
  neg = tf.constant(-1e9, tf.float32)
  start = tf.where(in_context, out['start_logits'], neg)
  end = tf.where(in_context, out['end_logits'], neg)
  i, j = tf.range(length)[:, None], tf.range(length)[None, :]
  allowed = (j >= i) & (j < i + MAX_ANSWER_TOKENS)
  scores = tf.where(allowed[None], start[:, :, None] + end[:, None, :], neg)
  flat = tf.reshape(scores, [tf.shape(scores)[0], -1])
  best = tf.argmax(flat, -1, output_type=tf.int32)
  s, e = best // length - first, best % length - first
  starts = c_starts.to_tensor()
  ends = c_ends.to_tensor()
  byte_start = tf.gather(starts, s, batch_dims=1)
  byte_end = tf.gather(ends, e, batch_dims=1)
  answer = tf.strings.substr(context, byte_start, byte_end - byte_start)
  return {'answer': answer, 'score': tf.reduce_max(flat, -1)}


def _tags(tf, inputs: _Inputs, run, labels, text):
  """A tag per whitespace-separated word, the words as given: the tag of its first word piece.
  Words split where Python's str.split splits, as bertjax's predict splits a line
  (tf.strings.split alone misses 23 of those characters, and tensorflow-text's
  WhitespaceTokenizer keeps part of a multi-byte one in the word before it); a word of control
  or zero-width characters only reads [UNK], as bertjax's alignment reads it (cleaning the text
  first dropped it, and the tags of the words after it slid one word back)."""
  words = tf.strings.split(tf.strings.regex_replace(text, inputs.whitespace, ' '))  # [B, (W)]
  pieces = inputs.tokenize(words.flat_values)  # [B*W, (P)]
  empty = tf.cast(pieces.row_lengths() == 0, tf.int64)
  unknown = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(empty)], tf.constant(inputs.unk, tf.int64)), empty)
  pieces = tf.concat([pieces, unknown], 1)
  per_word = pieces.row_lengths()
  flat_ids = tf.RaggedTensor.from_row_lengths(pieces.flat_values, pieces.row_lengths())
  ids_per_text = tf.RaggedTensor.from_row_splits(flat_ids, words.row_splits).merge_dims(1, 2)
  ids, mask, seg = inputs.assemble(ids_per_text)
  tag_ids = run(ids, mask, seg)['tag_ids']
  # The first piece of word w sits at 1 + the pieces of the words before it (in its text).
  lengths = tf.RaggedTensor.from_row_splits(per_word, words.row_splits)
  firsts = 1 + tf.cumsum(lengths, axis=1, exclusive=True)
  firsts = firsts.to_tensor(default_value=0)
  kept = (firsts < tf.cast(tf.reduce_sum(mask, 1) - 1, tf.int64)[:, None]) & (
      tf.sequence_mask(words.row_lengths(), tf.shape(firsts, out_type=tf.int64)[1]))
  # Words past the model's length (truncated away) read a position in range, and are blanked.
  inside = tf.minimum(tf.cast(firsts, tf.int32), tf.shape(tag_ids)[1] - 1)
  tags = tf.gather(labels, tf.gather(tag_ids, inside, batch_dims=1))
  return {'words': words.to_tensor(default_value=''), 'tags': tf.where(kept, tags, '')}


# The kind table's Served.signature -> the signatures it writes.
_SIGNATURES = {'texts': _texts, 'answer': _answer_signature, 'tags': _tags_signature}


def numpy_outputs(result: bundle_lib.Bundle, batch: dict) -> dict:
  """What the SavedModel's model part computes, run in JAX (for tests and the benchmark)."""
  return jax.tree.map(np.asarray, jax.jit(jax_function(result))(_params_tree(result), **batch))


def loading_lines(output) -> list[str]:
  """The lines that load the SavedModel at `output` in a TensorFlow program, and each
  signature's inputs and outputs (names, dtypes, shapes) as its saved_model.pb records them."""
  tf, _ = fast_tokenizer.import_tf()
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  proto = saved_model_pb2.SavedModel.FromString(
      files.read_bytes(files.join(str(output), 'saved_model.pb')))
  signatures = proto.meta_graphs[0].signature_def

  def described(tensors) -> str:
    return ', '.join(f'{name}: {tf.dtypes.as_dtype(info.dtype).name} {_shape(info)}'
                     for name, info in sorted(tensors.items()))
  lines = ['load it with:', '  import tensorflow as tf',
           "  import tensorflow_text  # registers the tokenizer's ops",
           f'  model = tf.saved_model.load({str(output)!r})']
  names = sorted((n for n in signatures if not n.startswith('__')),  # __saved_model_init_op
                 key=lambda n: (n != 'serving_default', n))
  if names:
    first = signatures[names[0]]
    example = ', '.join(f'{name}=tf.constant([...])' for name in sorted(first.inputs))
    lines.append(f'  outputs = model.signatures[{names[0]!r}]({example})')
  lines.append('signatures:')
  for name in names:
    lines.append(f'  {name}({described(signatures[name].inputs)}) -> '
                 f'{described(signatures[name].outputs)}')
  return lines


def _shape(info) -> str:
  if info.tensor_shape.unknown_rank:
    return '[?]'
  return '[' + ', '.join('None' if d.size < 0 else str(d.size)
                         for d in info.tensor_shape.dim) + ']'

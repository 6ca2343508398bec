"""Dynamic whole-word masking (masking_tf._whole_words) prints nothing a user cannot act on, and
draws the masks it always drew."""

import hashlib

import numpy as np
import tensorflow as tf

from bertjax.input import masking_tf

VOCAB, PIECES = 50, 40  # Ids >= PIECES continue a word.
# What the int32 scan drew (before the float32 one), for the batch below.
EXPECTED_CHOSEN = 86
EXPECTED_DIGEST = '4cee7ba42dfd4fb82d4d71380011f5a6c67df41bc2e37411a918dc0d0e39de6e'


def _config():
  return masking_tf.MaskingConfig(vocab_size=VOCAB, mask_id=3, cls_id=1, sep_id=2,
                                  continuation=np.arange(VOCAB) >= PIECES, strategy='whole_word')


def _transposed_dtypes(graph_def) -> list[str]:
  nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
  return [tf.dtypes.as_dtype(n.attr['T'].type).name for n in nodes if n.op == 'Transpose']


def test_whole_word_masking_transposes_no_int_or_bool_tensor():
  """Hostile pass A, 7: every run with dynamic whole-word masking printed 'E0000 ...
  util.cc:131] oneDNN supports DT_INT32 only on platforms with AVX-512. Falling back to the
  default Eigen-based implementation if present.': TensorFlow's oneDNN Transpose says so for an
  int32 or bool tensor on a CPU without AVX-512 (a float32 one is quiet). Checked on the graph,
  so that a CPU with AVX-512 catches it too."""
  config = _config()
  run = tf.function(lambda ids, mask, seed: masking_tf.mask_batch(
      ids, mask, config=config, max_predictions_per_seq=5, seed_2=seed))
  graph_def = run.get_concrete_function(
      tf.TensorSpec([None, 32], tf.int64), tf.TensorSpec([None, 32], tf.int64),
      tf.TensorSpec([2], tf.int64)).graph.as_graph_def()
  dtypes = _transposed_dtypes(graph_def)
  assert dtypes and set(dtypes) == {'float32'}, dtypes


def test_whole_word_masks_are_the_ones_drawn_before():
  """The scan's counts became float32 (exact): the masks of a seed must not move, or a resumed
  run would draw others than its first part did."""
  rng = np.random.default_rng(0)
  ids = rng.integers(4, VOCAB, (16, 64))
  ids[:, 0], ids[:, 31] = 1, 2
  mask = (np.arange(64)[None, :] < rng.integers(8, 65, (16, 1))).astype(np.int64)
  ids = ids * mask
  out = masking_tf.mask_batch(tf.constant(ids), tf.constant(mask), config=_config(),
                              max_predictions_per_seq=10, seed_2=tf.constant([7, 3], tf.int64))
  digest = hashlib.sha256()
  for key in sorted(out):
    digest.update(out[key].numpy().tobytes())
  assert int(out['masked_lm_weights'].numpy().sum()) == EXPECTED_CHOSEN
  assert digest.hexdigest() == EXPECTED_DIGEST

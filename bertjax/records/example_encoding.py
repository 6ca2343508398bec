"""tf.train.Example bytes for a batch of fixed-shape int64/float features, built with numpy.

Building one `tf.train.Example` proto per instance costs tens of microseconds in Python; here the
protobuf wire format is written for the whole batch at once. An Example is
`features { feature { key: NAME value { int64_list { value: [packed varints] } } } ... }`, i.e.
nested length-delimited fields, so every record is a fixed sequence of parts: constant bytes
(tags, feature names) and per-record bytes (varint payloads and the lengths that prefix them).
Each part is a (flat bytes, per-record length) pair, and one scatter per part lays them out.
The output parses with `tf.io.parse_single_example` like TF's own serialisation (the map
entries are written in the order given, which protobuf parsers accept in any order).
"""

import numpy as np

# The feature spec of google-research/bert's run_pretraining.py (shape by settings).
MASKED_FEATURES = ('input_ids', 'input_mask', 'segment_ids', 'masked_lm_positions',
                   'masked_lm_ids', 'masked_lm_weights', 'next_sentence_labels')
# Unmasked instances for dynamic masking in the input pipeline.
UNMASKED_FEATURES = ('input_ids', 'input_mask', 'segment_ids', 'next_sentence_labels')
# Added by packing (several instances per row).
PACKED_FEATURES = ('instance_starts', 'next_sentence_weights')
NSP_FEATURES = ('next_sentence_labels', 'next_sentence_weights')
# Token ids, positions and lengths are encoded by table lookup, for values below this.
_MAX_TABLE = 1 << 24
_TABLES = {}


def feature_spec(max_seq_length, max_predictions_per_seq, static_masking=True, nsp=True,
                 max_instances_per_row=1):
  """{name: (shape, dtype name)} of the records written with these settings (without NSP,
  no next_sentence_labels). Packed rows (max_instances_per_row > 1, packing.py) add
  instance_starts and next_sentence_weights and hold a label per instance."""
  spec = {
      'input_ids': ((max_seq_length,), 'int64'),
      'input_mask': ((max_seq_length,), 'int64'),
      'segment_ids': ((max_seq_length,), 'int64'),
      'masked_lm_positions': ((max_predictions_per_seq,), 'int64'),
      'masked_lm_ids': ((max_predictions_per_seq,), 'int64'),
      'masked_lm_weights': ((max_predictions_per_seq,), 'float32'),
      'next_sentence_labels': ((1,), 'int64'),
  }
  names = MASKED_FEATURES if static_masking else UNMASKED_FEATURES
  if max_instances_per_row > 1:
    per_row = (max_instances_per_row,)
    spec |= {'instance_starts': (per_row, 'int64'), 'next_sentence_labels': (per_row, 'int64'),
             'next_sentence_weights': (per_row, 'float32')}
    names += PACKED_FEATURES
  return {k: spec[k] for k in names if nsp or k not in NSP_FEATURES}


def _varint_table(size):
  """(bytes [size, W], keep [size, W]) of the varints of 0..size-1, W = the widest."""
  if size not in _TABLES:
    values = np.arange(size, dtype=np.int64)
    width = max(1, (int(size - 1).bit_length() + 6) // 7)
    nbytes = np.ones(size, np.int64)
    table = np.empty((size, width), np.uint8)
    for j in range(width):
      more = values >= (1 << (7 * (j + 1)))
      table[:, j] = ((values >> (7 * j)) & 0x7F) | (more << 7)
      nbytes += more
    _TABLES[size] = table, np.arange(width) < nbytes[:, None]
  return _TABLES[size]


def _varints(values):
  """Varints of each row of a 2-D non-negative int array, as a part (see _layout)."""
  values = np.asarray(values)
  num, width = values.shape
  top = int(values.max(initial=0))
  if values.size and (int(values.min()) < 0 or top >= _MAX_TABLE):
    raise ValueError(f'values must be in [0, {_MAX_TABLE}) to be encoded here')
  if top < 0x80:  # One byte each: masks, segment ids, labels, positions below 128.
    return values.astype(np.uint8, copy=False), None, np.full(num, width, np.int64)
  # A table lookup per value (np.take is far faster than arithmetic on every byte).
  table, keep = _varint_table(1 << max(8, top.bit_length()))
  planes = np.take(table, values, axis=0).reshape(num, -1)
  keep = np.take(keep, values, axis=0).reshape(num, -1)
  return planes, keep, keep.sum(axis=1, dtype=np.int64)


def _const(data, num):
  data = np.frombuffer(bytes(data), np.uint8)
  return np.broadcast_to(data, (num, data.size)), None, np.full(num, data.size, np.int64)


def _layout(parts):
  """Concatenates parts record by record: (flat uint8, record lengths).

  A part is (bytes [N, W] uint8, keep [N, W] bool or None for all, lengths [N]): record i's bytes
  of the part are bytes[i][keep[i]], so varints of different widths need no per-record work.
  """
  data = np.concatenate([p[0] for p in parts], axis=1)
  lens = sum(p[2] for p in parts)
  if all(p[1] is None for p in parts):
    return data.ravel(), lens
  keep = np.concatenate([np.ones(p[0].shape, bool) if p[1] is None else p[1] for p in parts],
                        axis=1)
  return data[keep], lens


def _message(tag, body, num):
  """Parts of a length-delimited field: tag byte, length varint, then the body's parts."""
  body_lens = sum(p[2] for p in body)
  return [_const([tag], num), _varints(body_lens[:, None])] + body


def encode_examples(features):
  """Serialized tf.train.Example bytes per record, for {name: [N, ...] int or float array}."""
  num = len(next(iter(features.values())))
  if num == 0:
    return []
  entries = []
  for name, values in features.items():
    values = np.asarray(values).reshape(num, -1)
    if values.shape[1] == 0:
      raise ValueError(f'feature {name!r} has no values; every feature needs a fixed length')
    if np.issubdtype(values.dtype, np.floating):
      payload = values.astype('<f4').view(np.uint8)
      value_list = _message(0x0A, [(payload, None, np.full(num, payload.shape[1], np.int64))],
                            num)
      feature = _message(0x12, value_list, num)  # Feature.float_list = 2.
    else:
      value_list = _message(0x0A, [_varints(values)], num)
      feature = _message(0x1A, value_list, num)  # Feature.int64_list = 3.
    key = name.encode('utf-8')
    entry = _message(0x0A, [_const(key, num)], num) + _message(0x12, feature, num)
    entries += _message(0x0A, entry, num)  # Features.feature (map entry) = 1.
  parts = _message(0x0A, entries, num)  # Example.features = 1.
  flat, lens = _layout(parts)
  data = flat.tobytes()
  ends = np.cumsum(lens).tolist()
  return [data[a:b] for a, b in zip([0] + ends[:-1], ends, strict=True)]

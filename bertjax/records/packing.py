"""Several pre-training instances in one row of max_seq_length (sequence packing).

A packed row keeps BERT's feature names with one change of meaning and two additions:
  input_mask             instance ids, 1, 2, ... per token (0 = padding), not 0/1;
  masked_lm_positions    offsets into the row (each instance's own positions + its start);
  instance_starts        [N] where each instance's [CLS] is (0 for an empty slot);
  next_sentence_labels   [N], one per instance, and next_sentence_weights [N] (0 = empty slot).
The model reads these as separate sequences (bertjax/model/encoder.py: attention inside an
instance, positions restarting at each, NSP at each [CLS]) and the loss counts instances, so
a packed batch trains like the same instances one per row, with the padding gone.
"""

import numpy as np


def instance_length(instance: dict) -> int:
  """Real tokens of an unpacked instance (its input_mask's ones)."""
  return int(np.sum(instance['input_mask']))


def first_fit(lengths, predictions, max_seq_length: int, max_predictions: int,
              max_instances: int, decreasing: bool = False) -> list[list[int]]:
  """Rows of instance indices, each filling at most max_seq_length tokens, max_predictions
  masked positions and max_instances instances: each instance goes to the first row with room.

  In input order, or with `decreasing` longest first (first-fit decreasing: the long instances
  of statically masked data leave gaps that the short ones fill). Within a row the indices are
  ascending, so packing is a pure function of its inputs.
  """
  lengths = np.asarray(lengths, np.int64)
  predictions = np.asarray(predictions, np.int64)
  if lengths.shape != predictions.shape:
    raise ValueError(f'{lengths.size} lengths but {predictions.size} prediction counts')
  too_big = np.flatnonzero((lengths > max_seq_length) | (predictions > max_predictions))
  if too_big.size:
    i = int(too_big[0])
    raise ValueError(f'instance {i} has {lengths[i]} tokens and {predictions[i]} predictions; a '
                     f'packed row holds {max_seq_length} and {max_predictions}.')
  order = np.argsort(-lengths, kind='stable') if decreasing else np.arange(lengths.size)
  # Room left per row (at most one row per instance), found with one vector test per instance.
  tokens = np.full(lengths.size, max_seq_length, np.int64)
  masks = np.full(lengths.size, max_predictions, np.int64)
  counts = np.zeros(lengths.size, np.int64)
  rows, used = [], 0
  for i in order.tolist():
    fits = np.flatnonzero((tokens[:used] >= lengths[i]) & (masks[:used] >= predictions[i])
                          & (counts[:used] < max_instances))
    r = int(fits[0]) if fits.size else used
    if r == used:
      rows.append([])
      used += 1
    rows[r].append(i)
    tokens[r] -= lengths[i]
    masks[r] -= predictions[i]
    counts[r] += 1
  return [sorted(row) for row in rows]


def pack_row(instances: list[dict], max_seq_length: int, max_predictions: int,
             max_instances: int, nsp: bool = True) -> dict:
  """One packed row of unpacked instances (numpy features of create_pretraining_data). Instances
  without masked_lm_* (unmasked, for dynamic masking) make a row without them."""
  masked = 'masked_lm_weights' in instances[0]
  row = {'input_ids': np.zeros(max_seq_length, np.int32),
         'input_mask': np.zeros(max_seq_length, np.int32),
         'segment_ids': np.zeros(max_seq_length, np.int32)}
  if masked:
    row |= {'masked_lm_positions': np.zeros(max_predictions, np.int32),
            'masked_lm_ids': np.zeros(max_predictions, np.int32),
            'masked_lm_weights': np.zeros(max_predictions, np.float32)}
  row['instance_starts'] = np.zeros(max_instances, np.int32)
  if nsp:
    row['next_sentence_labels'] = np.zeros(max_instances, np.int32)
    row['next_sentence_weights'] = np.zeros(max_instances, np.float32)
  start, pred = 0, 0
  for n, instance in enumerate(instances):
    length = instance_length(instance)
    end = start + length
    row['input_ids'][start:end] = instance['input_ids'][:length]
    row['input_mask'][start:end] = n + 1
    row['segment_ids'][start:end] = instance['segment_ids'][:length]
    if masked:
      weights = np.asarray(instance['masked_lm_weights'], np.float32)
      real = int(np.count_nonzero(weights))
      row['masked_lm_positions'][pred:pred + real] = (
          np.asarray(instance['masked_lm_positions'][:real]) + start)
      row['masked_lm_ids'][pred:pred + real] = instance['masked_lm_ids'][:real]
      row['masked_lm_weights'][pred:pred + real] = weights[:real]
      pred += real
    row['instance_starts'][n] = start
    if nsp:
      row['next_sentence_labels'][n] = np.asarray(instance['next_sentence_labels']).reshape(-1)[0]
      row['next_sentence_weights'][n] = 1.0
    start = end
  return row


def pack(instances: list[dict], max_seq_length: int, max_predictions: int, max_instances: int,
         nsp: bool = True, decreasing: bool = False) -> list[dict]:
  """Packed rows holding every instance exactly once (first fit, see first_fit)."""
  lengths = [instance_length(x) for x in instances]
  predictions = [int(np.count_nonzero(x['masked_lm_weights'])) if 'masked_lm_weights' in x
                 else 0 for x in instances]
  rows = first_fit(lengths, predictions, max_seq_length, max_predictions, max_instances,
                   decreasing)
  return [pack_row([instances[i] for i in row], max_seq_length, max_predictions, max_instances,
                   nsp) for row in rows]


def pack_arrays(batch: dict, max_instances: int) -> dict:
  """A batch of instances ({name: [n, ...]}, instances.py) as packed rows ({name: [rows, ...]}),
  first-fit decreasing within the batch, at the batch's lengths."""
  masked = 'masked_lm_weights' in batch
  lengths = np.count_nonzero(batch['input_mask'], axis=1)
  predictions = (np.count_nonzero(batch['masked_lm_weights'], axis=1) if masked
                 else np.zeros_like(lengths))
  max_seq_length = batch['input_ids'].shape[1]
  max_predictions = batch['masked_lm_weights'].shape[1] if masked else 0
  rows = first_fit(lengths, predictions, max_seq_length, max_predictions, max_instances,
                   decreasing=True)
  packed = [pack_row([{k: v[i] for k, v in batch.items()} for i in row], max_seq_length,
                     max_predictions, max_instances, nsp='next_sentence_labels' in batch)
            for row in rows]
  return {k: np.stack([r[k] for r in packed]) for k in packed[0]}


def unpack_row(row: dict, max_seq_length: int | None = None) -> list[dict]:
  """The instances of a packed row, one per row again (at max_seq_length, default the row's
  length): the inverse of pack_row, for inspecting packed files."""
  length = max_seq_length or len(row['input_ids'])
  ids = np.asarray(row['input_mask'])
  masked = 'masked_lm_weights' in row
  out = []
  for n, start in enumerate(np.asarray(row['instance_starts']).tolist()):
    size = int(np.sum(ids == n + 1))
    if not size:
      break
    instance = {}
    for name in ('input_ids', 'segment_ids'):
      instance[name] = np.zeros(length, np.int32)
      instance[name][:size] = row[name][start:start + size]
    instance['input_mask'] = (np.arange(length) < size).astype(np.int32)
    if masked:
      positions = np.asarray(row['masked_lm_positions'])
      mine = (np.asarray(row['masked_lm_weights']) > 0) & (positions >= start) & (
          positions < start + size)
      instance['masked_lm_positions'] = positions[mine] - start
      instance['masked_lm_ids'] = np.asarray(row['masked_lm_ids'])[mine]
    if 'next_sentence_labels' in row:
      instance['next_sentence_labels'] = int(row['next_sentence_labels'][n])
    out.append(instance)
  return out

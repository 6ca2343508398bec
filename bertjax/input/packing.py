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
              max_instances: int) -> list[list[int]]:
  """Rows of instance indices, each filling at most max_seq_length tokens, max_predictions
  masked positions and max_instances instances: each instance, in order, goes to the first row
  with room (order is kept within a row, so packing is deterministic)."""
  rows, room = [], []
  for i, (length, preds) in enumerate(zip(lengths, predictions, strict=True)):
    if length > max_seq_length or preds > max_predictions:
      raise ValueError(f'instance {i} has {length} tokens and {preds} predictions; a packed '
                       f'row holds {max_seq_length} and {max_predictions}.')
    for r, (tokens, masks, count) in enumerate(room):
      if tokens >= length and masks >= preds and count < max_instances:
        rows[r].append(i)
        room[r] = (tokens - length, masks - preds, count + 1)
        break
    else:
      rows.append([i])
      room.append((max_seq_length - length, max_predictions - preds, 1))
  return rows


def pack_row(instances: list[dict], max_seq_length: int, max_predictions: int,
             max_instances: int, nsp: bool = True) -> dict:
  """One packed row of unpacked instances (numpy features of create_pretraining_data)."""
  row = {'input_ids': np.zeros(max_seq_length, np.int32),
         'input_mask': np.zeros(max_seq_length, np.int32),
         'segment_ids': np.zeros(max_seq_length, np.int32),
         'masked_lm_positions': np.zeros(max_predictions, np.int32),
         'masked_lm_ids': np.zeros(max_predictions, np.int32),
         'masked_lm_weights': np.zeros(max_predictions, np.float32),
         'instance_starts': np.zeros(max_instances, np.int32)}
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
    weights = np.asarray(instance['masked_lm_weights'], np.float32)
    real = int(np.count_nonzero(weights))
    row['masked_lm_positions'][pred:pred + real] = (
        np.asarray(instance['masked_lm_positions'][:real]) + start)
    row['masked_lm_ids'][pred:pred + real] = instance['masked_lm_ids'][:real]
    row['masked_lm_weights'][pred:pred + real] = weights[:real]
    row['instance_starts'][n] = start
    if nsp:
      row['next_sentence_labels'][n] = np.asarray(instance['next_sentence_labels']).reshape(-1)[0]
      row['next_sentence_weights'][n] = 1.0
    start, pred = end, pred + real
  return row


def pack(instances: list[dict], max_seq_length: int, max_predictions: int, max_instances: int,
         nsp: bool = True) -> list[dict]:
  """Packed rows holding every instance exactly once (first fit, in order)."""
  lengths = [instance_length(x) for x in instances]
  predictions = [int(np.count_nonzero(x['masked_lm_weights'])) for x in instances]
  rows = first_fit(lengths, predictions, max_seq_length, max_predictions, max_instances)
  return [pack_row([instances[i] for i in row], max_seq_length, max_predictions, max_instances,
                   nsp) for row in rows]


def padding_fraction(rows: list[dict]) -> float:
  """Share of the rows' token slots that are padding."""
  mask = np.stack([r['input_mask'] for r in rows])
  return float(np.mean(mask == 0))

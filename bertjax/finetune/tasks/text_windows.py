"""Long single texts as several windows of max_seq_length, their logits averaged per text.

BBC News articles run past 512 wordpieces; classifying every window and averaging lets a
model read more of each article than BERT's one truncated window.
"""

from absl import logging
import numpy as np


def windowed_features(examples, tokenizer, max_seq_length, labels, *, stride, max_windows):
  """Features for long single texts: up to `max_windows` windows of the text, one row each.

  A window is [CLS] + max_seq_length - 2 consecutive wordpieces + [SEP]; windows start
  `stride` pieces apart (stride = max_seq_length - 2: back to back, no overlap). Every row
  carries its example's label and `example_index`; at eval the rows' logits are averaged per
  example (`example_logits`), so a model reads up to max_windows x the one-window length of
  each article. max_windows=1 is BERT's single truncated window.
  """
  if max_seq_length < 3 or stride < 1 or max_windows < 1:
    raise ValueError(f'max_seq_length={max_seq_length}, stride={stride}, max_windows='
                     f'{max_windows}: need max_seq_length >= 3 and stride, max_windows >= 1.')
  width = max_seq_length - 2
  label_index = {label: index for index, label in enumerate(labels)}
  rows = []  # (example index, pieces, label id)
  for index, example in enumerate(examples):
    pieces = tokenizer.tokenize(example.text_a)
    if example.label is not None and example.label not in label_index:
      raise ValueError(f'example {example.guid!r} has label {example.label!r}, not one of '
                       f'{labels}')
    label = label_index.get(example.label, 0)
    last = max(len(pieces) - width, 0)
    starts = list(range(0, last + 1, stride))
    if starts[-1] < last:  # The text's tail, when the stride does not land on it.
      starts.append(starts[-1] + stride)
    for start in starts[:max_windows]:
      rows.append((index, pieces[start:start + width], label))
  n = len(rows)
  features = {'input_ids': np.zeros((n, max_seq_length), np.int32),
              'input_mask': np.zeros((n, max_seq_length), np.int32),
              'segment_ids': np.zeros((n, max_seq_length), np.int32),
              'label': np.zeros(n, np.int32), 'example_index': np.zeros(n, np.int32)}
  for row, (index, pieces, label) in enumerate(rows):
    ids = tokenizer.convert_tokens_to_ids(['[CLS]', *pieces, '[SEP]'])
    features['input_ids'][row, :len(ids)] = ids
    features['input_mask'][row, :len(ids)] = 1
    features['label'][row] = label
    features['example_index'][row] = index
  logging.info('%d examples -> %d windows of %d tokens (stride %d, at most %d per example)',
               len(examples), n, max_seq_length, stride, max_windows)
  return features


def example_logits(logits_NxC, example_index_N, num_examples):
  """Per-example mean of its windows' logits: [num_examples, C]."""
  sums = np.zeros((num_examples, logits_NxC.shape[-1]), np.float64)
  np.add.at(sums, example_index_N, logits_NxC)
  counts = np.bincount(example_index_N, minlength=num_examples)
  if (counts == 0).any():
    raise ValueError(f'{int((counts == 0).sum())} examples have no window.')
  return (sums / counts[:, None]).astype(np.float32)

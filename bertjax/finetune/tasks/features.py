"""BERT's sequence-level features: one text or a pair as [CLS] a [SEP] (b [SEP]) ids and labels.

Exactly google-research/bert's run_classifier.py (longest-first pair truncation, ties cut from
b), so checkpoints fine-tuned here and there see the same inputs.
"""

from absl import logging
import numpy as np


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Cuts the longer of two token lists (b on ties) one token at a time to a total length.

  Exactly run_classifier.py's rule. transformers' tokenizers-backed longest_first differs when
  the cut leaves the two within one token at an odd total: it gives the spare token to the
  input that was longer, this rule to a.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def encode(examples, tokenizer, max_seq_length, name: str, labels, *,
           regression: bool = False) -> dict[str, np.ndarray]:
  """Model inputs, one row per example: [CLS] a [SEP] (b [SEP]), padded with 0; `label` is the
  index of example.label in `labels` (its float value for regression). `name` is for messages."""
  if max_seq_length < 3:
    raise ValueError(f'max_seq_length={max_seq_length} leaves no room for text after [CLS] '
                     'and [SEP]: use 128 (the BERT paper\'s GLUE setting)')
  num = len(examples)
  input_ids_NxL = np.zeros((num, max_seq_length), np.int32)
  input_mask_NxL = np.zeros((num, max_seq_length), np.int32)
  segment_ids_NxL = np.zeros((num, max_seq_length), np.int32)
  label_dtype = np.float32 if regression else np.int32
  label_N = np.zeros(num, label_dtype)
  label_index = {label: index for index, label in enumerate(labels)}
  num_truncated = 0
  for row, example in enumerate(examples):
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b is not None else None
    length = len(tokens_a) + len(tokens_b or ())
    if tokens_b is not None:
      truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
      del tokens_a[max_seq_length - 2:]
    num_truncated += length > len(tokens_a) + len(tokens_b or ())
    tokens = ['[CLS]'] + tokens_a + ['[SEP]']
    segments = [0] * len(tokens)
    if tokens_b is not None:
      tokens += tokens_b + ['[SEP]']
      segments += [1] * (len(tokens_b) + 1)
    input_ids_NxL[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    input_mask_NxL[row, :len(tokens)] = 1
    segment_ids_NxL[row, :len(tokens)] = segments
    if example.label is None:
      continue
    if regression:
      label_N[row] = float(example.label)
    elif example.label in label_index:
      label_N[row] = label_index[example.label]
    else:
      raise ValueError(f'example {example.guid!r} has label {example.label!r}, not one of '
                       f'{name}\'s {tuple(labels)}')
  if num_truncated:
    logging.info('%s: %d of %d examples truncated to max_seq_length=%d', name,
                 num_truncated, num, max_seq_length)
  return {'input_ids': input_ids_NxL, 'input_mask': input_mask_NxL,
          'segment_ids': segment_ids_NxL, 'example_index': np.arange(num, dtype=np.int32),
          'label': label_N}

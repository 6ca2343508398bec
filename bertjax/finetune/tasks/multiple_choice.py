"""Multiple choice (the BERT paper's SWAG setup): one [CLS] context [SEP] choice [SEP] per choice.

Features are [N, C, L]: question n's C choices side by side, each the pair (context, choice)
cut longest-first as run_classifier.py cuts pairs, so the head can score the C rows and take
the softmax over them (model/heads.BertForMultipleChoice).
"""

import json
import os

from absl import logging
import numpy as np

from bertjax import files
from bertjax.finetune import metrics
from bertjax.finetune.tasks import features as features_lib
from bertjax.training import kinds as kind_table


def convert(questions, tokenizer, max_seq_length) -> dict[str, np.ndarray]:
  """Model inputs [N, C, L] and `label` [N] (0 for unlabelled questions)."""
  if max_seq_length < 4:
    raise ValueError(f'max_seq_length={max_seq_length} leaves no room for a context and a '
                     'choice after [CLS] and two [SEP]: use 128 (the BERT paper\'s SWAG setting)')
  num = len(questions)
  num_choices = len(questions[0].choices) if questions else 0
  shape = (num, num_choices, max_seq_length)
  input_ids, input_mask, segment_ids = (np.zeros(shape, np.int32) for _ in range(3))
  num_truncated = 0
  for row, question in enumerate(questions):
    if len(question.choices) != num_choices:
      raise ValueError(f'{question.guid}: {len(question.choices)} choices, but '
                       f'{questions[0].guid} has {num_choices}: every question needs the same '
                       'number of choices.')
    context = tokenizer.tokenize(question.context)
    for c, choice in enumerate(question.choices):
      tokens_a, tokens_b = list(context), tokenizer.tokenize(choice)
      length = len(tokens_a) + len(tokens_b)
      features_lib.truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
      num_truncated += length > len(tokens_a) + len(tokens_b)
      tokens = ['[CLS]'] + tokens_a + ['[SEP]'] + tokens_b + ['[SEP]']
      input_ids[row, c, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
      input_mask[row, c, :len(tokens)] = 1
      segment_ids[row, c, len(tokens_a) + 2:len(tokens)] = 1
  if num_truncated:  # As features.encode says it of other pairs.
    logging.info('multiple choice: %d of %d (context, choice) pairs truncated to '
                 'max_seq_length=%d', num_truncated, num * num_choices, max_seq_length)
  label = np.array([q.label if q.label is not None else 0 for q in questions], np.int32)
  return {'input_ids': input_ids, 'input_mask': input_mask, 'segment_ids': segment_ids,
          'example_index': np.arange(num, dtype=np.int32), 'label': label}


def evaluate(logits_NxC, questions) -> dict[str, float]:
  gold = np.array([q.label for q in questions])
  return {'accuracy': metrics.accuracy(np.argmax(logits_NxC, -1), gold)}


def write_predictions(path, logits_NxC, questions) -> str:
  """JSON lines: guid, the chosen index, the probabilities of the choices (and `gold`, the gold
  choice, as classification's rows name theirs), written whole or not at all to `path` (a local
  path or a URL)."""
  predictions = kind_table.get('multiple_choice').predictions((), logits_NxC, logits=False,
                                                             digits=6)
  rows = []
  for question, prediction in zip(questions, predictions, strict=True):
    row = {'guid': question.guid, **prediction}
    if question.label is not None:
      row['gold'] = question.label
    rows.append(json.dumps(row) + '\n')
  files.write_atomically(os.fspath(path), ''.join(rows))
  return os.fspath(path)

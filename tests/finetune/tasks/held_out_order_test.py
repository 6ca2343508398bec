"""The examples held out of a training file (no eval file) come back in the file's order: a
tagging run's `word gold pred` lines carry no row name, so their order is how a user finds
each sentence in the file."""

import json

import ml_collections

from bertjax.finetune.tasks import registry
from configs import finetune as finetune_config


def _data(task, **fields):
  data = ml_collections.ConfigDict(finetune_config.get_config(f'task={task}').data.to_dict())
  for name, value in fields.items():
    setattr(data, name, value)
  return data


def test_held_out_tagging_sentences_in_file_order(tmp_path):
  train = tmp_path / 'train.jsonl'
  rows = [{'tokens': [f'word{i}', 'x'], 'tags': ['B-A' if i % 3 else 'O', 'O']} for i in range(40)]
  train.write_text(''.join(json.dumps(r) + '\n' for r in rows))
  task = registry.get_task('tagging', _data('tagging', train_file=str(train), eval_fraction=0.3))
  trained = task.read('train')[0]
  held_out = task.read('validation')[0]
  numbers = [int(s.words[0][len('word'):]) for s in held_out]
  assert len(held_out) == 12 and numbers == sorted(numbers), numbers
  # Still the seeded split: a sample of the file, none of it trained on.
  assert numbers != list(range(12))
  assert not {s.words for s in held_out} & {s.words for s in trained}
  # max_eval_examples samples the split first, then orders the sample.
  task = registry.get_task('tagging', _data('tagging', train_file=str(train), eval_fraction=0.3,
                                            max_eval_examples=5))
  sample = [int(s.words[0][len('word'):]) for s in task.read('validation')[0]]
  assert sample == sorted(sample) and set(sample) <= set(numbers) and len(sample) == 5


def test_held_out_classification_rows_in_file_order(tmp_path):
  train = tmp_path / 'train.csv'
  train.write_text('text,label\n' + ''.join(f'text {i},{"ab"[i % 2]}\n' for i in range(30)))
  task = registry.get_task('classification', _data('classification', train_file=str(train)))
  lines = [int(e.guid.rpartition(':')[2]) for e in task.read('validation')[0]]
  assert len(lines) == 6 and lines == sorted(lines), lines

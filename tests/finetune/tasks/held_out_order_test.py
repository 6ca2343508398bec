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


def test_the_digest_of_the_held_out_texts_ignores_the_cut_and_follows_the_draw(tmp_path):
  """mode=eval compares it with the run's (run_data.check_held_out): a run trained with
  max_eval_examples=N and scored whole was not checked (session 56's leftover)."""
  train = tmp_path / 'train.jsonl'
  rows = [{'tokens': [f'word{i}', 'x'], 'tags': ['B-A' if i % 3 else 'O', 'O']} for i in range(40)]
  train.write_text(''.join(json.dumps(r) + '\n' for r in rows))
  bbc = tmp_path / 'bbc'
  for topic in ('business', 'entertainment', 'politics', 'sports', 'tech'):
    (bbc / topic).mkdir(parents=True)
    for i in range(6):
      (bbc / topic / f'{i:03d}.txt').write_text(f'{topic} {i} title\n\n{topic} story {i} z{i}.\n')

  def digest(task, seed=0, **fields):
    data = _data(task, **({'data_dir': str(bbc)} if task == 'bbc' else
                          {'train_file': str(train), 'eval_fraction': 0.3}), **fields)
    made = registry.get_task(task, data, seed)
    made.read('validation')
    return made.held_out()

  for task in ('tagging', 'bbc'):
    whole = digest(task)
    assert len(whole) == 64, task
    assert digest(task, max_eval_examples=2) == whole, task  # However many are scored.
    assert digest(task, seed=1) != whole, task  # Another draw.
  assert registry.get_task('tagging', _data('tagging', train_file=str(train),
                                            eval_file=str(train))).held_out() is None

"""The conll2003 preset on the files a user brings (hostile pass of 2026-12-01): a file to predict
without a tag column was refused (the README promises `word pred` lines for one), and a dev tag
outside the nine was said to be missing from 'the training data'."""

import pytest

from bertjax.finetune.tasks import registry
from configs import finetune as finetune_config

TRAIN = '-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP I-PER\n'


def _data(data_dir, **fields):
  data = finetune_config.get_config('task=conll2003').data
  data.data_dir = str(data_dir)
  for key, value in fields.items():
    data[key] = value
  return data


def test_a_file_to_predict_needs_no_tag_column(tmp_path):
  (tmp_path / 'mine.txt').write_text('Peter\nlives\n\nU.N.\n')
  task = registry.get_task('conll2003', _data(tmp_path, predict_file=str(tmp_path / 'mine.txt')))
  sentences, _ = task.read('test')
  assert [(s.words, s.tags) for s in sentences] == [(('Peter', 'lives'), (None, None)),
                                                    (('U.N.',), (None,))]


def test_a_dev_tag_outside_the_presets_is_said_as_the_presets(tmp_path):
  (tmp_path / 'train.txt').write_text(TRAIN)
  (tmp_path / 'valid.txt').write_text('EU NNP B-NP S-ORG\n')
  task = registry.get_task('conll2003', _data(tmp_path))
  with pytest.raises(ValueError, match=r"valid.txt:1 \(word 1, 'EU'\): validation tag 'S-ORG' "
                     r"is not one of conll2003's tags \['O', 'B-PER', .*\]: fix it, or fine-tune "
                     r'with task=tagging, which takes the tags its training file has\.$'):
    task.read('validation')


def test_the_shared_tasks_own_file_names_are_read_and_a_missing_file_is_named(tmp_path):
  """eng.train/eng.testa/eng.testb were 'train.txt does not exist: check config.data.train_file',
  and config.data.train_file is refused for the preset."""
  (tmp_path / 'eng.train').write_text(TRAIN)
  (tmp_path / 'eng.testa').write_text('EU NNP B-NP I-ORG\n')
  task = registry.get_task('conll2003', _data(tmp_path))
  assert [s.words for s in task.read('train')[0]] == [('EU', 'rejects'), ('Peter',)]
  assert [s.tags for s in task.read('validation')[0]] == [('I-ORG',)]
  with pytest.raises(FileNotFoundError, match=rf'^config.data.data_dir={tmp_path} has no test.txt '
                     r'or eng.testb: task=conll2003 reads train.txt, valid.txt and test.txt there '
                     r"\(or the shared task's eng.train, eng.testa and eng.testb\), and "
                     r'config.data.predict_file instead of the test file\.$'):
    task.read('test')
  (tmp_path / 'train.txt').write_text('Peter NNP B-NP I-PER\n')  # Both: the usual name first.
  assert [s.words for s in task.read('train')[0]] == [('Peter',)]

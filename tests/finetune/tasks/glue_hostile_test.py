"""GLUE pass B: MNLI's predict_file was read as both test splits (the mismatched ids written as
MNLI-m.tsv too); use_tfds ignored predict_file; AX.tsv (GLUE's diagnostic set) could not be
written; messages named a Python argument, blamed an empty file for rows all skipped, read rows
with an extra column silently, and called a gzipped file an encoding problem."""

import gzip

import glue_files
import numpy as np
import pytest

from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import glue_readers
from bertjax.finetune.tasks import registry
from configs import finetune as finetune_config

Ex = glue.Example
MNLI_EXPECTED = glue_files.GLUE_FILES['mnli'][2]


def _task(name, **data):
  config = finetune_config.get_config(f'task={name}').data
  config.update(data)
  return registry.get_task(name, config)


class _Warnings:
  def __init__(self):
    self.lines = []

  def warning(self, message, *args):
    self.lines.append(message % args)


@pytest.fixture
def warnings(monkeypatch):
  recorded = _Warnings()
  monkeypatch.setattr(glue_readers, 'logging', recorded)
  return recorded


@pytest.mark.parametrize('file_name, split, written', [
    ('test_matched.tsv', 'test_matched', 'MNLI-m.tsv'),
    ('test_mismatched.tsv', 'test_mismatched', 'MNLI-mm.tsv'),
    ('diagnostic.tsv', 'test_ax', 'AX.tsv'),
])
def test_an_mnli_predict_file_is_the_one_split_its_glue_name_says(tmp_path, file_name, split,
                                                                   written):
  """It was read as every test split and written as MNLI-m.tsv and MNLI-mm.tsv alike."""
  root = glue_files.write_glue(tmp_path / 'glue', ['mnli'])
  source = {'test_ax': root / 'diagnostic'}.get(split, root / 'MNLI') / file_name
  mine = tmp_path / 'mine' / file_name
  mine.parent.mkdir()
  mine.write_bytes(source.read_bytes())
  task = _task('mnli', data_dir=str(tmp_path / 'elsewhere'), predict_file=str(mine))
  assert tuple(task.test_splits) == (split,)
  examples, _ = task.read(split)
  assert examples == MNLI_EXPECTED[split]
  logits = np.eye(3)[np.arange(len(examples)) % 3]
  path = task.write_predictions(logits, None, None, examples, split, str(tmp_path / 'out'))
  assert path.endswith(written)


def test_an_mnli_predict_file_of_another_name_is_refused_before_reading(tmp_path):
  with pytest.raises(ValueError, match=(
      r'^config.data.predict_file=\S+/mnli_test.tsv: GLUE mnli has 3 test files, told apart by '
      r'their GLUE names: test_matched.tsv \(written as MNLI-m.tsv\), test_mismatched.tsv '
      r'\(written as MNLI-mm.tsv\), diagnostic.tsv \(written as AX.tsv\); name the file so, or '
      r'leave predict_file out to predict them all from config.data.data_dir$')):
    # Refused when mode=predict asks for the test splits, not as the task is built for
    # training, eval or export (a run's recorded predict_file must not stop those).
    task = _task('mnli', predict_file=str(tmp_path / 'mnli_test.tsv'))  # Need not exist.
    assert repr(task.test_splits) == '<test splits, when asked>'
    tuple(task.test_splits)
  # A task with one test split reads a file of any name as it.
  assert tuple(_task('rte', predict_file='/x/mine.tsv').test_splits) == ('test',)


def test_use_tfds_reads_the_predict_file(tmp_path):
  """TFDS's test split was read instead (and the folder named after the user's file)."""
  (tmp_path / 'mine.tsv').write_text('index\tsentence1\tsentence2\n7\tA b.\tC d.\n')
  task = _task('rte', use_tfds=True, data_dir=str(tmp_path / 'tfds'),
               predict_file=str(tmp_path / 'mine.tsv'))
  examples, _ = task.read('test')
  assert examples == [Ex('7', 'A b.', 'C d.', None)]


@pytest.mark.parametrize('where', ['root', 'MNLI', 'beside'])
def test_mnli_predicts_ax_from_glues_diagnostic_file(tmp_path, where, warnings):
  root = glue_files.write_glue(tmp_path, ['mnli'])
  data_dir = root if where == 'root' else root / 'MNLI'
  if where == 'beside':  # A copy beside MNLI's own files.
    (root / 'diagnostic' / 'diagnostic.tsv').rename(root / 'MNLI' / 'diagnostic.tsv')
  task = _task('mnli', data_dir=str(data_dir))
  assert tuple(task.test_splits) == ('test_matched', 'test_mismatched', 'test_ax')
  assert task.read('test_ax')[0] == glue_files.AX_EXAMPLES
  logits = np.array([[0.1, 3.0, 0.2], [2.0, 0.0, 0.0]])  # entailment, contradiction.
  path = glue.write_predictions('mnli', 'test_ax', logits, glue_files.AX_EXAMPLES, tmp_path)
  assert path.endswith('/AX.tsv')
  assert open(path).read() == 'index\tprediction\n0\tentailment\n1\tcontradiction\n'
  assert not warnings.lines


def test_without_the_diagnostic_file_ax_is_left_out_with_one_warning(tmp_path, warnings):
  root = glue_files.write_glue(tmp_path, ['mnli'])
  (root / 'diagnostic' / 'diagnostic.tsv').unlink()
  task = _task('mnli', data_dir=str(root / 'MNLI'))
  assert not warnings.lines  # Building the task (training, export) looks for nothing.
  assert tuple(task.test_splits) == ('test_matched', 'test_mismatched')
  assert len(task.test_splits) == 2 and list(task.test_splits) == ['test_matched',
                                                                    'test_mismatched']
  (line,) = warnings.lines
  assert line == (
      "GLUE mnli: no diagnostic set, so AX.tsv (the leaderboard's AX, predicted by the MNLI "
      "model) is not written; put GLUE's diagnostic/diagnostic.tsv (download_glue_data.py) at "
      f'{root}/MNLI/diagnostic/diagnostic.tsv (data_dir: the GLUE root) or '
      f'{root}/diagnostic/diagnostic.tsv (data_dir: its MNLI folder) to write it')
  assert task.test_splits == ('test_matched', 'test_mismatched')  # Compared as a tuple.
  with pytest.raises(FileNotFoundError, match=r'mnli test_ax: no diagnostic.tsv at .*: put '
                                               r'diagnostic/diagnostic.tsv of the GLUE download'):
    glue_readers.read_examples('mnli', root / 'MNLI', 'test_ax')


def test_tfds_ax_is_glue_ax_and_left_out_with_a_warning_when_unprepared(tmp_path, warnings):
  task = _task('mnli', use_tfds=True, data_dir=str(tmp_path))
  assert tuple(task.test_splits) == ('test_matched', 'test_mismatched')
  (line,) = warnings.lines
  assert line.startswith('GLUE mnli: no diagnostic set, so AX.tsv ') and line.endswith(
      f'prepare TFDS glue/ax in {tmp_path}/glue/ax/2.0.0 (`tfds build glue/ax --data_dir DIR`) '
      'to write it')
  glue_files.write_tfds(tmp_path, 'glue/ax', '2.0.0', {'test': [
      {'premise': 'P one.', 'hypothesis': 'H one.', 'label': -1, 'idx': 1},
      {'premise': 'P zero.', 'hypothesis': 'H zero.', 'label': -1, 'idx': 0}]})
  task = _task('mnli', use_tfds=True, data_dir=str(tmp_path))
  assert tuple(task.test_splits) == ('test_matched', 'test_mismatched', 'test_ax')
  assert task.read('test_ax')[0] == [Ex('0', 'P zero.', 'H zero.', None),
                                      Ex('1', 'P one.', 'H one.', None)]
  assert len(warnings.lines) == 1


def test_a_malformed_dev_row_says_what_a_command_line_user_does(tmp_path):
  glue_files.write_glue(tmp_path, ['qnli'])
  (tmp_path / 'QNLI' / 'dev.tsv').write_text('index\tquestion\tsentence\tlabel\n0\tWhat?\n')
  with pytest.raises(ValueError) as raised:
    glue_readers.read_examples('qnli', tmp_path, 'validation')
  assert str(raised.value).endswith(
      'dev.tsv:2: 2 columns where GLUE qnli validation rows have 4: fix or remove the line '
      '(only the training split skips such rows, counting them)')
  assert 'skip_malformed' not in str(raised.value)


def test_an_export_whose_rows_are_all_skipped_is_said_to_be_one(tmp_path):
  """A headerless HF/TFDS CoLA export (`sentence label idx`) was called empty."""
  (tmp_path / 'train.tsv').write_text('It rained.\t1\t0\nThey drank the pub.\t0\t1\n')
  with pytest.raises(ValueError, match=(
      r"train.tsv: all 2 rows have fewer columns than GLUE cola train's 4: is this GLUE's own "
      r'CoLA file \(the GLUE download\), not an export\?$')):
    glue_readers.read_examples('cola', tmp_path, 'train')
  (tmp_path / 'train.tsv').write_text('sentence\tlabel\nGood . \t1\tpositive\n')
  with pytest.raises(ValueError, match=r"all 1 rows have more columns than its header's 2"):
    glue_readers.read_examples('sst2', tmp_path, 'train')
  (tmp_path / 'train.tsv').write_text('sentence\tlabel\nGood . \t1\t\t\n')  # Trailing tabs.
  assert glue_readers.read_examples('sst2', tmp_path, 'train')[0] == [Ex('0', 'Good . ', None,
                                                                          '1')]


def test_a_row_with_more_columns_than_its_header_is_malformed(tmp_path):
  """It was read with a field dropped: text_b 'She said hi', 'hello there' lost."""
  glue_files.write_glue(tmp_path, ['mrpc'])
  head = 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
  (tmp_path / 'MRPC' / 'dev.tsv').write_text(head + '1\t1\t2\tHe said\thello there\tShe said hi\n')
  with pytest.raises(ValueError, match=r'dev.tsv:2: 6 columns where GLUE mrpc validation rows '
                                       r'have 5 \(a tab inside a text\?\): fix or remove'):
    glue_readers.read_examples('mrpc', tmp_path, 'validation')
  train = tmp_path / 'MRPC' / 'train.tsv'
  train.write_text(train.read_text() + '1\t1\t2\tHe said\thello there\tShe said hi\n')
  examples, skips = glue_readers.read_examples('mrpc', tmp_path, 'train')
  assert examples == glue_files.GLUE_FILES['mrpc'][2]['train']
  assert skips == {'too many columns': 1}
  (tmp_path / 'train.tsv').write_text('gj04\t1\t\tA\tB.\n')  # CoLA has exactly 4.
  with pytest.raises(ValueError, match='all 1 rows have more columns than GLUE cola train'):
    glue_readers.read_examples('cola', tmp_path, 'train')


def test_a_gzipped_file_is_read_decompressed(tmp_path):
  """As the corpus tools read one (it was refused, told to be gunzipped); cut short, said."""
  glue_files.write_glue(tmp_path, ['rte'])
  dev = tmp_path / 'RTE' / 'dev.tsv'
  plain = glue_readers.read_examples('rte', tmp_path, 'validation')
  dev.write_bytes(gzip.compress(dev.read_bytes()))
  assert glue_readers.read_examples('rte', tmp_path, 'validation') == plain
  dev.write_bytes(dev.read_bytes()[:30])
  with pytest.raises(ValueError, match=rf'^{dev} cannot be read whole'):
    glue_readers.read_examples('rte', tmp_path, 'validation')

"""GLUE readers on hand-written files in each task's real layout, features, scores, submissions."""

import os

import glue_files
import numpy as np
import pytest

from bertjax.finetune import metrics
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import glue_readers
from bertjax.text import tokenizer

Ex = glue.Example
GLUE_FILES = glue_files.GLUE_FILES
write_glue = glue_files.write_glue


@pytest.fixture
def full_tokenizer(minilm_dir):
  return tokenizer.FullTokenizer(minilm_dir / 'vocab.txt', do_lower_case=True)


def test_task_table():
  assert list(glue.TASKS) == ['cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli', 'rte', 'wnli']
  main = {name: task.metrics[0] for name, task in glue.TASKS.items()}
  assert main == {'cola': 'mcc', 'sst2': 'accuracy', 'mrpc': 'f1', 'stsb': 'pearson',
                  'qqp': 'f1', 'mnli': 'accuracy', 'qnli': 'accuracy', 'rte': 'accuracy',
                  'wnli': 'accuracy'}
  mnli = glue.get_task('MNLI')
  assert mnli.eval_splits == ('validation_matched', 'validation_mismatched')
  assert dict(mnli.submission_files) == {'test_matched': 'MNLI-m.tsv',
                                         'test_mismatched': 'MNLI-mm.tsv', 'test_ax': 'AX.tsv'}
  assert glue.get_task('sts-b').kind == 'regression' and glue.get_task('stsb').labels == ()
  assert glue.get_task('cola').submission_files['test'] == 'CoLA.tsv'
  with pytest.raises(ValueError, match='unknown GLUE task .*valid tasks are cola, sst2'):
    glue.get_task('squad')


@pytest.mark.parametrize('name', list(GLUE_FILES))
def test_reads_every_split_in_its_real_layout(tmp_path, name):
  write_glue(tmp_path, [name])
  task = glue.get_task(name)
  _, _, expected = GLUE_FILES[name]
  assert set(expected) == set(task.files)
  for split, want in expected.items():
    # data_dir may be the task's folder or the GLUE root holding it.
    for data_dir in (tmp_path / task.glue_dir, tmp_path):
      examples, skips = glue_readers.read_examples(name, data_dir, split)
      assert examples == want, split
      assert skips == ({'too few columns': 1} if (name, split) == ('qqp', 'train') else {})


def test_malformed_rows_skip_in_train_and_fail_elsewhere(tmp_path):
  write_glue(tmp_path, ['qqp'])
  dev = tmp_path / 'QQP' / 'dev.tsv'
  dev.write_text(dev.read_text() + '\n\tstray half row\t1\n4\t5\t6\tA?\tB?\t1\n')
  with pytest.raises(ValueError, match=r'dev.tsv:4: 3 columns where GLUE qqp validation rows '
                                       r'have 6: fix or remove the line \(only the training '
                                       r'split skips such rows, counting them\)$'):
    glue_readers.read_examples('qqp', tmp_path, 'validation')
  examples, skips = glue_readers.read_examples('qqp', tmp_path, 'validation', skip_malformed=True)
  assert [e.guid for e in examples] == ['201359', '4']
  assert skips == {'too few columns': 1, 'blank line': 1}


@pytest.mark.parametrize('content, message', [
    ('index\tquestion\tlabel\n0\tWho?\tentailment\n',
     r'train.tsv:1: header has columns .*\(missing \[\'sentence\'\]\)'),
    ('index\tquestion\tsentence\tlabel\n0\tWho?\tHim.\tentailment\n1\tA?\tB.\tcontradiction\n',
     r'train.tsv:3: label \'contradiction\' is not a GLUE qnli label'),
    ('', r'train.tsv: no examples in the file'),
    ('index\tquestion\tsentence\tlabel\n', r'train.tsv: no examples in the file'),
])
def test_bad_files_fail_with_file_and_line(tmp_path, content, message):
  (tmp_path / 'train.tsv').write_text(content)
  with pytest.raises(ValueError, match=message):
    glue_readers.read_examples('qnli', tmp_path, 'train')


def test_bad_score_missing_file_and_unknown_split(tmp_path):
  (tmp_path / 'dev.tsv').write_text(
      f'{glue_files.STSB_COLS}\tscore\n0\tg\tf\ty\to\ts\ts\tA.\tB.\thigh\n')
  with pytest.raises(ValueError, match=r'dev.tsv:2: STS-B score \'high\' is not a number'):
    glue_readers.read_examples('stsb', tmp_path, 'validation')
  with pytest.raises(FileNotFoundError, match=r'test.tsv does not exist.*STS-B/test.tsv'):
    glue_readers.read_examples('stsb', tmp_path, 'test')
  with pytest.raises(ValueError, match='no split .validation.: valid splits are train, '
                                       'validation_matched'):
    glue_readers.read_examples('mnli', tmp_path, 'validation')


def _pieces(tok, features, row):
  length = int(features['input_mask'][row].sum())
  return tok.convert_ids_to_tokens(features['input_ids'][row, :length].tolist())


def test_pair_truncation_token_by_token(full_tokenizer):
  # a = 7 pieces, b = 8; max_seq_length 12 leaves 9. Cutting the longer one, b on ties:
  # (7,8) -> (7,7) -> (7,6) -> (6,6) -> (6,5) -> (5,5) -> (5,4).
  examples = [Ex('0', 'The cat sat on the mat.', 'A dog ran in the park today!', '1')]
  features = glue.convert_examples(examples, full_tokenizer, 12, 'mrpc')
  assert _pieces(full_tokenizer, features, 0) == [
      '[CLS]', 'the', 'cat', 'sat', 'on', 'the', '[SEP]', 'a', 'dog', 'ran', 'in', '[SEP]']
  np.testing.assert_array_equal(features['segment_ids'][0], [0] * 7 + [1] * 5)
  np.testing.assert_array_equal(features['input_mask'][0], [1] * 12)
  assert features['input_ids'][0, 0] == 101 and features['input_ids'][0, -1] == 102
  assert features['label'].tolist() == [1] and features['example_index'].tolist() == [0]
  for key in ('input_ids', 'input_mask', 'segment_ids', 'example_index', 'label'):
    assert features[key].dtype == np.int32, key


def test_truncated_pairs_are_counted_for_glue_and_multiple_choice(full_tokenizer, monkeypatch):
  """A user's long inputs are cut as the original cuts them; how many is said (at INFO: shown
  by the console, which carries bertjax's lines), for single texts, pairs and choices. The
  modules' own `logging` is recorded: whatever verbosity and handlers earlier tests of this
  process left on absl's logger."""
  from bertjax.finetune.tasks import features  # pylint: disable=g-import-not-at-top
  from bertjax.finetune.tasks import multiple_choice  # pylint: disable=g-import-not-at-top
  from bertjax.finetune.tasks import user_data  # pylint: disable=g-import-not-at-top
  lines = []

  class Recorded:
    def info(self, message, *args):
      lines.append(message % args)

  monkeypatch.setattr(features, 'logging', Recorded())
  monkeypatch.setattr(multiple_choice, 'logging', Recorded())
  examples = [Ex('0', 'The cat sat on the mat.', 'A dog ran in the park today!', '1'),
              Ex('1', 'The cat', 'ran', '1')]
  glue.convert_examples(examples, full_tokenizer, 12, 'mrpc')
  question = user_data.Choices('q', 'The cat sat on the mat.', ('A dog ran', 'ok'), 0)
  multiple_choice.convert([question], full_tokenizer, 11)
  assert lines == ['GLUE mrpc: 1 of 2 examples truncated to max_seq_length=12',
                   'multiple choice: 1 of 2 (context, choice) pairs truncated to '
                   'max_seq_length=11'], lines


def test_pair_encoding_equals_transformers(full_tokenizer, minilm_dir):
  import transformers  # pylint: disable=g-import-not-at-top  # A slow reference import.

  hf = transformers.BertTokenizer(str(minilm_dir / 'vocab.txt'), do_lower_case=True)
  a, b = 'The cat sat on the mat.', 'A dog ran in the park today!'
  # When the cut leaves the two within one token of each other at an odd total, transformers'
  # tokenizers-backed longest_first gives the spare token to the input that was longer,
  # run_classifier.py to a (7+8 pieces cut to 13: 6+7 there, 7+6 here); these cases avoid it.
  cases = [(a, b, 13), ('The cat sat', b, 12), (b, 'unaffable', 9), (a, b, 40), (b, a, 16)]
  examples = [Ex(str(i), x, y, 'entailment') for i, (x, y, _) in enumerate(cases)]
  for i, (x, y, length) in enumerate(cases):
    ours = glue.convert_examples(examples[i:i + 1], full_tokenizer, length, 'rte')
    theirs = hf(x, y, truncation='longest_first', max_length=length, padding='max_length')
    np.testing.assert_array_equal(ours['input_ids'][0], theirs['input_ids'], err_msg=str(i))
    np.testing.assert_array_equal(ours['segment_ids'][0], theirs['token_type_ids'])
    np.testing.assert_array_equal(ours['input_mask'][0], theirs['attention_mask'])


def test_single_sentence_and_test_split_features(full_tokenizer):
  examples = [Ex('0', 'A dog ran in the park today!', None, None),
              Ex('1', 'The cat', None, None)]
  features = glue.convert_examples(examples, full_tokenizer, 6, 'sst2')
  assert _pieces(full_tokenizer, features, 0) == ['[CLS]', 'a', 'dog', 'ran', 'in', '[SEP]']
  assert _pieces(full_tokenizer, features, 1) == ['[CLS]', 'the', 'cat', '[SEP]']
  np.testing.assert_array_equal(features['input_ids'][1, 4:], [0, 0])
  assert not features['segment_ids'].any()
  assert features['label'].tolist() == [0, 0]
  regression = glue.convert_examples([Ex('0', 'a', 'b', 3.2)], full_tokenizer, 8, 'stsb')
  assert regression['label'].dtype == np.float32
  assert regression['label'][0] == pytest.approx(3.2)
  with pytest.raises(ValueError, match="label 'maybe', not one of GLUE rte"):
    glue.convert_examples([Ex('0', 'a', 'b', 'maybe')], full_tokenizer, 8, 'rte')


def test_evaluate_plumbs_the_task_metrics(full_tokenizer):
  gold = ['1', '0', '1', '1', '0', '0', '1']
  examples = [Ex(str(i), 'a b', 'c', label) for i, label in enumerate(gold)]
  features = glue.convert_examples(examples, full_tokenizer, 8, 'mrpc')
  pred = np.array([1, 0, 0, 1, 1, 0, 1])
  logits = np.eye(2, dtype=np.float32)[pred] * 3.0 - 1.0
  scores = glue.evaluate('mrpc', logits, features, examples)
  gold_ids = np.array([int(label) for label in gold])
  # TP 3, FP 1, FN 1 -> F1 = 6/8; 5 of 7 right.
  assert scores == {'f1': pytest.approx(0.75), 'accuracy': pytest.approx(5 / 7)}
  assert glue.evaluate('cola', logits, features, examples) == {
      'mcc': pytest.approx(metrics.matthews_corrcoef(pred, gold_ids))}
  scores = [0.0, 1.0, 2.5, 4.0]
  examples = [Ex(str(i), 'a', 'b', s) for i, s in enumerate(scores)]
  features = glue.convert_examples(examples, full_tokenizer, 8, 'stsb')
  outputs = np.array([0.5, 0.7, 3.0, 3.5], np.float32)
  result = glue.evaluate('stsb', outputs[:, None], features, examples)
  assert result['pearson'] == pytest.approx(np.corrcoef(outputs, scores)[0, 1], rel=1e-5)
  assert result['spearman'] == pytest.approx(1.0)
  with pytest.raises(ValueError, match=r'outputs have shape \(4, 2\), expected \[4\]'):
    glue.evaluate('stsb', np.zeros((4, 2)), features, examples)
  test_examples = [Ex('0', 'a', 'b', None)]
  test_features = glue.convert_examples(test_examples, full_tokenizer, 8, 'rte')
  with pytest.raises(ValueError, match='no gold labels'):
    glue.evaluate('rte', np.zeros((1, 2)), test_features, test_examples)


def test_submission_files(tmp_path):
  data_dir = write_glue(tmp_path, ['mnli'])
  examples, _ = glue_readers.read_examples('mnli', data_dir, 'test_mismatched')
  logits = np.array([[0.1, 0.2, 3.0]])  # 'neutral' in run_classifier.py's label order.
  path = glue.write_predictions('mnli', 'test_mismatched', logits, examples, tmp_path / 'out')
  assert os.path.basename(path) == 'MNLI-mm.tsv'
  assert open(path).read() == 'index\tprediction\n5\tneutral\n'
  examples = [Ex(str(i), 'a', 'b', None) for i in range(3)]
  path = glue.write_predictions('stsb', 'test', np.array([-0.4, 2.25, 5.7]), examples, tmp_path)
  assert os.path.basename(path) == 'STS-B.tsv'
  assert open(path).read() == 'index\tprediction\n0\t0.000\n1\t2.250\n2\t5.000\n'
  path = glue.write_predictions('cola', 'validation', np.array([[0, 1], [2, 1], [0, 5]]),
                                examples, tmp_path)
  assert os.path.basename(path) == 'cola-validation.tsv'
  assert open(path).read() == 'index\tprediction\n0\t1\n1\t0\n2\t1\n'
  with pytest.raises(ValueError, match=r'shape \(2, 2\), expected \[3, 2\] logits'):
    glue.write_predictions('cola', 'test', np.zeros((2, 2)), examples, tmp_path)


def test_tfds_unprepared_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match=r'glue/rte is not prepared in .*tfds build '
                                              r'glue/rte --data_dir DIR.*; or read the GLUE TSV '
                                              r'files \(--config.data.use_tfds=false, '
                                              r'--config.data.data_dir: the GLUE download\)$'):
    glue_readers.read_tfds('rte', 'train', data_dir=str(tmp_path))


def test_tfds_records_map_to_tsv_examples(tmp_path):
  # A prepared glue/mnli, no download.
  records = {
      # TFDS numbers MNLI as entailment 0, neutral 1, contradiction 2.
      'validation_matched': [{'premise': 'P one.', 'hypothesis': 'H one.', 'label': 0, 'idx': 1},
                             {'premise': 'P zero.', 'hypothesis': 'H zero.', 'label': 2,
                              'idx': 0}],
      'test_matched': [{'premise': 'P t.', 'hypothesis': 'H t.', 'label': -1, 'idx': 0}],
  }
  glue_files.write_tfds(tmp_path, 'glue/mnli', '2.0.0', records)
  assert glue_readers.read_tfds('mnli', 'validation_matched', data_dir=str(tmp_path)) == [
      Ex('0', 'P zero.', 'H zero.', 'contradiction'), Ex('1', 'P one.', 'H one.', 'entailment')]
  assert glue_readers.read_tfds('mnli', 'test_matched', data_dir=str(tmp_path)) == [
      Ex('0', 'P t.', 'H t.', None)]
  with pytest.raises(ValueError, match='has no split .train.; it has'):
    glue_readers.read_tfds('mnli', 'train', data_dir=str(tmp_path))

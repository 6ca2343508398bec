"""Hostile pass AK over a user's own span (SQuAD JSON), multiple-choice and SWAG files: what was
read silently wrong (question ids merged, JSON values turned into text, a missing ending read as
a choice, limits ignored) and what was said wrong or too late (an empty eval file after
training, an eval without a training file, advice to set fields a task does not read)."""

import gzip
import json
import logging
import re
import types

import ml_collections
import pytest

from bertjax import predict
from bertjax import predict_inputs
from bertjax.finetune import scored_folders
from bertjax.finetune.tasks import data_reads
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import user_data
from bertjax.finetune.tasks import user_tasks
from configs import finetune as finetune_config

CONTEXT = 'Vienna is the capital of Austria. Dublin is the capital of Ireland.'


def _squad(*ids, v2=False, context=CONTEXT):
  """A SQuAD file's JSON: one paragraph, a question per id, each answered 'Vienna'."""
  qas = [{'id': i, 'question': 'which city?', 'answers': [{'text': 'Vienna', 'answer_start': 0}]}
         for i in ids]
  if v2:
    for qa in qas:
      qa['is_impossible'] = False
  return {'version': '2.0' if v2 else '1.1',
          'data': [{'title': 't', 'paragraphs': [{'context': context, 'qas': qas}]}]}


def _write(tmp_path, name, content):
  path = tmp_path / name
  path.write_text(content if isinstance(content, str) else json.dumps(content))
  return str(path)


def _span(**files):
  data = ml_collections.ConfigDict(finetune_config.get_config('task=span').data.to_dict())
  for key, value in files.items():
    data[key] = value
  return data


def test_a_question_id_twice_in_eval_or_test_data_is_refused(tmp_path):
  """Predictions are keyed by id: a dev file with one id twice scored one question against the
  other's answer (27 keys for 30 questions); `7` and `"7"` merged too."""
  for ids, said in ((('a', 'b', 'a'), "question 2 has the id 'a' of article 0 paragraph 0 "
                     'question 0'), ((7, '7'), "question 1 has the id '7'")):
    path = _write(tmp_path, 'dev.json', _squad(*ids))
    for labelled in (True, False):
      with pytest.raises(ValueError, match=re.escape(said) + '.*give each question its own'):
        squad.read_squad(path, is_training=False, labelled=labelled)
    examples, _ = squad.read_squad(path)  # Training keys nothing by id.
    assert len(examples) == len(ids)


def test_a_squad_file_without_questions_is_refused_when_it_is_read(tmp_path):
  """An eval file of no questions trained the whole run, then failed with numpy's 'need at least
  one array to concatenate'; a training file whose answers were all misplaced said 'no training
  features (check config.data.data_dir)'."""
  empty = _write(tmp_path, 'empty.json', {'version': '1.1', 'data': []})
  with pytest.raises(ValueError, match=r"empty.json' holds no questions: span tasks read "
                     r"SQuAD's JSON"):
    squad.read_squad(empty, is_training=False)
  misplaced = _squad('a', 'b')
  for qa in misplaced['data'][0]['paragraphs'][0]['qas']:
    qa['answers'][0]['answer_start'] = 40
  with pytest.raises(ValueError, match=r"holds no questions whose answer could be located: all 2 "
                     r"were skipped \({'answer text not at answer_start': 2}; why above\)"):
    squad.read_squad(_write(tmp_path, 'train.json', misplaced))


def test_a_span_task_reads_only_the_files_it_is_given(tmp_path):
  """mode=eval or predict without a train_file ended in KeyError: 'train'; the training file was
  read at the start only to check its version, so a moved one stopped an eval."""
  dev = _write(tmp_path, 'dev.json', _squad('a', 'b', v2=True))
  task = registry.get_task('span', _span(eval_file=dev))
  assert task.version_2 and len(task.read('validation')[0]) == 2
  with pytest.raises(ValueError, match=r'^task=span: no train file: set config.data.train_file'):
    task.read('train')
  task = registry.get_task('span', _span(eval_file=dev, train_file=str(tmp_path / 'moved.json')))
  assert len(task.read('validation')[0]) == 2
  with pytest.raises(FileNotFoundError, match='moved.json.* does not exist'):
    task.read('train')
  test = _write(tmp_path, 'test.json', _squad('q'))
  assert not registry.get_task('span', _span(predict_file=test)).version_2
  # Predicted alone by a v2.0 run: the run's version, whatever the file says (it says v1.1).
  assert registry.get_task('span', _span(predict_file=test), version_2=True).version_2
  assert not registry.get_task('span', _span(eval_file=_write(tmp_path, 'v1.json', _squad('q'))),
                               version_2=True).version_2  # An eval file's own version decides.
  with pytest.raises(ValueError, match='task=span needs config.data.eval_file'):
    registry.get_task('span', _span(train_file=test))


def test_a_span_setting_of_several_files_or_a_json_lines_file_is_refused(tmp_path):
  """A comma list was said as one path that 'does not exist'; JSON lines as 'truncated: download
  it again'; a v2.0 file marking only its unanswerable questions as 'the file is damaged'."""
  one, two = (_write(tmp_path, f'{n}.json', _squad(n)) for n in ('a', 'b'))
  with pytest.raises(ValueError, match=re.escape(f'config.data.eval_file={one},{two} names 2 '
                                                 'files: a SQuAD task reads one SQuAD JSON file')):
    registry.get_task('span', _span(eval_file=f'{one},{two}'))
  assert len(registry.get_task('span', _span(eval_file=str(tmp_path / 'a.*'))).read(
      'validation')[0]) == 1  # A glob of one file.
  lines = _write(tmp_path, 'hf.jsonl', '{"question": "q", "context": "c"}\n' * 2)
  with pytest.raises(ValueError, match=r"is not one JSON document \(Extra data.*\): span tasks "
                     r"read SQuAD's JSON, .* \(not JSON lines or CSV\)"):
    squad.read_squad(lines, is_training=False)
  partly = _squad('a', 'b', v2=True)
  partly['data'][0]['paragraphs'][0]['qas'][1]['is_impossible'] = 'no'
  with pytest.raises(ValueError, match="question 'b' has is_impossible 'no', not true or false"):
    squad.read_squad(_write(tmp_path, 'v2.json', partly), version_2_with_negative=True)


def test_a_v2_file_without_its_marks_reads_as_the_official_scorer_reads_it(tmp_path):
  """Copies converted from other formats drop `version` and `is_impossible` and give an
  unanswerable question `answers: []`: both configs refused such a file, each naming the other.
  evaluate-v2.0.py tells an unanswerable question by its empty answers alone."""
  converted = _squad('a', 'b', 'c')
  del converted['version']
  qas = converted['data'][0]['paragraphs'][0]['qas']
  qas[1]['answers'] = []
  qas[2]['is_impossible'] = False  # Marked: as marked.
  path = _write(tmp_path, 'converted.json', converted)
  examples, _ = squad.read_squad(path, version_2_with_negative=True, is_training=False)
  assert [(e.qas_id, e.is_impossible, e.answers) for e in examples] == [
      ('a', False, ['Vienna']), ('b', True, []), ('c', False, ['Vienna'])]
  assert len(squad.read_squad(path, version_2_with_negative=True)[0]) == 3  # Training too.
  with pytest.raises(ValueError, match=r"is v2.0 \(with unanswerable questions\) \(version "
                     r"field 'absent'\) but is read as v1.1: .* task=squad_v2"):
    squad.read_squad(path, is_training=False)
  gzipped = tmp_path / 'dev.json.gz'
  gzipped.write_bytes(gzip.compress(json.dumps(converted).encode()))
  # Read decompressed, as the corpus tools read one (it was refused, told to be gunzipped).
  assert squad.read_squad(gzipped, version_2_with_negative=True, is_training=False)[0] == (
      examples)
  # A file to predict that lists no answers at all is no v2.0 file (either version reads it).
  for qa in qas:
    qa['answers'] = []
    qa.pop('is_impossible', None)
  assert not squad.is_version_2(converted)


@pytest.mark.parametrize('task', ['classification', 'mrpc'])
def test_an_example_limit_in_predict_mode_is_said_to_be_unapplied(task, caplog):
  # mode=predict predicts every example of its file: max_eval_examples=3 there was ignored
  # without a word (the run's flags reused in every mode, as README allows).
  with caplog.at_level(logging.WARNING, logger='absl'):
    data_reads.check_limits(task, _span(max_eval_examples=3), 'predict', True)
  assert ('config.data.max_eval_examples=3 is not applied by mode=predict, which predicts every '
          'example of its file') in caplog.text
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger='absl'):
    data_reads.check_limits(task, _span(), 'predict', True)
  assert not caplog.text


def test_example_limits_are_refused_where_the_task_reads_its_files_whole(tmp_path):
  """A span run with max_train_examples=16 and max_eval_examples=3 trained and scored them all."""
  dev = _write(tmp_path, 'dev.json', _squad('a'))
  for field in ('max_train_examples', 'max_eval_examples'):
    with pytest.raises(ValueError, match=rf'config.data.{field}=3: task span reads its files '
                       r'whole \(the tasks that take a sample: bbc, .*\); drop it'):
      data_reads.check_limits('span', _span(eval_file=dev, **{field: 3}), 'train_eval', False)
  # A run that recorded one (never applied) resumes with it; an eval is told of its own.
  data_reads.check_limits('mrpc', _span(max_train_examples=1000), 'train_eval', True)
  data_reads.check_limits('mrpc', _span(max_train_examples=1000), 'eval', True)
  with pytest.raises(ValueError, match='max_eval_examples=3: task mrpc reads its files whole'):
    data_reads.check_limits('mrpc', _span(max_eval_examples=3), 'eval', True)
  data_reads.check_limits('wordnet', _span(max_eval_examples=3), 'eval', True)
  train = _write(tmp_path, 'train.csv', 'text,label\n' + ''.join(
      f'text {i},{"ab"[i % 2]}\n' for i in range(20)))
  data = ml_collections.ConfigDict(
      finetune_config.get_config('task=classification').data.to_dict())
  data.train_file, data.max_train_examples = train, 4
  assert len(registry.get_task('classification', data).read('train')[0]) == 4


@pytest.mark.parametrize('row, said', [
    ('{"context": {"text": "the king"}, "choices": ["a", "b"], "label": 0}',
     "field 'context' is a object"),
    ('{"context": "the king", "choices": [["a"], "b"], "label": 0}',
     "field 'choices\\[0\\]' is a list"),
    ('{"context": "the king", "choices": ["a", true], "label": 0}',
     "field 'choices\\[1\\]' is a boolean"),
    ('{"context": "the king", "choices": ["a", "b"], "label": 0.9}', 'label 0.9 is not a choice'),
    ('{"context": "the king", "choices": ["a", "b"], "label": true}', 'label True is not a choice'),
])
def test_a_multiple_choice_value_of_another_json_type_is_refused(tmp_path, row, said):
  """Read as str(): a context {'text': ...}, choices "['a']" and 'True', labels 0.9 -> 0."""
  path = _write(tmp_path, 'mc.jsonl', row + '\n')
  with pytest.raises(ValueError, match=r'mc.jsonl:1: ' + said):
    user_data.read_choices(path)


def test_multiple_choice_labels_may_be_integral_numbers_or_absent_in_a_test_file(tmp_path):
  path = _write(tmp_path, 'mc.jsonl', '{"context": "c", "choices": ["a", "b"], "label": 1.0}\n'
                '{"context": "d", "choices": ["a", "b"], "label": null}\n'
                '{"context": "e", "choices": ["a", "b"]}\n')
  questions, _ = user_data.read_choices(path, is_training=False, require_labels=False)
  assert [q.label for q in questions] == [1, None, None]
  with pytest.raises(ValueError, match=r'mc.jsonl:2: label None is not a choice index'):
    user_data.read_choices(path, is_training=False)  # Eval data needs every label.


SWAG_HEADER = 'sent1,sent2,ending0,ending1,ending2,ending3,label\n'


def test_a_swag_ending_left_empty_is_an_empty_choice(tmp_path):
  """A row without ending2 and ending3 read as choices 'The lord' x 2, trained and scored;
  predict refused the same row."""
  path = _write(tmp_path, 'swag.csv', SWAG_HEADER + 'The king spoke.,The lord,laughed.,cried.,,,0\n'
                'The queen sat.,She,rose.,fell.,ran.,hid.,1\n')
  with pytest.raises(ValueError, match=r'swag.csv:2: an empty context or choice'):
    user_data.read_swag(path, is_training=False)
  questions, skipped = user_data.read_swag(path)
  assert len(questions) == 1 and skipped == {'empty_text': 1}


def test_swag_columns_beyond_four_endings_and_unlabelled_test_rows(tmp_path):
  """An ending4 column was dropped without a word; an empty label in a test file was refused."""
  five = _write(tmp_path, 'five.csv', 'sent1,sent2,ending0,ending1,ending2,ending3,ending4,label\n'
                'a,b,c,d,e,f,g,4\n')
  with pytest.raises(ValueError, match=r'five.csv: columns ending4 beside ending0..ending3: '
                     r"SWAG's questions have 4 endings.* use task=multiple_choice"):
    user_data.read_swag(five)
  test = _write(tmp_path, 'test.csv', SWAG_HEADER + 'a,b,c,d,e,f,\na,b,c,d,e,f,2\n')
  questions, _ = user_data.read_swag(test, is_training=False, require_labels=False)
  assert [q.label for q in questions] == [None, 2]
  # The fields' names are SWAG's: the advice is not to set text_fields, which swag never reads.
  renamed = _write(tmp_path, 'renamed.csv', 'context,sent2,ending0,ending1,ending2,ending3,label\n'
                   'a,b,c,d,e,f,1\n')
  with pytest.raises(ValueError, match=r"no field 'sent1'.* task=swag reads SWAG's columns by "
                     r'their names: sent1, sent2, ending0..ending3 and label'):
    user_data.read_swag(renamed)
  tsv = _write(tmp_path, 'swag.tsv', SWAG_HEADER.replace(',', '\t') + 'a\tb\tc\td\te\tf\t1\n')
  assert [q.label for q in user_data.read_swag(tsv)[0]] == [1]  # By its extension, as said.


def test_predict_says_what_to_do_with_a_squad_file_or_an_empty_choice():
  with pytest.raises(ValueError, match=r'input 1 is a SQuAD file \("data": its articles\): '
                     r'predict reads one question per line .* --config.mode=predict and '
                     r'--config.data.predict_file=FILE'):
    predict_inputs.example('input 1', {'version': '1.1', 'data': []}, 'span', (), None)
  labels = ('0', '1', '2')
  for item, said in ((' ||| a ||| b ||| c', 'its context is empty'),
                     ({'context': 'x', 'choices': ['a', '', 'c']}, 'choice 1 is empty')):
    with pytest.raises(ValueError, match=rf'^input 1: {said}: every input needs a context and 3 '
                       'choices with text'):
      predict_inputs.example('input 1', item, 'multiple_choice', labels, None)


def test_a_tuned_no_answer_threshold_is_kept_apart_and_reaches_predict(tmp_path):
  """mode=eval with another null_score_diff_threshold replaced the run's eval folder, and
  bertjax.predict had no way to answer with the tuned value."""
  run = {'version_2_with_negative': True, 'data': {'null_score_diff_threshold': 0.0}}
  cfg = ml_collections.ConfigDict({'version_2_with_negative': True, 'data': {
      'eval_file': '', 'predict_file': '', 'test_file': '', 'null_score_diff_threshold': 0.0}})
  assert scored_folders.scored_folder(cfg, run, 'eval', 8) == 'eval_step_8'
  cfg.data.null_score_diff_threshold = -1.5
  assert scored_folders.scored_folder(cfg, run, 'eval', 8) == 'eval_step_8-threshold-1.5'
  cfg.version_2_with_negative = False  # A v1.1 model has no no-answer threshold.
  assert scored_folders.scored_folder(cfg, run, 'eval', 8) == 'eval_step_8'
  v2 = types.SimpleNamespace(run={'task': 'span', 'version_2_with_negative': True}, kind='span',
                             data=ml_collections.ConfigDict({'null_score_diff_threshold': 0.0}))
  predict.Predictor.set_null_threshold(v2, -1.5)
  assert v2.data.null_score_diff_threshold == -1.5
  # nan was taken, and answered every question (its comparisons are false), as inf does; eval's
  # config.data.null_score_diff_threshold refuses them.
  for threshold in (float('nan'), float('inf'), -float('inf'), True, '0.5'):
    with pytest.raises(ValueError, match=r'^--null_score_diff_threshold=.*: must be a finite '
                       "number \\(the null score's margin over the best span's"):
      predict.Predictor.set_null_threshold(v2, threshold)
  assert v2.data.null_score_diff_threshold == -1.5
  v1 = types.SimpleNamespace(run={'task': 'classification'}, kind='classification')
  with pytest.raises(ValueError, match=r'no-answer threshold of a model fine-tuned on SQuAD 2.0 '
                     r'files, and this run \(task classification, a classification model\) was '
                     'not: drop it'):
    predict.Predictor.set_null_threshold(v1, -1.5)


def test_a_test_file_missing_at_training_time_is_said_at_its_start(tmp_path):
  """Training never read config.data.test_file: a wrong path went unsaid until mode=predict."""
  data = ml_collections.ConfigDict({'test_file': str(tmp_path / 'nope.csv'), 'predict_file': ''})
  with pytest.raises(FileNotFoundError, match=r'config.data.test_file: .*nope.csv does not exist: '
                     r'fix the path, or drop it \(mode=predict reads it after training\)'):
    user_tasks.check_files_to_predict(data)
  # Helper-173's pass: mode=predict, which reads it now, was told to drop it (read "after
  # training"), which predicts another split.
  with pytest.raises(FileNotFoundError, match=r'config.data.test_file: .*nope.csv does not exist: '
                     r'fix the path\.$'):
    user_tasks.check_files_to_predict(data, training=False)
  data.test_file = _write(tmp_path, 'test.csv', 'text\nx\n')
  user_tasks.check_files_to_predict(data)


def test_a_swag_file_of_a_header_alone_or_named_otherwise_is_read_as_csv(tmp_path):
  """Review: a header-only file raised IndexError; train.txt was refused as not CSV."""
  with pytest.raises(ValueError, match=r'header.csv holds no usable examples \(no data rows\)'):
    user_data.read_swag(_write(tmp_path, 'header.csv', SWAG_HEADER))
  named = _write(tmp_path, 'train.txt', SWAG_HEADER + 'a,b,c,d,e,f,3\n')
  assert [q.label for q in user_data.read_swag(named)[0]] == [3]

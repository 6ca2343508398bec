"""Hostile pass AJ over a user's own files: what was read silently wrong (a stray quote merging
rows, held-out texts with copies in training, a sorted file subsampled by its first rows), and
what was said wrong (an unclosed quote, labels per row in a test file, two files of one name)."""

import json
import re

import log_records
import pytest
import user_task_files

from bertjax import predict_inputs
from bertjax.finetune import run_config
from bertjax.finetune import run_data
from bertjax.finetune import scored_folders
from bertjax.finetune.tasks import labelled_split
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import user_formats
from bertjax.finetune.tasks import user_tasks
from configs import finetune as finetune_config

_data = user_task_files.data_config


@pytest.mark.parametrize('content, said', [
    # Read leniently, rows 2-4 became one text with label 'pos': 5 rows, 3 examples, no word.
    ('text,label\n"hello,pos\nb,neg\nc said "hi",pos\nd,neg\n',
     'x.csv:2: \',\' expected after \'"\': the row that starts there opens a quoted field read '
     'on to line 4: close its quote, and double every quote inside it ("").'),
    # Said as '1 columns where the header has 2 ... quote fields that hold the separator'.
    ('text,label\n"unterminated,pos\nb,neg\n',
     'x.csv:2: unexpected end of data: the row that starts there opens a quoted field read on to '
     'line 3'),
])
def test_a_quote_left_open_is_an_error_at_the_row_it_opens(tmp_path, content, said):
  (tmp_path / 'x.csv').write_text(content)
  with pytest.raises(ValueError) as e:
    user_formats.read_records(tmp_path / 'x.csv')
  assert str(e.value).startswith(f'{tmp_path}/{said}'), str(e.value)


def test_a_quoted_field_over_lines_is_read(tmp_path):
  """Named by its last line still: guids, and so the held-out split of runs made before."""
  (tmp_path / 'x.csv').write_text('text,label\n"multi\nline",pos\nb,neg\n"x ""q"" y",pos\n')
  assert user_formats.read_records(tmp_path / 'x.csv') == [
      (3, {'text': 'multi\nline', 'label': 'pos'}), (4, {'text': 'b', 'label': 'neg'}),
      (5, {'text': 'x "q" y', 'label': 'pos'})]


def test_the_copies_of_a_text_stay_on_one_side_of_the_held_out_split(tmp_path):
  """40 rows written 3 times: 21 of 24 held-out texts were copies of training rows."""
  rows = [(f'text number {i}', 'ab'[i % 2]) for i in range(40)]
  copies = rows * 2 + [(f'TEXT  Number {i}', label) for i, (_, label) in enumerate(rows)]
  (tmp_path / 'train.csv').write_text('text,label\n' + ''.join(f'{t},{y}\n' for t, y in copies))
  task = registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv')))
  train, _ = task.read('train')
  held_out, _ = task.read('validation')
  assert len(train) + len(held_out) == 120  # No row dropped.
  # 8 texts held out, with their copies.
  assert len(held_out) == 24 and sorted(e.label for e in held_out) == ['a'] * 12 + ['b'] * 12
  assert not {' '.join(e.text_a.lower().split()) for e in held_out} & {
      ' '.join(e.text_a.lower().split()) for e in train}


def test_max_train_examples_samples_a_file_sorted_by_label(tmp_path):
  """With an eval file it took the first rows: label 'c' never reached training, and the error
  blamed the eval data."""
  rows = ''.join(f'text {i},{"abc"[i // 10]}\n' for i in range(30))
  (tmp_path / 'sorted.csv').write_text('text,label\n' + rows)
  task = registry.get_task('classification', _data(
      train_file=str(tmp_path / 'sorted.csv'), eval_file=str(tmp_path / 'sorted.csv'),
      max_train_examples=15))
  train, _ = task.read('train')
  assert len(train) == 15 and {e.label for e in train} == {'a', 'b', 'c'}
  assert [int(e.text_a.split()[1]) for e in train] == sorted(  # In file order.
      int(e.text_a.split()[1]) for e in train)


def test_an_eval_file_of_training_texts_is_warned_about(tmp_path, monkeypatch):
  rows = ''.join(f'text {i},{"ab"[i % 2]}\n' for i in range(10))
  (tmp_path / 'a.csv').write_text('text,label\n' + rows)
  (tmp_path / 'b.csv').write_text('text,label\ntext 3,b\nsomething new,a\n')
  warned = log_records.recorded_warnings(monkeypatch, user_tasks)
  # Counted in the eval set scored: after max_eval_examples.
  for eval_file, limit, copies in (('a.csv', -1, '10 of the 10'), ('b.csv', -1, '1 of the 2'),
                                   ('a.csv', 4, '4 of the 4')):
    task = registry.get_task('classification', _data(
        train_file=str(tmp_path / 'a.csv'), eval_file=str(tmp_path / eval_file),
        max_eval_examples=limit))
    task.read('train')
    task.read('validation')
    assert warned[-1].startswith(f'{copies} eval examples ({tmp_path / eval_file}) are texts of '
                                 'the training data'), warned
  assert len(warned) == 3


def test_two_training_files_of_one_name_are_told_by_their_paths(tmp_path):
  """Guids named a row by its file's name: 'guid t.csv:2 occurs twice' with no eval file."""
  for folder, word in (('x', 'left'), ('y', 'right')):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / 't.csv').write_text(
        'text,label\n' + ''.join(f'{word} {i},{"ab"[i % 2]}\n' for i in range(10)))
  task = registry.get_task('classification', _data(
      train_file=f'{tmp_path}/x/t.csv,{tmp_path}/y/t.csv'))
  train, _ = task.read('train')
  held_out, _ = task.read('validation')
  guids = [e.guid for e in train + held_out]
  assert len(guids) == len(set(guids)) == 20 and f'{tmp_path}/y/t.csv:2' in guids


def test_a_test_file_row_may_have_its_label_or_none(tmp_path):
  """An empty label cell was refused; a JSONL whose first row lacked the label dropped every
  later row's."""
  rows = ''.join(f'text {i},{"ab"[i % 2]}\n' for i in range(10))
  (tmp_path / 'train.csv').write_text('text,label\n' + rows)
  (tmp_path / 'test.csv').write_text('text,label\nhello,\nworld,b\n')
  (tmp_path / 'test.jsonl').write_text(json.dumps({'text': 'hello'}) + '\n' + json.dumps(
      {'text': 'world', 'label': 'a'}) + '\n')
  for name in ('test.csv', 'test.jsonl'):
    task = registry.get_task('classification', _data(
        train_file=str(tmp_path / 'train.csv'), test_file=str(tmp_path / name)))
    test, _ = task.read('test')
    assert [e.label for e in test] == [None, 'b' if name == 'test.csv' else 'a'], name


def test_labels_too_many_to_hold_some_out_each_say_what_to_set():
  examples = [labelled_split.Example(f'g{i}', f'text {i}', None, f'label {i // 2}')
              for i in range(3000)]
  with pytest.raises(ValueError, match=r'3000 examples at eval_fraction=0.2 leave 3000 for '
                     r'training and 0 for eval: both need some \(each of the 1500 labels holds out '
                     r'its own share, and the largest has 2 examples\): set config.data.eval_file'):
    labelled_split.split(examples, eval_fraction=0.2, seed=0)


def test_a_pair_models_input_missing_its_second_field_names_it():
  """Said as 'fine-tuned on text pairs: give text_a ||| text_b' to {"q": ..., "answer": ...}."""
  with pytest.raises(ValueError) as e:
    predict_inputs._texts('input 4', {'q': 'why?', 'answer': 'because'}, None, None,
                          {'text_fields': 'q,a'}, True)
  assert str(e.value) == (
      "input 4: this model was fine-tuned on text pairs, and the second text is missing: no field "
      "'a' beside 'q' (it has answer, q): name it as config.data.text_fields does (q,a), or give "
      '`text_a ||| text_b`.')


def test_a_glue_pair_models_single_text_is_told_to_give_a_pair():
  """The default text_fields ('text',) of a GLUE pair run: an IndexError in review."""
  with pytest.raises(ValueError, match=r'^input 1: this model was fine-tuned on text pairs: give'):
    predict_inputs._texts('input 1', {'text': 'one sentence'}, None, None, {}, True)


def _run_with_eval_file(tmp_path, rows):
  (tmp_path / 'ev.csv').write_text('text,label\n' + rows)
  config = finetune_config.get_config('task=classification,size=tiny,batch=8')
  config.unlock()
  config.data.train_file, config.data.eval_file = '/data/reviews.csv', str(tmp_path / 'ev.csv')
  config.data.eval_sha256 = run_data.data_digest(config.data.eval_file)
  return config.to_dict(), config


def test_a_resume_with_another_eval_file_or_its_rows_edited_is_refused(tmp_path):
  """The history read steps 5-15 on a.csv and step 20 on b.csv; the best step compared them."""
  run, config = _run_with_eval_file(tmp_path, 'good,a\nbad,b\n')
  run_config.check_against_run(config, run, '/runs/r')  # The same file: resumes.
  (tmp_path / 'other.csv').write_text('text,label\nfine,a\n')
  config.data.eval_file = str(tmp_path / 'other.csv')
  config.data.eval_sha256 = run_data.data_digest(config.data.eval_file, 'eval_file')
  with pytest.raises(ValueError) as e:
    run_config.check_against_run(config, run, '/runs/r')
  assert (f"data.eval_file '{tmp_path}/ev.csv' (the run) vs '{tmp_path}/other.csv': its eval "
          'history (the best step, early stopping) compares scores on one eval set; pass '
          f'--config.data.eval_file={tmp_path}/ev.csv (mode=eval scores another file with it). '
          'Match the run') in str(e.value)  # One reason: not also 'holds other rows'.
  # A GLUE run older than data.eval_file (config.json without it): resumes as before.
  del run['data']['eval_file'], run['data']['eval_sha256']
  run['data']['train_file'] = config.data.train_file = config.data.eval_file = ''
  run_config.check_against_run(config, run, '/runs/r')
  run, config = _run_with_eval_file(tmp_path, 'good,a\nbad,b\n')
  config.data.eval_file = str(tmp_path / 'nope-*.csv')
  with pytest.raises(FileNotFoundError, match=r'nope-\*.csv matches no file: check '
                     r'config.data.eval_file'):  # Was: check config.data.train_file.
    run_data.data_digest(config.data.eval_file, 'eval_file')
  config.mode = 'eval'  # Scoring another file is what mode=eval is for.
  run_config.check_against_run(config, run, '/runs/r')
  config.mode, config.data.eval_file = 'train_eval', str(tmp_path / 'ev.csv')
  (tmp_path / 'ev.csv').write_text('text,label\ngood,a\nbad,a\n')
  config.data.eval_sha256 = run_data.data_digest(config.data.eval_file)
  with pytest.raises(ValueError, match=re.escape(f"data.eval_file '{tmp_path}/ev.csv' holds "
                                                 'other rows than it did')):
    run_config.check_against_run(config, run, '/runs/r')


def test_a_run_holding_a_key_its_task_never_reads_is_not_asked_to_match_it(tmp_path):
  """A run of before config_check refused unread data keys may hold one (doc_stride beside
  classification, text_fields beside mrpc): matching it was asked, then refused by the check."""
  run, config = _run_with_eval_file(tmp_path, 'good,a\nbad,b\n')
  run['data']['doc_stride'] = 64
  for mode in ('train_eval', 'eval', 'predict'):
    config.mode = mode
    run_config.check_against_run(config, run, '/runs/r')
  config.mode = 'train_eval'
  run['data']['max_seq_length'] = 64  # A key the task reads is still matched.
  with pytest.raises(ValueError, match=r'data.max_seq_length 64 \(the run\) vs 128'):
    run_config.check_against_run(config, run, '/runs/r')
  glue = finetune_config.get_config('task=mrpc,size=tiny')
  old = glue.to_dict()
  old['data']['text_fields'] = 'sentence'
  run_config.check_against_run(glue, old, '/runs/r')


def test_a_run_whose_unchanged_file_is_split_otherwise_now_is_told_so(tmp_path, monkeypatch):
  """A run from before the split by text, on a file with copies of a text, is held out
  otherwise now: its resume said 'its training files were changed' of the same bytes."""
  run, config = _run_with_eval_file(tmp_path, 'good,a\nbad,b\n')
  run['data'] |= {'train_sha256': 'a' * 64, 'train_features_sha256': 'b' * 64}
  monkeypatch.setattr(run_config, 'trained_run', lambda workdir: run)
  config.data.train_sha256 = 'a' * 64
  run_data.check_training_features(config, '/runs/r', 'b' * 64)  # The same features: resumes.
  with pytest.raises(ValueError, match=r'its training files are the same bytes, which this '
                     r'version of bertjax reads, splits \(the examples held out for eval\) or '
                     r'tokenizes otherwise .* Resume it with that version, or fine-tune in '
                     r'another --workdir.$'):
    run_data.check_training_features(config, '/runs/r', 'c' * 64)
  config.data.train_sha256 = 'd' * 64  # Other bytes: said as before.
  with pytest.raises(ValueError, match=r'its training files were changed, or read or tokenized '
                     r'otherwise. Restore the data'):
    run_data.check_training_features(config, '/runs/r', 'c' * 64)


def test_an_eval_of_another_file_is_written_beside_the_runs_own(tmp_path):
  """Each eval or predict of another file replaced the last one's results in one folder."""
  run, config = _run_with_eval_file(tmp_path, 'good,a\nbad,b\n')
  assert scored_folders.scored_folder(config, run, 'eval', 8) == 'eval_step_8'
  (tmp_path / 'b.csv').write_text('text,label\nfine,a\n')
  config.data.eval_file = str(tmp_path / 'b.csv')
  named = scored_folders.scored_folder(config, run, 'eval', 8)
  digest = run_data.data_digest(str(tmp_path / 'b.csv'))
  assert named == f'eval_step_8-b.csv-{digest[:8]}'
  (tmp_path / 'b.csv').write_text('text,label\nfine,b\n')  # Edited: another folder again.
  assert scored_folders.scored_folder(config, run, 'eval', 8) not in (named, 'eval_step_8')
  config.data.eval_file = str(tmp_path / 'ev.csv')  # The run's own, edited since it trained.
  (tmp_path / 'ev.csv').write_text('text,label\ngood,b\n')
  assert scored_folders.scored_folder(config, run, 'eval', 8).startswith('eval_step_8-ev.csv-')
  config.data.predict_file = str(tmp_path / 'b.csv')
  assert scored_folders.scored_folder(config, run, 'predict', 8).startswith('predict_step_8-b.csv-')
  config.data.predict_file = ''
  assert scored_folders.scored_folder(config, run, 'predict', 8) == 'predict_step_8'  # test_file.


def test_a_test_file_edited_or_a_part_of_the_eval_set_keeps_the_earlier_results(tmp_path):
  """Hostile pass of session 36, 2: mode=predict of the run's test file edited since (2 rows,
  then 1) replaced predictions/predict_step_N, and mode=eval of the first 3 eval examples
  replaced the 10 of eval_step_N."""
  run, config = _run_with_eval_file(tmp_path, 'good,a\nbad,b\n')
  (tmp_path / 'tst.csv').write_text('text\ngood\nbad\n')
  config.data.test_file = str(tmp_path / 'tst.csv')
  config.data.test_sha256 = run_data.data_digest(config.data.test_file, 'test_file')
  run = config.to_dict()  # Trained with that test file, recorded as job_setup records it.
  assert scored_folders.scored_folder(config, run, 'predict', 2) == 'predict_step_2'
  (tmp_path / 'tst.csv').write_text('text\ngood\n')
  edited = scored_folders.scored_folder(config, run, 'predict', 2)
  assert edited.startswith('predict_step_2-tst.csv-') and edited != 'predict_step_2'
  config.data.max_eval_examples = 3
  assert scored_folders.scored_folder(config, run, 'eval', 4) == 'eval_step_4-first3'
  assert scored_folders.scored_folder(config, run, 'predict', 4).startswith('predict_step_4-tst')
  run['data']['max_eval_examples'] = 3  # The run evaluated those 3: still not all of them.
  assert scored_folders.scored_folder(config, run, 'eval', 4) == 'eval_step_4-first3'
  config.data.max_eval_examples = -1  # All of them: the eval's own folder.
  assert scored_folders.scored_folder(config, run, 'eval', 4) == 'eval_step_4'


def test_eval_questions_kept_and_scored_are_not_counted_as_skipped():
  """Hostile pass of session 36, 6: the summary's 'skipped examples 5' counted 2 eval questions
  that were kept and scored against their text."""
  from bertjax.finetune import job_setup  # noqa: PLC0415  # JAX: only this test needs it.
  from bertjax.finetune.tasks import task as task_lib  # noqa: PLC0415
  skipped = {'answer_not_found': 3, f'validation/answer_not_found{task_lib.KEPT}': 2}
  assert job_setup.skipped_total(skipped) == 3


def test_multiple_choice_predictions_name_the_gold_choice_gold(tmp_path):
  """Hostile pass of session 36, 13: a multiple-choice row's `label` was the gold choice where a
  classification row's `label` is the prediction (and its gold `gold`)."""
  import types  # noqa: PLC0415

  import numpy as np  # noqa: PLC0415

  from bertjax.finetune.tasks import multiple_choice  # noqa: PLC0415
  questions = [types.SimpleNamespace(guid='q:1', label=0),
               types.SimpleNamespace(guid='q:2', label=None)]
  path = multiple_choice.write_predictions(tmp_path / 'p.jsonl', np.array([[0.0, 2.0],
                                                                           [3.0, 0.0]]), questions)
  rows = [json.loads(line) for line in open(path, encoding='utf-8')]  # noqa: SIM115
  assert [(r['guid'], r['choice'], r.get('gold')) for r in rows] == [('q:1', 1, 0),
                                                                      ('q:2', 0, None)]
  assert all('label' not in r for r in rows)


@pytest.mark.parametrize('flag, split', [('train_file', 'train'), ('eval_file', 'validation'),
                                         ('test_file', 'test'), ('predict_file', 'test')])
def test_a_missing_file_is_said_with_the_flag_that_named_it(tmp_path, flag, split):
  """Each was 'does not exist: check config.data.train_file / eval_file / test_file' (the reader
  did not know which flag), and a predict_file was named test_file by a glob matching nothing."""
  (tmp_path / 'train.csv').write_text('text,label\n' + ''.join(f't{i},{i % 2}\n'
                                                                for i in range(20)))
  settings = {'train_file': str(tmp_path / 'train.csv'), flag: str(tmp_path / 'nope.csv')}
  with pytest.raises(FileNotFoundError) as e:  # Training's labels are read as the task is made.
    registry.get_task('classification', _data(**settings)).read(split)
  assert str(e.value) == f'config.data.{flag}: {tmp_path}/nope.csv does not exist: fix the path.'
  settings[flag] = str(tmp_path / 'nope-*.csv')
  with pytest.raises(FileNotFoundError, match=f'nope-\\*.csv matches no file: check '
                                              f'config.data.{flag}.$'):
    registry.get_task('classification', _data(**settings)).read(split)

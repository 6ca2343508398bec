"""A preset task's config.data.predict_file as a glob or a comma-separated list (hostile pass of
2026-12-04): GLUE, SQuAD and CoNLL read the setting as one path, so a glob that matches one file
was "does not exist: pass the folder holding SST-2/test.tsv as --config.data.data_dir" (the user
had set predict_file, not data_dir), and two files were the same. A glob that matches one file is
that file; several files are refused, saying what to do; a glob that matches none is named."""

import json
import re

import glue_files
import pytest

from bertjax.finetune import run_data
from bertjax.finetune import scored_folders
from bertjax.finetune.tasks import data_reads
from bertjax.finetune.tasks import registry
from configs import finetune as finetune_config

SQUAD = {'version': '1.1', 'data': [{'title': 't', 'paragraphs': [{
    'context': 'Paris is in France.',
    'qas': [{'id': 'q1', 'question': 'Where is Paris?', 'answers': []}]}]}]}


def _data(name, **fields):
  data = finetune_config.get_config(f'task={name}').data
  for key, value in fields.items():
    data[key] = value
  return data


def _copies(tmp_path, source, *names):
  for name in names:
    (tmp_path / 'mine').mkdir(exist_ok=True)
    (tmp_path / 'mine' / name).write_bytes(source.read_bytes())
  return tmp_path / 'mine'


def test_a_glue_glob_that_matches_one_file_is_read_as_it(tmp_path):
  root = glue_files.write_glue(tmp_path / 'glue', ['sst2', 'mnli'])
  mine = _copies(tmp_path, root / 'SST-2' / 'test.tsv', 'sst-test-2026.tsv')
  task = registry.get_task('sst2', _data('sst2', predict_file=str(mine / 'sst-test-*.tsv')))
  examples, _ = task.read('test')
  assert examples == glue_files.GLUE_FILES['sst2'][2]['test']
  # MNLI tells its test splits apart by the file's GLUE name: the matched file's, not the glob's.
  mnli = _copies(tmp_path, root / 'MNLI' / 'test_matched.tsv', 'test_matched.tsv')
  task = registry.get_task('mnli', _data('mnli', predict_file=str(mnli / 'test_match*.tsv')))
  assert tuple(task.test_splits) == ('test_matched',)
  assert task.read('test_matched')[0] == glue_files.GLUE_FILES['mnli'][2]['test_matched']


@pytest.mark.parametrize('task_name, written, why', [
    ('sst2', 'test.tsv', r'a GLUE task predicts one test TSV per run \(its leaderboard file holds '
     r"one file's rows by their index\): predict each file in its own run \(each writes its own "
     r'predictions folder\)\.'),
    ('conll2003', 'test.txt', r'task=conll2003 predicts one file per run: join them into one '
     r'\(sentences apart by a blank line\), or predict each in its own run'),
    ('squad_v1', 'dev.json', r'a SQuAD task reads one SQuAD JSON file per setting'),
])
@pytest.mark.parametrize('spelled', ['glob', 'list'])
def test_several_files_to_predict_are_refused_saying_what_to_do(tmp_path, task_name, written,
                                                                why, spelled):
  mine = tmp_path / 'mine'
  mine.mkdir()
  for name in ('a-' + written, 'b-' + written):
    (mine / name).write_text(json.dumps(SQUAD) if written.endswith('json') else 'x\n')
  setting = (str(mine / ('*-' + written)) if spelled == 'glob' else
             f'{mine / ("a-" + written)},{mine / ("b-" + written)}')
  data = _data(task_name, predict_file=setting, data_dir=str(tmp_path))
  refusal = rf'^config.data.predict_file={setting} names 2 files: {why}'
  with pytest.raises(ValueError, match=refusal.replace('[', r'\[').replace('*', r'\*')):
    registry.check_files_to_predict(task_name, data)  # Before training, which reads neither.
  with pytest.raises(ValueError, match=refusal.replace('[', r'\[').replace('*', r'\*')):
    task = registry.get_task(task_name, data)
    task.read(tuple(task.test_splits)[0])


@pytest.mark.parametrize('task_name', ['rte', 'conll2003', 'squad_v2'])
def test_a_glob_that_matches_nothing_or_a_missing_file_is_named_before_training(tmp_path,
                                                                              task_name):
  glob = str(tmp_path / 'test-*.tsv')
  with pytest.raises(FileNotFoundError, match=rf'^{glob.replace("*", "[*]")} matches no file: '
                     r'check config.data.predict_file\.$'):
    registry.check_files_to_predict(task_name, _data(task_name, predict_file=glob))
  missing = str(tmp_path / 'test.tsv')
  with pytest.raises(FileNotFoundError, match=rf'config.data.predict_file: {missing} does not '
                     r'exist: fix the path, or drop it \(mode=predict reads it after training\)'):
    registry.check_files_to_predict(task_name, _data(task_name, predict_file=missing))


def test_a_conll_and_a_squad_glob_of_one_file_are_read_as_it(tmp_path):
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'news-0001.txt').write_text('Peter\nlives\n')
  task = registry.get_task('conll2003', _data('conll2003', predict_file=str(mine / 'news-*.txt'),
                                              data_dir=str(tmp_path)))
  assert [s.words for s in task.read('test')[0]] == [('Peter', 'lives')]
  (mine / 'questions-1.json').write_text(json.dumps(SQUAD))
  task = registry.get_task('squad_v1', _data('squad_v1', data_dir=str(tmp_path),
                                             predict_file=str(mine / 'questions-?.json')))
  assert [e.qas_id for e in task.read('test')[0]] == ['q1']


# Where mode=eval and mode=predict write (run_config.scored_folder), hostile pass of 2026-12-04:
# the run's own predict_file, and a preset's files from another data_dir, replaced the results
# of the run's own test split or eval set in predict_step_N / eval_step_N without a word.


def _glue_run(tmp_path):
  root = glue_files.write_glue(tmp_path / 'glue', ['sst2'])
  config = finetune_config.get_config('task=sst2')
  config.data.data_dir = str(root / 'SST-2')
  return config, config.to_dict()


def test_a_predict_file_never_shares_the_test_splits_folder(tmp_path):
  config, run = _glue_run(tmp_path)
  assert scored_folders.scored_folder(config, run, 'predict', 2) == 'predict_step_2'
  (tmp_path / 'own.tsv').write_text('index\tsentence\n0\tfine .\n1\tbad .\n')
  config.data.predict_file = str(tmp_path / 'own.tsv')
  run = config.to_dict()  # Trained with it: its predictions still have a folder of their own.
  own = scored_folders.scored_folder(config, run, 'predict', 2)
  digest = run_data.data_digest(str(tmp_path / 'own.tsv'), 'predict_file')
  assert own == f'predict_step_2-own.tsv-{digest[:8]}'
  (tmp_path / 'own.tsv').write_text('index\tsentence\n0\tfine .\n')  # Edited: another folder.
  assert scored_folders.scored_folder(config, run, 'predict', 2) not in (own, 'predict_step_2')
  config.data.predict_file = str(tmp_path / 'ow*.tsv')  # A glob: named as the file it matched.
  assert scored_folders.scored_folder(config, run, 'predict', 2).startswith(
      'predict_step_2-own.tsv-')
  config.data.predict_file = ''
  assert scored_folders.scored_folder(config, run, 'predict', 2) == 'predict_step_2'


def test_a_presets_files_from_another_data_dir_are_scored_in_a_folder_of_their_own(tmp_path):
  config, run = _glue_run(tmp_path)
  assert scored_folders.scored_folder(config, run, 'eval', 2) == 'eval_step_2'
  other = glue_files.write_glue(tmp_path / 'other', ['sst2']) / 'SST-2'
  config.data.data_dir = str(other)
  for mode in ('eval', 'predict'):
    folder = scored_folders.scored_folder(config, run, mode, 2)
    assert re.fullmatch(rf'{mode}_step_2-SST-2-[0-9a-f]{{8}}', folder), folder
  first = scored_folders.scored_folder(config, run, 'eval', 2)
  config.data.data_dir = str(glue_files.write_glue(tmp_path / 'third', ['sst2']) / 'SST-2')
  assert scored_folders.scored_folder(config, run, 'eval', 2) != first  # Each copy its own.
  config.data.data_dir = run['data']['data_dir']
  config.data.use_tfds = True  # TFDS's copy of the task, read from that folder.
  assert scored_folders.scored_folder(config, run, 'eval', 2).startswith('eval_step_2-tfds-SST-2-')


def test_a_long_file_name_is_cut_in_the_folders_name(tmp_path):
  config, run = _glue_run(tmp_path)
  long_name = tmp_path / ('x' * 240 + '.tsv')
  long_name.write_text('index\tsentence\n0\tfine .\n')
  config.data.predict_file = str(long_name)
  folder = scored_folders.scored_folder(config, run, 'predict', 123456)
  assert len(folder.encode()) < 120 and folder.startswith('predict_step_123456-xxx'), folder
  (tmp_path / 'p' / folder).mkdir(parents=True)  # The file system takes it.


def test_mode_eval_refuses_a_predict_file_it_would_ignore(tmp_path):
  for task_name in ('sst2', 'classification', 'conll2003'):
    data = _data(task_name, predict_file=str(tmp_path / 'mine.tsv'))
    with pytest.raises(ValueError, match=r'^config.data.predict_file=\S+mine.tsv is not read by '
                       r'mode=eval, which scores the eval split and would ignore it: drop it, or '
                       r'pass --config.mode=predict to predict on that file\.$'):
      data_reads.check_reads(task_name, data, 'eval')
    data_reads.check_reads(task_name, data, 'predict')  # Read there.


def test_a_folder_or_a_device_as_the_file_to_predict_is_said_as_such(tmp_path):
  """A folder was 'does not exist: fix the path'; /dev/null 'does not exist: pass the folder
  holding SST-2//dev/null ... as --config.data.data_dir, or use read_tfds()'."""
  with pytest.raises(FileNotFoundError, match=rf'^config.data.predict_file: {tmp_path} is a '
                     r'folder, not a file: fix the path, or drop it'):
    registry.check_files_to_predict('sst2', _data('sst2', predict_file=str(tmp_path)))
  task = registry.get_task('sst2', _data('sst2', predict_file='/dev/null'))
  with pytest.raises(FileNotFoundError, match=r'^GLUE sst2 test file /dev/null is no regular '
                     r'file \(a device\?\): check config.data.predict_file$'):
    task.read('test')
  (tmp_path / 'mine.tsv').write_text('index\tsentence\n')  # The user's: no re-download.
  task = registry.get_task('sst2', _data('sst2', predict_file=str(tmp_path / 'mine.tsv')))
  with pytest.raises(ValueError, match=r'mine.tsv: no examples in the file: it is empty or '
                     r'holds only a header; give it the rows to read$'):
    task.read('test')


def test_a_v1_model_told_it_predicts_a_v2_file(tmp_path, monkeypatch):
  """A squad_v1 run predicted a v2.0 file without a word: no question answered ''."""
  said = []
  monkeypatch.setattr(registry.logging, 'warning', lambda msg, *args: said.append(msg % args))
  (tmp_path / 'v2.json').write_text(json.dumps(dict(SQUAD, version='v2.0')))
  task = registry.get_task('squad_v1', _data('squad_v1', predict_file=str(tmp_path / 'v2.json')))
  assert [e.qas_id for e in task.read('test')[0]] == ['q1']
  assert said == [f'{tmp_path}/v2.json is SQuAD v2.0 (questions without an answer) but the model '
                  'was trained on v1.1: it answers every question with a span, never "" '
                  '(fine-tune on SQuAD v2.0 files for that)']
  said.clear()
  (tmp_path / 'v1.json').write_text(json.dumps(SQUAD))
  task = registry.get_task('squad_v1', _data('squad_v1', predict_file=str(tmp_path / 'v1.json')))
  task.read('test')
  assert not said


def test_a_folder_holding_the_results_of_other_inputs_is_never_written_into(tmp_path):
  """A preset's dev.tsv edited in place (or downloaded again) was scored into eval_step_N,
  replacing the earlier results: scored_into keeps them, by the inputs' digest it records."""
  folder = str(tmp_path / 'eval_step_2')
  assert scored_folders.scored_into(folder, 'a' * 64) == folder  # New.
  scored_folders.record_inputs(folder, 'a' * 64)
  assert scored_folders.scored_into(folder, 'a' * 64) == folder  # The same inputs again.
  assert scored_folders.scored_into(folder, 'b' * 64) == folder + '-bbbbbbbb'
  (tmp_path / 'eval_step_2' / scored_folders.INPUTS_FILE).write_text('{"sha')  # Damaged.
  assert scored_folders.scored_into(folder, 'a' * 64) == folder + '-aaaaaaaa'
  (tmp_path / 'older').mkdir()  # Written by a bertjax that kept no record: not replaced.
  assert scored_folders.scored_into(str(tmp_path / 'older'), 'a' * 64).endswith('older-aaaaaaaa')


def test_a_non_ascii_name_is_cut_by_its_bytes_and_a_urls_slash_changes_nothing(tmp_path):
  config, run = _glue_run(tmp_path)
  name = tmp_path / ('文' * 78 + '.tsv')  # 238 bytes: a name the file system takes.
  name.write_text('index\tsentence\n0\tfine .\n')
  config.data.predict_file = str(name)
  folder = scored_folders.scored_folder(config, run, 'predict', 2)
  assert len(folder.encode()) <= 120, folder
  (tmp_path / 'p' / folder).mkdir(parents=True)
  config.data.predict_file = ''
  run['data']['data_dir'] = config.data.data_dir = 'gs://bucket/glue'
  config.data.data_dir = 'gs://bucket/glue/'
  assert scored_folders.scored_folder(config, run, 'eval', 2) == 'eval_step_2'


def test_a_glob_that_matches_a_folder_too_says_so(tmp_path):
  (tmp_path / 'test.tsv').write_text('index\tsentence\n0\tfine .\n')
  (tmp_path / 'testdir').mkdir()
  with pytest.raises(ValueError, match=rf'names 2 paths, 1 of them a folder \({tmp_path}/testdir\)'
                     r': a GLUE task predicts one test TSV per run'):
    registry.check_files_to_predict('sst2', _data('sst2', predict_file=str(tmp_path / 'test*')))


def test_a_file_of_ones_own_needs_only_the_columns_read(tmp_path):
  """An STS-B file to predict had to carry all nine published columns (genre, filename, ...)."""
  (tmp_path / 'mine.tsv').write_text('index\tsentence1\tsentence2\n7\tA man plays.\tHe plays.\n')
  task = registry.get_task('stsb', _data('stsb', predict_file=str(tmp_path / 'mine.tsv')))
  [example], _ = task.read('test')
  assert (example.guid, example.text_a, example.text_b) == ('7', 'A man plays.', 'He plays.')
  (tmp_path / 'mine.tsv').write_text('index\tsentence1\n7\tA man plays.\n')
  with pytest.raises(ValueError, match=r"header has columns \['index', 'sentence1'\] but GLUE "
                     r"stsb test needs \['index', 'sentence1', 'sentence2'\] \(missing "
                     r"\['sentence2'\]\)"):
    task.read('test')

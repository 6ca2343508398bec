"""mode=eval and mode=predict of a run on a user's own files need nothing but --workdir: the
data the run read, and how it read it, come from its config.json (run_data.follow_run_data);
a --workdir inside the run (a step of its checkpoints) is told the flags that read it."""

import json
import pathlib
import re
import shutil

import log_records
import pytest

from bertjax.finetune import job
from bertjax.finetune import run_data
from bertjax.finetune import run_workdir
from bertjax.finetune import scored_folders
from bertjax.finetune.tasks import registry
from configs import finetune as finetune_config

REPO = pathlib.Path(__file__).resolve().parents[2]
ARGS = 'task=classification,size=tiny,seq=32,batch=8,lr=3e-3,epochs=2'


def _bare(mode, **data):
  """A config naming only the task, the mode and `data` (what a user types for an eval)."""
  config = finetune_config.get_config(ARGS)
  config.unlock()
  config.mode, config.eval_batch_size = mode, 8
  for key, value in data.items():
    config.data[key] = value
  return config


@pytest.fixture(scope='module')
def reviews_run(tmp_path_factory):
  """(workdir, data folder) of a tiny classifier on the checkout's reviews.csv (10 of its 48
  rows held out by seed 3), its test file new_reviews as one column, checkpoints 6 and 9 kept."""
  root = tmp_path_factory.mktemp('reviews')
  data = root / 'data'
  data.mkdir()
  shutil.copy(REPO / 'launch' / 'examples' / 'reviews.csv', data / 'reviews.csv')
  texts = (REPO / 'launch' / 'examples' / 'new_reviews.txt').read_text().splitlines()
  (data / 'new.tsv').write_text('review\n' + ''.join(f'{t}\n' for t in texts if t.strip()))
  config = _bare('train_eval', train_file=str(data / 'reviews.csv'),
                 test_file=str(data / 'new.tsv'), text_fields='review', label_field='sentiment')
  config.seed, config.checkpoint.every_steps = 3, 3
  job.run(config, str(root / 'run'))
  return root / 'run', data


def test_an_eval_naming_no_data_scores_the_runs_held_out_examples_as_it_did(reviews_run):
  workdir, _ = reviews_run
  written = job.run(_bare('eval'), str(workdir))
  folder = pathlib.Path(written[0]).parent
  assert folder.name == 'eval_step_9'
  scored = json.loads((folder / 'validation_results.json').read_text())
  trained = json.loads((workdir / 'eval_results.json').read_text())  # The run's last eval.
  assert scored.keys() == trained.keys() - {'step'}
  assert all(abs(scored[k] - trained[k]) < 1e-5 for k in scored), (scored, trained)
  rows = (folder / 'validation_predictions.jsonl').read_text().splitlines()
  assert len(rows) == 10  # 0.2 of 48, drawn by the run's seed 3.


def test_a_predict_naming_no_data_predicts_the_runs_test_file(reviews_run):
  workdir, data = reviews_run
  written = pathlib.Path(job.run(_bare('predict'), str(workdir))[0])
  assert written.parent.name == 'predict_step_9'
  rows = [json.loads(line) for line in written.read_text().splitlines()]
  assert len(rows) == len((data / 'new.tsv').read_text().splitlines()) - 1
  assert {r['label'] for r in rows} <= {'positive', 'negative'}


def test_a_file_of_a_split_the_mode_does_not_read_may_be_gone(reviews_run, tmp_path):
  """Hostile pass of 2026-12-04: eval stopped on the run's test file gone (`... is gone: pass
  --config.data.test_file=...`, which then made eval read no data of the run's), and predict
  on its training file gone."""
  workdir, data = reviews_run
  for name, mode in (('new.tsv', 'eval'), ('reviews.csv', 'predict')):
    (data / name).rename(tmp_path / name)
    try:
      written = job.run(_bare(mode), str(workdir))
    finally:
      (tmp_path / name).rename(data / name)
    assert pathlib.Path(written[0]).parent.name == f'{mode}_step_9'


def test_a_file_named_for_eval_is_read_with_the_runs_columns_not_its_training_file(reviews_run,
                                                                                 tmp_path):
  workdir, _ = reviews_run
  (tmp_path / 'more.csv').write_text('review,sentiment\na joy to watch,positive\n'
                                     'a dull mess,negative\nwonderful acting,positive\n')
  config = _bare('eval', eval_file=str(tmp_path / 'more.csv'))
  folder = pathlib.Path(job.run(config, str(workdir), step=6)[0]).parent
  assert folder.name.startswith('eval_step_6-more.csv-')
  assert len((folder / 'validation_predictions.jsonl').read_text().splitlines()) == 3
  assert (config.data.text_fields, config.data.train_file) == ('text', '')  # The caller's own.


@pytest.mark.parametrize('mode, under, step, said', [
    ('eval', 'checkpoints/6', None, 'is step 6 of the run {run}: pass --workdir={run} --step=6.'),
    ('predict', 'checkpoints', None, 'is inside the run {run}: pass --workdir={run}.'),
    ('eval', 'checkpoints/6/state', None, 'is inside step 6 of the run {run}: pass '
     '--workdir={run} --step=6.'),
    ('eval', 'checkpoints/06', '6', 'is step 6 of the run {run}: pass --workdir={run} --step=6.'),
    # Session 55's hostile pass: --step=5 beside a step-9 workdir was replaced by --step=9.
    ('eval', 'checkpoints/9', 'best', 'is step 9 of the run {run}: pass --workdir={run} '
     '--step=best (or --step=9, the step the workdir names).'),
    ('train_eval', 'checkpoints/9', None, 'is step 9 of the run {run}: pass --workdir={run} to '
     'resume it, or a new folder outside it to fine-tune anew.')])
def test_a_workdir_inside_the_run_names_the_run_and_its_step(reviews_run, mode, under, step,
                                                             said):
  workdir, _ = reviews_run
  with pytest.raises(ValueError) as raised:
    job.run(_bare(mode), str(workdir / under), step=step)
  assert str(raised.value) == f'--workdir={workdir / under} ' + said.format(run=workdir)


def test_only_what_the_user_left_unset_is_taken_from_the_run():
  run = _bare('train_eval', train_file='/d/t.csv', text_fields='review', label_field='y',
              format='tsv').to_dict()
  run['seed'] = 5
  config = _bare('eval', text_fields='other')
  assert run_data.follow_run_data(config, run) == {
      'label_field': 'y', 'train_file': '/d/t.csv', 'format': 'tsv', 'seed': 5}
  assert config.data.text_fields == 'other'  # Said differing by check_against_run, not replaced.
  named = _bare('eval', eval_file='/d/e.csv')
  assert run_data.follow_run_data(named, run) == {'text_fields': 'review', 'label_field': 'y'}
  assert named.seed == 0 and named.data.format == ''  # Its own file's format, from its name.
  moved = _bare('eval', train_file='/e/t.csv')  # The run's file, moved: read as it was.
  assert run_data.follow_run_data(moved, run) == {'text_fields': 'review', 'label_field': 'y',
                                                    'seed': 5}
  assert run_data.follow_run_data(_bare('train_eval'), run) == {}  # A resume: as given.


def test_a_runs_file_gone_since_is_said_as_the_runs_with_the_flag_to_pass(tmp_path):
  config = _bare('eval', train_file=str(tmp_path / 'reviews.csv'))
  with pytest.raises(FileNotFoundError) as raised:
    run_data.check_run_data_found(config, {'train_file': f'{tmp_path}/reviews.csv'}, '/w/run')
  assert str(raised.value) == (
      f'{tmp_path}/reviews.csv is gone (moved since the run trained?): the run read it as '
      'config.data.train_file (/w/run/config.json records it, and this eval named no data of its '
      'own); pass --config.data.train_file=<where it is now> (or --config.data.eval_file=FILE to '
      'score another file).')
  (tmp_path / 'reviews.csv').mkdir()  # Session 55's hostile pass: said 'fix the path'.
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{tmp_path}/reviews.csv is a folder now: the run read it as config.data.train_file')):
    run_data.check_run_data_found(config, {'train_file': f'{tmp_path}/reviews.csv'}, '/w/run')
  (tmp_path / 'reviews.csv').rmdir()
  (tmp_path / 'reviews.csv').write_text('review,sentiment\n')
  run_data.check_run_data_found(config, {'train_file': f'{tmp_path}/reviews.csv'}, '/w/run')
  # One glob of a comma list matching nothing now: it is named, not the whole list.
  config.data.train_file = f'{tmp_path}/reviews.csv,{tmp_path}/more-*.csv'
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{tmp_path}/more-*.csv is gone (moved since the run trained?): the run read it as')):
    run_data.check_run_data_found(config, {'train_file': config.data.train_file}, '/w/run')
  # Helper-173's pass: a preset's folder gone offered eval_file, which the preset refuses.
  preset = finetune_config.get_config('task=sst2,size=tiny,seq=16')
  preset.unlock()
  preset.mode, preset.data.data_dir = 'eval', str(tmp_path / 'glue')
  with pytest.raises(FileNotFoundError) as raised:
    run_data.check_run_data_found(preset, {'data_dir': preset.data.data_dir}, '/w/run')
  assert str(raised.value).endswith(
      "own); pass --config.data.data_dir=<where it is now>."), str(raised.value)


def test_an_eval_limit_past_the_eval_set_scores_it_all_into_its_own_folder(reviews_run):
  """Hostile pass of 2026-12-04: max_eval_examples=1000 of 10 examples wrote
  eval_step_N-first1000, as if a part of the set had been scored."""
  workdir, _ = reviews_run
  whole = _bare('eval', max_eval_examples=1000)
  assert pathlib.Path(job.run(whole, str(workdir))[0]).parent.name == 'eval_step_9'
  part = _bare('eval', max_eval_examples=10)  # As many as the set: whether it was cut is unknown.
  assert pathlib.Path(job.run(part, str(workdir))[0]).parent.name == 'eval_step_9-first10'


def test_a_test_file_beside_a_predict_file_is_said_not_to_be_predicted(tmp_path, monkeypatch):
  """Hostile pass of 2026-12-04: the training command line reused with a predict_file added
  predicted that file and ignored its test_file without a word."""
  for name in ('test.csv', 'new.csv'):
    (tmp_path / name).write_text('review\ngreat\n')
  data = _bare('predict', test_file=str(tmp_path / 'test.csv'),
               predict_file=str(tmp_path / 'new.csv')).data
  warned = log_records.recorded_warnings(monkeypatch, registry)
  registry.check_files_to_predict('classification', data, training=False)
  assert warned == [f'config.data.test_file={tmp_path}/test.csv is not predicted: mode=predict '
                    f'reads config.data.predict_file={tmp_path}/new.csv instead (drop one of them '
                    'to silence this)']
  warned.clear()
  registry.check_files_to_predict('classification', data)  # Training reads neither: no word.
  assert not warned


@pytest.mark.parametrize('mode', ['eval', 'predict'])
def test_a_workdir_holding_no_run_is_said_before_the_data(tmp_path, mode):
  """Session 55's hostile pass: mode=eval of an empty or missing folder (a mistyped --workdir)
  said 'task=classification: set config.data.train_file ...', the run's absence unsaid."""
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{tmp_path} holds no checkpoint: fine-tune first (mode=train_eval) with this --workdir.')):
    job.run(_bare(mode), str(tmp_path))
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'--workdir={tmp_path}/rnu does not exist: pass the folder of a fine-tuning run, or '
      'fine-tune first (mode=train_eval) with this --workdir.')):
    job.run(_bare(mode), str(tmp_path / 'rnu'))
  assert list(tmp_path.iterdir()) == []


def test_an_eval_whose_held_out_examples_differ_from_the_runs_is_refused(reviews_run, tmp_path):
  """Session 55's hostile pass: a seed edited in config.json (or another copy of the data, a run
  whose file no digest covers) drew other eval examples out of the training file, some of them
  trained on, and scored them into eval_step_N without a word."""
  workdir, _ = reviews_run
  run = json.loads((workdir / 'config.json').read_text())
  assert len(run['data']['held_out_sha256']) == len(run['data']['held_out_texts_sha256']) == 64
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  (copy / 'config.json').write_text(json.dumps(run | {'seed': 4}))
  before = sorted((copy / 'predictions').rglob('*')) if (copy / 'predictions').exists() else []
  # However many of them are scored (session 56's leftover: a cut other than the run's was not
  # checked), and, for a run older than the texts' digest, where cut as the run's were.
  older = copy_dict(run, seed=4)
  del older['data']['held_out_texts_sha256']
  for edited, digest, cut in ((run | {'seed': 4}, 'held_out_texts_sha256', {}),
                              (run | {'seed': 4}, 'held_out_texts_sha256',
                               {'max_eval_examples': 4}),
                              (older, 'held_out_sha256', {})):
    (copy / 'config.json').write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=re.escape(
        f'the eval examples drawn out of {run["data"]["train_file"]} now are not the ones {copy} '
        f'held out when it trained (sha256 {run["data"][digest][:12]}... then, ')):
      job.run(_bare('eval', **cut), str(copy))
    assert (sorted((copy / 'predictions').rglob('*')) if (copy / 'predictions').exists()
            else []) == before
  # The run's own draw, cut otherwise: scored.
  (copy / 'config.json').write_text(json.dumps(run))
  assert len(job.run(_bare('eval', max_eval_examples=4), str(copy))) == 1


def copy_dict(run: dict, **changes) -> dict:
  """A deep copy of a run's config.json, with top-level `changes`."""
  return json.loads(json.dumps(run)) | changes


def test_the_runs_own_file_edited_since_is_said_beside_its_folder(tmp_path, monkeypatch):
  """Session 55's hostile pass: its scores went to a folder of their own, the user left looking
  for eval_step_N without a word."""
  (tmp_path / 'ev.csv').write_text('review,sentiment\nfine,positive\n')
  config = _bare('eval', eval_file=str(tmp_path / 'ev.csv'))
  run = {'data': {'eval_file': str(tmp_path / 'ev.csv'), 'eval_sha256': 'a' * 64}}
  warned = log_records.recorded_warnings(monkeypatch, scored_folders)
  named = scored_folders.scored_folder(config, run, 'eval', 9)
  digest = run_data.data_digest(str(tmp_path / 'ev.csv'), 'eval_file')
  assert named == f'eval_step_9-ev.csv-{digest[:8]}'
  assert warned == [f'config.data.eval_file {tmp_path}/ev.csv was edited since the run trained '
                    f'(sha256 aaaaaaaaaaaa... then, {digest[:12]}... now): its scores go to '
                    f'predictions/{named}, beside those of the file as it was']
  run['data']['eval_sha256'] = digest
  assert scored_folders.scored_folder(config, run, 'eval', 9) == 'eval_step_9'
  assert len(warned) == 1


def test_a_test_file_beside_an_eval_is_said_unread_and_the_runs_data_scored(reviews_run,
                                                                            monkeypatch):
  """Session 54's leftover: an eval given the training command's flags with a test_file (here
  one gone) named data of its own, so the run's was not taken: 'has no eval data'."""
  workdir, _ = reviews_run
  warned = log_records.recorded_warnings(monkeypatch, job)
  written = job.run(_bare('eval', test_file='/gone/new.tsv'), str(workdir))
  assert pathlib.Path(written[0]).parent.name == 'eval_step_9'
  assert warned == ['config.data.test_file=/gone/new.tsv is not read by mode=eval, which scores '
                    'the eval split (mode=predict reads it)']


def test_an_eval_file_named_to_predict_is_said_unread(reviews_run, monkeypatch):
  """Helper-173's pass: mode=predict with an eval_file of its own predicted the run's test
  file without a word."""
  workdir, data = reviews_run
  warned = log_records.recorded_warnings(monkeypatch, job)
  written = job.run(_bare('predict', eval_file=str(data / 'reviews.csv')), str(workdir))
  assert [pathlib.Path(p).parent.name for p in written] == ['predict_step_9']
  assert warned == [f'config.data.eval_file={data}/reviews.csv is not read by mode=predict, '
                    'which predicts the test split: pass it as --config.data.predict_file to '
                    'predict it, or score it with mode=eval']


def test_a_predict_of_a_run_without_a_test_file_or_config_is_told_what_is_missing(reviews_run,
                                                                                  tmp_path):
  """Helper-173's pass: both were told 'set config.data.train_file', which the run had."""
  workdir, _ = reviews_run
  data = _bare('predict').data
  with pytest.raises(ValueError, match=r'^mode=predict predicts config.data.predict_file \(or '
                     r'test_file\), and task classification has neither \(nor did the run record '
                     r'one\): pass --config.data.predict_file=FILE\.$'):
    registry.check_files_to_predict('classification', data, training=False)
  registry.check_files_to_predict('classification', data)  # Training: nothing to predict yet.
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns('.lock', 'config.json'))
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{copy} holds checkpoints but not the config.json its run wrote (its task, labels, data '
      'and model, which eval and predict read): copy it back')):
    run_workdir.check_has_checkpoint(str(copy))
  run_workdir.check_has_checkpoint(str(workdir))


def test_scores_in_another_dtype_or_of_a_name_with_a_line_break_keep_their_own_folder(
    tmp_path, monkeypatch):
  """Helper-173's pass: an eval at model.dtype=bfloat16 replaced the float32 one's scores in
  eval_step_N without a word; a predict_file named with a line break split the summary line."""
  from bertjax import console  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(console, '_WARNED', set())
  warned = log_records.recorded_warnings(monkeypatch, console)
  run = {'model': {'dtype': 'float32'}, 'data': {}}
  config = _bare('eval')
  config.model.dtype = 'bfloat16'
  assert scored_folders.scored_folder(config, run, 'eval', 9) == 'eval_step_9-bfloat16'
  assert warned == ['model.dtype=bfloat16 is not the dtype the run trained and evaluated in '
                    '(float32): its scores go to predictions/eval_step_9-bfloat16, beside those '
                    'in float32']
  config.model.dtype = 'float32'
  assert scored_folders.scored_folder(config, run, 'eval', 9) == 'eval_step_9'
  odd = tmp_path / 'a\nb.csv'
  odd.write_text('review\nfine\n')
  named = scored_folders.scored_folder(_bare('predict', predict_file=str(odd)), run, 'predict', 9)
  assert named.startswith('predict_step_9-a_b.csv-') and '\n' not in named


def test_an_eval_of_the_file_the_run_trained_on_is_said(tmp_path, monkeypatch):
  """Helper-173's pass: eval_file=train.csv scored the training texts without a word (training
  says eval examples that are training texts; mode=eval read no training file)."""
  train = tmp_path / 'train.csv'
  train.write_text('review,sentiment\nfine,positive\nbad,negative\n')
  (tmp_path / 'copy.csv').write_text(train.read_text())
  (tmp_path / 'dev.csv').write_text('review,sentiment\nnew,positive\nold,negative\n')
  warned = log_records.recorded_warnings(monkeypatch, run_data)
  run = {'data': {'train_file': str(train)}}
  for name in ('train.csv', 'copy.csv', 'dev.csv'):
    run_data.warn_if_scoring_training_files(_bare('eval', eval_file=str(tmp_path / name)), run)
  run_data.warn_if_scoring_training_files(_bare('predict', eval_file=str(train)), run)
  said = 'the run trained on (config.data.train_file {}): its score is a free right answer'
  assert [line.split(': its score')[0] + ': its score is a free right answer'
          for line in warned] == [
      f'config.data.eval_file {train} is the file ' + said.format(train),
      f'config.data.eval_file {tmp_path}/copy.csv is a copy of the file ' + said.format(train)]


def test_an_eval_after_the_training_file_moved_scores_and_still_tells_a_copy_of_it(
    tmp_path, monkeypatch):
  """Helper-180's pass (moved runs and data): the user's files moved after training, an eval
  naming the eval file's new place ended on '[Errno 2] No such file or directory: .../train.csv'
  (the training-file check read the gone file's size); the moved training file itself is still
  told by the sha256 config.json records."""
  moved = tmp_path / 'moved'
  moved.mkdir()
  (moved / 'train.csv').write_text('review,sentiment\nfine,positive\nbad,negative\n')
  (moved / 'dev.csv').write_text('review,sentiment\nnew,positive\nold,negative\n')
  gone = tmp_path / 'train.csv'
  warned = log_records.recorded_warnings(monkeypatch, run_data)
  run = {'data': {'train_file': str(gone),
                  'train_sha256': run_data.data_digest(str(moved / 'train.csv'))}}
  run_data.warn_if_scoring_training_files(_bare('eval', eval_file=str(moved / 'dev.csv')), run)
  assert not warned
  run_data.warn_if_scoring_training_files(_bare('eval', eval_file=str(moved / 'train.csv')), run)
  assert warned == [f'config.data.eval_file {moved}/train.csv is a copy of the file the run '
                    f'trained on (config.data.train_file {gone}, gone from there since: its '
                    'sha256 in config.json): its score is a free right answer, above what new '
                    'text would get']


def test_an_eval_or_predict_reads_the_files_where_the_runs_latest_resume_found_them(
    reviews_run, tmp_path):
  """Helper-180's pass: files moved after the run began and given at their new place on a
  resume; mode=eval and predict naming no data read the paths of config.json (gone), not the
  resume's (config-resumed-at-N.json), and were told the files were gone."""
  workdir, data = reviews_run
  run = tmp_path / 'run'
  shutil.copytree(workdir, run)
  recorded = json.loads((run / 'config.json').read_text())
  began = json.loads(json.dumps(recorded))  # config.json as the run began, its folder gone.
  for key in ('train_file', 'test_file'):
    began['data'][key] = str(tmp_path / 'gone' / pathlib.Path(recorded['data'][key]).name)
  (run / 'config.json').write_text(json.dumps(began))
  (run / 'config-resumed-at-6.json').write_text(json.dumps(recorded))  # Found at `data`.
  scored = pathlib.Path(job.run(_bare('eval'), str(run))[0]).parent
  rows = (scored / 'validation_predictions.jsonl').read_text().splitlines()
  assert len(rows) == 10  # The run's held-out examples of its training file, at its new place.
  written = pathlib.Path(job.run(_bare('predict'), str(run))[0])
  assert len(written.read_text().splitlines()) == len(
      (data / 'new.tsv').read_text().splitlines()) - 1

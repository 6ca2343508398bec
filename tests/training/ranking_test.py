"""How a run's evals rank (bertjax/training/ranking.py), without a run: NaN, unreachable
patience. (best_checkpoint_test runs jobs on one device for the rest.)"""

import json
import math
import os

import best_checkpoint_test

from bertjax.training import checkpoint_reader
from bertjax.training import ranking
from bertjax.training import run_files

kept_steps, _save_ranked = best_checkpoint_test.kept_steps, best_checkpoint_test._save_ranked  # pylint: disable=protected-access


def test_an_eval_of_nan_ranks_last_for_keep_best_step_best_and_early_stopping(tmp_path):
  """Hostile pass of session 35, 1: NaN compares neither way, so orbax's sort kept the NaN step
  as the best, deleted the real best, and --step=best read the NaN model without a word."""
  nan = float('nan')
  _save_ranked(tmp_path, {1: 0.5, 2: nan, 3: 0.6})
  assert kept_steps(tmp_path) == {1, 3}
  assert checkpoint_reader.resolve_step(tmp_path, 'best') == 1
  for mode, values in (('min', {1: 0.5, 2: nan, 3: 0.6}), ('max', {1: 0.5, 2: nan, 3: 0.4}),
                       ('max', {1: nan, 2: 0.5, 3: 0.4})):
    history = {step: {'loss': value} for step, value in values.items()}
    best = 2 if values[1] != values[1] else 1
    assert ranking.since_best(history, 'loss', mode) == (best, 3 - best), (mode, values)


def test_patience_that_no_run_of_its_evals_can_reach_is_said(caplog):
  """Hostile pass of session 35, 7: patience 3 on a run with one eval ended as if none were set,
  without a word."""
  ranking.warn_if_patience_unreached(3, 100, 4)
  assert ('early_stopping_patience=3 counts evals without an improvement, but this run '
          'evaluates 1 time(s) (every 100 of 4 steps): it cannot stop early') in caplog.text
  caplog.clear()
  for patience, every, steps in ((3, 1, 4), (0, 100, 4), (2, 0, 4)):
    ranking.warn_if_patience_unreached(patience, every, steps)
  assert 'early_stopping_patience' not in caplog.text


def test_a_metric_of_nan_is_written_as_strict_json_and_read_back_as_nan(tmp_path):
  """Session 35's leftover: a NaN metric (a constant prediction's pearson) was written as the
  bare word NaN, which Python reads but jq, JavaScript and strict parsers refuse."""
  nan, inf = float('nan'), float('inf')
  run_files.record_eval(tmp_path, {2: {'pearson': nan, 'loss': 0.5}, 4: {'pearson': 0.3,
                                                                         'loss': inf}})
  text = (tmp_path / run_files.EVAL_HISTORY).read_text()
  def refuse(word):
    raise ValueError(f'not strict JSON: {word}')
  strict = json.loads(text, parse_constant=refuse)
  assert strict == {'2': {'loss': 0.5, 'pearson': None}, '4': {'loss': None, 'pearson': 0.3}}
  history = run_files.eval_history(tmp_path, up_to_step=10)
  assert math.isnan(history[2]['pearson']) and math.isnan(history[4]['loss'])
  assert ranking.since_best(history, 'pearson', 'max') == (4, 0)
  results = tmp_path / 'eval_results.json'
  run_files.write_json(results, {'pearson': nan, 'nested': [inf, 1.0]})
  assert json.loads(results.read_text(), parse_constant=refuse) == {'nested': [None, 1.0],
                                                                     'pearson': None}
  ended = tmp_path / 'ended'  # A run without a history: its results, read back as written.
  ended.mkdir()
  run_files.write_json(ended / 'eval_results.json', {'pearson': nan, 'loss': 0.5})
  step, metrics = run_files.last_eval(ended, 3, 3)
  assert step == 3 and metrics['loss'] == 0.5 and math.isnan(metrics['pearson'])


def test_a_reader_of_a_run_training_now_says_its_newest_step_is_not_its_last(tmp_path,
                                                                             monkeypatch):
  """Hostile pass of session 36 (user files, 15): predict on a run still training read its
  newest step without a word that the run goes on."""
  import log_records  # noqa: PLC0415

  from bertjax import console  # noqa: PLC0415
  from bertjax.training import workdir_lock  # noqa: PLC0415
  _save_ranked(tmp_path, {1: 0.5, 2: 0.4})
  lines = log_records.recorded_warnings(monkeypatch, console)
  monkeypatch.setattr(console, '_WARNED', set())
  checkpoint_reader.resolve_step(tmp_path, None)
  assert not lines and workdir_lock.live_holder(str(tmp_path)) == ''  # Ended: nothing said.
  with workdir_lock.locked(str(tmp_path)):
    assert workdir_lock.live_holder(str(tmp_path)) == f'pid {os.getpid()}'
    checkpoint_reader.resolve_step(tmp_path, None)
    checkpoint_reader.resolve_step(tmp_path, None)  # Asked again (mode=eval does): said once.
    checkpoint_reader.resolve_step(tmp_path, 2)  # A step asked by number: nothing to say.
  assert lines == [f'{tmp_path} is training now (pid {os.getpid()}): its newest checkpoint '
                   'is read (step 2, or one saved since), not its final one']


def test_a_reader_of_a_run_stopped_before_it_finished_says_so(tmp_path, monkeypatch):
  """Helper-172's pass on predict: a run preempted, interrupted or killed before its last step
  was read from without a word (one training now, or stopped early, is said)."""
  import log_records  # noqa: PLC0415

  from bertjax import console  # noqa: PLC0415
  _save_ranked(tmp_path, {1: 0.5, 2: 0.6})
  recorded = json.loads((tmp_path / 'config.json').read_text())
  logs = [log_records.recorded_warnings(monkeypatch, module)
          for module in (console, checkpoint_reader, run_files)]

  def said(total, patience=0, step=None, saved=None):
    (tmp_path / 'config.json').write_text(json.dumps(
        {**recorded, 'num_train_steps': total, 'early_stopping_patience': patience}))
    (tmp_path / run_files.SAVED).unlink(missing_ok=True)
    if saved is not None:
      run_files.write_json(tmp_path / run_files.SAVED, {'newest_step': saved})
    for lines in logs:
      lines.clear()
    monkeypatch.setattr(console, '_WARNED', set())
    assert checkpoint_reader.resolve_step(tmp_path, step) == step  # None: the newest.
    return [line for lines in logs for line in lines]

  assert said(5) == [f'{tmp_path} stopped at step 2 of its 5, before it finished (preempted, '
                     'interrupted or killed), and its newest checkpoint is read: rerun its '
                     'command to finish it, or pass --step=2 to read this step without this '
                     'warning']
  assert said(5, saved=2) == said(5)  # Its record of saves agrees.
  assert said(2) == said(2, saved=2) == []  # Finished.
  assert said(5, step=2) == []  # The step asked for by number.
  # Stopped early (no better loss in 1 eval): its own line where best is not newest, not this.
  assert said(5, patience=1) == [
      f'{tmp_path} stopped early: loss did not improve for 1 evaluation after step 1, its best '
      '(0.5): --step=latest reads its last step, 2; --step=best reads step 1']
  # Newer steps saved and gone: that is said, not a stop before the end.
  assert [line.split(':')[0] for line in said(5, saved=4)] == [
      f'{tmp_path} saved checkpoints up to step 4 ({run_files.SAVED}) but {tmp_path}/checkpoints '
      'holds none after step 2']

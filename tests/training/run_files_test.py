"""The files a run keeps beside its checkpoints, damaged (bertjax/training/run_files.py): each
read names the file and what to do, where a JSON error without a file name or a traceback was."""

import json

import pytest

from bertjax.training import run_files


@pytest.mark.parametrize('text, why', [
    ('{bad', 'not JSON: Expecting property name'),
    ('[]', 'a JSON list, not an object'),
    ('{"2": 5}', 'not {step: metrics}'),
    ('{"2": {"loss": "low"}}', 'not {step: metrics}'),
    ('{"two": {"loss": 0.5}}', 'not {step: metrics}'),
])
def test_a_damaged_eval_history_is_named_with_what_to_do(tmp_path, text, why):
  """Hostile pass of session 35, 7: '{bad' stopped the resume with 'Expecting property name
  enclosed in double quotes: line 1 column 2', naming no file; a list or a non-dict value was
  an AttributeError or a TypeError in --step=best."""
  (tmp_path / 'eval_history.json').write_text(text)
  with pytest.raises(ValueError) as raised:
    run_files.eval_history(tmp_path, 10)
  said = str(raised.value)
  assert said.startswith(f'{tmp_path}/eval_history.json is damaged ({why}'), said
  assert said.endswith('restore it, or delete it (early stopping and --step=best then know only '
                       'the evals after it).')


def test_a_sound_eval_history_reads_up_to_the_step(tmp_path):
  run_files.record_eval(tmp_path, {2: {'loss': 0.5}, 4: {'loss': float('nan')}})
  assert run_files.eval_history(tmp_path, 3) == {2: {'loss': 0.5}}
  assert list(run_files.eval_history(tmp_path, 10)) == [2, 4]


def test_a_damaged_record_of_saves_is_named_with_what_to_do(tmp_path):
  (tmp_path / 'checkpoints').mkdir()
  for text in ('{oops', '[19]'):
    (tmp_path / 'checkpoints_saved.json').write_text(text)
    with pytest.raises(ValueError, match=f'^{tmp_path}/checkpoints_saved.json is damaged'):
      run_files.lost_checkpoints(tmp_path)
  (tmp_path / 'checkpoints_saved.json').write_text(json.dumps({'newest_step': 19}))
  assert 'its checkpoints/ holds no checkpoint' in run_files.lost_checkpoints(tmp_path)

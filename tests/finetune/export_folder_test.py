"""bertjax.export's refusal of --output=RUN for a fine-tuning run: the folder it suggests lies
beside the run, where an export may go (checked in-process on a folder laid out as a run)."""

import os
import re

import pytest

from bertjax.interop import export_folder


def _run(folder):
  (folder / 'checkpoints' / '12').mkdir(parents=True)
  (folder / 'config.json').write_text('{}')
  return folder


@pytest.mark.parametrize('source', ['run', 'run/checkpoints/12'])
def test_over_a_run_the_suggested_output_is_beside_the_run(tmp_path, source):
  run = _run(tmp_path / 'run')
  with pytest.raises(FileExistsError, match='never over or around it') as refused:
    export_folder.check(str(run), True, str(tmp_path / source))
  suggested = re.search(r'--output=(\S+)\.$', str(refused.value)).group(1)
  assert suggested == str(run) + '_export'
  assert os.path.dirname(suggested) == str(tmp_path)  # Beside the run, not inside it.
  export_folder.check(suggested, True, str(tmp_path / source))  # Which the check accepts.


def test_over_a_model_folder_the_suggested_output_is_beside_it(tmp_path):
  model = tmp_path / 'model'
  model.mkdir()
  (model / 'config.json').write_text('{}')
  with pytest.raises(FileExistsError, match=re.escape(f'--output={model}_export.')):
    export_folder.check(str(model), True, str(model))

"""Fine-tuning options each tested alone, here combined as a user combines them (helper-186's
hostile pass): a tiny SST-2-like run with dropout off, compared with the same run without
the option whose combination is the subject."""

import pathlib

import finetune_runs
import pytest

from bertjax.finetune import job

ONE_DEVICE = pytest.mark.usefixtures('one_device')


@pytest.fixture(scope='module')
def sst2_dir(tmp_path_factory):
  return finetune_runs.write_sst2(tmp_path_factory.mktemp('sst2'))


def _run(sst2_dir, workdir, **fields):
  config = finetune_runs.tiny_config(sst2_dir, **{'data.max_seq_length': 48, **fields})
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0
  return job.train_and_evaluate(config, str(workdir))


def _predictions(workdir) -> list[str]:
  return [p.read_text() for p in sorted((pathlib.Path(workdir) / 'predictions').rglob('*.*'))]


@ONE_DEVICE
def test_packed_rows_split_into_grad_accumulation_micro_batches(sst2_dir, tmp_path):
  """Packed rows (16 examples 3 to a row: 6) were rounded up to data.packed_rows_multiple_of
  alone, and grad_accum_steps=4 then failed in the step with JAX's 'cannot reshape array of
  shape (6, 3) ... into shape (1, 4, 3)': the rows are rounded up to a multiple of the
  micro-batches too, and train like the same examples one per row."""
  accum = {'grad_accum_steps': 4, 'data.packed_rows_multiple_of': 1}
  one = _run(sst2_dir, tmp_path / 'one', **accum)
  packed = _run(sst2_dir, tmp_path / 'packed', **accum, **{'data.max_instances_per_row': 3})
  for key, value in one.items():
    assert packed[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
  assert _predictions(tmp_path / 'packed') == _predictions(tmp_path / 'one') != []

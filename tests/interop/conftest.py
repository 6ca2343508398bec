"""A classifier fine-tuned here (tiny, SST-2-like), shared by the export tests."""

import finetune_runs
import pytest

from bertjax.finetune import job


@pytest.fixture(scope='session')
def fine_tuned_sst2(tmp_path_factory):
  """(workdir, data dir) of a tiny classifier that predicts both labels on its dev set."""
  root = tmp_path_factory.mktemp('sst2')
  data = finetune_runs.write_sst2(root / 'data', n_train=64, n_dev=40)
  workdir = root / 'run'
  job.train_and_evaluate(finetune_runs.tiny_config(
      data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3}), str(workdir))
  return workdir, data

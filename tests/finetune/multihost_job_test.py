"""Two processes (jax.distributed on 127.0.0.1, gloo, 4 CPU devices each) fine-tune together
through `python -m bertjax.main` and end where one process with 8 devices ends: same params,
same eval predictions, every eval example scored once (24 examples, eval batch 16: the second
batch is part padding, and the padding is split across the hosts).

Each host feeds its contiguous half of every global batch; the global arrays, and so the
dropout masks, are the single process's, so only the order of floating-point sums differs.
"""

import json
import os
import pathlib
import sys

import finetune_runs
import gcs_emulator
import numpy as np
import pretrain_runs
import pytest
import two_processes

from bertjax import files
from bertjax.finetune import job as finetune

FIELDS = {'mesh.data': 4, 'mesh.fsdp': 2, 'num_train_steps': 6, 'model.vocab_size': 8192,
          'eval_batch_size': 16, 'log_every_steps': 2, 'checkpoint.every_steps': 3}
ARG = 'task=sst2,size=tiny,seq=16,batch=16,lr=1e-3'



def _fields(data_dir, packed: bool) -> dict:
  fields = FIELDS | {'data.data_dir': str(data_dir)}
  if packed:
    fields |= {'data.max_seq_length': 48, 'data.max_instances_per_row': 3}
  return fields


@pytest.fixture(scope='module')
def single_process_run(tmp_path_factory):
  """packed -> the workdir of one process with 8 devices on the same task (the reference; run
  once per layout and shared by the variants: the task files are the same, seed 0)."""
  runs = {}

  def run(packed: bool) -> pathlib.Path:
    if packed not in runs:
      root = tmp_path_factory.mktemp('packed' if packed else 'one_per_row')
      data_dir = finetune_runs.write_sst2(root / 'sst2')
      config = finetune_runs.tiny_config(data_dir, **_fields(data_dir, packed))
      config.unlock()
      finetune.train_and_evaluate(config, str(root / 'single'))
      runs[packed] = root / 'single'
    return runs[packed]

  return run


@pytest.mark.parametrize('packed,bucket', [(False, False), (True, True)],
                         ids=['one_per_row_local', 'packed_in_a_bucket'])
def test_two_hosts_equal_one(tmp_path, packed, bucket, request, single_process_run):
  """Packed: 16 examples of ~10 tokens in 8 rows of 48 (3 to a row, rounded up to 8 for the
  data-parallel size), each host sending its 4 rows. Bucket: the two hosts read the task files
  from a bucket (the GCS emulator) and write their run there, as on a pod. Packing and the
  bucket are independent (the files are read before rows are packed), so one two-process run
  takes both, the other neither: each two-process run costs ~30 s of the suite's time alone."""
  data_dir = finetune_runs.write_sst2(tmp_path / 'sst2')
  fields = _fields(data_dir, packed)
  single_dir = single_process_run(packed)

  env = pretrain_runs.environment(4, tmp_path / 'jax-cache')
  address = f'--coordinator_address=127.0.0.1:{two_processes.free_port()}'
  workdir = tmp_path / 'two'
  workdir.mkdir()
  logs = [workdir / f'host-{i}.txt' for i in range(2)]
  if bucket:
    root = request.getfixturevalue('gcs_bucket')
    files.copy_tree(str(data_dir), f'{root}/sst2')
    fields['data.data_dir'] = f'{root}/sst2'
    env = env | {k: os.environ[k] for k in gcs_emulator.ENV_NAMES}
    workdir = f'{root}/two'
  command = [sys.executable, '-m', 'bertjax.main', f'--config=configs/finetune.py:{ARG}',
             *[f'--config.{k}={v}' for k, v in fields.items()], f'--workdir={workdir}',
             address, '--num_processes=2']
  processes = [pretrain_runs.start(command + [f'--process_id={i}'], logs[i], env)
               for i in range(2)]
  for process, log in zip(processes, logs, strict=True):
    assert pretrain_runs.finish(process, log) == 0, pretrain_runs.log_tail(log)
  # Process 0 ends with the summary line; process 1 prints none.
  assert logs[0].read_text().strip().splitlines()[-1].startswith('finetune finished in ')
  assert 'finetune finished' not in logs[1].read_text()

  (one, step_one) = finetune_runs.final_params(single_dir)
  if bucket:
    assert not files.exists(f'{workdir}/.lock')  # Process 0's lease is given back.
    recorded = json.loads(files.read_text(f'{workdir}/config.json'))
    assert recorded['data']['data_dir'] == f'{root}/sst2', recorded['data']
    with files.local_copy(workdir) as local:
      (two, step_two) = finetune_runs.final_params(local)
      hosts = (pathlib.Path(local) / 'predictions/step_6/sst2-validation.tsv').read_text()
  else:
    (two, step_two) = finetune_runs.final_params(workdir)
    hosts = (workdir / 'predictions/step_6/sst2-validation.tsv').read_text()
  assert step_one == step_two == 6
  for key in one:
    np.testing.assert_allclose(two[key], one[key], atol=2e-5, rtol=1e-4, err_msg=key)
  single = (single_dir / 'predictions/step_6/sst2-validation.tsv').read_text().splitlines()
  assert len(single) == 1 + 24
  assert hosts.splitlines() == single

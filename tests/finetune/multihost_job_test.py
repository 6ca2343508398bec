"""Two processes (jax.distributed on 127.0.0.1, gloo, 4 CPU devices each) fine-tune together
through `python -m bertjax.main` and end where one process with 8 devices ends: same params,
same eval predictions, every eval example scored once (24 examples, eval batch 16: the second
batch is part padding, and the padding is split across the hosts).

Each host feeds its contiguous half of every global batch; the global arrays, and so the
dropout masks, are the single process's, so only the order of floating-point sums differs.
"""

import socket
import sys

import finetune_runs
import numpy as np
import pretrain_runs
import pytest

from bertjax.finetune import job as finetune

FIELDS = {'mesh.data': 4, 'mesh.fsdp': 2, 'num_train_steps': 6, 'model.vocab_size': 8192,
          'eval_batch_size': 16, 'log_every_steps': 2, 'checkpoint.every_steps': 3}
ARG = 'task=sst2,size=tiny,seq=16,batch=16,lr=1e-3'


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.mark.parametrize('packed', [False, True], ids=['one_per_row', 'packed'])
def test_two_hosts_equal_one(tmp_path, packed):
  """Packed: 16 examples of ~10 tokens in 8 rows of 48 (3 to a row, rounded up to 8 for the
  data-parallel size), each host sending its 4 rows."""
  data_dir = finetune_runs.write_sst2(tmp_path / 'sst2')
  fields = FIELDS | {'data.data_dir': str(data_dir)}
  if packed:
    fields |= {'data.max_seq_length': 48, 'data.max_instances_per_row': 3}
  config = finetune_runs.tiny_config(data_dir, **fields)
  config.unlock()
  finetune.train_and_evaluate(config, str(tmp_path / 'single'))

  env = pretrain_runs.environment(4, tmp_path / 'jax-cache')
  address = f'--coordinator_address=127.0.0.1:{_free_port()}'
  workdir = tmp_path / 'two'
  workdir.mkdir()
  logs = [workdir / f'host-{i}.txt' for i in range(2)]
  command = [sys.executable, '-m', 'bertjax.main', f'--config=configs/finetune.py:{ARG}',
             *[f'--config.{k}={v}' for k, v in fields.items()], f'--workdir={workdir}',
             address, '--num_processes=2']
  processes = [pretrain_runs.start(command + [f'--process_id={i}'], logs[i], env)
               for i in range(2)]
  for process, log in zip(processes, logs, strict=True):
    assert pretrain_runs.finish(process, log) == 0, pretrain_runs.log_tail(log)

  (one, step_one) = finetune_runs.final_params(tmp_path / 'single')
  (two, step_two) = finetune_runs.final_params(workdir)
  assert step_one == step_two == 6
  for key in one:
    np.testing.assert_allclose(two[key], one[key], atol=2e-5, rtol=1e-4, err_msg=key)
  single = (tmp_path / 'single/predictions/step_6/sst2-validation.tsv').read_text().splitlines()
  hosts = (workdir / 'predictions/step_6/sst2-validation.tsv').read_text().splitlines()
  assert len(single) == 1 + 24
  assert hosts == single

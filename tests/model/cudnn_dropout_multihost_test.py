"""Two real processes (jax.distributed on 127.0.0.1, gloo CPU collectives): where cuDNN's
attention-dropout check fails on one process only, every process settles on the XLA attention
(different kernels would make the processes compile different programs), and the one whose own
check passed names the process that failed."""

import json
import pathlib
import sys

import pytest
import two_processes

TIMEOUT_S = 120


def _worker(process_id: int, port: int, folder: pathlib.Path):
  import jax

  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}', num_processes=2,
                             process_id=process_id, initialization_timeout=60)
  from bertjax.model import platform_defaults
  from configs import common

  model = common.model_config('base', dtype='bfloat16')
  own = 'it broke here' if process_id == 0 else ''
  line = platform_defaults.settle(model, 'gpu', dropout_check=lambda packed: own)
  passing = common.model_config('base', dtype='bfloat16')
  both_pass = platform_defaults.settle(passing, 'gpu', dropout_check=lambda packed: '')
  (folder / f'result-{process_id}.json').write_text(json.dumps(dict(
      attention=model.attention_impl, line=line, both_pass=passing.attention_impl,
      both_pass_line=both_pass)))
  jax.distributed.shutdown()


@pytest.fixture(scope='module')
def results(tmp_path_factory):
  return two_processes.run_workers(__file__, tmp_path_factory.mktemp('multihost_check'),
                                   devices=1, timeout_s=TIMEOUT_S)


def test_one_process_failing_the_check_gives_every_process_the_xla_attention(results):
  assert [r['attention'] for r in results] == ['xla', 'xla']
  assert results[0]['line'] == 'attention xla (it broke here), layers unrolled: GPU defaults'
  assert results[1]['line'] == ('attention xla (cuDNN attention dropout failed its check on '
                                'process 0 of 2), layers unrolled: GPU defaults')


def test_every_process_passing_keeps_cudnn(results):
  assert [r['both_pass'] for r in results] == ['cudnn', 'cudnn']
  assert all(r['both_pass_line'].startswith('attention cudnn, layers unrolled: GPU defaults; ')
             for r in results)


if __name__ == '__main__':
  _worker(int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3]))

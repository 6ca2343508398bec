"""A multi-host job's hosts (two real processes, jax.distributed on 127.0.0.1, gloo) refuse to
start on different commands, or on a workdir that is a folder on each host's own disk (simulated
by one folder per process); the same command in one shared folder starts. Then through
bertjax.main: a host given another --config override stops both, with one line each."""

import json
import pathlib
import re
import subprocess
import sys

import commands
import finetune_runs
import pytest
import two_processes

REPO = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 240


def _worker(process_id: int, port: int, folder: pathlib.Path):
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}', num_processes=2,
                             process_id=process_id, initialization_timeout=60)
  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  from bertjax.training import run_files  # pylint: disable=g-import-not-at-top
  from bertjax.training import workdir_lock  # pylint: disable=g-import-not-at-top
  from configs import pretrain  # pylint: disable=g-import-not-at-top

  def outcome(check) -> str:
    try:
      check()
    except ValueError as e:
      return str(e)
    return 'ok'

  def locked(workdir):
    with workdir_lock.locked(str(workdir)):
      pass

  config = pretrain.get_config('size=tiny')
  other = pretrain.get_config('size=tiny')
  if process_id == 1:
    other.optimizer.learning_rate = 3e-4
    other.data.train_files = '/elsewhere/*.tfrecord'
  result = {
      'same': outcome(lambda: hosts.check_same_command(config, '/runs/w')),
      'other_config': outcome(lambda: hosts.check_same_command(other, '/runs/w')),
      'other_workdir': outcome(lambda: hosts.check_same_command(config, f'/runs/w{process_id}')),
      'shared': outcome(lambda: locked(folder / 'shared')),
      'own_disks': outcome(lambda: locked(folder / f'disk-{process_id}')),
      'other_step': outcome(lambda: hosts.check_same_command(
          config, '/runs/w', step=('best', 'latest')[process_id])),
      'same_view': outcome(lambda: hosts.check_same_view('/runs/w', 'steps [2, 8]')),
      'other_view': outcome(lambda: hosts.check_same_view(
          '/runs/w', ('steps [2, 8]', 'steps []')[process_id])),
      # A resume with another vocab than the run's: every host stops, not process 0 alone.
      'other_vocab': outcome(lambda: run_files.keep_run_vocab(
          str(folder / 'vocab_run'), str(folder / 'other_vocab.txt'))),
  }
  result['record_fails'] = _finetune_where_process_0_cannot_record(process_id, folder)
  result['folder'] = str(folder)
  (folder / f'result-{process_id}.json').write_text(json.dumps(result))


def _finetune_where_process_0_cannot_record(process_id: int, folder: pathlib.Path) -> str:
  """Both hosts fine-tune; process 0's write of the eval history (the first eval's, at step 2)
  fails as a full disk would: what each host raised."""
  import errno  # pylint: disable=g-import-not-at-top

  import finetune_runs  # pylint: disable=g-import-not-at-top

  from bertjax.finetune import job  # pylint: disable=g-import-not-at-top
  from bertjax.training import run_files  # pylint: disable=g-import-not-at-top

  def full(*_):
    raise OSError(errno.ENOSPC, 'No space left on device')

  if process_id == 0:
    run_files.record_eval = full
  config = finetune_runs.tiny_config(folder / 'sst2', num_epochs=1.0)
  try:
    job.train_and_evaluate(config, str(folder / 'finetune'))
  except Exception as e:  # pylint: disable=broad-except
    return f'{type(e).__name__}: {e}'
  return 'trained'


@pytest.fixture(scope='module')
def results(tmp_path_factory):
  folder = tmp_path_factory.mktemp('hosts')
  (folder / 'vocab_run').mkdir()
  (folder / 'vocab_run' / 'vocab.txt').write_text('[PAD]\nthe\n')
  (folder / 'other_vocab.txt').write_text('[PAD]\nand\n')
  finetune_runs.write_sst2(folder / 'sst2', n_train=32, n_dev=16)
  return two_processes.run_workers(__file__, folder, devices=1, timeout_s=TIMEOUT_S)


def test_a_resume_with_another_vocab_stops_every_host(results):
  for result in results:
    assert result['other_vocab'].startswith(
        f'{result["folder"]}/vocab_run was trained with the vocab'), result['other_vocab']


def test_the_same_command_in_a_shared_workdir_starts(results):
  assert [r['same'] for r in results] == ['ok', 'ok']
  assert [r['shared'] for r in results] == ['ok', 'ok']


def test_another_config_on_one_host_is_refused_on_both_naming_the_fields(results):
  first, second = (r['other_config'] for r in results)
  assert first.startswith('process 1 of this job run another config, --workdir or flags than '
                          'process 0')
  assert second.startswith('process 1 runs another command than process 0: '
                           "config.data.train_files='/elsewhere/*.tfrecord' here, ")
  assert "config.optimizer.learning_rate=0.0003 here, 0.002 on process 0" in second
  assert second.endswith('run the same command, config, --workdir and flags on every host (the '
                         'launchers in launch/ do).')
  assert "workdir='/runs/w1' here, '/runs/w0' on process 0" in results[1]['other_workdir']
  assert results[0]['other_workdir'].startswith('process 1 of this job run another config')


def test_a_folder_on_each_hosts_disk_is_refused_on_both(results):
  for result in results:
    assert 'is not one folder for every host: process 1 does not see the lock process 0 just ' \
        'wrote there' in result['own_disks'], result['own_disks']
    assert 'pass a bucket (gs://...) or a folder on a file system all the hosts share' in \
        result['own_disks']


def test_another_step_flag_on_one_host_is_refused_on_both(results):
  """Pass AB: --step=best on one host, latest on the other, ended in a device_put assertion
  and the parameters printed."""
  assert results[1]['other_step'].startswith(
      "process 1 runs another command than process 0: --step='latest' here, 'best' on process 0")
  assert results[0]['other_step'].startswith('process 1 of this job run another config')


def test_a_reader_whose_hosts_see_other_checkpoints_is_refused_on_both(results):
  """Pass AB: eval/predict on a workdir one host does not see hung 5 minutes, then aborted."""
  assert [r['same_view'] for r in results] == ['ok', 'ok']
  for result in results:
    assert result['other_view'] == (
        '--workdir=/runs/w reads differently on the hosts (process 0: steps [2, 8]; process 1: '
        'steps []): pass a bucket (gs://...) or a folder on a file system all the hosts share, '
        'and a run that is not saving (or --step=N).')


def test_main_stops_both_hosts_when_one_is_given_another_override(tmp_path):
  address = f'--coordinator_address=127.0.0.1:{two_processes.free_port()}'
  env = commands.environ()
  extra = [[], ['--config.optimizer.warmup_steps=7']]
  hosts = [subprocess.Popen(
      [sys.executable, '-m', 'bertjax.main', f'--config={REPO}/configs/pretrain.py:size=tiny',
       '--workdir=w', address, '--num_processes=2', f'--process_id={i}', *extra[i]],
      cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  try:
    errors = [host.communicate(timeout=TIMEOUT_S)[1] for host in hosts]
  finally:
    for host in hosts:
      if host.poll() is None:
        host.kill()
  assert [host.returncode for host in hosts] == [1, 1], errors
  last = [e.strip().splitlines()[-2] for e in errors]  # Before '(--verbosity=1 shows ...)'.
  assert last[0].startswith('error: process 1 of this job run another config'), errors[0]
  assert last[1].startswith('error: process 1 runs another command than process 0: '
                            'config.optimizer.warmup_steps=7 here, '), errors[1]
  assert not (tmp_path / 'w').exists()  # Nothing written: no host got as far as the lock.


if __name__ == '__main__':
  _worker(int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3]))


def test_init_from_read_differently_on_the_hosts_is_refused_before_placing(minilm_dir,
                                                                           monkeypatch):
  """Pass AD: each host resolved init_from's latest / best itself: against a run saving
  meanwhile, hosts could read other steps and place them as one array. What each host read is
  compared first (another host's view, simulated)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from bertjax.interop import init_from  # pylint: disable=g-import-not-at-top
  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  other = np.zeros(32 + hosts._VIEW_BYTES, np.uint8)  # pylint: disable=protected-access
  other[32:32 + 9] = np.frombuffer(b'/run/ck/9', np.uint8)
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(hosts, '_gathered', lambda mine: np.stack([mine, other]))
  with pytest.raises(ValueError, match=(
      rf'^init_from={minilm_dir} reads differently on the hosts \(process 0: {minilm_dir}; '
      r'process 1: /run/ck/9\): pass a source on a file system all the hosts share')):
    init_from.load_encoder(str(minilm_dir), {'bert': {}}, {'bert': {}}, 6)
  with pytest.raises(ValueError, match=r'reads differently on the hosts \(process 0: error: '):
    init_from.load_encoder('/nowhere/at/all', {'bert': {}}, {'bert': {}}, 6)


@pytest.mark.parametrize('raised, told', [
    (KeyboardInterrupt(), 'KeyboardInterrupt'),
    (SystemExit(2), 'SystemExit: 2'),
    (RuntimeError('gcsfs: 503'), 'RuntimeError: gcsfs: 503'),
    (ValueError('host 0 has no examples'), 'host 0 has no examples'),
    (OSError(28, 'No space left on device'), '[Errno 28] No space left on device')])
def test_any_stop_on_one_host_is_told_the_others_with_its_type(monkeypatch, raised, told):
  """A Ctrl-C or SystemExit on one host went past the gather (the others waited for it); the
  others were told the message without its type (an empty one for a Ctrl-C). Process 0 is
  this one; process 1, simulated, went on."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  sent, said = [], []
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(hosts, '_gathered', lambda mine: sent.append(mine) or np.stack(
      [mine, np.zeros_like(mine)]))
  monkeypatch.setattr(logging, 'warning', lambda text, *args: said.append(text % args))
  with pytest.raises(type(raised)) as caught:
    with hosts.fail_together():
      raise raised
  assert caught.value is raised
  assert bytes(sent[0][1:]).rstrip(b'\0').decode() == told
  assert said == [f'process 0 stopped ({told}): telling the other hosts']
  # What process 1 raises, told of process 0's stop.
  monkeypatch.setattr(hosts, '_gathered', lambda mine: np.stack([sent[0], mine]))
  with pytest.raises(ValueError, match=rf'^process 0 of this job stopped \(process 0: '
                     rf'{re.escape(told)}\)$'):
    with hosts.fail_together():
      pass


def test_the_worst_verdict_of_the_hosts_and_the_first_host_that_gave_it(monkeypatch):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  assert hosts.worst(1) == (1, 0)  # One process: its own.
  monkeypatch.setattr(jax, 'process_count', lambda: 3)
  monkeypatch.setattr(hosts, '_gathered', lambda mine: np.stack([mine, [2], [2]]))
  assert hosts.worst(0) == (2, 1)
  monkeypatch.setattr(hosts, '_gathered', lambda mine: np.stack([[0], [0], mine]))
  assert hosts.worst(1) == (1, 2)


def test_a_write_failing_on_process_0_alone_stops_both_hosts(results):
  """Process 0 writes the run's records (eval history, checkpoints_saved.json, config.json,
  predictions): its error there stopped it alone, the other host going into the next step's
  collective to wait for it until jax.distributed's shutdown aborted the job."""
  assert results[0]['record_fails'] == 'OSError: [Errno 28] No space left on device'
  assert results[1]['record_fails'] == ('ValueError: process 0 of this job stopped (process 0: '
                                        '[Errno 28] No space left on device)')

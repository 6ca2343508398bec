"""A pre-training run that is killed, preempted, re-meshed or finds a damaged checkpoint ends
where the uninterrupted run ends.

`python -m bertjax.main` runs in subprocesses on 8 simulated CPU devices (in this process where
what is checked is not the command's: another mesh, what an extension logs): 12 steps of a
1-layer model with dropout on, a checkpoint every 3 steps, the embedded corpus's TFRecords packed
3 instances to a row (pretrain_runs.PACK). Equal means
every leaf of the saved TrainState (parameters, Adam moments, step, dropout key) is bit-identical,
which needs the data position from the checkpoint's meta, the dropout key from the state and the
learning-rate schedule from the step all to be right; only a different mesh, which changes the
order of floating-point sums, is compared with a tolerance.
"""

import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import types

import jax
import numpy as np
import pretrain_runs
import pytest

from bertjax import console
from bertjax import pretrain
from bertjax.training import checkpoint
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import run_files
from bertjax.training import sharding
from bertjax.training import train_state

STEPS = 12
EVERY = 3  # pretrain_runs.fields' checkpoint.every_steps.


@pytest.fixture(scope='module')
def fields(tmp_path_factory):
  # One layer: what a resume restores (every leaf, the data position, the key) is the same for
  # any depth, and each of the module's commands traces, compiles and saves less.
  return pretrain_runs.fields(pretrain_runs.corpus_files(tmp_path_factory, pretrain_runs.PACK),
                              model__num_layers=1)


@pytest.fixture(scope='module')
def env(tmp_path_factory):
  return pretrain_runs.environment(8, tmp_path_factory.getbasetemp() / 'jax-cache')


@pytest.fixture(scope='module')
def reference(tmp_path_factory, fields, env) -> pathlib.Path:
  """The uninterrupted run's workdir, with checkpoints at 3, 6, 9 and 12."""
  workdir = tmp_path_factory.mktemp('reference')
  pretrain_runs.run(pretrain_runs.command(workdir, STEPS, fields), workdir / 'log.txt', env)
  assert pretrain_runs.checkpoint_steps(workdir) == [3, 6, 9, 12]
  return workdir


def assert_ends_like_reference(workdir, reference):
  assert pretrain_runs.checkpoint_steps(workdir)[-1] == STEPS
  assert pretrain_runs.read_meta(workdir, STEPS)['examples_consumed'] == STEPS * pretrain_runs.BATCH
  pretrain_runs.assert_equal_leaves(pretrain_runs.read_state(workdir, STEPS),
                                    pretrain_runs.read_state(reference, STEPS))


@pytest.fixture(scope='module')
def interrupted(tmp_path_factory, fields, env):
  """One workdir, the same command three times: SIGKILL once a checkpoint exists, SIGTERM
  after the restart's first step, then run to the end; what each run left behind."""
  workdir = tmp_path_factory.mktemp('interrupted')
  cmd = pretrain_runs.command(workdir, STEPS, fields)
  logs = [workdir / f'{name}.txt' for name in ('killed', 'stopped', 'finished')]
  seen = types.SimpleNamespace(workdir=workdir)

  process = pretrain_runs.start(cmd, logs[0], env)
  pretrain_runs.wait_for(lambda: pretrain_runs.checkpoint_steps(workdir), process, logs[0],
                         'a checkpoint')
  process.kill()  # No handler runs, and the next save may be left half-written.
  seen.killed_code = process.wait()
  seen.after_kill = pretrain_runs.checkpoint_steps(workdir)

  process = pretrain_runs.start(cmd, logs[1], env)
  first = f'step {seen.after_kill[-1] + 1}/{STEPS}:'
  pretrain_runs.wait_for(lambda: first in logs[1].read_text(), process, logs[1], first)
  process.send_signal(signal.SIGTERM)  # The handler is installed; the rest of the run is left.
  seen.stopped_code = pretrain_runs.finish(process, logs[1])
  seen.after_stop = pretrain_runs.checkpoint_steps(workdir)
  seen.leftovers = sorted(p.name for p in (workdir / 'checkpoints').glob('*.orbax-checkpoint-tmp*'))

  pretrain_runs.run(cmd, logs[2], env)
  seen.logs = [log.read_text() for log in logs]
  return seen


def test_sigkill_then_restart_resumes_from_the_last_checkpoint(interrupted):
  assert interrupted.killed_code == -signal.SIGKILL
  last = interrupted.after_kill[-1]
  assert last < STEPS
  assert f'restored step {last} ' in interrupted.logs[1]
  assert not interrupted.leftovers  # A save cut short by the kill is cleaned up.


def test_sigterm_saves_where_it_stopped_and_exits_for_a_rerun(interrupted):
  # Not 0: a scheduler that restarts failed jobs (a JobSet, SLURM) must not take it for done.
  assert interrupted.stopped_code == console.PREEMPTED_EXIT, interrupted.logs[1][-3000:]
  stopped = int(re.search(r'preempted: saved step (\d+)', interrupted.logs[1]).group(1))
  assert interrupted.after_kill[-1] < stopped < STEPS
  # The save at the stop is forced: usually between the periodic ones, and always the last one.
  periodic = set(range(EVERY, stopped + 1, EVERY))
  assert interrupted.after_stop == sorted(set(interrupted.after_kill) | periodic | {stopped})
  assert pretrain_runs.read_meta(interrupted.workdir, stopped)['examples_consumed'] == (
      stopped * pretrain_runs.BATCH)
  assert f'restored step {stopped} ' in interrupted.logs[2]
  # Its last line says it stopped early, where, and how to go on.
  workdir = interrupted.workdir
  assert re.fullmatch(
      rf'pretrain stopped \(preempted at step {stopped}: rerun the same command to resume\) in '
      rf'[\dms. ]+: step {stopped}/{STEPS}, train loss [\d.]+; checkpoints {workdir}/checkpoints '
      rf'\(step {stopped}\), TensorBoard {workdir}', last_line(interrupted.logs[1]))


def test_killed_then_preempted_run_ends_bit_identical(interrupted, reference):
  assert_ends_like_reference(interrupted.workdir, reference)


def test_resume_on_another_mesh(tmp_path, fields, reference):
  """Saved on data=8 at step 6, resumed on data=2,fsdp=2,tensor=2 to step 12, in-process."""
  shutil.copytree(reference / 'checkpoints', tmp_path / 'checkpoints')
  for step in (9, 12):
    shutil.rmtree(tmp_path / 'checkpoints' / str(step))
  config = pretrain_runs.config(STEPS, fields | {'mesh.data': 2, 'mesh.fsdp': 2, 'mesh.tensor': 2})

  mesh = sharding.make_mesh(config.mesh)
  # The state's shapes and shardings on the new mesh, traced only (nothing initialised).
  abstract, _ = train_state.train_state_shapes(
      config, pretrain.objective(config), optimizer_lib.make(config.optimizer), mesh)
  mngr = checkpoint.manager(tmp_path, config, best_metric=pretrain.BEST_METRIC)
  restored, meta = checkpoint.restore_latest(mngr, abstract)
  assert (meta['step'], meta['mesh']) == (6, {'data': 8, 'fsdp': 1, 'tensor': 1})
  kernel = restored.params['bert']['layers_0']['mlp']['intermediate']['kernel']
  assert kernel.sharding.spec == jax.sharding.PartitionSpec('fsdp', 'tensor')
  # Resharding reads the same bytes.
  pretrain_runs.assert_equal_leaves(jax.device_get(restored),
                                    pretrain_runs.read_state(reference, 6))
  del restored

  pretrain.train_and_evaluate(config, str(tmp_path))
  assert pretrain_runs.checkpoint_steps(tmp_path) == [3, 6, 9, 12]
  assert pretrain_runs.read_meta(tmp_path, 6)['mesh']['data'] == 8  # Not re-run...
  for step in (9, 12):  # ... continued from 6 on the new mesh at the right data position.
    assert pretrain_runs.read_meta(tmp_path, step)['mesh'] == {'data': 2, 'fsdp': 2, 'tensor': 2}
    assert pretrain_runs.read_meta(tmp_path, step)['examples_consumed'] == (
        step * pretrain_runs.BATCH)
  got = pretrain_runs.read_state(tmp_path, STEPS)
  want = pretrain_runs.read_state(reference, STEPS)
  at_6 = pretrain_runs.flat(pretrain_runs.read_state(reference, 6)['params'])
  moved = max(np.abs(v - at_6[k]).max() for k, v in pretrain_runs.flat(want['params']).items())
  assert moved > 100 * pretrain_runs.PARAMS_TOLERANCE['atol']  # Not a vacuous comparison.
  pretrain_runs.assert_close_leaves(got, want)  # Measured: within 4.3e-8 (params).


def test_unreadable_newest_checkpoint_is_moved_aside_and_the_previous_resumed(
    tmp_path, fields, env, reference):
  shutil.copytree(reference / 'checkpoints', tmp_path / 'checkpoints')
  # A half-written file: the largest data file of step 12's state, truncated.
  state_dir = tmp_path / 'checkpoints' / '12' / 'state'
  victim = max((p for p in state_dir.rglob('*') if p.is_file()), key=lambda p: p.stat().st_size)
  victim.write_bytes(victim.read_bytes()[:victim.stat().st_size // 2])
  files = sorted(str(p.relative_to(state_dir)) for p in state_dir.rglob('*'))

  log = tmp_path / 'log.txt'
  pretrain_runs.run(pretrain_runs.command(tmp_path, STEPS, fields), log, env)
  text = log.read_text()
  assert 'checkpoint step 12 in' in text and 'cannot be read' in text
  assert 'restored step 9 ' in text
  (aside,) = (tmp_path / 'checkpoints').glob('12.unreadable-*')
  assert sorted(str(p.relative_to(aside / 'state')) for p in (aside / 'state').rglob('*')) == files
  assert_ends_like_reference(tmp_path, reference)  # 10-12 run again from 9.


def test_no_readable_checkpoint_is_an_error_not_a_fresh_start(tmp_path, fields, env, reference):
  for step in (3, 6):
    shutil.copytree(reference / 'checkpoints' / str(step), tmp_path / 'checkpoints' / str(step))
  (tmp_path / 'checkpoints' / '3' / 'state' / 'manifest.ocdbt').unlink()
  (tmp_path / 'checkpoints' / '6' / 'state' / '_METADATA').write_text('{')
  # In a subprocess: orbax's failed reads leave futures whose callbacks later raise into a
  # closed event loop, noise that would land in whichever test runs next in this process.
  log = tmp_path / 'log.txt'
  process = pretrain_runs.start(pretrain_runs.command(tmp_path, STEPS, fields), log, env)
  assert pretrain_runs.finish(process, log) != 0
  # Not anchored on 'ValueError': orbax's late callbacks print tracebacks from other threads
  # while the interpreter prints this one, and the writes can interleave mid-line.
  assert re.search(r'none of the checkpoints \[6, 3\] .* can be read', log.read_text())
  assert 'training steps' not in log.read_text()
  names = sorted(p.name for p in (tmp_path / 'checkpoints').iterdir())
  assert [n.split('.')[0] for n in names] == ['3', '6'] and all('.unreadable-' in n for n in names)
  # A retry (a scheduler restarting the failed job) must not start fresh either. No step is
  # left to restore, so restore_latest (where the policy lives) needs no target state.
  with pytest.raises(ValueError, match='only ones moved aside as unreadable'):
    checkpoint.restore_latest(checkpoint.manager(tmp_path, pretrain_runs.config(STEPS, fields),
                                                  best_metric=pretrain.BEST_METRIC),
                              abstract_state=None)
  assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == names


def last_line(text: str) -> str:
  return text.strip().splitlines()[-1]


def test_the_console_carries_only_what_a_user_acts_on(reference):
  text = (reference / 'log.txt').read_text()
  # The last line, after orbax's background saves and every log line: the run's summary.
  assert re.fullmatch(
      rf'pretrain finished in [\dms. ]+: step {STEPS}/{STEPS}, train loss [\d.]+, eval '
      r'mlm_accuracy [\d.]+, mlm_loss [\d.]+, nsp_accuracy [\d.]+, nsp_loss [\d.]+, '
      rf'unigram_baseline [\d.]+; checkpoints {reference}/checkpoints \(step {STEPS}\), '
      rf'TensorBoard {reference}', last_line(text))
  for noise in ('checkpoint_manager.py', 'orbax', 'Setting work unit notes', 'cuInit',
                "backend 'tpu'", '_CHECKPOINT_METADATA'):
    assert noise not in text, noise
  assert text.count('saving checkpoint') == 4  # One line per save (3, 6, 9, 12).
  assert "no MFU: the peak FLOP/s of a 'cpu' device is not known" in text  # Said once, why.
  assert text.count('eval at step') == 1
  assert len(re.findall(r'step \d+/12:', text)) == STEPS  # log_every_steps=1.


def test_a_second_run_on_a_busy_workdir_is_refused(tmp_path, fields, env, reference):
  """The first run names its workdir relative to where it starts, resumes the reference's step
  6 and moves nothing aside; the second names it absolute and is refused by its lock."""
  for step in (3, 6):
    shutil.copytree(reference / 'checkpoints' / str(step), tmp_path / 'checkpoints' / str(step))
  relative = os.path.relpath(tmp_path, pretrain_runs.REPO)  # The commands run in the checkout.
  first_log, second_log = tmp_path / 'first.txt', tmp_path / 'second.txt'
  first = pretrain_runs.start(pretrain_runs.command(relative, STEPS, fields), first_log, env)
  pretrain_runs.wait_for(lambda: 'step 7/12:' in first_log.read_text(), first, first_log,
                         'the first step after the resume')
  # Paused while the second one starts, so that it cannot finish its tiny steps before the
  # second has started up (it keeps its lock while stopped).
  os.kill(first.pid, signal.SIGSTOP)
  try:
    second = pretrain_runs.start(pretrain_runs.command(tmp_path, STEPS, fields), second_log, env)
    assert pretrain_runs.finish(second, second_log) == 1
  finally:
    os.kill(first.pid, signal.SIGCONT)
  assert re.search(rf'error: {tmp_path} is in use by pid {first.pid} on .* running since',
                   second_log.read_text())
  assert pretrain_runs.finish(first, first_log) == 0  # Untouched by the refused one.
  assert 'restored step 6 ' in first_log.read_text()
  assert not list((tmp_path / 'checkpoints').glob('*.unreadable-*'))
  assert_ends_like_reference(tmp_path, reference)


def test_a_finished_run_says_so_and_an_extension_logs_the_schedule_change(
    tmp_path, fields, env, reference, caplog):
  shutil.copytree(reference / 'checkpoints', tmp_path / 'checkpoints')
  shutil.copy(reference / 'config.json', tmp_path / 'config.json')
  shutil.copy(reference / 'eval_results.json', tmp_path / 'eval_results.json')
  before = sorted(p.name for p in tmp_path.iterdir())
  log = tmp_path.parent / f'{tmp_path.name}-log.txt'
  pretrain_runs.run(pretrain_runs.command(tmp_path, STEPS, fields), log, env)
  assert 'already at step 12 of 12: nothing to do' in log.read_text()
  assert re.fullmatch(r'pretrain finished in [\d.]+ s: step 12/12 \(reached before: nothing to '
                      r'do\), eval mlm_accuracy [\d.]+, .*; checkpoints .*', last_line(
                          log.read_text()))
  # No events; the record of its saves, which a finished run has (this copy lacked it).
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
      before + ['.lock', 'checkpoints_saved.json'])
  # The extensions run in this process: what they log is the subject, not the command line.
  pretrain.train_and_evaluate(pretrain_runs.config(STEPS + 1, fields), str(tmp_path))
  # Both still warming up at step 12 (warmup 60): no jump there, yet another curve after it.
  assert re.search(r'the learning-rate schedule differs .*optimizer.total_steps 12 -> 13.* at '
                   r'step 12 the rate is unchanged \(\S+\) but follows another curve',
                   caplog.text)
  assert 'the data order differs' not in log.read_text() + caplog.text
  # Another seed reads on in another order: said, since the resume is then not exact. The
  # schedule of the last run (13 steps) is kept, so only the order is named.
  caplog.clear()
  pretrain.train_and_evaluate(pretrain_runs.config(STEPS + 2, fields | {
      'optimizer.total_steps': 13, 'seed': 7}), str(tmp_path))
  assert re.search(r'the data order differs from the one this run last ran with \(seed 0 -> 7\)'
                   r': from step 13 it reads on at example \d+ of another order', caplog.text)
  assert 'the learning-rate schedule differs' not in caplog.text


def test_a_full_disk_during_a_save_is_one_clear_error(tmp_path, fields, env, reference):
  """The workdir on a size-limited tmpfs (a private mount namespace): the second save fails."""
  if subprocess.run(['unshare', '-rm', 'true'], capture_output=True, check=False).returncode:
    # CI has them (it runs this test); elsewhere say why it cannot run here.
    message = 'unshare -rm (user and mount namespaces) is not permitted on this machine'
    if os.environ.get('CI', '').lower() == 'true':
      pytest.fail(message)
    pytest.skip(message)
  one = sum(p.stat().st_size for p in (reference / 'checkpoints' / '3').rglob('*') if p.is_file())
  need = sum(a.nbytes for a in pretrain_runs.flat(pretrain_runs.read_state(reference, 3)).values())
  size = int(need * 1.05) + (4 << 20) + one // 2  # Room for the first save, not the second.
  workdir, kept = tmp_path / 'w', tmp_path / 'kept'
  workdir.mkdir()
  kept.mkdir()
  cmd = ' '.join(shlex.quote(a) for a in pretrain_runs.command(workdir, STEPS, fields))
  script = (f'mount -t tmpfs -o size={size} tmpfs {workdir} && {cmd}; rc=$?; '
            f'cp -a {workdir}/. {kept}/; exit $rc')
  log = tmp_path / 'log.txt'
  process = pretrain_runs.start(['unshare', '-rm', 'sh', '-c', script], log, env)
  assert pretrain_runs.finish(process, log) == 1
  text = log.read_text()
  last = text.strip().splitlines()[-2]
  assert re.match(rf'error: the disk holding {workdir}/checkpoints has \d+ MiB free, too little '
                  r'for the checkpoint of step 6 \(about \d+ MiB, plus 4 MiB to spare\): not '
                  r'saved. The last complete one '
                  r'\(step 3\) is intact and a rerun resumes from it', last), text[-3000:]
  assert 'Traceback' not in text and 'sys.meta_path' not in text
  assert len(text.splitlines()) < 40, text
  assert pretrain_runs.checkpoint_steps(kept) == [3]
  pretrain_runs.assert_equal_leaves(pretrain_runs.read_state(kept, 3),
                                    pretrain_runs.read_state(reference, 3))


def test_a_run_whose_checkpoints_were_moved_is_not_started_over(tmp_path, fields, env,
                                                                reference):
  """Pass AG: with checkpoints/ moved away, the same command started the run over from step 0,
  replacing its eval_history.json, config.json and eval_results.json with another run's."""
  workdir = tmp_path / 'run'
  shutil.copytree(reference, workdir, ignore=shutil.ignore_patterns('checkpoints', 'log.txt'))
  kept = {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file() and p.name != '.lock'}
  assert 'eval_history.json' in kept and 'checkpoints_saved.json' in kept, sorted(kept)
  (workdir / 'checkpoints').symlink_to(tmp_path / 'gone')  # A link whose target is gone too.
  log = tmp_path / 'log.txt'
  process = pretrain_runs.start(pretrain_runs.command(workdir, STEPS, fields), log, env)
  assert pretrain_runs.finish(process, log) == 1
  assert log.read_text().splitlines()[-2].startswith(
      f'error: {workdir} records checkpoints up to step {STEPS} (checkpoints_saved.json) but '
      f"its checkpoints/ holds no checkpoint (a link to {tmp_path / 'gone'}, which holds none): "
      'its checkpoints were moved or deleted. Put them back to resume'), log.read_text()[-2000:]
  assert {p.name: p.read_bytes() for p in workdir.iterdir()
          if p.is_file() and p.name != '.lock'} == kept
  # A run that ended before its first save finished (its eval recorded) starts over.
  assert not run_files.lost_checkpoints(str(reference.parent / 'none'))
  (tmp_path / 'early').mkdir()
  (tmp_path / 'early' / 'eval_history.json').write_text('{"3": {}}')
  assert not run_files.lost_checkpoints(str(tmp_path / 'early'))

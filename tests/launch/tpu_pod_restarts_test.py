"""The TPU pod launcher's restarts, run in this process with a scripted gcloud
(pod_fakes.launch_scripted): what counts as a preemption; a cut ssh session reattached; a
finished or failed run never run again; an existing queued resource refused and left; a
preemption before the run starts; a delete that fails, once, always, or on a slice already
gone; Ctrl-C at any point leaving the slice (saying so when no run was started); a --git_ref
pinned to one commit that every install, restarts too, fetches (the workers' git commands run
against a real repository); a workdir on the slice's disk never deleted with it; and a run whose
exit status was lost taken as a failure."""

import dataclasses
import os
import re
import shlex
import subprocess

from pod_fakes import ATTEMPT
from pod_fakes import COMMIT
from pod_fakes import CREATE
from pod_fakes import DELETE
from pod_fakes import DESCRIBE
from pod_fakes import INSTALL
from pod_fakes import LOGS
from pod_fakes import MAIN_ARGS
from pod_fakes import START
from pod_fakes import launch_scripted
from pod_fakes import slice_
import pytest

from bertjax import console
from launch import cloud
from launch import git_ref as git_refs
from launch import tpu_pod
from launch import tpu_vm


def test_what_counts_as_a_preemption():
  assert tpu_pod.was_preempted(255, 'PREEMPTED') and tpu_pod.was_preempted(1, 'SUSPENDING')
  # The run saved and stopped on a SIGTERM (maintenance) while the slice stayed ACTIVE.
  assert tpu_pod.was_preempted(console.PREEMPTED_EXIT, 'ACTIVE')
  assert not tpu_pod.was_preempted(0, 'ACTIVE') and not tpu_pod.was_preempted(1, 'ACTIVE')
  assert not tpu_pod.was_preempted(0, 'SUSPENDED')  # Finished: never run again.
  assert not tpu_pod.was_preempted(1, '')  # The state unknown (gcloud failing): not preempted.


def test_a_cut_ssh_session_on_a_live_slice_is_reattached_not_deleted(monkeypatch):
  code, calls = launch_scripted(monkeypatch, exits=['255', '0'])
  assert code == 0 and calls == ATTEMPT + [LOGS, DESCRIBE, DELETE]
  # Cut every time: the slice, whose run may go on, is left, with what to do about it.
  error, calls = launch_scripted(monkeypatch, exits=['255'] * (tpu_pod.REATTACH + 1))
  assert error.startswith('the ssh session to worker 0 of bert was cut 6 times while the slice '
                          'was not preempted; it is left running: follow its run with gcloud '
                          'compute tpus tpu-vm ssh bert --worker=0'), error
  assert error.endswith('or delete it with gcloud compute tpus queued-resources delete bert '
                        '--force --quiet --zone=us-west4-a')
  assert calls == ATTEMPT + [LOGS, DESCRIBE] * tpu_pod.REATTACH  # No delete, no re-create.


def test_a_finished_run_is_never_run_again_and_a_failing_describe_is_asked_again(monkeypatch):
  # Exit 0: finished, even if the slice was preempted just after.
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['0'])
  assert code == 0 and calls == ATTEMPT + [DELETE]
  # gcloud failing on describe is asked again; the run's own failure is not a preemption.
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'ERROR', 'ACTIVE'], exits=['1'])
  assert code == 1 and calls == ATTEMPT + [DESCRIBE, DELETE]


def test_a_poll_gcloud_fails_says_why_as_it_asks_again(monkeypatch, capsys):
  """A failed poll was silent while it retried, and after 3 failures the launch said only
  'not readable (gcloud failed 3 times)'."""
  code, _ = launch_scripted(monkeypatch, states=['ACTIVE', 'ERROR', 'ACTIVE'], exits=['1'])
  reason = '(gcloud.compute.tpus.queued-resources.describe) HttpError 503: The service is '
  assert code == 1 and capsys.readouterr().err.strip().splitlines() == [
      f'tpu_pod: gcloud could not read the state of bert (try 1 of 3): ERROR: {reason}'
      'currently unavailable.']
  error, _ = launch_scripted(monkeypatch, states=['ERROR'] * 3)
  lines = capsys.readouterr().err.strip().splitlines()
  assert [line[:61] for line in lines] == [
      f'tpu_pod: gcloud could not read the state of bert (try {n} of 3)' for n in (1, 2, 3)]
  assert error.startswith('queued resource bert is not readable (gcloud failed 3 times, why '
                          'above): see `gcloud compute tpus queued-resources describe bert'), error


def test_an_existing_queued_resource_is_refused_and_left(monkeypatch):
  """The same command run again while the slice of an earlier one exists (its launcher died, or
  --keep): the create fails, and that slice is not this process's to delete."""
  error, calls = launch_scripted(monkeypatch, fails=[CREATE])
  assert error.startswith('queued resource bert exists already (ACTIVE): follow its run with '
                          'gcloud compute tpus tpu-vm ssh bert --worker=0 '), error
  assert error.endswith(', or delete it with gcloud compute tpus queued-resources delete bert '
                        '--force --quiet --zone=us-west4-a and run this again')
  assert calls == [CREATE, DESCRIBE]
  # A create that failed otherwise (no such resource): gcloud's error, nothing deleted.
  error, calls = launch_scripted(monkeypatch, states=['ERROR'], fails=[CREATE])
  assert error.startswith('gcloud exited with 255: gcloud compute tpus queued-resources create')
  assert calls == [CREATE, DESCRIBE]


def test_a_preemption_before_the_run_starts_is_a_restart(monkeypatch):
  # Suspended while waiting to be ACTIVE.
  code, calls = launch_scripted(monkeypatch, states=['PROVISIONING', 'SUSPENDED'])
  assert code == 0 and calls == ([CREATE, DESCRIBE, DESCRIBE, DELETE, DESCRIBE, DESCRIBE] + ATTEMPT
                                 + [DELETE])
  # Preempted during the install: ssh exits 255 and the slice is SUSPENDED.
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], fails=[INSTALL])
  assert code == 0 and calls == (ATTEMPT[:3] + [DESCRIBE, DELETE, DESCRIBE, DESCRIBE] + ATTEMPT
                                 + [DELETE])
  # Counted against --max_restarts.
  code, calls = launch_scripted(monkeypatch, states=['SUSPENDED'], max_restarts=0)
  assert code == cloud.PREEMPTED_EXIT and calls == [CREATE, DESCRIBE, DELETE]
  # An install that fails on a slice still ACTIVE is an error, as before.
  error, calls = launch_scripted(monkeypatch, fails=[INSTALL])
  assert error.startswith('gcloud exited with 255: gcloud compute tpus tpu-vm ssh bert')
  assert calls == ATTEMPT[:3] + [DESCRIBE, DELETE]


def test_ctrl_c_in_the_launch_leaves_the_slice(monkeypatch, capsys):
  for at in (LOGS, START, INSTALL, DESCRIBE, CREATE):
    try:
      code, calls = launch_scripted(monkeypatch, interrupt=at)
    except KeyboardInterrupt:
      pytest.fail('Ctrl-C was not handled: a traceback, and the slice deleted in `finally`')
    assert code == 130 and DELETE not in calls, (at, calls)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    if at in (LOGS, START):  # The run's start was sent: a run may go on.
      assert last.startswith('tpu_pod: interrupted; bert and its run (if started) go on: follow '
                             'it with gcloud '), last
    else:
      assert last == NOT_STARTED, (at, last)


NOT_STARTED = ('tpu_pod: interrupted before a run was started on bert: none goes on, but its '
               'queued resource stays (once ACTIVE it bills, idle): delete it with gcloud compute '
               'tpus queued-resources delete bert --force --quiet --zone=us-west4-a')


def test_ctrl_c_before_the_run_starts_says_none_goes_on_and_how_to_delete_the_slice(
    monkeypatch, capsys):
  """Hostile pass A: Ctrl-C while queued or installing said 'bert and its run (if started) go
  on: follow it with <the log stream>' -- no run existed, and the queued resource, left to become
  ACTIVE, billed idle. After a preemption, while the slice is re-created, the earlier run is gone
  too (its checkpoints in the bucket)."""
  code, calls = launch_scripted(monkeypatch, interrupt=INSTALL)
  assert code == 130 and calls == [CREATE, DESCRIBE, INSTALL], calls
  assert capsys.readouterr().err.strip().splitlines()[-1] == NOT_STARTED
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'],
                                exits=['255'], interrupt=INSTALL, interrupt_at=2)
  assert code == 130 and calls == ATTEMPT + [DELETE, DESCRIBE, DESCRIBE] + ATTEMPT[:3], calls
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      f'{NOT_STARTED}; then run the same command again to resume from the last checkpoint')


def test_a_preempted_slice_whose_delete_fails_once_is_deleted_again(monkeypatch):
  """A transient gcloud failure (a 503) on the restart's delete: tried again, the slice waited
  for until it is gone, then re-created; never taken for another run's slice."""
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['255'],
                                fails=[DELETE])
  assert code == 0, code
  # The failed delete: the slice still there; the next: gone.
  assert calls == ATTEMPT + [DELETE, DESCRIBE, DELETE, DESCRIBE, DESCRIBE] + ATTEMPT + [DELETE]


def test_a_preempted_slice_that_cannot_be_deleted_is_named_as_the_launchs_own(monkeypatch):
  error, calls = launch_scripted(monkeypatch, states=['ACTIVE'] + ['SUSPENDED'] * 5,
                                 exits=['255'], fails=[DELETE] * tpu_pod.DELETE_TRIES)
  assert error == ('the preempted slice bert of this launch could not be deleted to re-create '
                   'it (SUSPENDED): delete it with gcloud compute tpus queued-resources delete '
                   'bert --force --quiet --zone=us-west4-a and run this again (the run resumes '
                   'from its last checkpoint)'), error
  assert 'exists already' not in error
  assert calls == ATTEMPT + [DELETE, DESCRIBE] * tpu_pod.DELETE_TRIES + [DELETE]
  assert CREATE not in calls[len(ATTEMPT):]
  # Deleted, but still there when re-created (its deletion not done): the launch's own, too.
  tpu, calls = slice_(), []

  def run(cmd, **_):
    calls.append(cmd)
    return subprocess.CompletedProcess(cmd, int('create' in cmd), 'SUSPENDED\n')

  with pytest.raises(RuntimeError, match=r'^the preempted slice bert of this launch could not '
                     r'be deleted to re-create it \(SUSPENDED\)'):
    tpu_pod.create(tpu, run, restart=True)


def test_a_git_ref_is_pinned_to_the_commit_it_names_at_launch(monkeypatch, capsys):
  """A branch or tag can move between preemption restarts (each installed it again): the run
  resumed on other code. Where this machine cannot read the ref (git_ref_test.py: where it
  can), worker 0 reads the commit once; every install, restarts too, fetches that commit, and
  the run takes that commit's configs/, not this checkout's."""
  monkeypatch.setattr(git_refs, 'commit_here', lambda ref: ('', 'no network here (the test)'))
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['255'],
                                git_ref='git+https://example.invalid/bertjax@main')
  assert code == 0
  resolve = calls[2]
  assert resolve[:6] == ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=0'], calls
  assert resolve[6] == ('--command=rm -rf ~/bertjax-src && git init -q ~/bertjax-src && git -C '
                        '~/bertjax-src fetch -q --depth=1 https://example.invalid/bertjax main && '
                        "git -C ~/bertjax-src rev-parse 'FETCH_HEAD^{commit}'")
  installs = [c for c in calls if '--worker=all' in c and 'uv pip install' in c[-2]]
  pinned = [c[-2].replace('b2' * 20, COMMIT) for c in installs]
  assert len(installs) == 2 and pinned == [INSTALL[-2]] * 2, installs  # Both: worker 0's commit.
  assert sum('rev-parse' in c[-2] for c in calls) == 1  # Read once, not again at the restart.
  assert ('tpu_pod: --git_ref=git+https://example.invalid/bertjax@main is commit ' + 'b2' * 20 +
          ': every worker and every restart installs it and runs its configs/'
          ) in capsys.readouterr().out
  # A commit is installed as it is, with nothing to read.
  code, calls = launch_scripted(monkeypatch)
  assert code == 0 and not any('rev-parse' in c[-2] for c in calls)


@pytest.mark.parametrize('ref', ['main', 'v1', '', 'COMMIT'])
def test_the_workers_commands_fetch_the_commit_the_ref_names(tmp_path, ref):
  """The shell that worker 0 and the installs run, against a real repository: a branch, an
  annotated tag, the default branch and a commit each resolve to the commit, whose configs/
  the install takes (pip's part left out)."""
  repo, home = tmp_path / 'repo', tmp_path / 'home'
  home.mkdir()
  git = ['git', '-c', 'user.name=t', '-c', 'user.email=t@t', '-C', str(repo)]
  (repo / 'configs').mkdir(parents=True)
  (repo / 'configs' / 'pretrain.py').write_text('# first\n')
  subprocess.run(['git', 'init', '-q', '-b', 'main', str(repo)], check=True)
  subprocess.run(git + ['add', '.'], check=True)
  subprocess.run(git + ['commit', '-qm', 'first'], check=True)
  subprocess.run(git + ['tag', '-a', 'v1', '-m', 'v1'], check=True)
  first = subprocess.run(git + ['rev-parse', 'HEAD'], capture_output=True, text=True,
                         check=True).stdout.strip()
  git_ref = f'git+file://{repo}' + (f'@{first if ref == "COMMIT" else ref}' if ref else '')

  def on_worker(command):
    return subprocess.run(['bash', '-c', command], env={**os.environ, 'HOME': str(home)},
                          capture_output=True, text=True, check=True, timeout=60).stdout
  runs = []

  def run(cmd, **_):
    runs.append(cmd)
    return subprocess.CompletedProcess(cmd, 0, on_worker(cmd[-2].removeprefix('--command=')))
  pinned = tpu_pod.pin_commit(slice_(), run, git_ref)
  assert pinned == f'git+file://{repo}@{first}' and len(runs) == (ref != 'COMMIT')
  # The branch moves on: the pinned install still fetches the first commit.
  (repo / 'configs' / 'pretrain.py').write_text('# second\n')
  subprocess.run(git + ['commit', '-qam', 'second'], check=True)
  install = tpu_vm.install_commands(slice_(), '', pinned)[-1][-2].removeprefix('--command=')
  on_worker(install.partition(' && python3 -m pip')[0])
  assert (home / 'configs' / 'pretrain.py').read_text() == '# first\n'


def test_a_failed_delete_of_a_slice_already_gone_goes_on(monkeypatch):
  """Review: a delete that fails because the preempted slice is gone already (not found twice
  in a row) is no reason to stop: it is re-created."""
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED', 'ERROR', 'ERROR'],
                                exits=['255'], fails=[DELETE] * tpu_pod.DELETE_TRIES)
  assert code == 0, code
  assert calls == ATTEMPT + [DELETE, DESCRIBE, DESCRIBE] + ATTEMPT + [DELETE]


def test_a_queued_resource_that_failed_says_why_before_it_is_deleted(monkeypatch):
  """It was deleted, then the error said to describe it (gone by then), without --project."""
  reason = 'Quota TPUV5sLitepodPerProjectPerZone exceeded'
  error, calls = launch_scripted(monkeypatch, states=['FAILED', reason])
  describe = 'gcloud compute tpus queued-resources describe bert --zone=us-west4-a'
  assert error == (f'queued resource bert is FAILED: {reason} (with --keep it is left to be read '
                   f'with `{describe}`)'), error
  assert calls == [CREATE, DESCRIBE, DESCRIBE[:5] + [
      '--format=value(state.failedData.error.message)', DESCRIBE[-1]], DELETE]
  tpu = dataclasses.replace(slice_(), project='other-proj')
  answers = iter(['FAILED\n', ''])

  def run(cmd, **_):
    return subprocess.CompletedProcess(cmd, 0, next(answers))

  with pytest.raises(RuntimeError, match=re.escape(
      'queued resource bert is FAILED: gcloud gives no reason (with --keep it is left to be '
      f'read with `{describe} --project=other-proj`)')):
    tpu_pod.wait_active(tpu, run, 0)


def test_restarts_run_out_with_a_line_that_says_what_to_do(monkeypatch, capsys):
  code, _ = launch_scripted(monkeypatch, exits=['75'], max_restarts=0)
  assert code == cloud.PREEMPTED_EXIT
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      'tpu_pod: bert was preempted 1 time (--max_restarts=0 spent): the run stopped at its last '
      'checkpoint (if it saved one); run the same command again to resume from it')
  # Preempted before the run started, every time: it claimed a checkpoint none could have saved.
  code, _ = launch_scripted(monkeypatch, states=['SUSPENDED', 'SUSPENDED'], max_restarts=1)
  assert code == cloud.PREEMPTED_EXIT
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      'tpu_pod: bert was preempted 2 times (--max_restarts=1 spent): each time before its run '
      'started: nothing ran; run the same command again later')


ONE_HOST = tpu_vm.Slice('bert', 'us-west4-a', 'v5litepod-8')  # On demand: a local workdir kept.


@pytest.mark.parametrize('states, exits, why', [
    ([], ['75'], 'exit 75: it saved on a SIGTERM, or its VM restarted under it'),
    (['ACTIVE', 'SUSPENDED'], ['255'], 'its queued resource is SUSPENDED'),
])
def test_a_local_workdir_is_never_deleted_with_its_slice_to_resume(monkeypatch, capsys, states,
                                                                   exits, why):
  """Hostile pass A: a kept single-host slice with its workdir on the VM's disk was deleted and
  re-created on a preemption (or a run that saved on a SIGTERM): the 'resumed' run started from
  step 0, its checkpoints gone with the disk. The launch stops instead (75), the slice left, and
  says how to resume the run there."""
  code, calls = launch_scripted(monkeypatch, states=states, exits=exits, tpu=ONE_HOST,
                                workdir='/home/me/run', keep=True)
  assert code == cloud.PREEMPTED_EXIT, code
  assert [c[3] for c in calls] == ['create', 'describe', 'ssh', 'ssh', 'ssh', 'describe'], calls
  line = capsys.readouterr().err.strip().splitlines()[-1]
  assert line.startswith(
      f"tpu_pod: the run on bert stopped before its end ({why}), and its workdir lies on the "
      "VM's disk with its checkpoints: bert is left as it is, neither deleted nor re-created (a "
      'new slice would start the run again from step 0). Once `gcloud compute tpus '
      "queued-resources describe bert '--format=value(state.state)' --zone=us-west4-a` says "
      'ACTIVE, resume the run there from its last checkpoint with '), line
  rerun = shlex.join(tpu_vm.run_command(ONE_HOST, MAIN_ARGS, '/home/me/run'))
  assert f'with {rerun} and follow it with {shlex.join(tpu_vm.stream_command(ONE_HOST))}' in line
  assert line.endswith('delete the slice when done with gcloud compute tpus queued-resources '
                       'delete bert --force --quiet --zone=us-west4-a')


@pytest.mark.parametrize('state', ['PREEMPTED', 'FAILED'])
def test_a_local_workdir_gone_with_its_vm_is_said_lost_not_resumable(monkeypatch, capsys, state):
  """Review of 2026-12-01: a PREEMPTED or FAILED queued resource never comes back, nor its
  disk: the advice to wait for ACTIVE and resume there could never be followed."""
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', state], exits=['255'],
                                tpu=ONE_HOST, workdir='/home/me/run', keep=True)
  assert code == cloud.PREEMPTED_EXIT and [c[3] for c in calls].count('create') == 1, calls
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      f'tpu_pod: the run on bert stopped before its end (its queued resource is {state}): the '
      "VM is gone with its disk, and the run's checkpoints with it (its workdir was local to the "
      'VM), so no restart could resume them. Delete it with gcloud compute tpus queued-resources '
      'delete bert --force --quiet --zone=us-west4-a, and launch again with a gs:// --workdir to '
      'survive preemptions')


def test_a_local_workdir_slice_preempted_before_its_run_started_is_re_created(monkeypatch):
  """Nothing ran, so nothing is lost: the slice is re-created as with a bucket."""
  code, calls = launch_scripted(monkeypatch, states=['SUSPENDED'], tpu=ONE_HOST,
                                workdir='/home/me/run', keep=True)
  assert code == 0 and [c[3] for c in calls].count('create') == 2, calls


def test_a_lost_exit_status_is_a_failure_said_as_such(monkeypatch, capsys):
  """The log stream's STATUS_LOST (~/bertjax.rc held no number; it gave 0, a success): the
  launcher exits with it and says so, as after any failed run."""
  code, calls = launch_scripted(monkeypatch, exits=[str(tpu_vm.STATUS_LOST)])
  assert code == tpu_vm.STATUS_LOST and calls == ATTEMPT + [DELETE], calls
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      "tpu_pod: the run on bert ended, but its exit status was lost (worker 0's ~/bertjax.rc "
      'holds no number: a full disk?): taken as a failure (exit 86); its log is above, and in '
      '~/bertjax.log on each worker')

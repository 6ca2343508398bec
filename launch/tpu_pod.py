r"""Runs bertjax.main on a Cloud TPU slice: create, install, run on every worker, resume after
preemption, delete.

  python -m launch.tpu_pod --name=bert-base --zone=us-west4-a \
      --accelerator_type=v5litepod-16 --workdir=gs://my-bucket/runs/base --spot -- \
      --config=configs/pretrain.py:size=base,vocab=30522,phase2_fraction=0.1 \
      --config.data.train_files=gs://my-bucket/data/train128-* ...

Steps, each printed before it runs (--dry_run prints them and runs none; it reads --git_ref's
commit, as step 0 does):
  0. the job's config checked here as bertjax.main checks it, and for the slice (a batch it
     cannot split, a GPU kernel); with --aot_check, the step compiled for its topology here;
  1. a wheel of this checkout (the one this launcher belongs to: `pip wheel` of a fresh copy of
     what the wheel holds, in a temporary folder; tpu_vm.build_wheel), unless --git_ref=git+URL@REF
     names another commit;
  2. a queued resource for the slice (spot, reserved or on demand), waited for until ACTIVE;
  3. the wheel and configs/ copied to every worker's home and installed with jax[tpu] in a
     Python 3.12 venv; with --git_ref, the commit the ref names is read once, here before
     booking (worker 0 reads it where this machine cannot), and every worker (every restart
     too) fetches that commit and takes its configs/; a --config=FILE from outside configs/ is
     copied as ~/bertjax_job_config.py;
  4. bertjax.main started on every worker in the background, worker 0's log streamed until it
     ends (a cut ssh session on a live slice re-attached to);
  5. a preempted slice (or a run that saved on a SIGTERM, exit 75) deleted, re-created, steps
     3-4 run again: the run resumes from its last checkpoint; at most --max_restarts times. A
     run whose workdir lies on the slice's disk is not resumed on a new slice (it would start
     from step 0): the launch stops (exit 75), the slice left as it is, and says how to resume
     the run there;
  6. the slice deleted at the end (--keep leaves it); one of that name that exists already is
     refused, never deleted. Ctrl-C leaves the slice and its run going and says what to do
     (before a run was started: that none goes on, and how to delete the queued resource).

The workdir lies in a bucket (gs://); a single-host slice may use a local path with --keep and
without --spot. A --git_ref on this machine's disk (file://, a path) is refused, a dry run's too:
no worker reaches it. Exit status: the run's (75 when the restarts ran out); 78 when a flag, the
job's config or workdir is refused before anything runs (one line, as bertjax.main's refusals);
2 when gcloud, the wheel's build or the slice's creation fails; 130 on Ctrl-C. The command lines
(gcloud's, the workers') are in tpu_vm.py. Tests: tests/launch/tpu_pod*_test.py and
git_ref_test.py, against a fake gcloud.
"""

import re
import shlex
import sys
import tempfile
import time

from absl import flags

from bertjax import config_args
from launch import cloud
from launch import git_ref as git_refs
from launch import tpu_vm

# The slice a launch runs on (launch() takes one); its command lines are tpu_vm's.
Slice = tpu_vm.Slice
# The queued resource's states (state.state) of a slice that went away (spot preemption,
# maintenance): the run is resumed on a new one.
PREEMPTED = ('PREEMPTED', 'SUSPENDING', 'SUSPENDED', 'FAILED')
REATTACH = 5  # Re-attaches to worker 0's log after an ssh session cut (255) on a live slice.
# A preempted slice's delete is tried this many times (gcloud failing: a transient 503), and the
# slice looked for this many times after, until it is gone, before the launcher gives up.
DELETE_TRIES = 3
GONE_POLLS = 10

_NAME = flags.DEFINE_string('name', None, 'Name of the TPU VM (and of its queued resource).')
_ZONE = flags.DEFINE_string('zone', None, 'Zone, e.g. us-west4-a (v5e).')
_TYPE = flags.DEFINE_string('accelerator_type', None, 'e.g. v5litepod-16, v6e-16, v5p-32.')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Run directory: gs://... (a local path only '
                               'on a single-host slice, with --keep and no --spot).')
_PROJECT = flags.DEFINE_string('project', '', 'GCP project (default: gcloud\'s).')
_SPOT = flags.DEFINE_bool('spot', False, 'Spot capacity (preemptible; the run resumes).')
_RESERVED = flags.DEFINE_bool('reserved', False, 'The project\'s reservation.')
_RUNTIME = flags.DEFINE_string('runtime_version', '', 'TPU VM image (default per generation).')
_GIT_REF = flags.DEFINE_string('git_ref', '', 'Install bertjax, and take configs/, from this '
                               'git ref (e.g. git+https://github.com/ORG/bertjax@v0.2: the '
                               'commit it names at launch) instead of a wheel of this checkout.')
_AOT_CHECK = flags.DEFINE_bool('aot_check', False, 'Compile the step for the slice first.')
_KEEP = flags.DEFINE_bool('keep', False, 'Leave the slice running at the end.')
_MAX_RESTARTS = flags.DEFINE_integer('max_restarts', 10, 'Re-runs after preemptions.',
                                     lower_bound=0)
_POLL_S = flags.DEFINE_float('poll_seconds', 30.0, 'Seconds between queued-resource polls '
                             f'(0 to {cloud.POLL_MAX_S}).')
_DRY_RUN = flags.DEFINE_bool('dry_run', False, 'Print the commands, one per line; run none.')
REQUIRED = ('name', 'zone', 'accelerator_type', 'workdir')


def check(tpu: Slice, workdir: str, keep: bool = False):
  """Refuses a name GCP would refuse, an unknown accelerator type or zone (listing the known
  ones), a spot and reserved request at once, and a local workdir on a multi-host slice, or on
  one that is deleted (at the end, or on a preemption: its checkpoints with it)."""
  if not re.fullmatch(r'[a-z]([-a-z0-9]{0,61}[a-z0-9])?', tpu.name or ''):
    raise ValueError(f'--name={tpu.name!r}: a TPU VM name is lowercase letters, digits and '
                     'hyphens, starting with a letter (at most 63).')
  if tpu.accelerator_type not in cloud.SLICES:
    raise ValueError(f'unknown accelerator type {tpu.accelerator_type!r}; known: '
                     f'{", ".join(cloud.SLICES)}')
  if tpu.zone not in cloud.ZONES[tpu.generation]:
    raise ValueError(f'{tpu.generation} slices are not offered in zone {tpu.zone!r}; zones: '
                     f'{", ".join(cloud.ZONES[tpu.generation])}')
  if tpu.spot and tpu.reserved:
    raise ValueError('--spot and --reserved exclude each other: pick one')
  cloud.check_bucket_path(workdir)
  if tpu.hosts > 1 and not workdir.startswith('gs://'):
    raise ValueError(f'{tpu.accelerator_type} has {tpu.hosts} hosts, which cannot share the '
                     f'local path {workdir!r}: use a bucket, --workdir=gs://BUCKET/runs/NAME')
  if (tpu.spot or not keep) and not workdir.startswith('gs://'):
    raise ValueError(f'the local path {workdir!r} lies on the VM\'s disk, deleted with the slice '
                     'and its checkpoints (at the end, or on a preemption): use a bucket, '
                     '--workdir=gs://BUCKET/runs/NAME, or pass --keep without --spot')


def pin_commit(tpu: Slice, run: cloud.Runner, git_ref: str) -> str:
  """git_ref at the commit its ref names now (worker 0 fetching it): a branch or tag moved
  later changes nothing, on any worker or restart. A commit already is kept as it is."""
  if re.fullmatch(git_refs.COMMIT, git_refs.source(git_ref)[1]):
    return git_ref
  fetch = git_refs.fetch(git_ref, tpu_vm.SOURCE)
  command = tpu_vm.ssh_command(
      tpu, f"{fetch} && git -C {tpu_vm.SOURCE} rev-parse 'FETCH_HEAD^{{commit}}'", '0')
  if getattr(run, 'dry_run', False):
    print(shlex.join(command), flush=True)  # The commit is read at the run; the ref is shown.
    return git_ref
  said = run(command, capture=True).stdout.split()
  if not said or not re.fullmatch(git_refs.COMMIT, said[-1]):
    raise RuntimeError(f'worker 0 printed no commit for --git_ref={git_ref} ({said[-1:]}): '
                       'pass a commit, ...@<40 hex digits>')
  print(f'tpu_pod: --git_ref={git_ref} is commit {said[-1]}: every worker and every restart '
        'installs it and runs its configs/', flush=True)
  return git_refs.pinned(git_ref, said[-1])


def was_preempted(exit_code: int, state: str) -> bool:
  """The run did not finish because the slice went away: the queued resource's state is among
  PREEMPTED (spot preemption, maintenance), or the run itself saved and stopped on a SIGTERM
  (cloud.PREEMPTED_EXIT: a maintenance event on a slice still ACTIVE). A run that exited 0
  finished, whatever the state."""
  return exit_code != 0 and (exit_code == cloud.PREEMPTED_EXIT or state in PREEMPTED)


def describe(tpu: Slice, run: cloud.Runner, poll_s: float, tries: int = 3) -> str:
  """The queued resource's state, asked up to `tries` times (poll_s apart) while gcloud fails;
  '' when it failed every time."""
  for attempt in range(tries):
    if attempt:
      time.sleep(poll_s)
    result = run(tpu_vm.state_command(tpu), capture=True, check=False)
    if not result.returncode and result.stdout.strip():
      return result.stdout.strip()
    if tries > 1:  # A poll says why as it retries (a lone try asks 'gone?': NOT_FOUND expected).
      print(f'tpu_pod: gcloud could not read the state of {tpu.name} (try {attempt + 1} of '
            f'{tries}): {cloud.last_said(result) or f"exit {result.returncode}, no state given"}',
            file=sys.stderr, flush=True)
  return ''


def wait_active(tpu: Slice, run: cloud.Runner, poll_s: float) -> bool:
  """Waits for the queued resource to be ACTIVE: False when it was preempted first."""
  while True:
    state = describe(tpu, run, poll_s)
    if state == 'ACTIVE':
      return True
    if state in ('PREEMPTED', 'SUSPENDING', 'SUSPENDED'):
      return False
    if state in ('', 'FAILED'):  # FAILED before ACTIVE: it could not be created.
      raise RuntimeError(_failed(tpu, run, state))
    time.sleep(poll_s)


def _failed(tpu: Slice, run: cloud.Runner, state: str) -> str:
  """Why the queued resource could not be created, read before the launch deletes it: gcloud's
  state.failedData.error.message, and the describe that shows all (kept with --keep)."""
  describe = shlex.join(tpu.gcloud('queued-resources', 'describe', tpu.name))
  if not state:
    return (f'queued resource {tpu.name} is not readable (gcloud failed 3 times, why above): see '
            f'`{describe}`')
  said = run(tpu.gcloud('queued-resources', 'describe', tpu.name,
                        '--format=value(state.failedData.error.message)'),
             capture=True, check=False).stdout.strip()
  return (f'queued resource {tpu.name} is FAILED: {said or "gcloud gives no reason"} (with --keep '
          f'it is left to be read with `{describe}`)')


def create(tpu: Slice, run: cloud.Runner, restart: bool = False):
  """Creates the queued resource; refuses one of that name that exists already (a run still
  going, or one left by --keep), which is not this process's to delete. On a `restart` the one
  there is this launch's own preempted slice, which delete_preempted could not remove."""
  code = run(tpu_vm.create_command(tpu), check=False).returncode
  if not code:
    return
  state = describe(tpu, run, 0, tries=1)
  if state and restart:
    raise RuntimeError(_not_deleted(tpu, state))
  if state:
    raise RuntimeError(f'queued resource {tpu.name} exists already ({state}): follow its run with '
                       f'{shlex.join(tpu_vm.stream_command(tpu))}, or delete it with '
                       f'{shlex.join(tpu_vm.delete_command(tpu))} and run this again')
  raise RuntimeError(f'gcloud exited with {code}: {shlex.join(tpu_vm.create_command(tpu))}')


def _not_deleted(tpu: Slice, state: str) -> str:
  return (f'the preempted slice {tpu.name} of this launch could not be deleted to re-create it '
          f'({state or "its state not readable"}): delete it with '
          f'{shlex.join(tpu_vm.delete_command(tpu))} and run this again (the run resumes from its '
          'last checkpoint)')


def delete_preempted(tpu: Slice, run: cloud.Runner, poll_s: float):
  """Deletes this launch's own preempted slice before it is re-created: the delete tried
  DELETE_TRIES times while gcloud fails (a transient 503), then the slice waited for until
  describe no longer finds it. Raises RuntimeError, naming it as this launch's own, when it
  stays (create would take it for another run's)."""
  state = ''
  for attempt in range(DELETE_TRIES):
    if attempt:
      time.sleep(poll_s)
    deleted = not run(tpu_vm.delete_command(tpu), check=False).returncode
    for _ in range(GONE_POLLS if deleted else 1):  # A failed delete: gone already?
      state = describe(tpu, run, poll_s, tries=1)
      # Not found twice in a row: gone (one failed describe may be gcloud's own failure).
      if not state and not (state := describe(tpu, run, poll_s, tries=1)):
        return
      time.sleep(poll_s)
  raise RuntimeError(_not_deleted(tpu, state or describe(tpu, run, poll_s, tries=1)))


def start(tpu: Slice, run: cloud.Runner, commands, poll_s: float, git_ref: str = '',
          starting=lambda: None) -> tuple[bool, str]:
  """Waits for the slice to be ACTIVE, pins `git_ref` to a commit (pin_commit) and runs
  `commands(git_ref)` (install, the last starts the run; `starting()` is called just before it):
  (False when the slice was preempted on the way, a command failing and the queued resource
  PREEMPTED; the ref as pinned)."""
  if not wait_active(tpu, run, poll_s):
    return False, git_ref
  try:
    if git_ref:
      git_ref = pin_commit(tpu, run, git_ref)
    *install, start_run = commands(git_ref)
    for cmd in install:
      run(cmd)
    starting()
    run(start_run)
  except RuntimeError:
    if describe(tpu, run, poll_s) in PREEMPTED:
      return False, git_ref
    raise
  return True, git_ref


def follow(tpu: Slice, run: cloud.Runner, poll_s: float) -> tuple[int, str]:
  """Streams worker 0's log until the run ends: (its exit code, the queued resource's state).
  An ssh session cut (255) while the slice is not preempted is re-attached to, REATTACH times at
  most, poll_s apart: the run goes on in the background."""
  for attempt in range(REATTACH + 1):
    exit_code = run(tpu_vm.stream_command(tpu), check=False).returncode
    state = describe(tpu, run, poll_s)
    if exit_code != 255 or state in PREEMPTED or attempt == REATTACH:
      break
    print(f'tpu_pod: the ssh session to worker 0 was cut and {tpu.name} is '
          f'{state or "not readable"}: re-attaching to its run', flush=True)
    time.sleep(poll_s)
  return exit_code, state


def launch(tpu: Slice, main_args, workdir: str, *, run: cloud.Runner, git_ref: str = '',
           aot_check: bool = False, keep: bool = False, max_restarts: int = 10,
           poll_s: float = 30.0) -> int:
  """The whole job; returns the run's exit code (cloud.PREEMPTED_EXIT when the restarts ran out,
  or when a run with its workdir on the slice's disk stopped before its end)."""
  check(tpu, workdir, keep)
  main_args = cloud.job_flags(main_args)  # A --flagfile's lines, checked here, sent to the hosts.
  cloud.check_workdir(main_args, workdir)
  # The job's config as bertjax.main will check it: a typo fails here, not on a booked slice.
  config = config_args.check_args(main_args, cloud.check_paths)
  cloud.check_job(main_args, config)
  cloud.check_for_slice(config, tpu.accelerator_type)
  if warning := cloud.local_paths_warning('tpu_pod', config):
    print(warning, file=sys.stderr, flush=True)
  if aot_check and config.job != 'pretrain':
    raise ValueError(f'--aot_check compiles the pre-training step only, and this job is '
                     f'config.job={config.job!r}: leave --aot_check out')
  job_config, worker_args = cloud.worker_job(main_args, tpu_vm.WORKER_CONFIG)
  if job_config:
    cloud.check_on_worker(job_config, tpu_vm.WORKER_CONFIG, worker_args)
  if git_ref:
    git_ref = git_refs.pin_here(git_ref)
  if aot_check:  # aot_compile's refusal (78: a config that does not fit) is the launch's.
    command = cloud.aot_command(tpu.accelerator_type, config_args.config_flags(main_args, config))
    if code := run(command, check=False).returncode:
      if code == cloud.REFUSED_EXIT:
        raise ValueError(f'--aot_check: the step does not compile for {tpu.accelerator_type} '
                         "(aot_compile's reason above): mend what it names (the job's config, "
                         "or libtpu on this machine)")
      raise RuntimeError(f'launch.aot_compile exited with {code}: {shlex.join(command)}')
  start_run = tpu_vm.run_command(tpu, worker_args, workdir)
  with tempfile.TemporaryDirectory(prefix='tpu_pod-wheel-') as folder:  # local temp: the wheel
    wheel = '' if git_ref else tpu_vm.build_wheel(run, folder)
    return book_and_run(
        tpu, run, lambda ref: tpu_vm.install_commands(tpu, wheel, ref, job_config) + [start_run],
        git_ref=git_ref, keep=keep, max_restarts=max_restarts, poll_s=poll_s,
        # A local workdir (check: a kept single-host slice) goes with the slice's disk.
        rerun=None if workdir.startswith('gs://') else start_run)


def book_and_run(tpu: Slice, run: cloud.Runner, commands, *, git_ref: str, keep: bool,
                 max_restarts: int, poll_s: float, rerun: list[str] | None = None) -> int:
  """Books the slice, runs `commands(git_ref)` there (start; the last starts the run) and follows
  the run, re-created after each preemption; the slice deleted at the end unless `keep`.
  `rerun`: the command that starts the run again on this slice, given when its workdir lies on
  the slice's disk: a run stopped by a preemption then stops the launch, the slice left as it
  is (a new one would start the run from step 0), with how to resume it there."""
  owned = False  # The slice is this process's to delete at the end.
  booked = False  # A slice was asked for: Ctrl-C leaves it, and its run, alone.
  sent = []  # The run's start was sent to this attempt's slice: a run may go on there.
  ran = False  # A run was started on a slice (it may have saved a checkpoint).
  try:
    for attempt in range(max_restarts + 1):
      if attempt:
        print(f'tpu_pod: the slice was preempted; re-creating it (restart {attempt} of '
              f'{max_restarts}); the run resumes from its last checkpoint', flush=True)
        booked = False  # Ctrl-C while the preempted slice is deleted: no run goes on.
        delete_preempted(tpu, run, poll_s)
      booked = True
      sent.clear()
      create(tpu, run, restart=bool(attempt))
      owned = True
      started, git_ref = start(tpu, run, commands, poll_s, git_ref, lambda: sent.append(True))
      if not started:
        continue
      ran = True
      exit_code, state = follow(tpu, run, poll_s)
      if exit_code == 255 and state not in PREEMPTED:
        owned = False  # Its run may go on.
        raise RuntimeError(f'the ssh session to worker 0 of {tpu.name} was cut {REATTACH + 1} '
                           'times while the slice was not preempted; it is left running: follow '
                           f'its run with {shlex.join(tpu_vm.stream_command(tpu))}, or delete it '
                           f'with {shlex.join(tpu_vm.delete_command(tpu))}')
      if not was_preempted(exit_code, state):
        if exit_code == tpu_vm.STATUS_LOST:
          print(f'tpu_pod: the run on {tpu.name} ended, but its exit status was lost (worker '
                f'0\'s {tpu_vm.RC} holds no number: a full disk?): taken as a failure (exit '
                f'{exit_code}); its log is above, and in {tpu_vm.LOG} on each worker',
                file=sys.stderr, flush=True)
        return exit_code
      if rerun is not None:
        print(_kept_with_its_disk(tpu, exit_code, state, rerun), file=sys.stderr, flush=True)
        return cloud.PREEMPTED_EXIT
    times = f'{max_restarts + 1} time{"s" * bool(max_restarts)}'
    then = ('the run stopped at its last checkpoint (if it saved one); run the same command again '
            'to resume from it') if ran else ('each time before its run started: nothing ran; run '
                                              'the same command again later')
    print(f'tpu_pod: {tpu.name} was preempted {times} (--max_restarts={max_restarts} spent): '
          f'{then}', file=sys.stderr, flush=True)
    return cloud.PREEMPTED_EXIT
  except KeyboardInterrupt:
    if not booked:
      raise  # main says it.
    owned = False  # The run, told nothing (it would not save), goes on: the slice stays.
    print(_interrupted(tpu, bool(sent), ran), file=sys.stderr, flush=True)
    return 130
  finally:
    if owned and not keep:
      run(tpu_vm.delete_command(tpu), check=False)


def _kept_with_its_disk(tpu: Slice, exit_code: int, state: str, rerun: list[str]) -> str:
  """What to do when a run whose workdir lies on the slice's disk stopped before its end: its
  checkpoints are on that VM, which is left as it is (neither deleted nor re-created)."""
  if state in ('PREEMPTED', 'FAILED'):  # Such a queued resource never comes back, nor its disk.
    return (f'tpu_pod: the run on {tpu.name} stopped before its end (its queued resource is '
            f'{state}): the VM is gone with its disk, and the run\'s checkpoints with it (its '
            'workdir was local to the VM), so no restart could resume them. Delete it with '
            f'{shlex.join(tpu_vm.delete_command(tpu))}, and launch again with a gs:// --workdir '
            'to survive preemptions')
  why = (f'its queued resource is {state}' if state in PREEMPTED else
         f'exit {exit_code}: it saved on a SIGTERM, or its VM restarted under it')
  return (f'tpu_pod: the run on {tpu.name} stopped before its end ({why}), and its workdir lies '
          f'on the VM\'s disk with its checkpoints: {tpu.name} is left as it is, neither deleted '
          'nor re-created (a new slice would start the run again from step 0). Once '
          f'`{shlex.join(tpu_vm.state_command(tpu))}` says ACTIVE, resume the run there from its '
          f'last checkpoint with {shlex.join(rerun)} and follow it with '
          f'{shlex.join(tpu_vm.stream_command(tpu))}; delete the slice when done with '
          f'{shlex.join(tpu_vm.delete_command(tpu))}')


def _interrupted(tpu: Slice, sent: bool, ran: bool) -> str:
  """Ctrl-C's line once a slice was asked for: `sent`, the run's start sent to it (a run may go
  on); `ran`, a run started on an earlier slice of this launch (it may have saved a checkpoint)."""
  delete = shlex.join(tpu_vm.delete_command(tpu))
  if sent:
    return (f'tpu_pod: interrupted; {tpu.name} and its run (if started) go on: follow it with '
            f'{shlex.join(tpu_vm.stream_command(tpu))}; delete the slice when done with {delete}')
  # Queued, creating or installing: the queued resource becomes ACTIVE and bills, idle.
  return (f'tpu_pod: interrupted before a run was started on {tpu.name}: none goes on, but its '
          f'queued resource stays (once ACTIVE it bills, idle): delete it with {delete}'
          + ('; then run the same command again to resume from the last checkpoint' if ran
             else ''))


def main(argv):
  cloud.check_usage(argv, sys.argv[1:], REQUIRED)  # The launcher's own (argv[1:]: the job's).
  cloud.check_poll_seconds(_POLL_S.value)
  tpu = Slice(_NAME.value, _ZONE.value, _TYPE.value, _PROJECT.value, _SPOT.value,
              _RESERVED.value, _RUNTIME.value)
  try:
    code = launch(tpu, argv[1:], _WORKDIR.value,
                  run=cloud.Runner(_DRY_RUN.value, dry_output='ACTIVE'),
                  git_ref=_GIT_REF.value, aot_check=_AOT_CHECK.value, keep=_KEEP.value,
                  max_restarts=_MAX_RESTARTS.value, poll_s=_POLL_S.value)
  except ValueError as e:  # Its flags, the job's config or workdir: refused before anything ran.
    cloud.refuse('tpu_pod', str(e))
  except RuntimeError as e:  # gcloud failed, the slice exists already, the wheel not built.
    print(f'tpu_pod: error: {e}', file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt:  # Before a slice was asked for, or while deleting it at the end.
    print(f'tpu_pod: interrupted; if {tpu.name} exists, delete it with '
          f'{shlex.join(tpu_vm.delete_command(tpu))}', file=sys.stderr)
    sys.exit(130)
  sys.exit(code)


if __name__ == '__main__':
  cloud.run_launcher('tpu_pod', main)

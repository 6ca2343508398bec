"""launch/gke_jobset.py's JobSet on the cluster, through kubectl: created (never one of the same
name replaced), slice 0 worker 0's log followed through JobSet's restarts until the JobSet has a
terminal state, then deleted unless kept. Every kubectl command goes through cloud.Runner (its
dry run prints them)."""

import shlex
import sys
import time

from launch import cloud

COMPLETED, FAILED = 'Completed', 'Failed'  # The JobSet's status.terminalState.


def _worker0(name: str) -> str:
  return (f'jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/job-index=0,'
          'batch.kubernetes.io/job-completion-index=0')


def create_command(path) -> list[str]:
  """`create`, not `apply`: a JobSet of that name that appeared since exists_command is refused
  by kubectl, never changed."""
  return ['kubectl', 'create', '-f', str(path)]


def exists_command(name: str) -> list[str]:
  """Prints the name of the JobSet `name` if there is one, nothing if not."""
  return ['kubectl', 'get', 'jobset', name, '--ignore-not-found', '-o',
          'jsonpath={.metadata.name}']


def wait_command(name: str) -> list[str]:
  return ['kubectl', 'wait', '--for=condition=Ready', 'pod', f'--selector={_worker0(name)}',
          '--timeout=3600s']


def logs_command(name: str) -> list[str]:
  return ['kubectl', 'logs', '--follow', f'--selector={_worker0(name)}', '--tail=-1']


def state_command(name: str) -> list[str]:
  return ['kubectl', 'get', 'jobset', name, '-o', 'jsonpath={.status.terminalState}']


def delete_command(name: str) -> list[str]:
  return ['kubectl', 'delete', 'jobset', name, '--ignore-not-found']


STATE_TRIES = 3  # kubectl failing this many looks in a row at the JobSet's state: the launch stops.


def run_jobset(name: str, path, *, run: cloud.Runner, keep: bool = False,
               poll_s: float = 30.0) -> int:
  """Creates the JobSet and follows slice 0 worker 0 until it has a terminal state (through
  JobSet's restarts, pods pending for capacity): 0 when it completed, 1 when it failed (the run's
  error, or its restarts spent); deleted then unless `keep`. Ctrl-C leaves it running. Raises
  RuntimeError, deleting nothing, when one of that name exists (not this launch's to replace or
  delete), kubectl fails to create it, or its state cannot be read (follow)."""
  if run(exists_command(name), capture=True).stdout.strip() == name:
    raise RuntimeError(f'a JobSet named {name} exists already (still running, or left by --keep): '
                       f'follow it with {shlex.join(logs_command(name))}, or delete it with '
                       f'{shlex.join(delete_command(name))} and run this again, or pass another '
                       '--name')
  run(create_command(path))
  try:
    state = follow(name, run, poll_s)
  except KeyboardInterrupt:
    print(f'gke_jobset: interrupted; {name} is left running: delete it with '
          f'{shlex.join(delete_command(name))}', file=sys.stderr, flush=True)
    return 130
  dry = getattr(run, 'dry_run', False)  # Its state is the runner's made-up one: nothing ran.
  if not dry:
    print(f'gke_jobset: {name} completed' if state == COMPLETED else
          f'gke_jobset: {name} failed: the run\'s error (the log above; not restarted, it would '
          'fail the same way) or --max_restarts spent', flush=True)
  if not keep:
    run(delete_command(name), check=False)
  if dry:
    print(f'gke_jobset: dry run: no kubectl command ran, {name} was not created: run this again '
          'without --dry_run (with --apply) to create it', flush=True)
  return 0 if state == COMPLETED or dry else 1


def follow(name: str, run: cloud.Runner, poll_s: float) -> str:
  """Streams slice 0 worker 0's log, again after each restart, until the JobSet has a terminal
  state: that state. A failed look at the state says kubectl's reason; STATE_TRIES of them in a
  row raise RuntimeError (a JobSet deleted by someone else, kubectl's credentials expired, no
  network), which would otherwise be taken for a JobSet not ended, forever."""
  failures = 0
  while True:
    run(wait_command(name), check=False)
    run(logs_command(name), check=False)
    result = run(state_command(name), capture=True, check=False)
    if not result.returncode:
      failures = 0
      if (state := result.stdout.strip()) in (COMPLETED, FAILED):
        return state
      print(f'gke_jobset: {name} has not ended (its pods pending, or restarting after a '
            'preempted or evicted one: the run resumes from its last checkpoint)', flush=True)
    else:
      failures += 1
      said = cloud.last_said(result) or f'exit {result.returncode}, nothing said'
      print(f'gke_jobset: kubectl could not read the state of {name} (try {failures} of '
            f'{STATE_TRIES}): {said}', file=sys.stderr, flush=True)
      if failures == STATE_TRIES:
        raise RuntimeError(_unreadable(name, said))
    time.sleep(poll_s)


def _unreadable(name: str, said: str) -> str:
  if 'NotFound' in said or 'not found' in said:
    return (f'the JobSet {name} is gone (kubectl: {said}): someone else deleted it, and its '
            'run with it; run this again to start it anew (it resumes from the last checkpoint '
            'in the workdir)')
  return (f'kubectl could not read the state of the JobSet {name} {STATE_TRIES} times in a row '
          f'({said}): it is left as it is; mend kubectl\'s access to the cluster (credentials: '
          f'gcloud container clusters get-credentials), then follow it with '
          f'{shlex.join(logs_command(name))}, or delete it with {shlex.join(delete_command(name))}')

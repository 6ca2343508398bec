"""The command lines of a Cloud TPU slice, for tpu_pod.py: its queued resource's create, describe
and delete; ssh and scp to its workers; what the workers run (the install, bertjax.main in the
background, worker 0's log streamed until the run ends); and the wheel of this checkout they
install, built here from a clean copy of what the wheel holds."""

import dataclasses
import os
import pathlib
import shlex
import shutil
import sys
import tomllib

from launch import cloud
from launch import git_ref as git_refs

LOG = '~/bertjax.log'  # On each worker.
RC = '~/bertjax.rc'  # The run's exit code, written when it ends.
PID = '~/bertjax.pid'  # The run's process (its subshell), written when it starts.
SOURCE = '~/bertjax-src'  # On each worker: the --git_ref commit's checkout, installed from.
# On each worker, in its home: the job's config file when it lies outside this checkout's configs/
# (a fixed name: a file named after a module, jax.py say, would shadow it in bertjax.main).
WORKER_CONFIG = 'bertjax_job_config.py'
# bertjax needs Python >= 3.11 and the TPU runtime images hold Ubuntu 22.04's 3.10: each worker
# gets a venv of a Python uv provides (its own build when the image lacks that version).
VENV = '~/bertjax-venv'
PYTHON = f'{VENV}/bin/python'
UV = 'python3 -m uv'
VENV_SETUP = (f'python3 -m pip install -q --user -U uv && {UV} venv -q --allow-existing '
              f'--python 3.12 {VENV}')
# The log stream's exit status when the run ended but RC holds no number (an empty file: a full
# disk when it was written): a failure, not the 0 a bare `exit` would give (the slice deleted as
# if the run had finished). Neither bertjax.main's statuses nor ssh's 255.
STATUS_LOST = 86
# The checkout this launcher belongs to (not the current directory), and what its wheel is built
# from (pyproject.toml's [tool.setuptools] takes the bertjax* packages, its readme README.md):
# copied afresh, so that a stale build/ (setuptools' build/lib, which keeps a file deleted or
# back-dated since) cannot leak into the wheel.
CHECKOUT = pathlib.Path(__file__).resolve().parents[1]
WHEEL_SOURCES = ('pyproject.toml', 'setup.cfg', 'README.md', 'bertjax')


@dataclasses.dataclass(frozen=True)
class Slice:
  name: str
  zone: str
  accelerator_type: str
  project: str = ''
  spot: bool = False
  reserved: bool = False
  runtime_version: str = ''

  @property
  def generation(self) -> str:
    return self.accelerator_type.rsplit('-', 1)[0]

  @property
  def hosts(self) -> int:
    return cloud.SLICES[self.accelerator_type][0]

  def gcloud(self, *args) -> list[str]:
    return ['gcloud', 'compute', 'tpus', *args, f'--zone={self.zone}'] + (
        [f'--project={self.project}'] if self.project else [])


def build_wheel(run: cloud.Runner, folder: str, checkout: pathlib.Path = CHECKOUT) -> str:
  """A wheel of `checkout` built into `folder` (a temporary one, not the checkout's dist/) from
  a copy of its WHEEL_SOURCES made there; the path of the one wheel pip built (its name is
  pyproject's version, not bertjax.__version__'s). Raises RuntimeError, before a slice is booked,
  when pip built none or several. A dry run names the wheel pyproject's version would give."""
  source = os.path.join(folder, 'source')
  try:  # One line, before booking, for what the copy or pyproject's reading meets.
    os.makedirs(source)
    for name in WHEEL_SOURCES:
      path = checkout / name
      if path.is_dir():
        shutil.copytree(path, os.path.join(source, name),
                        ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
      elif path.exists():  # A missing one: pip's build says what it lacks.
        shutil.copy2(path, os.path.join(source, name))
    run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', f'--wheel-dir={folder}', source])
    if getattr(run, 'dry_run', False):
      version = tomllib.loads((checkout / 'pyproject.toml').read_text())['project']['version']
      return f'{folder}/bertjax-{version}-py3-none-any.whl'
  except (OSError, KeyError, tomllib.TOMLDecodeError) as e:
    raise RuntimeError(f'cannot build the wheel of {checkout} in {folder} ({type(e).__name__}: '
                       f'{e}): mend that, or pass --git_ref=git+URL@REF to install a commit') from e
  wheels = sorted(pathlib.Path(folder).glob('bertjax-*.whl'))
  if len(wheels) != 1:
    raise RuntimeError(f'pip wheel built {len(wheels)} bertjax wheels in {folder} '
                       f'({", ".join(w.name for w in wheels) or "none"}), not one: see its output '
                       f'above, mend {checkout}/pyproject.toml and run this again')
  return str(wheels[0])


def create_command(tpu: Slice) -> list[str]:
  capacity = ['--spot'] if tpu.spot else ['--reserved'] if tpu.reserved else []
  return tpu.gcloud('queued-resources', 'create', tpu.name, f'--node-id={tpu.name}',
                    f'--accelerator-type={tpu.accelerator_type}',
                    f'--runtime-version={tpu.runtime_version or cloud.RUNTIMES[tpu.generation]}',
                    *capacity)


def state_command(tpu: Slice) -> list[str]:
  return tpu.gcloud('queued-resources', 'describe', tpu.name, '--format=value(state.state)')


def delete_command(tpu: Slice) -> list[str]:
  return tpu.gcloud('queued-resources', 'delete', tpu.name, '--force', '--quiet')


def ssh_command(tpu: Slice, command: str, worker: str = 'all', *ssh_flags: str) -> list[str]:
  return tpu.gcloud('tpu-vm', 'ssh', tpu.name, f'--worker={worker}',
                    *(f'--ssh-flag={f}' for f in ssh_flags), f'--command={command}')


def install_commands(tpu: Slice, wheel: str, git_ref: str, job_config: str = ''
                     ) -> list[list[str]]:
  """Copy the wheel and this checkout's configs/ to every worker's home, or with a git ref
  (pinned: tpu_pod.pin_commit) fetch that commit there and take its configs/; and `job_config`
  (a config file from elsewhere, cloud.worker_job) as WORKER_CONFIG; pip-install bertjax."""
  sources = [wheel, os.path.relpath(cloud.CONFIGS)] if not git_ref else []
  copies = [tpu.gcloud('tpu-vm', 'scp', '--recurse', *sources, f'{tpu.name}:', '--worker=all')
            ] if sources else []
  if job_config:
    copies.append(tpu.gcloud('tpu-vm', 'scp', job_config, f'{tpu.name}:{WORKER_CONFIG}',
                             '--worker=all'))
  package, fetch = f'~/{wheel.rsplit("/", 1)[-1]}', ''
  if git_ref:
    package = SOURCE
    fetch = (f'{git_refs.fetch(git_ref, SOURCE)} && git -C {SOURCE} checkout -q FETCH_HEAD && '
             f'rm -rf ~/configs && cp -r {SOURCE}/configs ~/configs && ')
  return copies + [ssh_command(tpu, f'{fetch}{VENV_SETUP} && {UV} pip install -q --python '
                                    f'{PYTHON} -U "jax[tpu]" {package}')]


def run_command(tpu: Slice, main_args, workdir: str) -> list[str]:
  """bertjax.main on every worker, in the background: its log to LOG, its exit code to RC."""
  # PYTHON unquoted: its ~ expands on the worker.
  main = f'{PYTHON} -m bertjax.main ' + shlex.join([*main_args, f'--workdir={workdir}'])
  # The subshell ignores SIGHUP (inherited by python): the run outlives the ssh session.
  return ssh_command(tpu, f"rm -f {RC} {PID}; (trap '' HUP; {main}; echo $? > {RC}) > {LOG} "
                          f'2>&1 < /dev/null & echo $! > {PID}')


def stream_command(tpu: Slice) -> list[str]:
  """Worker 0's log until the run ends; exits with the run's exit code, PREEMPTED_EXIT when the
  run is gone without one (the VM rebooted for maintenance: the run resumes on a new slice), or
  STATUS_LOST when RC holds no number. A VM gone without a word (no FIN) ends the session (255)
  within 2 minutes instead of leaving it hanging."""
  gone = (f'! kill -0 "$(cat {PID} 2>/dev/null)" 2>/dev/null && [ ! -f {RC} ]')
  lost = (f'echo "tpu_pod: the run ended but {RC} holds no exit status ($rc): it was lost" >&2; '
          f'exit {STATUS_LOST}')
  return ssh_command(tpu, f'tail -n +1 -F {LOG} & while [ ! -f {RC} ]; do if {gone}; then '
                          f'kill %1; exit {cloud.PREEMPTED_EXIT}; fi; sleep 5; done; sleep 2; '
                          f'kill %1; rc=$(cat {RC}); case "$rc" in ""|*[!0-9]*) {lost};; esac; '
                          'exit "$rc"', '0',
                     '-o ServerAliveInterval=30', '-o ServerAliveCountMax=4')

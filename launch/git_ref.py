"""What tpu_pod's --git_ref names: pip's git+URL[@REF] parsed, the shell that fetches its commit
on a worker, and the commit read from this machine before a slice is booked (a queued slice may
come up hours later, when a branch has moved on); a source on this machine's disk (file://, a
path) refused, as no worker reaches it."""

import ipaddress
import os
import pathlib
import re
import shlex
import socket
import subprocess
import tempfile
import urllib.parse

COMMIT = r'[0-9a-f]{40}|[0-9a-f]{64}'  # A git commit's id (SHA-1, or a SHA-256 repository's).
_CHECKOUT = pathlib.Path(__file__).resolve().parents[1]  # The bertjax the launcher runs from.


def source(git_ref: str) -> tuple[str, str]:
  """(repository URL, ref: '' for its default branch) of pip's git+URL[@REF][#egg=NAME]."""
  url, _, fragment = git_ref.removeprefix('git+').partition('#')
  scheme, sep, rest = url.partition('://')
  host, _, path = rest.partition('/')
  path, at, ref = path.rpartition('@') if '@' in path else (path, '', '')
  if not (git_ref.startswith('git+') and sep and path.strip('/') and (host or scheme == 'file')
          and (ref or not at)):
    raise ValueError(f'--git_ref={git_ref!r} is no git URL: pass git+https://HOST/ORG/REPO@REF '
                     '(a branch, tag or commit), or leave it out to install this checkout')
  if fragment and not fragment.startswith('egg='):  # subdirectory=: the package is the root.
    raise ValueError(f'--git_ref={git_ref!r}: #{fragment} is not followed (bertjax is the '
                     "repository's root): leave it out")
  return f'{scheme}://{host}/{path}', ref


def pinned(git_ref: str, commit: str) -> str:
  """git_ref naming `commit` instead of its ref."""
  return f'git+{source(git_ref)[0]}@{commit}'


def fetch(git_ref: str, folder: str) -> str:
  """Shell: `folder` made afresh, the commit the ref names fetched into it as FETCH_HEAD (a
  shallow fetch: a branch, a tag or a commit)."""
  url, ref = source(git_ref)
  command = shlex.join(['fetch', '-q', '--depth=1', url] + ([ref] if ref else []))
  return f'rm -rf {folder} && git init -q {folder} && git -C {folder} {command}'


# What git says of a repository or a commit that is not there: refused, as every worker's fetch
# would fail on it. Any other failure (no network, credentials on the workers only) is not: nor
# is a host's "Repository not found", which it also says to a client lacking the credentials.
_ABSENT = re.compile(r"not our ref|couldn't find remote ref|not a git repository|does not appear "
                     r"to be a git repository|unadvertised object", re.IGNORECASE)


def _git(args, timeout_s: float) -> subprocess.CompletedProcess:
  # Never a prompt (a password, an ssh host key or passphrase): a launch is no place to wait.
  return subprocess.run(['git', *args], capture_output=True, text=True, timeout=timeout_s,
                        check=False, stdin=subprocess.DEVNULL,
                        env={**os.environ, 'GIT_TERMINAL_PROMPT': '0',
                             'GIT_SSH_COMMAND': os.environ.get('GIT_SSH_COMMAND', 'ssh') +
                             ' -o BatchMode=yes'})


def commit_here(git_ref: str, timeout_s: float = 60) -> tuple[str, str]:
  """(the commit git_ref names now, as `git ls-remote` reads it from this machine, ''), or ('',
  why) where it cannot be read here (no git, the host out of reach, credentials only on the
  workers): worker 0 reads it then. A full commit id is fetched (its commit object alone) to see
  that the repository has it. A repository, ref or commit that is not there is refused
  (ValueError): every worker's fetch would fail on it (a short commit id among them)."""
  url, ref = source(git_ref)
  commit = re.fullmatch(COMMIT, ref)
  with tempfile.TemporaryDirectory(prefix='git_ref-') as folder:  # local temp: git's own
    asked = (['-C', folder, 'fetch', '-q', '--depth=1', '--filter=tree:0', url, ref] if commit
             else ['ls-remote', url])
    try:
      made = _git(['init', '-q', folder], timeout_s) if commit else None
      listed = made if made and made.returncode else _git(asked, timeout_s)  # Made, or why not.
    except (OSError, subprocess.TimeoutExpired) as e:
      return '', f'git {"fetch" if commit else "ls-remote"} {url}: {type(e).__name__}: {e}'
  if listed.returncode:
    said = [line for line in listed.stderr.splitlines() if line.strip()]
    said = [line for line in said if line.startswith('fatal:')] or said  # git's reason first.
    why = said[0] if said else f'git {shlex.join(asked)} exited {listed.returncode}'
    if _ABSENT.search(listed.stderr):
      what = (f'does not give commit {ref} by its id, as every worker fetches it (it has no such '
              'commit, or serves only its branch and tag tips)'
              if re.search(r"not our ref|unadvertised object", listed.stderr) else
              f'has no {ref}' if "couldn't find" in listed.stderr else 'is no git repository')
      raise ValueError(f'--git_ref={git_ref}: {url} {what} ({why}): pass a repository and a '
                       'branch, tag or full commit id it has')
    return '', why
  if commit:
    return ref, ''
  refs = {name: sha for sha, name in (line.split('\t', 1) for line in listed.stdout.splitlines()
                                      if '\t' in line)}
  # git fetch's order for a short name: as given, then refs/, a tag, a branch.
  for name in [ref, f'refs/{ref}', f'refs/tags/{ref}', f'refs/heads/{ref}'] if ref else ['HEAD']:
    if name in refs:
      return refs.get(f'{name}^{{}}', refs[name]), ''  # An annotated tag: its commit.
  raise ValueError(f'--git_ref={git_ref}: {url} has no branch or tag {ref!r} (git ls-remote '
                   'lists its refs): pass one it has, or a full commit id')


def checkout_words(commit: str) -> str:
  """What the job's config was checked against here, beside `commit` (the workers')."""
  def git(*args):
    return subprocess.run(['git', '-C', str(_CHECKOUT), *args], capture_output=True, text=True,
                          timeout=60, check=False)
  try:
    head, changed = git('rev-parse', 'HEAD'), git('status', '--porcelain', '--', 'bertjax',
                                                  'configs')
  except (OSError, subprocess.TimeoutExpired):
    head = None
  if head is None or head.returncode:
    return (f'this bertjax ({_CHECKOUT}, no git checkout), not that commit\'s configs/ and code: '
            'launch from a checkout of it to check the config against them')
  if head.stdout.strip() == commit and not changed.stdout.strip():
    return 'this checkout, which is that commit'
  state = ', with changes to bertjax/ or configs/' if changed.stdout.strip() else ''
  return (f'this checkout (commit {head.stdout.strip()[:12]}{state}), not that commit\'s '
          'configs/ and code: launch from a checkout of it to check the config against them')


def check_workers_reach(git_ref: str):
  """Refuses a source on this machine, which no TPU worker can fetch (each fetches the commit
  itself, on a fresh VM): file:// or a plain path (this machine's disk), or a loopback host
  (each worker would ask itself). A launch refuses it, its dry run too (it shows what the launch
  does); commit_here reads any repository git reads."""
  url = git_ref.removeprefix('git+').partition('#')[0]
  scheme, sep, _ = url.partition('://')
  if re.match(r'file:', url, re.IGNORECASE):  # file:/repo, one slash: a path too.
    sep, scheme = '://', 'file'
  if not sep:  # A path (git+/repo@main, ../repo), or no URL at all: source() says so.
    local = url.startswith(('/', '.', '~')) or any(
        part and os.path.exists(os.path.expanduser(part)) for part in (url, url.rpartition('@')[0]))
    where = "this machine's disk" if local else ''
  elif scheme.lower() == 'file':
    where = "this machine's disk"
  else:
    try:
      loopback = _is_loopback(urllib.parse.urlsplit(url).hostname or '')
    except ValueError:  # A port that is no number.
      loopback = False
    where = 'this machine (a loopback host: each worker would ask itself)' if loopback else ''
  if where:
    raise ValueError(f'--git_ref={git_ref} lies on {where}, which no TPU worker can reach (each '
                     'fetches the commit itself): push the commit to a repository the workers '
                     'reach and pass git+https://HOST/ORG/REPO@COMMIT, or leave --git_ref out to '
                     'install a wheel of this checkout')


# The loopback names of the default /etc/hosts: Debian's (ip6-) and RHEL/Fedora's (4 and 6).
_LOOPBACK_NAMES = ('localhost', 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback',
                   'localhost4', 'localhost4.localdomain4', 'localhost6',
                   'localhost6.localdomain6')


def _is_loopback(host: str) -> bool:
  """True for a name or address that is this machine to whoever asks: localhost (and
  x.localhost, a final dot or not, and the names of _LOOPBACK_NAMES), 127.0.0.0/8 however
  written (127.1, as inet_aton reads it), ::1, 0.0.0.0 and ::, and IPv4 ones mapped into IPv6
  (::ffff:127.0.0.1). This machine's own host name passes: a worker in its network may reach it."""
  host = host.rstrip('.').lower()
  if not host:
    return False
  if host in _LOOPBACK_NAMES or host.endswith('.localhost'):
    return True
  try:
    address = ipaddress.ip_address(host)
  except ValueError:
    try:  # The short forms git's resolver takes: 127.1, 2130706433.
      address = ipaddress.ip_address(socket.inet_aton(host))
    except OSError:
      return False  # A host name.
  address = getattr(address, 'ipv4_mapped', None) or address
  return address.is_loopback or address.is_unspecified


def pin_here(git_ref: str) -> str:
  """git_ref at the commit its ref names as this machine reads it, before booking (a queued
  slice may come up hours later); as it is where that cannot be read here (pin_commit on worker
  0 then). Says what the job's config was checked against. A source the workers cannot reach
  is refused first (check_workers_reach)."""
  check_workers_reach(git_ref)
  commit, why = commit_here(git_ref)
  if not commit:
    print(f'tpu_pod: --git_ref={git_ref} could not be read here ({why}): worker 0 reads its '
          'commit when the slice is up; the job\'s config was checked against this checkout, '
          'not that commit\'s configs/ and code', flush=True)
    return git_ref
  print(f'tpu_pod: --git_ref={git_ref} is commit {commit}: every worker and every restart '
        f'installs it and runs its configs/; the job\'s config was checked against '
        f'{checkout_words(commit)}', flush=True)
  return pinned(git_ref, commit)

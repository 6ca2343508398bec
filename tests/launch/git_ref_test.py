"""launch/git_ref.py: the commit a --git_ref names, read on this machine before a slice is booked
(git ls-remote against a real repository), a ref the repository lacks refused, a source no
worker reaches (this machine's disk) refused, and what the launch says the job's config was
checked against."""

import re
import socket
import subprocess

from pod_fakes import MAIN_ARGS
from pod_fakes import REPO
from pod_fakes import launch
from pod_fakes import launch_scripted
from pod_fakes import slice_
import pytest

from launch import cloud
from launch import git_ref as git_refs
from launch import tpu_pod


def make_repo(path):
  """A repository with configs/pretrain.py on branch main, an annotated tag v1: its commit."""
  (path / 'configs').mkdir(parents=True)
  (path / 'configs' / 'pretrain.py').write_text('# first\n')
  subprocess.run(['git', 'init', '-q', '-b', 'main', str(path)], check=True)
  commit(path, 'first')
  git(path, 'tag', '-a', 'v1', '-m', 'v1')
  return git(path, 'rev-parse', 'HEAD')


def git(path, *args) -> str:
  return subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t', '-C', str(path),
                         *args], capture_output=True, text=True, check=True).stdout.strip()


def commit(path, message):
  git(path, 'add', '.')
  git(path, 'commit', '-qm', message)


@pytest.mark.parametrize('ref', ['main', 'v1', '', 'refs/heads/main', 'COMMIT'])
def test_a_ref_is_read_here_as_the_workers_fetch_it(tmp_path, ref):
  first = make_repo(tmp_path / 'repo')
  git_ref = f'git+file://{tmp_path}/repo' + (f'@{first if ref == "COMMIT" else ref}' if ref else '')
  assert git_refs.commit_here(git_ref) == (first, '')
  (tmp_path / 'repo' / 'configs' / 'pretrain.py').write_text('# second\n')
  commit(tmp_path / 'repo', 'second')
  second = git(tmp_path / 'repo', 'rev-parse', 'HEAD')
  # A branch moves on; a tag (the annotated tag's commit, not the tag object) and a commit stay.
  moved = ref in ('main', '', 'refs/heads/main')
  assert git_refs.commit_here(git_ref) == (second if moved else first, '')
  assert git_refs.pinned(git_ref + '#egg=bertjax', first) == f'git+file://{tmp_path}/repo@{first}'


def test_a_ref_the_repository_lacks_is_refused_and_one_out_of_reach_left_to_worker_0(tmp_path):
  first = make_repo(tmp_path / 'repo')
  for ref in ('nope', first[:12]):  # A short commit id: no worker's fetch takes one.
    with pytest.raises(ValueError, match=re.escape(
        f'--git_ref=git+file://{tmp_path}/repo@{ref}: file://{tmp_path}/repo has no branch or '
        f"tag '{ref}' (git ls-remote lists its refs): pass one it has, or a full commit id")):
      git_refs.commit_here(f'git+file://{tmp_path}/repo@{ref}')
  commit_read, why = git_refs.commit_here('git+https://example.invalid/bertjax@main')
  assert commit_read == '' and why.startswith('fatal: ') and 'example.invalid' in why, why


@pytest.mark.parametrize('where, what', [
    ('repo@' + 'e5' * 20, 'does not give commit ' + 'e5' * 20 + ' by its id, as every worker '
     'fetches it (it has no such commit, or serves only its branch and tag tips) (fatal: '),
    ('missing@main', 'is no git repository (fatal: '),
    ('plain@main', 'is no git repository (fatal: '),
    ('missing@COMMIT', 'is no git repository (fatal: '),
])
def test_a_commit_or_repository_that_is_not_there_is_refused(tmp_path, where, what):
  """A full commit id was taken unread, and a path that is no repository left to worker 0:
  both booked a slice whose every worker's fetch then failed. The commit is fetched here."""
  first = make_repo(tmp_path / 'repo')
  (tmp_path / 'plain').mkdir()
  git_ref = f'git+file://{tmp_path}/{where.replace("COMMIT", first)}'
  with pytest.raises(ValueError) as e:
    git_refs.commit_here(git_ref)
  url = git_refs.source(git_ref)[0]
  assert str(e.value).startswith(f'--git_ref={git_ref}: {url} {what}'), str(e.value)
  assert str(e.value).endswith('): pass a repository and a branch, tag or full commit id it has')
  # Out of reach (no network): left to worker 0, as a ref is.
  assert git_refs.commit_here(f'git+https://example.invalid/bertjax@{first}')[0] == ''


def served_at(monkeypatch, repo, url):
  """git on this machine reads `url` as the local `repo` (url.insteadOf, set for this process):
  a launch refuses a file:// --git_ref, which no worker reaches."""
  monkeypatch.setenv('GIT_CONFIG_COUNT', '1')
  monkeypatch.setenv('GIT_CONFIG_KEY_0', f'url.file://{repo}.insteadOf')
  monkeypatch.setenv('GIT_CONFIG_VALUE_0', url)


def test_a_launch_pins_the_commit_read_here_before_booking(tmp_path, monkeypatch, capsys):
  """The commit is read when the launch is asked for, not when a queued slice comes up: worker
  0 reads nothing, and every install fetches that commit. A ref the repository lacks is refused
  before anything runs."""
  first = make_repo(tmp_path / 'repo')
  served_at(monkeypatch, tmp_path / 'repo', 'https://git.example.test/bertjax')
  git_ref = 'git+https://git.example.test/bertjax@main'
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['255'],
                                git_ref=git_ref)
  assert code == 0
  assert not any('rev-parse' in c[-2] for c in calls), calls  # Nothing left to read on a worker.
  installs = [c[-2] for c in calls if '--worker=all' in c and 'uv pip install' in c[-2]]
  assert len(installs) == 2 and all(f'https://git.example.test/bertjax {first} && ' in c
                                    for c in installs), installs
  out = capsys.readouterr().out
  assert (f'tpu_pod: --git_ref={git_ref} is commit {first}: every worker and every restart '
          "installs it and runs its configs/; the job's config was checked against this "
          'checkout (commit ') in out, out
  monkeypatch.chdir(REPO)
  asked = []
  with pytest.raises(ValueError, match='has no branch or tag'):
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=asked.append,
                   git_ref='git+https://git.example.test/bertjax@nope')
  assert asked == []


@pytest.mark.parametrize('where, said', [
    ('git+file://{repo}@main', "this machine's disk"),
    ('git+file://localhost{repo}', "this machine's disk"),
    ('{repo}', "this machine's disk"),  # A plain path, pip's git+ or not.
    ('git+{repo}@main', "this machine's disk"),
    ('git+https://localhost:8080/bertjax@main', 'this machine (a loopback host: each worker '
     'would ask itself)'),
    ('git+ssh://git@127.0.0.1/bertjax', 'this machine (a loopback host'),
    # However written (they were fetched by each worker from itself, the slice booked first).
    ('git+file:{repo}@main', "this machine's disk"),
    ('git+https://127.1/bertjax@main', 'this machine (a loopback host'),
    ('git+https://0.0.0.0/bertjax@main', 'this machine (a loopback host'),
    ('git+https://LocalHost./bertjax@main', 'this machine (a loopback host'),
    ('git+https://[::ffff:127.0.0.1]/bertjax@main', 'this machine (a loopback host'),
    ('git+https://[::1]:8080/bertjax@main', 'this machine (a loopback host'),
    ('git+https://localhost.localdomain/bertjax@main', 'this machine (a loopback host'),
    ('git+ssh://git@ip6-localhost/bertjax', 'this machine (a loopback host'),
    ('git+https://localhost6.localdomain6/bertjax@main', 'this machine (a loopback host'),
    ('git+https://localhost4:8080/bertjax@main', 'this machine (a loopback host'),
])
def test_a_source_no_worker_reaches_is_refused_before_anything_runs(tmp_path, monkeypatch,
                                                                     where, said):
  """A file:// --git_ref was pinned (read here) and the slice booked: every worker's fetch of
  this machine's path then failed. A dry run refuses it too: it shows what the launch does."""
  make_repo(tmp_path / 'repo')
  git_ref = where.format(repo=tmp_path / 'repo')
  monkeypatch.chdir(REPO)
  asked = []
  with pytest.raises(ValueError, match='^' + re.escape(
      f'--git_ref={git_ref} lies on {said}')) as e:
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=asked.append, git_ref=git_ref)
  assert asked == [] and str(e.value).endswith(
      ', which no TPU worker can reach (each fetches the commit itself): push the commit to a '
      'repository the workers reach and pass git+https://HOST/ORG/REPO@COMMIT, or leave '
      '--git_ref out to install a wheel of this checkout'), str(e.value)
  if where.startswith('git+file://{repo}'):
    code, out, calls = launch(tmp_path, '--dry_run', f'--git_ref={git_ref}')
    assert code == cloud.REFUSED_EXIT and calls == [], out
    assert out.strip().splitlines() == [f'tpu_pod: error: {e.value}'], out
  for reached in ('git+https://github.com/org/bertjax@main', 'git+ssh://git@github.com/org/b',
                  'git+https://10.0.0.7/bertjax@main', 'git+https://1.example/b@main',
                  # This machine's name: a worker in its network may reach it.
                  f'git+https://{socket.gethostname()}/bertjax@main'):
    git_refs.check_workers_reach(reached)
  # scp-like (no scheme), which pip does not take: no git URL, whatever its host.
  with pytest.raises(ValueError, match="^--git_ref='git\\+git@localhost:org/b@main' is no git "):
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=asked.append,
                   git_ref='git+git@localhost:org/b@main')
  assert asked == []


def test_the_launch_says_whether_the_config_was_checked_against_the_commit(tmp_path,
                                                                           monkeypatch):
  checkout = tmp_path / 'checkout'
  first = make_repo(checkout)
  monkeypatch.setattr(git_refs, '_CHECKOUT', checkout)
  assert git_refs.checkout_words(first) == 'this checkout, which is that commit'
  other = 'd4' * 20
  assert git_refs.checkout_words(other) == (
      f"this checkout (commit {first[:12]}), not that commit's configs/ and code: launch from "
      'a checkout of it to check the config against them')
  (checkout / 'configs' / 'pretrain.py').write_text('# edited\n')
  assert git_refs.checkout_words(first).startswith(
      f'this checkout (commit {first[:12]}, with changes to bertjax/ or configs/), not that ')
  monkeypatch.setattr(git_refs, '_CHECKOUT', tmp_path / 'not_git')
  (tmp_path / 'not_git').mkdir()
  assert git_refs.checkout_words(first).startswith(
      f"this bertjax ({tmp_path / 'not_git'}, no git checkout), not that commit's")

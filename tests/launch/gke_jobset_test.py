"""The GKE JobSet manifest (single and multi-slice), the names and images it refuses, and the
kubectl command lines, against a fake kubectl that records its arguments (kube_fakes.py; its
failure policies: gke_failure_policy_test.py; hostile pass A's mends: gke_jobset_checks_test.py)."""

import re
import subprocess

from kube_fakes import DELETE
from kube_fakes import EXISTS
from kube_fakes import IMAGE
from kube_fakes import LOGS
from kube_fakes import MAIN_ARGS
from kube_fakes import REPO
from kube_fakes import SELECTOR
from kube_fakes import STATE
from kube_fakes import WAIT
from kube_fakes import launch
import pytest
import yaml

from bertjax import config_files
from launch import gke_jobset
from launch import gke_kubectl

REFUSED = gke_jobset.REFUSED_EXIT  # A flag, the job's config or workdir refused: 78.


@pytest.fixture(autouse=True)
def _in_the_checkout(monkeypatch):
  """The launcher runs from the checkout: a job's --config=FILE is read from there."""
  monkeypatch.chdir(REPO)


def pod(spec):
  return spec['spec']['replicatedJobs'][0]['template']['spec']['template']['spec']


def test_two_v5e_16_slices():
  spec = gke_jobset.manifest('bert-large', 'v5litepod-16', 2, IMAGE, 'gs://bkt/runs/large',
                             MAIN_ARGS, spot=True, max_restarts=5)
  assert spec['metadata']['annotations'] == {
      'alpha.jobset.sigs.k8s.io/exclusive-topology': 'cloud.google.com/gke-nodepool'}
  assert spec['spec']['failurePolicy']['maxRestarts'] == 5
  job = spec['spec']['replicatedJobs'][0]
  assert (job['name'], job['replicas']) == ('slice', 2)
  assert {k: job['template']['spec'][k] for k in ('parallelism', 'completions', 'backoffLimit')
          } == {'parallelism': 4, 'completions': 4, 'backoffLimit': 0}  # 4 hosts of 4 chips.
  p = pod(spec)
  assert p['nodeSelector'] == {'cloud.google.com/gke-tpu-accelerator': 'tpu-v5-lite-podslice',
                               'cloud.google.com/gke-tpu-topology': '4x4',
                               'cloud.google.com/gke-spot': 'true'}
  assert p['tolerations'][0]['key'] == 'cloud.google.com/gke-spot'
  assert p['terminationGracePeriodSeconds'] == gke_jobset.GRACE_S >= 120  # Time to save.
  container = p['containers'][0]
  assert container['image'] == IMAGE
  assert container['command'] == ['python3', '-m', 'bertjax.main', *MAIN_ARGS,
                                  '--workdir=gs://bkt/runs/large']
  assert container['resources'] == {'limits': {'google.com/tpu': 4}}
  env = {e['name']: e for e in container['env']}
  assert env['MEGASCALE_NUM_SLICES']['value'] == '2'
  assert env['MEGASCALE_COORDINATOR_ADDRESS']['value'] == (
      '$(JOBSET_NAME)-slice-0-0.$(JOBSET_NAME)')
  assert env['MEGASCALE_SLICE_ID']['valueFrom']['fieldRef']['fieldPath'] == (
      "metadata.annotations['jobset.sigs.k8s.io/job-index']")


@pytest.mark.parametrize('accelerator_type,hosts,topology,chips', [
    ('v6e-8', 1, '2x4', 8), ('v5litepod-4', 1, '2x2', 4), ('v5p-32', 4, '2x2x4', 4),
    ('v4-16', 2, '2x2x2', 4)])
def test_one_slice_per_type(accelerator_type, hosts, topology, chips):
  spec = gke_jobset.manifest('bert', accelerator_type, 1, IMAGE, 'gs://bkt/r', MAIN_ARGS)
  assert spec['spec']['replicatedJobs'][0]['template']['spec']['parallelism'] == hosts
  p = pod(spec)
  assert p['nodeSelector']['cloud.google.com/gke-tpu-topology'] == topology
  assert p['containers'][0]['resources']['limits']['google.com/tpu'] == chips
  # One slice (no MEGASCALE_*), on demand; the launcher's configs/, which the pod checks.
  assert p['containers'][0]['env'] == [{'name': 'BERTJAX_CONFIGS_SHA256',
                                        'value': config_files.configs_digest(REPO / 'configs')}]
  assert 'tolerations' not in p and p['containers'][0]['imagePullPolicy'] == 'Always'


@pytest.mark.parametrize('args,message', [
    (('bert', 'v5e-16', 1, IMAGE, 'gs://bkt/r'), "unknown accelerator type 'v5e-16'; known: .*"
                                               'v5litepod-16'),
    (('bert', 'v6e-8', 0, IMAGE, 'gs://bkt/r'), 'at least 1'),
    (('bert', 'v6e-8', 1, '', 'gs://bkt/r'), '--image is required'),
    (('bert', 'v6e-8', 1, 'img v1', 'gs://bkt/r'),
     r"^--image='img v1' holds a space: pass the image as pushed, REGISTRY/PATH:TAG"),
    (('bert', 'v6e-8', 1, 'img\tv1', 'gs://bkt/r'), 'holds a space'),
    (('bert', 'v6e-8', 1, IMAGE, '/tmp/run'), 'pods share no local disk'),
])
def test_bad_input_is_refused(args, message):
  with pytest.raises(ValueError, match=message):
    gke_jobset.manifest(*args, MAIN_ARGS)


@pytest.mark.parametrize('name', ['Bert_1', '-abc', 'abc-', '1abc', 'bért', 'ß', 'a.b', ''])
def test_a_name_kubernetes_would_refuse_is_refused(name):
  """A DNS-1035 label, ASCII only ('é'.islower() is true)."""
  with pytest.raises(ValueError) as e:
    gke_jobset.check(name, 'v6e-8', 1, IMAGE, 'gs://bkt/r')
  assert str(e.value) == (f'--name={name!r}: a JobSet name is lowercase letters a-z, digits and '
                          '-, starting with a letter and ending with a letter or digit: pass e.g. '
                          '--name=bert-large')


@pytest.mark.parametrize('accelerator_type,num_slices,limit', [
    ('v6e-8', 1, 47), ('v5litepod-16', 2, 47), ('v5p-128', 12, 45), ('v6e-256', 1, 46)])
def test_a_name_leaves_room_for_the_pods_names(accelerator_type, num_slices, limit):
  """JobSet's webhook refuses a JobSet whose last pod, NAME-slice-S-H-xxxxx, passes 63."""
  hosts = gke_jobset.cloud.SLICES[accelerator_type][0]
  name = 'b' * limit
  gke_jobset.check(name, accelerator_type, num_slices, IMAGE, 'gs://bkt/r')
  assert len(f'{name}-slice-{num_slices - 1}-{hosts - 1}-abcde') == 63
  with pytest.raises(ValueError) as e:
    gke_jobset.check(name + 'b', accelerator_type, num_slices, IMAGE, 'gs://bkt/r')
  assert str(e.value) == (f"--name='{name}b' has {limit + 1} characters; {num_slices} x "
                          f'{accelerator_type} allows {limit} (its pods are named '
                          'NAME-slice-S-H-xxxxx, at most 63): pass a shorter --name')


def test_apply_follows_worker_0_through_a_restart_and_deletes(tmp_path):
  code, out, calls = launch(tmp_path, '--apply', states=',Completed')
  assert code == 0, out
  assert calls == [EXISTS, ['create', '-f', str(tmp_path / 'bert.yaml')], WAIT, LOGS, STATE,
                   WAIT, LOGS, STATE, DELETE]
  assert 'bert-large has not ended' in out and 'bert-large completed' in out
  written = yaml.safe_load((tmp_path / 'bert.yaml').read_text())
  digest = written['metadata']['annotations'].pop(gke_jobset.DIGEST)  # What tells an edit.
  assert written == gke_jobset.manifest('bert-large', 'v5litepod-16', 2, IMAGE,
                                        'gs://bkt/runs/large', MAIN_ARGS)
  assert digest == gke_jobset._digest(written)  # pylint: disable=protected-access


def test_a_running_jobset_is_followed_until_it_ends_and_never_deleted_before(tmp_path):
  """Passes without a terminal state (kubectl wait failing fast before the pods exist, or timing
  out while spot capacity is pending) are no restarts: --max_restarts is JobSet's, not a count
  of them after which the launcher would delete a JobSet still running."""
  code, out, calls = launch(tmp_path, '--apply', '--max_restarts=1',
                            states=',' * 5 + 'Completed')
  assert code == 0, out
  assert calls[2:] == [WAIT, LOGS, STATE] * 6 + [DELETE]


def test_ctrl_c_leaves_the_jobset_running_and_says_how_to_delete_it(capsys):
  calls = []

  def run(cmd, **_):
    calls.append(cmd[1])
    if cmd[1] == 'logs':
      raise KeyboardInterrupt
    return subprocess.CompletedProcess(cmd, 0, '')

  try:
    code = gke_kubectl.run_jobset('bert', 'bert.yaml', run=run, poll_s=0)
  except KeyboardInterrupt:
    pytest.fail(f'Ctrl-C was not handled; kubectl ran: {calls}')
  assert code == 130 and calls == ['get', 'create', 'wait', 'logs']
  assert capsys.readouterr().err == ('gke_jobset: interrupted; bert is left running: delete it '
                                     'with kubectl delete jobset bert --ignore-not-found\n')


def test_a_failed_jobset_exits_1_and_keep_leaves_it(tmp_path):
  code, out, calls = launch(tmp_path, '--apply', '--keep', states='Failed')
  assert code == 1, out
  assert calls[-1] == STATE and DELETE not in calls


def test_without_apply_only_the_manifest_is_written(tmp_path):
  code, out, calls = launch(tmp_path)
  assert code == 0 and calls == [], out
  assert f'create it with: kubectl create -f {tmp_path / "bert.yaml"}' in out
  code, out, calls = launch(tmp_path)  # Its own earlier manifest is replaced.
  assert code == 0 and calls == [], out


@pytest.mark.parametrize('existing, message', [('file', 'is not a JobSet manifest'),
                                               ('folder', 'is a folder')])
def test_the_manifest_never_replaces_a_users_file(tmp_path, existing, message):
  target = tmp_path / 'bert.yaml'  # What launch() passes as --output.
  if existing == 'file':
    target.write_text('review,sentiment\ngood,pos\n')
  else:
    target.mkdir()
  code, out, calls = launch(tmp_path)
  assert code == REFUSED and message in out and calls == [], out
  if existing == 'file':
    assert target.read_text() == 'review,sentiment\ngood,pos\n'


@pytest.mark.parametrize('flags', [['--dry_run'], ['--apply', '--dry_run']])
def test_dry_run_prints_the_commands_and_runs_none(tmp_path, flags):
  """--dry_run wins over --apply: it said `bert-large completed`, nothing having run."""
  code, out, calls = launch(tmp_path, *flags)
  assert code == 0 and calls == [], out
  assert (f'kubectl get jobset bert-large --ignore-not-found -o '
          f'\'jsonpath={{.metadata.name}}\'\nkubectl create -f {tmp_path / "bert.yaml"}\n'
          'kubectl wait') in out
  lines = out.strip().splitlines()
  assert lines[-2:] == [
      'kubectl delete jobset bert-large --ignore-not-found',
      'gke_jobset: dry run: no kubectl command ran, bert-large was not created: run this again '
      'without --dry_run (with --apply) to create it'], out
  assert 'completed' not in out and 'failed' not in out, out
  # The manifest the printed `kubectl create -f` reads is written, to be read before applying.
  assert lines[0] == f'gke_jobset: wrote {tmp_path / "bert.yaml"}', out


def test_a_batch_the_slices_cannot_split_is_refused_before_the_manifest(tmp_path):
  code, out, calls = launch(tmp_path, main_args=MAIN_ARGS + ['--config.global_batch_size=48'])
  assert code == REFUSED and ('gke_jobset: error: global_batch_size=48 cannot be split over the 32 '
                        'batch shards of 2 x v5litepod-16') in out, out
  assert calls == [] and not (tmp_path / 'bert.yaml').exists()


def test_a_local_workdir_is_refused_before_anything_runs(tmp_path):
  flags = [f for f in gk(tmp_path) if not f.startswith('--workdir')] + ['--workdir=/tmp/x']
  code, out, calls = launch(tmp_path, launcher_flags=flags)  # No job flags: refused first.
  assert code == REFUSED and 'pods share no local disk' in out and calls == [], out
  assert not (tmp_path / 'bert.yaml').exists()


def test_a_config_file_the_image_does_not_hold_is_refused(tmp_path):
  """The image holds this checkout's configs/ only (launch/Dockerfile): a config file from
  elsewhere passes the local check but would fail in every pod."""
  outside = tmp_path / 'my_config.py'
  outside.write_text('from configs import pretrain\n\n\ndef get_config(arg):\n'
                     '  return pretrain.get_config(arg)\n')
  for config in ([f'--config={outside}:size=large'], ['--config', f'{outside}:size=large']):
    with pytest.raises(ValueError) as e:
      gke_jobset.manifest('bert', 'v6e-8', 1, IMAGE, 'gs://bkt/r', config + MAIN_ARGS[1:])
    assert str(e.value) == (f'--config={outside}:size=large: the image holds only this '
                            'checkout\'s configs/ (launch/Dockerfile copies it): move the file '
                            'into configs/, rebuild and push the image, and pass '
                            '--config=configs/<file>.py')
  code, out, calls = launch(tmp_path, '--apply', main_args=[f'--config={outside}:size=large'])
  assert code == REFUSED and 'gke_jobset: error: --config=' in out and calls == [], out
  assert 'Traceback' not in out and not (tmp_path / 'bert.yaml').exists()


@pytest.mark.parametrize('config', [
    ['--config', 'configs/pretrain.py:size=large'],  # absl's --flag value form.
    [f'--config={REPO}/configs/pretrain.py:size=large'],  # This checkout's file, absolute.
    ['--config=./configs/../configs/pretrain.py:size=large'],
])
def test_a_config_file_in_configs_is_named_where_the_image_holds_it(config):
  spec = gke_jobset.manifest('bert', 'v6e-8', 1, IMAGE, 'gs://bkt/r', config + MAIN_ARGS[1:])
  assert pod(spec)['containers'][0]['command'] == [
      'python3', '-m', 'bertjax.main', '--config=configs/pretrain.py:size=large', *MAIN_ARGS[1:],
      '--workdir=gs://bkt/r']


def test_a_job_workdir_other_than_the_launchers_is_refused(tmp_path):
  for extra in (['--workdir=gs://bkt/other'], ['--workdir', 'gs://bkt/other']):
    with pytest.raises(ValueError) as e:
      gke_jobset.manifest('bert', 'v6e-8', 1, IMAGE, 'gs://bkt/r', MAIN_ARGS + extra)
    assert str(e.value) == ('the job\'s flags (after --) set --workdir=gs://bkt/other, the '
                            'launcher\'s --workdir=gs://bkt/r: pass the run directory once, as '
                            'the launcher\'s --workdir (before --)')
  code, out, calls = launch(tmp_path, '--apply', main_args=MAIN_ARGS + ['--workdir=gs://bkt/x'])
  assert code == REFUSED and calls == [], out
  assert "gke_jobset: error: the job's flags (after --) set --workdir=gs://bkt/x" in out, out
  assert 'Traceback' not in out and not (tmp_path / 'bert.yaml').exists()


def test_a_dollar_in_a_flag_reaches_the_job_as_written():
  """Kubernetes expands $(VAR) in a container's command and reads $$ as $."""
  args = ['--config=configs/pretrain.py', '--config.data.train_files=gs://bkt/$(JOBSET_NAME)/a$$b']
  command = pod(gke_jobset.manifest('bert', 'v5litepod-16', 1, IMAGE, 'gs://bkt/r$1',
                                    args))['containers'][0]['command']
  assert command[-2:] == ['--config.data.train_files=gs://bkt/$$(JOBSET_NAME)/a$$$$b',
                          '--workdir=gs://bkt/r$$1']


@pytest.mark.parametrize('workdir', ['gs://', 'gs:///runs'])
def test_a_workdir_naming_no_bucket_is_refused(workdir):
  with pytest.raises(ValueError, match=rf"^--workdir='{workdir}' names no bucket .*: pass "
                     r'--workdir=gs://BUCKET/path$'):
    gke_jobset.check('b', 'v6e-8', 1, IMAGE, workdir)


def test_a_jobset_of_that_name_is_refused_and_never_deleted(tmp_path):
  """One left by --keep (its state Failed), or another run's still going: `apply` would have
  left it unchanged, followed and deleted it."""
  code, out, calls = launch(tmp_path, '--apply', existing='bert-large', states='Failed')
  assert code == 2 and calls == [EXISTS], out
  assert out.splitlines()[-1] == (
      'gke_jobset: error: a JobSet named bert-large exists already (still running, or left by '
      f'--keep): follow it with kubectl logs --follow {SELECTOR} --tail=-1, or delete it with '
      'kubectl delete jobset bert-large --ignore-not-found and run this again, or pass another '
      '--name')


def test_a_jobset_created_meanwhile_is_left_to_its_owner():
  """`kubectl create` refuses one that appeared since the look: nothing followed or deleted."""
  calls = []

  def run(cmd, check=True, **_):
    calls.append(cmd[1])
    if cmd[1] == 'create' and check:
      raise RuntimeError('kubectl exited with 1: kubectl create -f bert.yaml')
    return subprocess.CompletedProcess(cmd, 0, '')

  with pytest.raises(RuntimeError, match='kubectl exited with 1: kubectl create'):
    gke_kubectl.run_jobset('bert', 'bert.yaml', run=run, poll_s=0)
  assert calls == ['get', 'create']


def gk(tmp_path):
  """The launcher's flags without the job's: bert-large on one v5litepod-16."""
  return ['--name=bert-large', '--accelerator_type=v5litepod-16', f'--image={IMAGE}',
          '--workdir=gs://bkt/runs/large', f'--output={tmp_path / "bert.yaml"}']


JOB = ['--', '--config=configs/pretrain.py:size=tiny']


@pytest.mark.parametrize('drop,flags,line', [
    ('', ['extra_word', *JOB], "unexpected arguments ['extra_word']: the launcher takes --flags "
                               "only; bertjax.main's flags go after --"),
    ('', ['--keep', 'extra_word'], "unexpected arguments ['extra_word']: the launcher takes"),
    ('', ['--name', '--apply', *JOB], "--name took the next word '--apply' as its value"),
    ('--name=', JOB, "--name is required: pass --name=NAME, the JobSet's"),
    ('--accelerator_type=', JOB, '--accelerator_type is required: pass --accelerator_type=TYPE'),
    ('--workdir=', JOB, '--workdir is required: pass --workdir=gs://BUCKET/runs/NAME'),
    ('', ['--apply', '--max_restarts', '--keep', *JOB],  # absl's own error, in one line.
     "flag --max_restarts=--keep: invalid literal for int()"),
])
def test_a_usage_error_is_one_line_not_the_help(tmp_path, drop, flags, line):
  kept = [f for f in gk(tmp_path) if not (drop and f.startswith(drop))]
  code, out, calls = launch(tmp_path, launcher_flags=kept + flags)
  assert code == REFUSED and calls == [] and not (tmp_path / 'bert.yaml').exists(), out
  assert out.startswith(line if 'FATAL' in line else f'gke_jobset: error: {line}'), out
  assert len(out.splitlines()) == (2 if 'FATAL' in line else 1), out


def test_flags_given_as_two_words_are_no_stray_words(tmp_path):
  flags = ['--name', 'bert-large', *gk(tmp_path)[1:], '--max_restarts', '3', *JOB]
  code, out, _ = launch(tmp_path, launcher_flags=flags)
  assert code == 0 and (tmp_path / 'bert.yaml').exists(), out


@pytest.mark.parametrize('flag,line', [
    ('--name=bért', "--name='bért': a JobSet name is lowercase letters a-z"),
    (f'--name={"a" * 70}', "has 70 characters; 1 x v5litepod-16 allows 47"),
    ('--image=img v1', "--image='img v1' holds a space"),
    ('--output={tmp}/nodir/x.yaml', '--output={tmp}/nodir/x.yaml: the folder {tmp}/nodir does not '
                                    'exist: create it, or name a file in an existing folder.'),
    (f'--output={{tmp}}/{"x" * 300}.yaml', 'cannot be written (File name too long): name a file '
                                           'you can write'),  # An OSError, as root too.
])
def test_a_bad_name_image_or_output_is_one_line_before_the_manifest(tmp_path, flag, line):
  flag, line = flag.format(tmp=tmp_path), line.format(tmp=tmp_path)
  flags = [f for f in gk(tmp_path) if not f.startswith(flag.partition('=')[0])]
  code, out, calls = launch(tmp_path, launcher_flags=[*flags, flag, *JOB])
  # Refused (a scheduler must not retry it), but for a file the disk would not write.
  refused = 2 if 'cannot be written' in line else REFUSED
  assert code == refused and calls == [] and not (tmp_path / 'bert.yaml').exists(), out
  assert out.startswith('gke_jobset: error: ') and line in out and len(out.splitlines()) == 1, out


def test_a_flagfile_after_the_separator_is_read_here_and_written_expanded(tmp_path):
  """The pods lack the file: its lines go into the manifest, checked as the launch's own."""
  flags_file = tmp_path / 'job.flags'
  flags_file.write_text(f'{MAIN_ARGS[0]}\n--config.num_train_steps=7\n')
  code, out, _ = launch(tmp_path, main_args=[f'--flagfile={flags_file}', *MAIN_ARGS[1:]])
  assert code == 0, out
  assert pod(yaml.safe_load((tmp_path / 'bert.yaml').read_text()))['containers'][0][
      'command'] == ['python3', '-m', 'bertjax.main', MAIN_ARGS[0], '--config.num_train_steps=7',
                     *MAIN_ARGS[1:], '--workdir=gs://bkt/runs/large']
  flags_file.write_text('--config.num_trian_steps=7\n')
  code, out, _ = launch(tmp_path, main_args=[f'--flagfile={flags_file}', *MAIN_ARGS])
  assert code == REFUSED and "unknown config field 'num_trian_steps'" in out, out


@pytest.mark.parametrize('workdir', ['GS://bkt/r', 'gs:/bkt/r'])
def test_a_misspelt_bucket_url_is_named_as_such(workdir):
  with pytest.raises(ValueError, match=re.escape(
      f"--workdir='{workdir}' is no gs:// URL (a bucket is gs://BUCKET/path, lowercase, two "
      'slashes): pass --workdir=gs://bkt/r')):
    gke_jobset.check('bert', 'v6e-8', 1, IMAGE, workdir)

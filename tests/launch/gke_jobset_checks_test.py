"""The GKE launcher's mends of hostile pass A, against the fake kubectl (kube_fakes.py): a JobSet
whose state kubectl cannot read (deleted by someone else, credentials expired) stops the launch
instead of being followed forever; a manifest of another JobSet is never replaced; a config
file missing from the current folder is said missing; --keep, --poll_seconds without --apply and
an empty --output are usage errors."""

from kube_fakes import DELETE
from kube_fakes import LOGS
from kube_fakes import MAIN_ARGS
from kube_fakes import REPO
from kube_fakes import STATE
from kube_fakes import WAIT
from kube_fakes import launch
import yaml

from launch import gke_jobset

NOT_FOUND = ('Error from server (NotFound): jobsets.jobset.x-k8s.io "bert-large" not found')
NO_AUTH = 'error: You must be logged in to the server (Unauthorized)'


def test_a_jobset_deleted_by_someone_else_stops_the_launch(tmp_path):
  """`kubectl get jobset` failing (NotFound) gave an empty state, taken for 'not ended': the
  launcher looped forever."""
  code, out, calls = launch(tmp_path, '--apply', states=','.join([f'ERR:{NOT_FOUND}'] * 3))
  assert code == 2, out
  assert calls[2:] == [WAIT, LOGS, STATE] * 3 and DELETE not in calls, calls
  lines = out.strip().splitlines()
  assert lines[-4:-1] == [f'gke_jobset: kubectl could not read the state of bert-large (try {n} '
                          f'of 3): {NOT_FOUND}' for n in (1, 2, 3)], out
  assert lines[-1] == (f'gke_jobset: error: the JobSet bert-large is gone (kubectl: {NOT_FOUND}): '
                       'someone else deleted it, and its run with it; run this again to start it '
                       'anew (it resumes from the last checkpoint in the workdir)')


def test_a_state_kubectl_cannot_read_stops_after_three_tries_in_a_row(tmp_path):
  """Expired credentials, no network: kubectl's reason said, the JobSet left as it is."""
  code, out, calls = launch(tmp_path, '--apply',
                            states=f'ERR:{NO_AUTH},ERR:{NO_AUTH},,ERR:{NO_AUTH},Completed')
  assert code == 0 and calls[-1] == DELETE, out  # Failures not in a row: followed to its end.
  code, out, calls = launch(tmp_path, '--apply', states=','.join([f'ERR:{NO_AUTH}'] * 3))
  assert code == 2 and DELETE not in calls, out
  assert out.strip().splitlines()[-1] == (
      'gke_jobset: error: kubectl could not read the state of the JobSet bert-large 3 times in a '
      f"row ({NO_AUTH}): it is left as it is; mend kubectl's access to the cluster (credentials: "
      'gcloud container clusters get-credentials), then follow it with kubectl logs --follow '
      f'{LOGS[2]} --tail=-1, or delete it with kubectl delete jobset bert-large '
      '--ignore-not-found')


def test_a_manifest_of_another_jobset_is_never_replaced(tmp_path):
  """--output naming another JobSet's manifest replaced it silently."""
  target = tmp_path / 'bert.yaml'  # What launch() passes as --output.
  other = {'apiVersion': 'jobset.x-k8s.io/v1alpha2', 'kind': 'JobSet',
           'metadata': {'name': 'bert-base'}, 'spec': {}}
  target.write_text(yaml.safe_dump(other))
  code, out, calls = launch(tmp_path)
  assert code == gke_jobset.REFUSED_EXIT and calls == [], out
  assert out.strip().splitlines() == [
      f"gke_jobset: error: --output={target} holds the manifest of the JobSet 'bert-base', not "
      f"bert-large's: name another file, e.g. --output={tmp_path}/bert-large.jobset.yaml"], out
  assert yaml.safe_load(target.read_text()) == other
  # One of the same name (an earlier launch's, or edited by hand): replaced, and said so.
  target.write_text(yaml.safe_dump({**other, 'metadata': {'name': 'bert-large'}}))
  code, out, _ = launch(tmp_path)
  assert code == 0 and out.startswith(f'gke_jobset: replaced {target}\n'), out
  assert yaml.safe_load(target.read_text())['spec']['replicatedJobs']
  # Review of 2026-12-01: one file reused for dated launches (--name=run-MMDD). A manifest the
  # launcher wrote, unedited, is replaced whatever JobSet it names; one edited since is not.
  written = yaml.safe_load(target.read_text())
  assert gke_jobset.DIGEST in written['metadata']['annotations']
  gke_jobset.write({**written, 'metadata': {**written['metadata'], 'name': 'run-1130'}}, target)
  code, out, _ = launch(tmp_path)
  assert code == 0 and out.startswith(f'gke_jobset: replaced {target}\n'), out
  edited = target.read_text().replace('backoffLimit: 0', 'backoffLimit: 3')
  target.write_text(edited)
  code, out, calls = launch(tmp_path)
  assert code == gke_jobset.REFUSED_EXIT and calls == [] and out.strip().splitlines() == [
      f'gke_jobset: error: --output={target} is a manifest gke_jobset wrote and someone edited '
      f'since: name another file, e.g. --output={tmp_path}/bert-large.jobset.yaml'], out
  assert target.read_text() == edited


def test_a_config_file_missing_from_the_current_folder_is_said_missing(tmp_path):
  """Run outside the checkout, --config=configs/pretrain.py named no file there: the launcher said
  the image holds only configs/ and to move the file into it."""
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  code, out, calls = launch(tmp_path, cwd=elsewhere)
  assert code == gke_jobset.REFUSED_EXIT and calls == [], out
  assert out.strip().splitlines() == [
      f"gke_jobset: error: --config={MAIN_ARGS[0].partition('=')[2]}: no config file "
      f"'configs/pretrain.py' (from {elsewhere}); the configs are configs/pretrain.py, "
      'configs/finetune.py, configs/embed.py'], out
  assert (REPO / 'configs' / 'pretrain.py').is_file()


def test_flags_that_act_only_with_apply_and_an_empty_output_are_usage_errors(tmp_path):
  """--keep and --poll_seconds were ignored without --apply; an empty --output= wrote the default
  name."""
  own = ['--name=bert-large', '--accelerator_type=v5litepod-16', '--image=gcr.io/p/b:1',
         '--workdir=gs://bkt/runs/large']
  for flags, line in (
      ([f'--output={tmp_path}/bert.yaml', '--keep'], '--keep acts only with --apply (which '
       'creates the JobSet and follows it): add --apply, or drop --keep'),
      ([f'--output={tmp_path}/bert.yaml', '--poll_seconds=5'], '--poll_seconds acts only with '
       '--apply (which creates the JobSet and follows it): add --apply, or drop --poll_seconds'),
      (['--output='], '--output is empty: name the manifest file, or leave --output out to write '
       'bert-large.jobset.yaml'),
      (['--output=-'], "--output=- would write a file named '-' (the manifest is a file kubectl "
       'reads): name the file, e.g. --output=bert-large.jobset.yaml')):
    code, out, calls = launch(tmp_path, launcher_flags=[*own, *flags, '--', *MAIN_ARGS])
    assert code == gke_jobset.REFUSED_EXIT and calls == [], out
    assert out.strip().splitlines() == [
        f'gke_jobset: error: {line} (--helpshort lists the flags)'], out
    assert not (tmp_path / 'bert.yaml').exists() and not (REPO / 'bert-large.jobset.yaml').exists()
  code, out, _ = launch(tmp_path, '--apply', '--keep', states='Completed')
  assert code == 0, out

"""The GKE JobSet's failure policies: a command bertjax.main refuses ends the JobSet at once (it
would fail the same way on every restart); a preemption and any other failure restart it."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from bertjax import config_files
from bertjax import console
from launch import gke_jobset

REPO = pathlib.Path(__file__).resolve().parents[2]
IMAGE = 'us-docker.pkg.dev/p/bertjax/bertjax:v1'
MAIN_ARGS = ['--config=configs/pretrain.py:size=large,vocab=30522',
             '--config.data.train_files=gs://bkt/train-*']


@pytest.fixture(autouse=True)
def _in_the_checkout(monkeypatch):
  monkeypatch.chdir(REPO)  # The job's --config=FILE is read from there.


def pod(spec):
  return spec['spec']['replicatedJobs'][0]['template']['spec']['template']['spec']


def job_spec(spec):
  return spec['spec']['replicatedJobs'][0]['template']['spec']


def what_kubernetes_does(spec, exit_code, disrupted=False) -> str:
  """The Job's podFailurePolicy (its first matching rule, else Count; backoffLimit 0: Count fails
  the Job with reason BackoffLimitExceeded, FailJob with PodFailurePolicy), then JobSet's
  failurePolicy rules on that reason (none matching: RestartJobSet)."""
  def matches(rule):
    if 'onPodConditions' in rule:
      return disrupted and {'type': 'DisruptionTarget', 'status': 'True'} in rule['onPodConditions']
    assert rule['onExitCodes']['containerName'] == pod(spec)['containers'][0]['name']
    return (exit_code in rule['onExitCodes']['values']) == (rule['onExitCodes']['operator'] == 'In')
  action = next((r['action'] for r in job_spec(spec)['podFailurePolicy']['rules'] if matches(r)),
                'Count')
  reason = {'FailJob': 'PodFailurePolicy', 'Count': 'BackoffLimitExceeded'}[action]
  return next((r['action'] for r in spec['spec']['failurePolicy']['rules']
               if reason in r['onJobFailureReasons']), 'RestartJobSet')


def test_a_refused_command_fails_the_jobset_at_once_and_other_failures_restart_it():
  """A command bertjax.main refuses (a stale image) would repeat on every restart, each after
  waiting for capacity again: it ends the JobSet. Its other errors (1: storage out of reach,
  peers not started in time, a crash) may pass: restarted, as preemption is."""
  spec = gke_jobset.manifest('bert', 'v5litepod-16', 2, IMAGE, 'gs://bkt/r', MAIN_ARGS)
  assert pod(spec)['restartPolicy'] == 'Never'  # podFailurePolicy needs it.
  assert job_spec(spec)['backoffLimit'] == 0
  assert what_kubernetes_does(spec, gke_jobset.REFUSED_EXIT) == 'FailJobSet'
  assert what_kubernetes_does(spec, console.PREEMPTED_EXIT) == 'RestartJobSet'  # Saved.
  for code in (1, 137, 139, 143):  # Failed, killed, crashed: restarted (up to --max_restarts).
    assert what_kubernetes_does(spec, code) == 'RestartJobSet'
  # The policies as the Kubernetes and JobSet APIs name their fields.
  assert job_spec(spec)['podFailurePolicy'] == {'rules': [
      {'action': 'Count', 'onPodConditions': [{'type': 'DisruptionTarget', 'status': 'True'}]},
      {'action': 'FailJob', 'onExitCodes': {'containerName': 'bertjax', 'operator': 'In',
                                            'values': [78]}}]}
  assert spec['spec']['failurePolicy']['rules'] == [
      {'name': 'runErrorFailsJobSet', 'action': 'FailJobSet',
       'onJobFailureReasons': ['PodFailurePolicy']}]
  # Evicted or preempted (a spot node reclaimed, a drain), whatever the run exited with.
  for code in (gke_jobset.REFUSED_EXIT, console.PREEMPTED_EXIT, 137):
    assert what_kubernetes_does(spec, code, disrupted=True) == 'RestartJobSet'
  for rule in spec['spec']['failurePolicy']['rules']:  # JobSet's pattern for a rule's name.
    assert re.fullmatch(r'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?', rule['name'])


@pytest.mark.parametrize('extra,digest,said', [
    ([], '0' * 64, "this image's configs/ (" f'{REPO / "configs"}) differ'),  # A stale image.
    (['--config.optimizer.learning_rate=-1'], '', 'a negative learning rate'),
    (['--config.optimizer.learnin_rate=1e-4'], '', "unknown config field 'optimizer.learnin_rate'"),
    (['--num_hosts=2'], '', 'Unknown command line flag'),  # absl's own flag errors too.
])
def test_bertjax_main_ends_a_refused_run_with_the_exit_status_that_fails_the_jobset(
    tmp_path, extra, digest, said):
  """What the FailJob rule matches is what bertjax.main exits with on a config value it refuses,
  on a stale image's configs/ (their digest not the launcher's), and on a flag it does not
  take (absl's error, exit 1 before: restarted maxRestarts times)."""
  env = dict(os.environ, JAX_PLATFORMS='cpu', **{config_files.CONFIGS_DIGEST_ENV: digest or ''})
  result = subprocess.run([sys.executable, '-m', 'bertjax.main',
                           '--config=configs/pretrain.py:size=tiny', *extra,
                           f'--workdir={tmp_path / "run"}'], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == gke_jobset.REFUSED_EXIT == 78 and said in result.stderr, result.stderr
  assert not (tmp_path / 'run').exists()

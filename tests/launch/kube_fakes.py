"""Shared by the GKE launcher's tests (gke_jobset_test.py, gke_jobset_checks_test.py), no tests
here: a fake kubectl that records its arguments, and launch(), which runs the launcher against
it; the job's flags and image those tests launch with, and the kubectl calls of one launch of
the JobSet bert-large (EXISTS, WAIT, LOGS, STATE, DELETE)."""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
IMAGE = 'us-docker.pkg.dev/p/bertjax/bertjax:v1'
MAIN_ARGS = ['--config=configs/pretrain.py:size=large,vocab=30522',
             '--config.data.train_files=gs://bkt/train-*']
FAKE_KUBECTL = '''#!{python}
"""Records its arguments; answers `get jobset` from a scripted list of terminal states (ERR:WHY:
kubectl fails, saying WHY), and `get jobset --ignore-not-found` with FAKE_EXISTING (the name of
one there already, or nothing)."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ['FAKE_LOG'], 'a') as f:
  f.write(json.dumps(args) + '\\n')
if args[:2] == ['get', 'jobset'] and '--ignore-not-found' in args:
  print(os.environ['FAKE_EXISTING'], end='')
elif args[:2] == ['get', 'jobset']:
  path = os.environ['FAKE_STATES']
  states = open(path).read().split(',')
  open(path, 'w').write(','.join(states[1:]))
  if states[0].startswith('ERR:'):
    sys.exit(states[0][len('ERR:'):])
  print(states[0])
elif args[0] == 'logs':
  print('step 10/10: loss 6.1 (slice 0, worker 0)')
'''


def launch(tmp_path, *flags, states='', main_args=MAIN_ARGS, existing='', launcher_flags=None,
           cwd=REPO):
  """Runs the launcher (`launcher_flags`, or those of bert-large on 2 x v5litepod-16 and
  `flags`, polling at once with --apply or --dry_run) with the fake kubectl first on PATH, from
  `cwd`: (exit code, output, kubectl calls)."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir(exist_ok=True)
  fake = bin_dir / 'kubectl'
  fake.write_text(FAKE_KUBECTL.format(python=sys.executable))
  fake.chmod(0o755)
  (tmp_path / 'states').write_text(states)
  log = tmp_path / 'calls.jsonl'
  log.write_text('')
  env = dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}', FAKE_LOG=str(log),
             FAKE_STATES=str(tmp_path / 'states'), FAKE_EXISTING=existing, PYTHONPATH=str(REPO))
  if launcher_flags is None:
    polls = ['--poll_seconds=0'] if {'--apply', '--dry_run'} & set(flags) else []
    launcher_flags = ['--name=bert-large', '--accelerator_type=v5litepod-16', '--num_slices=2',
                      f'--image={IMAGE}', '--workdir=gs://bkt/runs/large',
                      f'--output={tmp_path / "bert.yaml"}', *polls, *flags, '--', *main_args]
  result = subprocess.run([sys.executable, '-m', 'launch.gke_jobset', *launcher_flags], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)
  calls = [json.loads(line) for line in log.read_text().splitlines()]
  return result.returncode, result.stdout + result.stderr, calls


SELECTOR = ('--selector=jobset.sigs.k8s.io/jobset-name=bert-large,jobset.sigs.k8s.io/job-index=0,'
            'batch.kubernetes.io/job-completion-index=0')
WAIT = ['wait', '--for=condition=Ready', 'pod', SELECTOR, '--timeout=3600s']
LOGS = ['logs', '--follow', SELECTOR, '--tail=-1']
STATE = ['get', 'jobset', 'bert-large', '-o', 'jsonpath={.status.terminalState}']
DELETE = ['delete', 'jobset', 'bert-large', '--ignore-not-found']
EXISTS = ['get', 'jobset', 'bert-large', '--ignore-not-found', '-o', 'jsonpath={.metadata.name}']

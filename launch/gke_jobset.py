r"""Runs bertjax.main on GKE TPU node pools as a JobSet: one or several slices (multi-slice).

  docker build -f launch/Dockerfile -t us-docker.pkg.dev/PROJECT/bertjax/bertjax:v1 . && \
      docker push us-docker.pkg.dev/PROJECT/bertjax/bertjax:v1
  python -m launch.gke_jobset --name=bert-large --accelerator_type=v5litepod-16 \
      --num_slices=2 --image=us-docker.pkg.dev/PROJECT/bertjax/bertjax:v1 \
      --workdir=gs://BUCKET/runs/large --spot --apply -- \
      --config=configs/pretrain.py:size=large,vocab=30522 \
      --config.data.train_files=gs://BUCKET/data/train128-* ...

Writes <name>.jobset.yaml (or --output): a JobSet with one child Job per slice, each Job one
pod per TPU host of the slice (`exclusive-topology`: a slice's pods share one node pool), every
pod running `python3 -m bertjax.main <flags after --> --workdir=<workdir>` from the image's
checkout, which holds configs/ and no other config file (a --config=FILE elsewhere is refused,
as is a --workdir after -- that differs from --workdir). jax.distributed finds
its peers from what GKE sets on TPU pods (TPU_WORKER_HOSTNAMES, TPU_WORKER_ID); with
--num_slices > 1 the manifest adds the MEGASCALE_* variables that join the slices over the data
center network, and bertjax's mesh puts the `data` axis across slices (fsdp and tensor stay
inside one). When a pod is preempted or evicted (a spot node reclaimed, a drain) or exits 75 (it
saved on a SIGTERM), JobSet re-creates all the Jobs (up to --max_restarts) and the run resumes
from its last checkpoint in the bucket; so does any other failure (storage out of reach, a
slice whose pods waited for capacity past bertjax.main's --distributed_timeout_s, a crash). A
command bertjax.main refuses before it starts (exit 78: a flag or config value, a stale
image's configs/) fails the JobSet at once: it would fail the same way on every restart, each after
waiting for capacity again (podFailurePolicy FailJob, JobSet failurePolicy FailJobSet). The
job's flags and config are checked here first, so on the pods that is mostly a stale image.

With --apply (needs kubectl pointed at the cluster): a JobSet of that name refused (one left by
--keep, or still running: never replaced nor deleted), `kubectl create`, slice 0 worker 0's log
streamed (again after each restart, however long pods wait for capacity) until the JobSet has a
terminal state, the JobSet deleted then (--keep leaves it; so does Ctrl-C, which prints the
kubectl delete; kubectl failing to read its state 3 times in a row stops the launch, saying
why). --dry_run (--apply or not) writes the manifest and prints the kubectl commands --apply
runs, running none. Exit status: 0 (completed; or written), 1 (the JobSet failed), 78 (a flag,
such as an --output in no folder, or the job's config or workdir refused: nothing written), 2
(kubectl failed, the JobSet exists, the manifest's folder not writable or full), 130 (Ctrl-C).
An existing manifest is replaced only when this launcher wrote it and nobody edited it since
(its bertjax/manifest-sha256 annotation), whatever JobSet it names, or when it is the same
JobSet's; an edited one, or another JobSet's without the annotation (hand-written), is refused.
Tests: tests/launch/gke_jobset*_test.py (a fake kubectl, kube_fakes.py).
"""

import copy
import hashlib
import os
import pathlib
import re
import shlex
import sys

from absl import app
from absl import flags
import yaml

from bertjax import config_args
from bertjax import config_files
from bertjax import console
from bertjax import paths
from launch import cloud
from launch import gke_kubectl

# GKE's node label for each TPU generation (cloud.google.com/gke-tpu-accelerator).
ACCELERATORS = {'v4': 'tpu-v4-podslice', 'v5litepod': 'tpu-v5-lite-podslice',
                'v5p': 'tpu-v5p-slice', 'v6e': 'tpu-v6e-slice'}
JOB = 'slice'  # The replicated job's name: pods are <name>-slice-<slice>-<host>-<5 random>.
CONTAINER = 'bertjax'
# bertjax.main's exit status for a command it refuses before anything starts (a flag, config_check,
# a stale image's configs/): a restart would fail the same way. Its other errors exit 1 and are
# restarted (storage, peers, crashes), as preemption's 75 (console.PREEMPTED_EXIT) is.
REFUSED_EXIT = console.REFUSED_EXIT
LABEL_MAX = 63  # A DNS-1035 label: a pod's name, and the hostname JobSet gives it.

FLAGS = flags.FLAGS


def _define_flags():
  """Flags exist only when this module is the program (tests import the functions)."""
  flags.DEFINE_string('name', None, 'JobSet name: lowercase letters, digits and -, starting '
                      'with a letter.')
  flags.DEFINE_string('accelerator_type', None, 'Per slice, e.g. v5litepod-16, v6e-8.')
  flags.DEFINE_integer('num_slices', 1, 'Slices joined over DCN (multi-slice).', lower_bound=1)
  flags.DEFINE_string('image', None, 'Container image with bertjax (launch/Dockerfile).')
  flags.DEFINE_string('workdir', None, 'Run directory in a bucket: gs://...')
  flags.DEFINE_bool('spot', False, 'Schedule on spot node pools (the run resumes).')
  flags.DEFINE_integer('max_restarts', 10, 'JobSet restarts (preemptions, evictions).',
                       lower_bound=0)
  flags.DEFINE_string('output', '', 'Manifest path (default <name>.jobset.yaml).')
  flags.DEFINE_bool('apply', False, 'kubectl create it, stream the log, delete at end.')
  flags.DEFINE_bool('keep', False, 'With --apply: leave the JobSet at the end.')
  flags.DEFINE_float('poll_seconds', 30.0, 'With --apply: seconds between looks at a JobSet '
                     f'that has not ended (0 to {cloud.POLL_MAX_S}).')
  flags.DEFINE_bool('dry_run', False, 'Print the kubectl commands; run none.')


def chips_per_host(accelerator_type: str) -> int:
  """google.com/tpu per pod: the slice's chips (its topology's product) over its hosts."""
  return cloud.devices(accelerator_type) // cloud.SLICES[accelerator_type][0]


def check(name: str, accelerator_type: str, num_slices: int, image: str, workdir: str):
  """Refuses what GKE would reject late or what would run wrong: names, types, a local path."""
  if accelerator_type not in cloud.SLICES:
    raise ValueError(f'unknown accelerator type {accelerator_type!r}; known: '
                     f'{", ".join(cloud.SLICES)}')
  if num_slices < 1:
    raise ValueError(f'--num_slices={num_slices}: at least 1')
  check_name(name, accelerator_type, num_slices)
  if not image:
    raise ValueError('--image is required: an image with bertjax installed, built by '
                     '`docker build -f launch/Dockerfile -t IMAGE .` and pushed')
  if any(c.isspace() for c in image):
    raise ValueError(f'--image={image!r} holds a space: pass the image as pushed, '
                     'REGISTRY/PATH:TAG, e.g. us-docker.pkg.dev/PROJECT/bertjax/bertjax:v1')
  cloud.check_bucket_path(workdir)  # A misspelt URL (GS://, gs:/) named as such first.
  if not workdir.startswith('gs://'):
    raise ValueError(f'--workdir={workdir!r}: pods share no local disk and lose it on a '
                     'restart; use a bucket, --workdir=gs://BUCKET/runs/NAME')


def check_name(name: str, accelerator_type: str, num_slices: int):
  """A DNS-1035 label short enough for the pods' names, NAME-slice-S-H-xxxxx (JobSet's webhook
  checks the longest, the last slice's last host, against LABEL_MAX)."""
  if not re.fullmatch(r'[a-z]([-a-z0-9]*[a-z0-9])?', name or ''):
    raise ValueError(f'--name={name!r}: a JobSet name is lowercase letters a-z, digits and -, '
                     'starting with a letter and ending with a letter or digit: pass e.g. '
                     '--name=bert-large')
  hosts = cloud.SLICES[accelerator_type][0]
  limit = LABEL_MAX - len(f'-{JOB}-{num_slices - 1}-{hosts - 1}-xxxxx')
  if len(name) > limit:
    raise ValueError(f'--name={name!r} has {len(name)} characters; {num_slices} x '
                     f'{accelerator_type} allows {limit} (its pods are named '
                     f'NAME-{JOB}-S-H-xxxxx, at most {LABEL_MAX}): pass a shorter --name')


def image_job(main_args) -> list[str]:
  """The job's flags as the image runs them, from its checkout's root: a --config=FILE in this
  checkout's configs/ as configs/<path>. Raises ValueError for a FILE missing here (from the
  current folder: config_args says so first), or elsewhere, which the image does not hold
  (launch/Dockerfile copies configs/ only)."""
  spec = config_args.config_spec(main_args)
  if spec is None:
    return list(main_args)  # config_args.check_args says what to pass.
  if not os.path.isfile(spec.partition(':')[0]):  # local: the job's config file, read here
    config_files.load_config_file(spec)  # Its one line: no such file (from the current folder).
  in_image = cloud.config_in_checkout(spec)
  if in_image is None:
    raise ValueError(f'--config={spec}: the image holds only this checkout\'s configs/ '
                     '(launch/Dockerfile copies it): move the file into configs/, rebuild and '
                     'push the image, and pass --config=configs/<file>.py')
  return config_args.with_config_file(main_args, in_image)


GRACE_S = 300  # The pods' terminationGracePeriodSeconds.


def _annotation(key: str) -> dict:
  return {'valueFrom': {'fieldRef': {'fieldPath': f"metadata.annotations['{key}']"}}}


def environment(num_slices: int) -> list[dict]:
  """Multi-slice: where slice 0's first pod listens, how many slices, which one this is."""
  if num_slices == 1:
    return []
  return [
      {'name': 'JOBSET_NAME', **_annotation('jobset.sigs.k8s.io/jobset-name')},
      {'name': 'MEGASCALE_COORDINATOR_ADDRESS',
       'value': f'$(JOBSET_NAME)-{JOB}-0-0.$(JOBSET_NAME)'},  # Slice 0's first pod.
      {'name': 'MEGASCALE_NUM_SLICES', 'value': str(num_slices)},
      {'name': 'MEGASCALE_SLICE_ID', **_annotation('jobset.sigs.k8s.io/job-index')},
  ]


# A pod's failure, in order: preempted or evicted (DisruptionTarget: a spot node reclaimed, a
# drain; whatever its exit status), counted: backoffLimit 0 fails its Job, which JobSet restarts.
# bertjax.main's refusal (REFUSED_EXIT) fails its Job with reason PodFailurePolicy, which fails
# the JobSet at once (RULES). Any other status (75: saved on a SIGTERM; 1: an error; a signal's)
# is counted too.
POD_FAILURE_POLICY = {'rules': [
    {'action': 'Count', 'onPodConditions': [{'type': 'DisruptionTarget', 'status': 'True'}]},
    {'action': 'FailJob', 'onExitCodes': {'containerName': CONTAINER, 'operator': 'In',
                                          'values': [REFUSED_EXIT]}},
]}
RULES = [{'name': 'runErrorFailsJobSet', 'action': 'FailJobSet',
          'onJobFailureReasons': ['PodFailurePolicy']}]


def manifest(name: str, accelerator_type: str, num_slices: int, image: str, workdir: str,
             main_args, *, spot: bool = False, max_restarts: int = 10) -> dict:
  """The JobSet, as a dict (yaml.safe_dump writes it)."""
  check(name, accelerator_type, num_slices, image, workdir)
  cloud.check_workdir(main_args, workdir)
  main_args = image_job(main_args)
  generation = accelerator_type.rsplit('-', 1)[0]
  hosts, topology = cloud.SLICES[accelerator_type]
  selector = {'cloud.google.com/gke-tpu-accelerator': ACCELERATORS[generation],
              'cloud.google.com/gke-tpu-topology': topology.split(':')[1]}
  pod = {
      'restartPolicy': 'Never',
      # SIGTERM (a drain, maintenance, a JobSet restart) to the kill: the run saves at its next
      # step and exits 75; Kubernetes' default of 30 s can cut a Large model's save short.
      'terminationGracePeriodSeconds': GRACE_S,
      # The slices' collectives run over the host network (DCN); names resolve as in-cluster.
      'hostNetwork': True,
      'dnsPolicy': 'ClusterFirstWithHostNet',
      'nodeSelector': selector,
      'containers': [{
          'name': CONTAINER,
          'image': image,
          # Kubernetes expands $(NAME) in a command and reads $$ as $: each $ is doubled so
          # that the job gets its flags as given.
          'command': ['python3', '-m', 'bertjax.main',
                      *(a.replace('$', '$$') for a in [*main_args, f'--workdir={workdir}'])],
          'ports': [{'containerPort': 8471}, {'containerPort': 8080}],  # TPU runtime, DCN.
          # The image's tag may be pushed again: every pod pulls what it names now, and
          # refuses configs/ other than the ones checked here (config_files.configs_check).
          'imagePullPolicy': 'Always',
          'env': [{'name': config_files.CONFIGS_DIGEST_ENV,
                   'value': config_files.configs_digest(cloud.CONFIGS)}, *environment(num_slices)],
          'resources': {'limits': {'google.com/tpu': chips_per_host(accelerator_type)}},
      }],
  }
  if spot:
    selector['cloud.google.com/gke-spot'] = 'true'
    pod['tolerations'] = [{'key': 'cloud.google.com/gke-spot', 'operator': 'Equal',
                           'value': 'true', 'effect': 'NoSchedule'}]
  return {
      'apiVersion': 'jobset.x-k8s.io/v1alpha2',
      'kind': 'JobSet',
      'metadata': {'name': name, 'annotations': {
          # One slice per node pool, and a slice's pods all in the same one (ICI).
          'alpha.jobset.sigs.k8s.io/exclusive-topology': 'cloud.google.com/gke-nodepool'}},
      'spec': {
          # A pod preempted, evicted or stopped (exit 75) restarts every Job: the run resumes
          # from its checkpoint. backoffLimit 0: no Job retries a lone pod. A run's error
          # (POD_FAILURE_POLICY) ends the JobSet: a restart would fail the same way.
          'failurePolicy': {'maxRestarts': max_restarts, 'rules': copy.deepcopy(RULES)},
          'replicatedJobs': [{'name': JOB, 'replicas': num_slices, 'template': {'spec': {
              'parallelism': hosts, 'completions': hosts, 'backoffLimit': 0,
              # Needs the pods' restartPolicy Never.
              'podFailurePolicy': copy.deepcopy(POD_FAILURE_POLICY),
              'template': {'spec': pod}}}}],
      },
  }


# The manifest's digest, in an annotation of its own: a manifest this launcher wrote and nobody
# edited since is replaced whatever JobSet it names (one file reused for dated launches).
DIGEST = 'bertjax/manifest-sha256'


def _digest(spec: dict) -> str:
  """The digest of `spec` without its DIGEST annotation."""
  spec = copy.deepcopy(spec)
  spec.get('metadata', {}).get('annotations', {}).pop(DIGEST, None)
  return hashlib.sha256(yaml.safe_dump(spec, sort_keys=True).encode()).hexdigest()


def check_output(path: pathlib.Path, name: str) -> bool:
  """Refuses a --output that is a folder, in no folder, a file other than a JobSet manifest (a
  user's file is never replaced by a manifest), a manifest this launcher wrote and someone
  edited since, or one without its digest (an older launch's, a hand-written one) of another
  JobSet than `name`. True when it replaces one."""
  if path.is_dir():
    raise ValueError(f'--output={path} is a folder: name the manifest file to write.')
  if not path.parent.is_dir():
    raise ValueError(f'--output={path}: the folder {path.parent} does not exist: create it, or '
                     'name a file in an existing folder.')
  if not path.exists():
    return False
  try:
    written = yaml.safe_load(path.read_text())
    kind, other = written.get('kind'), (written.get('metadata') or {}).get('name')
    digest = ((written.get('metadata') or {}).get('annotations') or {}).get(DIGEST)
  except Exception:  # pylint: disable=broad-except  # Not YAML, not a mapping: not ours.
    kind = other = digest = None
  if kind != 'JobSet':
    raise ValueError(f'--output={path} exists and is not a JobSet manifest: name a new file.')
  if digest is not None:
    if digest == _digest(written):
      return True
    raise ValueError(f'--output={path} is a manifest gke_jobset wrote and someone edited since: '
                     f'name another file, e.g. --output={path.with_name(f"{name}.jobset.yaml")}')
  if other != name:
    raise ValueError(f'--output={path} holds the manifest of the JobSet {other!r}, not {name}\'s: '
                     f'name another file, e.g. --output={path.with_name(f"{name}.jobset.yaml")}')
  return True


def write(spec: dict, path: pathlib.Path) -> pathlib.Path:
  """Writes `spec` to `path` with its digest (check_output tells an edit by it)."""
  spec = copy.deepcopy(spec)
  spec['metadata'].setdefault('annotations', {})[DIGEST] = _digest(spec)
  path.write_text(yaml.safe_dump(spec, sort_keys=False))
  return path


# What a missing flag's line asks for (--image: check() says how to build one).
REQUIRED = {'name': "--name=NAME, the JobSet's (lowercase letters, digits and -)",
            'accelerator_type': '--accelerator_type=TYPE, per slice (e.g. v5litepod-16)',
            'workdir': '--workdir=gs://BUCKET/runs/NAME, where the run writes'}


def check_flags():
  """The launcher's own flags that do nothing where given: --keep and --poll_seconds act on a
  JobSet that --apply (or --dry_run) creates; an empty --output names no file."""
  for name in ('keep', 'poll_seconds'):
    if FLAGS[name].present and not (FLAGS.apply or FLAGS.dry_run):
      raise app.UsageError(f'--{name} acts only with --apply (which creates the JobSet and '
                           f'follows it): add --apply, or drop --{name}')
  if FLAGS['output'].present and not FLAGS.output:
    raise app.UsageError('--output is empty: name the manifest file, or leave --output out to '
                         f'write {FLAGS.name}.jobset.yaml')
  try:  # kubectl reads the manifest from its file.
    paths.refuse_dash(FLAGS.output, '--output', 'file', 'the manifest is a file kubectl reads',
                      f'{FLAGS.name}.jobset.yaml')
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  cloud.check_poll_seconds(FLAGS.poll_seconds)


def main(argv):
  cloud.check_usage(argv, sys.argv[1:], REQUIRED)
  check_flags()
  path = pathlib.Path(FLAGS.output or f'{FLAGS.name}.jobset.yaml')
  try:
    argv = [argv[0], *cloud.job_flags(argv[1:])]  # A --flagfile's lines: the pods lack the file.
    spec = manifest(FLAGS.name, FLAGS.accelerator_type, FLAGS.num_slices, FLAGS.image,
                    FLAGS.workdir, argv[1:], spot=FLAGS.spot, max_restarts=FLAGS.max_restarts)
    # The job's config as bertjax.main will check it, before a manifest or a kubectl command.
    config = config_args.check_args(argv[1:], cloud.check_paths)
    cloud.check_job(argv[1:], config)
    cloud.check_for_slice(config, FLAGS.accelerator_type, FLAGS.num_slices)
    if warning := cloud.local_paths_warning('gke_jobset', config):
      print(warning, file=sys.stderr, flush=True)
    replaced = check_output(path, FLAGS.name)
    write(spec, path)
  except ValueError as e:  # Its flags, the job's config or workdir: refused before anything ran.
    cloud.refuse('gke_jobset', str(e))
  except OSError as e:  # Not writable: permissions, a full disk, a name too long.
    print(f'gke_jobset: error: --output={path} cannot be written ({e.strerror or e}): name a '
          'file you can write', file=sys.stderr)
    sys.exit(2)
  print(f'gke_jobset: {"replaced" if replaced else "wrote"} {path}', flush=True)
  if not (FLAGS.apply or FLAGS.dry_run):
    print(f'create it with: {shlex.join(gke_kubectl.create_command(path))}')
    return
  try:
    code = gke_kubectl.run_jobset(FLAGS.name, path,
                                  run=cloud.Runner(FLAGS.dry_run,
                                                   dry_output=gke_kubectl.COMPLETED),
                                  keep=FLAGS.keep, poll_s=FLAGS.poll_seconds)
  except RuntimeError as e:  # One of that name exists, kubectl failed (said by kubectl).
    print(f'gke_jobset: error: {e}', file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt:  # While checking for or creating the JobSet.
    print(f'gke_jobset: interrupted; if this launch created {FLAGS.name}, delete it with '
          f'{shlex.join(gke_kubectl.delete_command(FLAGS.name))}', file=sys.stderr)
    sys.exit(130)
  sys.exit(code)


if __name__ == '__main__':
  _define_flags()
  cloud.run_launcher('gke_jobset', main)

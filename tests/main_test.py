"""The command line as a new user meets it: config files from anywhere, one-line errors, a
console without library chatter."""

import logging
import os
import pathlib
import platform
import re
import subprocess
import sys

from absl import logging as absl_logging
import finetune_runs
import pytest

from bertjax import accelerators
from bertjax import console
from bertjax.training import summaries

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_main(cwd, *args, python=('-m', 'bertjax.main'), env=()):
  """bertjax.main (or `python -c CODE` that runs it) started from `cwd`, on the CPU."""
  environ = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}  # Not the checkout's.
  environ |= {'JAX_PLATFORMS': 'cpu', **dict(env)}
  return subprocess.run([sys.executable, *python, *args], cwd=cwd, env=environ,
                        capture_output=True, text=True, timeout=300, check=False)


def test_a_mistyped_config_field_is_one_line_naming_the_closest(tmp_path):
  done = run_main(tmp_path, f'--config={REPO}/configs/pretrain.py:size=tiny',
                  '--config.optimizer.learning_rat=1e-3', f'--workdir={tmp_path}/w')
  assert done.returncode == console.REFUSED_EXIT, done.stderr
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1, done.stderr
  assert "unknown config field 'optimizer.learning_rat'" in lines[0]
  assert 'closest valid names: optimizer.learning_rate' in lines[0]


def test_config_files_load_from_another_directory_and_bad_input_is_one_error(tmp_path):
  # Started outside the checkout: the config file still finds configs/common.py. Data that
  # matches nothing fails at once, before anything is compiled, with one line to act on.
  (tmp_path / 'relative' / 'w').mkdir(parents=True)  # A new one, refused, would be removed.
  done = run_main(tmp_path, f'--config={REPO}/configs/pretrain.py:size=tiny',
                  '--config.data.train_files=nowhere/train-*', '--workdir=relative/w')
  assert done.returncode == 1, done.stderr
  last = done.stderr.strip().splitlines()
  assert last[-2].startswith('error: config.data.train_files: no files match') and (
      f'{tmp_path}/nowhere/train-*' in last[-2])  # The field named: helper-180.
  assert 'Traceback' not in done.stderr and 'cuInit' not in done.stderr
  # The user's folder as it was: its refused run's lock removed (session 56).
  assert list((tmp_path / 'relative' / 'w').iterdir()) == []


_KEPT = 'the checkpoints already written are kept and the run resumes from the last one'


@pytest.mark.parametrize('raised, line', [
    ("OSError(errno.ENOSPC, 'No space left on device', '/w/config.json')",  # run_files
     f'error: /w/config.json: No space left on device: free space or pass another --workdir; '
     f'{_KEPT}'),
    ("OSError(errno.ENOSPC, 'No space left on device')",  # workdir_lock's flush: no path.
     f'error: No space left on device: free space or pass another --workdir; {_KEPT}'),
    ("OSError(errno.EROFS, 'Read-only file system', '/ro/w')",  # os.makedirs of the workdir.
     f'error: /ro/w: Read-only file system: remount it writable or pass another --workdir; '
     f'{_KEPT}'),
    ("PermissionError(errno.EACCES, 'Permission denied', '/w/.lock')",
     f'error: /w/.lock: Permission denied: check its owner and mode (ls -l) or pass another '
     f'--workdir; {_KEPT}'),
    ("OSError(errno.EIO, 'Input/output error', '/w/x')", None),  # Any other: its traceback.
])
def test_a_full_or_read_only_disk_is_one_line_saying_what_to_do(tmp_path, raised, line):
  """A full or read-only disk outside checkpoint saving (the run's config.json, its lock, the
  workdir itself) gave a raw traceback."""
  code = ('import errno, sys\nfrom bertjax import main\n'
          f'def _run(argv):\n  raise {raised}\n'
          'main._run = _run\nmain.main(sys.argv)\n')
  done = run_main(tmp_path, python=('-c', code))
  assert done.returncode == 1, done.stderr
  lines = done.stderr.strip().splitlines()
  if line is None:
    assert 'Traceback' in done.stderr, done.stderr
    assert lines[-1] == "OSError: [Errno 5] Input/output error: '/w/x'", done.stderr
    return
  assert lines == [line, '(--verbosity=1 shows where it was raised)'], done.stderr


def test_a_scoring_jobs_full_or_read_only_disk_says_to_copy_the_run():
  """Helper-173's pass: mode=eval on a read-only or full disk was told to pass another
  --workdir, which holds no checkpoint to score; a write's ENOSPC named no path."""
  code = ('import errno, sys\nfrom absl import flags\nfrom bertjax import main\n'
          "flags.FLAGS(['main', '--workdir=/runs/r', '--config=configs/pretrain.py'])\n"
          "for e in (OSError(errno.EROFS, 'Read-only file system', '/runs/r/predictions'), "
          "OSError(errno.ENOSPC, 'No space left on device')):\n"
          "  print(main._storage_error(e, {'job': 'finetune', 'mode': 'eval'}))")
  done = run_main(REPO, python=('-c', code))
  kept = 'the run is as it was, with no predictions/ folder half-written (scored_folders)'
  assert done.stdout.strip().splitlines() == [
      '/runs/r/predictions: Read-only file system: remount it writable or copy the run to a disk '
      f'you can write (cp -r RUN NEW) and score it there (--workdir=NEW); {kept}',
      'writing in /runs/r: No space left on device: free space or copy the run to a disk you can '
      f'write (cp -r RUN NEW) and score it there (--workdir=NEW); {kept}'], done.stderr


def test_embeds_full_disk_line_says_its_earlier_outputs_are_kept():
  """Matrix pass of 2026-12-02: embed's full disk was said as a training run's ('the
  checkpoints already written are kept and the run resumes'): embed has neither."""
  code = ('import errno\nfrom bertjax import main\n'
          "print(main._storage_error(OSError(errno.ENOSPC, 'No space left on device', '/w'), "
          "{'job': 'embed'}))")
  done = run_main(REPO, python=('-c', code))
  assert done.stdout.strip() == (
      "/w: No space left on device: free space or pass another --workdir; an earlier embed's "
      'embeddings.npy and similarity.txt there are kept as they were'), done.stderr


def _main_telling(run_body: str):
  """bertjax.main whose _run is `run_body` (code), hosts.tell_stopped printing what it is told."""
  code = ('import errno, sys\nfrom bertjax import console, main\n'
          'from bertjax.training import hosts\n'
          'hosts.tell_stopped = lambda why, **kwargs: print(f"told: {why}", kwargs)\n'
          f'def _run(argv):\n  {run_body}\n'
          'main._run = _run\nmain.main(sys.argv)\n')
  return run_main(REPO, python=('-c', code))


@pytest.mark.parametrize('raised, told', [
    ("OSError(errno.ENOSPC, 'No space left on device', '/w/config.json')",
     f'/w/config.json: No space left on device: free space or pass another --workdir; {_KEPT}'),
    ("RuntimeError('a library failed\\nits details')", 'RuntimeError: a library failed'),
])
def test_an_error_is_told_to_the_other_hosts_in_one_line(raised, told):
  """A host's own error ended it alone: the others waited for it (hosts.watch_others reads
  what tell_stopped says; others_stop_test runs both with two processes)."""
  done = _main_telling(f'raise {raised}')
  assert done.returncode == 1, done.stderr
  assert done.stdout.strip().splitlines() == [f"told: {told} {{'status': 1}}"], done.stdout


def test_an_error_before_jax_starts_starts_no_backend_to_tell_it():
  """Telling the other hosts asked jax.process_count(), which starts JAX's backends (on a TPU
  VM: takes the TPU) in a run that had failed before any (a bad flag, a config error)."""
  code = ('import atexit, sys\nfrom jax._src import xla_bridge\nfrom bertjax import main\n'
          'atexit.register(lambda: print("started", xla_bridge.backends_are_initialized()))\n'
          'def _run(argv):\n  raise ValueError("a bad config")\n'
          'main._run = _run\nmain.main(sys.argv)\n')
  done = run_main(REPO, python=('-c', code))
  assert done.returncode == 1, done.stderr
  assert done.stdout.strip() == 'started False', done.stdout


def test_an_interrupt_is_told_to_the_other_hosts():
  """A Ctrl-C ends the process at once (os._exit): the others are told, with its status."""
  done = _main_telling('console.interrupted(lambda: "interrupted here")')
  assert done.returncode == 130, done.stderr
  assert done.stdout.strip().splitlines() == [
      "told: interrupted {'status': 130, 'interrupted': True}"]
  assert done.stderr.strip().splitlines()[-1] == 'interrupted here'


def test_the_interrupt_line_tells_no_checkpoint_from_storage_that_does_not_answer(tmp_path):
  """Storage failing mid-run (the usual reason it ends) said 'before the first checkpoint' of a
  run that had written several. (In its own process: bertjax.main defines --config, as
  launch.aot_compile does, which other tests of a worker import.)"""
  workdir = tmp_path / 'w'
  code = ('import sys, ml_collections\nfrom bertjax import files, main\n'
          "config = ml_collections.ConfigDict({'job': 'pretrain'})\n"
          'print(main.interrupted_message(config, sys.argv[1]))\n'
          "files.os.makedirs(sys.argv[1] + '/checkpoints/4')\n"
          'print(main.interrupted_message(config, sys.argv[1]))\n'
          'def failing(path):\n  raise OSError(f"HTTP 503 listing {path}")\n'
          'files.listdir = failing\n'
          'print(main.interrupted_message(config, sys.argv[1]))\n')
  done = run_main(tmp_path, str(workdir), python=('-c', code))
  assert done.returncode == 0, done.stderr
  none, intact, unlisted = done.stdout.strip().splitlines()
  assert none.startswith('interrupted before the first checkpoint in ')
  assert '(step 4) is intact' in intact
  assert unlisted.startswith(f'interrupted: {workdir}/checkpoints could not be listed (OSError: '
                             'HTTP 503 listing '), unlisted
  assert 'resumes from the last complete checkpoint' in unlisted


def test_the_interrupt_line_of_the_embed_job_says_its_files_are_whole(tmp_path):
  """Pass AL: 'nothing was written' of a workdir whose embeddings.npy had been replaced; and
  'whole files' of a workdir that held none (the first embed there, interrupted)."""
  (tmp_path / 'w').mkdir()
  (tmp_path / 'w' / 'embeddings.npy').write_bytes(b'')
  code = ('import sys, ml_collections\nfrom bertjax import main\n'
          "config = ml_collections.ConfigDict({'job': 'embed'})\n"
          'for workdir in sys.argv[1:]: print(main.interrupted_message(config, workdir))\n')
  done = run_main(tmp_path, str(tmp_path / 'w'), str(tmp_path), 'gs://b/w', '',
                  python=('-c', code))
  assert done.returncode == 0, done.stderr
  whole = ('holds whole files only (embeddings.npy, and similarity.txt of the same sentences or '
           'none); rerun the same command to write them')
  nothing = 'interrupted: nothing was written; rerun the same command to start again'
  assert done.stdout.strip().splitlines() == [
      f'interrupted: {tmp_path}/w {whole}', nothing, f'interrupted: gs://b/w {whole}', nothing]


def test_the_interrupt_line_of_a_fine_tuned_runs_eval_says_no_results_are_half_written(
    tmp_path):
  """Hostile review of 2026-12-04: '... is unchanged' of a run whose predictions/ folder the eval
  had begun to write; now the folder is put in place whole (scored_folders.writing)."""
  code = ('import sys, ml_collections\nfrom bertjax import main\n'
          "config = ml_collections.ConfigDict({'job': 'finetune', 'mode': 'eval'})\n"
          'for workdir in sys.argv[1:]: print(main.interrupted_message(config, workdir))\n')
  done = run_main(tmp_path, str(tmp_path / 'w'), 'gs://b/w', python=('-c', code))
  assert done.returncode == 0, done.stderr
  local, bucket = done.stdout.strip().splitlines()
  assert local == (f'interrupted: {tmp_path}/w holds no half-written results (a predictions/ '
                   'folder is put in place only when complete); rerun the same command to write '
                   'them')
  assert bucket.startswith('interrupted: gs://b/w holds no half-written results, but for a '
                           'predictions/ folder cut short while uploaded'), bucket


def record(pathname, level, message='m'):
  return logging.LogRecord('absl', level, pathname, 1, message, None, None)


def test_console_filter_keeps_ours_and_library_warnings():
  console_filter = console.ConsoleFilter()
  orbax = '/site-packages/orbax/checkpoint/_src/checkpoint_manager.py'
  verbosity = absl_logging.get_verbosity()
  try:
    absl_logging.set_verbosity(absl_logging.INFO)
    assert console_filter.filter(record('/x/bertjax/training/loop.py', logging.INFO))
    assert not console_filter.filter(record(orbax, logging.INFO))
    assert not console_filter.filter(record('/site-packages/jax/_src/xla_bridge.py', logging.INFO,
                                     "Unable to initialize backend 'tpu'"))
    assert console_filter.filter(record(orbax, logging.WARNING, 'a real problem'))
    assert not console_filter.filter(record(orbax, logging.WARNING,
                                     'Metadata file does not exist: /w/1/_CHECKPOINT_METADATA'))
    # A save that waited for the one before: the progress line's rate shows it (a loaded CI
    # machine's 1.1 s wait put orbax's line among the pre-training run's).
    assert not console_filter.filter(record(orbax, logging.WARNING,
                                     'Waiting for previous save to complete took 1.102294 '
                                     'seconds. If this number is high, consider checkpointing '
                                     'less frequently.'))
    # gcsfs' log of the error it raises (the network gone mid-command), a 40-line traceback
    # above the command's one line that says it.
    gcsfs_retry = record('/site-packages/gcsfs/retry.py', logging.ERROR, '_request out of '
                         'retries on exception: Cannot connect to host 127.0.0.1:9 ssl:default')
    assert not console_filter.filter(gcsfs_retry)
    absl_logging.set_verbosity(absl_logging.DEBUG)  # --verbosity=1: everything.
    assert console_filter.filter(record(orbax, logging.INFO))
    assert console_filter.filter(gcsfs_retry)
  finally:
    absl_logging.set_verbosity(verbosity)


def _finetune_in_subprocess(cwd, workdir, *flags_, env=()):
  """A 6-step tiny fine-tuning through bertjax.main on a CSV in `cwd`; prints at exit whether
  TensorFlow was imported."""
  train = pathlib.Path(cwd) / 'train.csv'
  if not train.exists():
    words = {'yes': finetune_runs.POSITIVE, 'no': finetune_runs.NEGATIVE}
    rows = [(' '.join(words[y][(i // 4 ** j) % 4] for j in range(4)), y)  # Each text once:
            for i, y in enumerate(['yes', 'no'] * 32)]  # a text's copies stay on one side.
    train.write_text('text,label\n' + ''.join(f'{t},{y}\n' for t, y in rows))
  argv = [f'--config={REPO}/configs/finetune.py:task=classification,size=tiny,seq=16,batch=16,'
          'epochs=2', '--config.data.train_file=train.csv', '--config.model.vocab_size=1000',
          f'--workdir={workdir}', *flags_]
  code = ('import atexit, runpy, sys\n'
          'atexit.register(lambda: print("tensorflow imported:", "tensorflow" in sys.modules))\n'
          f'sys.argv = ["bertjax.main", *{argv!r}]\n'
          'runpy.run_module("bertjax.main", run_name="__main__")\n')
  done = run_main(cwd, python=('-c', code), env=env)
  assert done.returncode == 0, done.stderr[-3000:]
  return done


EVERY_COMPILE = [('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')]  # Tiny compiles too.


@pytest.fixture(scope='module')
def first_cached_run(tmp_path_factory):
  """(folder, cache, process) of a fine-tuning run (workdir <folder>/w1) that compiled every
  program into a fresh cache: the cache test's first run, whose job the TensorBoard test reads
  too (one run of the command, not two)."""
  folder = tmp_path_factory.mktemp('finetune')
  cache = folder / 'cache'
  done = _finetune_in_subprocess(folder, 'w1', f'--compilation_cache_dir={cache}',
                                 '--log_dir=logs', env=EVERY_COMPILE)
  return folder, cache, done


def test_log_dir_holds_every_line_of_the_run_beside_the_console(first_cached_run):
  """Console pass 12 (2026-12-02): absl's --log_dir was taken and wrote nothing."""
  folder, _, done = first_cached_run
  [log] = (folder / 'logs').iterdir()
  assert re.fullmatch(r'main\.\d{8}-\d{6}\..+\.\d+\.log', log.name), log.name
  text = log.read_text()
  assert f'log file: {log}' in done.stderr  # Said once, on the console too.
  for line in ('classification head on the [CLS] pooler: exports to hf, tf1, saved_model',
               'finetune finished in '):
    assert line in text and line in done.stderr + done.stdout, line
  # Libraries' INFO lines (orbax's on every save), held from the console, are in the file.
  library = [line for line in text.splitlines() if 'checkpoint_manager.py' in line]
  assert library and not any(line in done.stderr for line in library[:3]), text[-2000:]


def test_a_cpu_finetuning_run_logs_to_tensorboard_without_importing_tensorflow(first_cached_run):
  # TensorFlow's import costs seconds; a fine-tuning job on a CPU host reads no tf.data, so its
  # event files are written without it, and TensorBoard's reader still finds its scalars.
  folder, _, done = first_cached_run
  lines = done.stdout.strip().splitlines()
  assert lines[-1] == 'tensorflow imported: False'  # Printed at exit, after the job.
  # The job's last line: its summary, after every log line; its first: what exports hold it.
  workdir = folder / 'w1'
  assert re.fullmatch(
      rf'finetune finished in (\d+\.\d s|\d+m\d\ds): step 6/6, train loss [\d.]+, eval '
      rf'accuracy [\d.]+, macro_f1 [\d.]+, loss [\d.]+; eval results {workdir}/eval_results.json, '
      rf'predictions '
      rf'{workdir}/predictions/step_6, checkpoints {workdir}/checkpoints \(step 6\), TensorBoard '
      rf'{workdir}', lines[-2]), done.stdout
  assert 'classification head on the [CLS] pooler: exports to hf, tf1, saved_model' in done.stderr
  scalars = summaries.read_scalars(str(workdir))
  # Evals at each epoch's end: the first epoch's train rows (more than 48) complete at step 4.
  assert sorted(scalars['eval/accuracy']) == [4, 6]
  assert sorted(scalars['train/loss']) == [4, 6]


def test_a_rerun_loads_its_compiled_steps_from_the_cache_and_ends_the_same(first_cached_run):
  folder, cache, first = first_cached_run
  assert f'compiled programs cached in {cache}' in first.stderr
  entries = sorted(p.name for p in cache.iterdir())
  assert any(name.startswith('jit_train_step-') for name in entries), entries
  _finetune_in_subprocess(folder, 'w2', f'--compilation_cache_dir={cache}', env=EVERY_COMPILE)
  assert sorted(p.name for p in cache.iterdir()) == entries  # Every program found, none added.
  # An entry cut short (a process killed while writing it) is reported and compiled again.
  step = next(p for p in cache.iterdir() if p.name.startswith('jit_train_step-'))
  step.write_bytes(step.read_bytes()[:step.stat().st_size // 2])
  third = _finetune_in_subprocess(folder, 'w3', f'--compilation_cache_dir={cache}',
                                  env=EVERY_COMPILE)
  assert "Error reading persistent compilation cache entry for 'jit_train_step'" in third.stderr
  results = [(folder / w / 'eval_results.json').read_text() for w in ('w1', 'w2', 'w3')]
  assert results[0] == results[1] == results[2]


def test_the_default_cache_folder_is_one_per_kind_of_machine(monkeypatch):
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  default = pathlib.Path(accelerators.default_compilation_cache_dir())
  assert default.parent == pathlib.Path.home() / '.cache' / 'bertjax' / 'jax'
  assert default.name.startswith(platform.machine() + '-')
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '/shared/jax')
  assert accelerators.default_compilation_cache_dir() == '/shared/jax'


def test_a_second_compilation_cache_folder_is_the_one_used(tmp_path):
  """A notebook's set-up cell run again with another folder: JAX had opened the first at its
  first compilation and went on filling it; '' then left the cache on."""
  code = ('import sys, jax, numpy\nfrom bertjax import accelerators\n'
          "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
          'def run(f): jax.jit(f)(numpy.ones(3)).block_until_ready()\n'
          'def first(x): return x + 1\ndef second(x): return x * 2\n'
          'def third(x): return x - 3\ndef fourth(x): return x / 4\n'
          'for folder, f in zip(sys.argv[1:], (first, second, third, fourth)):\n'
          '  accelerators.use_compilation_cache(folder)\n  run(f)\n')
  a, b = tmp_path / 'a', tmp_path / 'b'
  subprocess.run([sys.executable, '-c', code, str(a), str(b), '', str(a)], check=True,
                 capture_output=True, text=True, timeout=120, cwd=REPO)
  assert sorted(n.split('-')[0] for n in os.listdir(a) if not n.endswith('-atime')) == [
      'jit_first', 'jit_fourth']
  assert [n.split('-')[0] for n in os.listdir(b) if not n.endswith('-atime')] == ['jit_second']


@pytest.mark.parametrize('endpoints, workers', [
    ('10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5', 4),  # Today's format: the hosts' addresses.
    ('w-0:0:10.0.0.2,w-1:1:10.0.0.3', 2),  # The older name:id:ip triples.
    ('10.0.0.2', 1),  # A single-host slice: no jax.distributed.
])
def test_a_tpu_vms_peers_come_from_its_metadata_server(monkeypatch, tmp_path, endpoints,
                                                       workers):
  """`gcloud ... tpu-vm ssh --worker=all --command='python -m bertjax.main ...'` sets no
  variable naming the slice's hosts: main must still start jax.distributed on each (orbax's
  saves and the hosts' barriers need it), from what the VM's metadata server says."""
  import http.server  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top

  asked = []

  class Metadata(http.server.BaseHTTPRequestHandler):

    def do_GET(self):  # pylint: disable=invalid-name
      asked.append((self.path, self.headers.get('Metadata-Flavor')))
      body = endpoints.encode()
      self.send_response(200)
      self.send_header('Content-Length', str(len(body)))
      self.end_headers()
      self.wfile.write(body)

    def log_message(self, *args):
      del args

  server = http.server.HTTPServer(('127.0.0.1', 0), Metadata)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    monkeypatch.setenv('GCE_METADATA_IP', f'127.0.0.1:{server.server_port}')
    for name in ('TPU_SKIP_MDS_QUERY', 'TPU_WORKER_HOSTNAMES', 'SLURM_NTASKS',
                 'OMPI_COMM_WORLD_SIZE', 'MEGASCALE_NUM_SLICES'):
      monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(accelerators, '_TPU_NODES', (str(tmp_path / 'none'),))
    assert accelerators.tpu_vm_workers() == 1 and not asked  # No TPU here: nothing is asked.
    (tmp_path / 'accel0').touch()
    monkeypatch.setattr(accelerators, '_TPU_NODES', (str(tmp_path / 'accel0'),))
    assert accelerators.tpu_vm_workers() == workers
    assert asked[-1] == ('/computeMetadata/v1/instance/attributes/worker-network-endpoints',
                         'Google')
    # main starts jax.distributed on a slice of several hosts only.
    node = str(tmp_path / 'accel0')
    code = (f'from bertjax import accelerators\naccelerators._TPU_NODES = ({node!r},)\n'
            'from bertjax import main\nprint(main._cluster_detected())')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            env=dict(os.environ), timeout=120, check=True)
    assert result.stdout.strip() == str(workers > 1), result.stderr
  finally:
    server.shutdown()


def test_a_notebooks_console_set_up_twice_prints_each_line_once(tmp_path):
  """Pass U: the setup cell rerun after importlib.reload(console) (%autoreload) printed every
  bertjax line twice."""
  code = ('import importlib\nfrom absl import logging\nfrom bertjax import console\n'
          'console.notebook()\nimportlib.reload(console)\nconsole.notebook()\n'
          'console.notebook()\nlogging.info("one line")\n')
  script = tmp_path / 'bertjax' / 'cell.py'  # A bertjax path: the console keeps its lines.
  script.parent.mkdir()
  script.write_text(code)
  done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=120, check=True)
  assert done.stdout.count('one line') == 1, done.stdout + done.stderr


@pytest.mark.parametrize('args, env, line', [
    (['--num_processes=2', '--process_id=1'], {}, 'error: --num_processes and --process_id are '
     "read with --coordinator_address=HOST:PORT (process 0's) only: pass it too, or leave them "
     'out for a single process.'),
    (['--coordinator_address=nohost', '--num_processes=2', '--process_id=0'], {},
     "error: --coordinator_address=nohost is not HOST:PORT: pass process 0's host and a free "
     'port, e.g. 10.0.0.2:1234.'),
    (['--coordinator_address=127.0.0.1:1234', '--num_processes=2', '--process_id=5'], {},
     'error: --process_id=5 is not one of the 2 processes: pass 0 to 1, distinct per process.'),
    (['--coordinator_address=127.0.0.1:1234', '--num_processes=-1', '--process_id=0'], {},
     'error: --num_processes=-1: pass the number of processes in the job (1 or more).'),
    (['--compilation_cache_dir={tmp}/a_file'], {}, 'error: --compilation_cache_dir={tmp}/a_file '
     "is a file: pass a folder (made if missing), or '' for no cache."),
    (['--config={tmp}/no_job.py'], {}, 'error: --config={tmp}/no_job.py is not a bertjax config: '
     'its get_config() gave ConfigDict without a job field; load configs/pretrain.py,'),
    (['--config={tmp}/an_int.py'], {}, 'error: --config={tmp}/an_int.py is not a bertjax config: '
     'its get_config() gave int without a job field'),
    (['--config={repo}/README.md'], {}, 'FATAL Flags parsing error: --config={repo}/README.md '
     'does not load: ValueError: {repo}/README.md is not a Python file'),
    ([], {'JAX_NUM_PROCESSES': 'two'}, "error: the environment variable JAX_NUM_PROCESSES='two' "
     'is not a whole number: set it to one, or unset it.'),
    (['--log_dir='], {}, 'FATAL Flags parsing error: --log_dir is empty: name a folder for the '
     'log file, or drop the flag.'),
    (['--log_dir=gs://bucket/logs'], {}, 'FATAL Flags parsing error: --log_dir=gs://bucket/logs: '
     'a log file is appended to line by line, so it takes a local folder (copy it to a bucket '
     'after the run).'),
    (['--log_dir={tmp}/a_file'], {}, 'FATAL Flags parsing error: --log_dir={tmp}/a_file is a '
     'file: name a folder (made if missing).'),
    (['--log_dir={tmp}/a_file/logs'], {}, 'FATAL Flags parsing error: --log_dir={tmp}/a_file/logs: '
     'cannot write a log file there ([Errno 20] Not a directory'),
])
def test_a_bad_process_cache_or_config_flag_is_refused_before_anything_starts(tmp_path, args,
                                                                             env, line):
  """Hostile pass of 2026-12-01: --num_processes without a coordinator ran as one process
  without a word; a process id past the count, a port-less address, a cache path that is a file
  (logged as the cache) and a config of another program got tracebacks or lines about
  something else; JAX_NUM_PROCESSES=two a traceback at import."""
  (tmp_path / 'a_file').write_text('')
  (tmp_path / 'no_job.py').write_text('import ml_collections\n\n\ndef get_config():\n  return '
                                      'ml_collections.ConfigDict({"steps": 1})\n')
  (tmp_path / 'an_int.py').write_text('def get_config():\n  return 5\n')
  args = [a.format(tmp=tmp_path, repo=REPO) for a in args]
  if not any(a.startswith('--config=') for a in args):
    args.append(f'--config={REPO}/configs/pretrain.py:size=tiny')
  done = run_main(tmp_path, *args, f'--workdir={tmp_path}/w', env=env)
  assert done.returncode in (1, console.REFUSED_EXIT), done.stderr
  assert done.stderr.strip().splitlines()[0].startswith(line.format(tmp=tmp_path, repo=REPO)), (
      done.stderr)
  assert 'Traceback' not in done.stderr and not (tmp_path / 'w').exists()


@pytest.mark.parametrize('args, line', [
    (('--step=5', '--workdir={tmp}/w'), 'error: --step=5 picks the checkpoint a fine-tuning run'),
    (('--step=', '--workdir={tmp}/w'), 'error: --step= is empty: pass best, latest or a '
                                       'checkpoint step number, or leave --step out'),
    # Helper-173's pass: a step no reader takes exited 1 once JAX had started.
    (('--step=-1', '--workdir={tmp}/w', '--config={repo}/configs/finetune.py:task=sst2'),
     'error: --step=-1: pass best, latest or a checkpoint step number (0 or more'),
    (('--step=Best', '--workdir={tmp}/w', '--config={repo}/configs/finetune.py:task=sst2'),
     'error: --step=Best: pass best, latest or a checkpoint step number (0 or more'),
    ((), 'error: --workdir is required: checkpoints and logs go there.'),
    (('--workdir=-',), "error: --workdir=- would write a folder named '-' (a run's checkpoints "
                       'and logs are files, not a stream): name the folder, e.g. '
                       '--workdir=runs/base'),
])
def test_a_flag_the_job_does_not_read_is_refused_as_a_command(tmp_path, args, line):
  """Hostile pass of the launchers: --step with a pre-training config, and no --workdir, ended
  with exit 1 once JAX had started, so a JobSet restarted the refused command: exit 78 now."""
  args = [a.format(tmp=tmp_path, repo=REPO) for a in args]
  if not any(a.startswith('--config=') for a in args):
    args.insert(0, f'--config={REPO}/configs/pretrain.py:size=tiny')
  done = run_main(tmp_path, *args)
  assert done.returncode == console.REFUSED_EXIT, done.stderr
  assert done.stderr.strip().splitlines()[0].startswith(line), done.stderr
  assert 'JAX' not in done.stderr
  assert not (tmp_path / 'w').exists() and not (tmp_path / '-').exists()

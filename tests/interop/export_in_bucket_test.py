"""Models in and out of a bucket: `bertjax.export --from=gs://... --output=gs://...`, init_from
and sources reading gs:// transformers folders, TF1 checkpoints and bertjax runs, the export's
refusals on URLs, and one clear line for a bucket that does not exist or cannot be reached.

Against a real GCS API served locally (tests/gcs_emulator.py). The command line runs in separate
processes where a flag takes the URL; the other formats go through the same `export.export` in
this process (an export's writer is all that differs between formats).
"""

import json
import os
import re
import subprocess
import sys
import time

import export_test
import hf_checkpoint_test
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
from safetensors import numpy as st_numpy
import saved_model_test
import torch
import transformers

from bertjax import export
from bertjax import files
from bertjax.interop import export_folder
from bertjax.interop import export_writing
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.interop import saved_model
from bertjax.interop import sources
from bertjax.model import encoder
from bertjax.text import fast_tokenizer
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader

MANIFEST = export_folder.MANIFEST


def run_export(*flags, env=None, timeout=300):
  return subprocess.run([sys.executable, '-m', 'bertjax.export', *flags], capture_output=True,
                        text=True, timeout=timeout, env=env)


def printed(proc) -> list[str]:
  """The lines the command printed, absl's and TensorFlow's log lines left out."""
  return [line for line in (proc.stdout + proc.stderr).splitlines()
          if line.strip() and not (line[:1] in 'IWEF' and line[1:5].isdigit())]


@pytest.fixture
def minilm_url(gcs_bucket, minilm_dir):
  url = files.join(gcs_bucket, 'minilm')
  files.copy_tree(str(minilm_dir), url)
  return url


def assert_complete_export(url):
  manifest = json.loads(files.read_text(files.join(url, MANIFEST)))
  assert 'in_progress' not in manifest
  assert sorted(manifest['files']) == sorted(set(files.walk_files(url)) - {MANIFEST})
  return manifest


def test_the_command_line_exports_hf_from_a_bucket_to_a_bucket(minilm_url, minilm_dir,
                                                                 gcs_bucket):
  out = files.join(gcs_bucket, 'exports', 'hf')
  proc = run_export(f'--from={minilm_url}', '--format=hf', f'--output={out}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines()[-1].endswith(f'; hf {out}'), proc.stdout
  assert assert_complete_export(out)['source'] == minilm_url
  with files.local_copy(out) as local:
    before = st_numpy.load_file(os.path.join(minilm_dir, 'model.safetensors'))
    after = st_numpy.load_file(os.path.join(local, 'model.safetensors'))
    before = {k: v for k, v in before.items() if not k.endswith('position_ids')}
    assert set(after) == set(before)
    for name, value in before.items():
      np.testing.assert_array_equal(after[name], value, err_msg=name)
    # transformers loads the download; bertjax reads the source in the bucket: equal outputs.
    ref = export_test.load_reporting(transformers.BertModel, local)
    batch = hf_checkpoint_test.hf_batch(local, hf_checkpoint_test.SENTENCES[:2])
  cfg, params, report = hf_checkpoint.load(minilm_url, with_heads=False)
  assert not report.initialised
  seq, pooled = encoder.BertEncoder(cfg).apply({'params': params}, **batch)
  with torch.no_grad():
    theirs = ref(**hf_checkpoint_test.torch_inputs(batch))
  np.testing.assert_allclose(np.asarray(seq), theirs.last_hidden_state.numpy(), atol=1e-5,
                             rtol=0)
  np.testing.assert_allclose(np.asarray(pooled), theirs.pooler_output.numpy(), atol=1e-5, rtol=0)


def test_tf1_in_a_bucket_reads_back_as_the_local_source(minilm_url, minilm_dir, gcs_bucket):
  out = files.join(gcs_bucket, 'tf1')
  assert export.export(minilm_url, 'tf1', out) == out
  assert_complete_export(out)
  for name in ('bert_config.json', 'bert_model.ckpt.index', 'vocab.txt', 'checkpoint'):
    assert files.isfile(files.join(out, name)), name
  local = sources.load(minilm_dir)
  for location in (out, files.join(out, 'bert_model.ckpt')):  # The folder, or the prefix.
    assert sources.format_of(location) == 'tf1'
    back = sources.load(location)
    assert back.kind == 'encoder' and set(back.params) == set(local.params)
    for name, value in local.params.items():
      np.testing.assert_array_equal(back.params[name], value, err_msg=name)
    assert init_from.vocab_file(location) == files.join(out, 'vocab.txt')
    assert init_from.model_config(location) == init_from.model_config(str(minilm_dir))
  remote = checkpoint.flatten(init_from.read_params(out, with_heads=False))
  assert set(remote) == {k for k in local.params if k.startswith('bert/')}


def test_init_from_a_bucket_reads_what_the_local_folder_holds(minilm_url, minilm_dir):
  local, remote = str(minilm_dir), minilm_url
  assert init_from.is_transformers_dir(remote)
  assert init_from.model_config(remote) == init_from.model_config(local)
  assert init_from.vocab_file(remote) == files.join(remote, 'vocab.txt')
  assert init_from.pooling(remote) == init_from.pooling(local) == 'mean'
  ours = checkpoint.flatten(init_from.read_params(remote, with_heads=False))
  theirs = checkpoint.flatten(init_from.read_params(local, with_heads=False))
  assert set(ours) == set(theirs)
  for name, value in theirs.items():
    np.testing.assert_array_equal(ours[name], value, err_msg=name)
  bundle, reference = sources.load(remote), sources.load(local)
  assert (bundle.kind, bundle.pooling, bundle.max_seq_length, bundle.do_lower_case) == (
      reference.kind, reference.pooling, reference.max_seq_length, reference.do_lower_case)
  assert bundle.vocab_file == files.join(remote, 'vocab.txt') and bundle.source == remote


def test_a_saved_model_in_a_bucket_serves_bertjax_outputs(minilm_url, gcs_bucket):
  out = files.join(gcs_bucket, 'saved_model')
  export.export(minilm_url, 'saved_model', out)
  assert_complete_export(out)
  assert files.isfile(files.join(out, 'saved_model.pb'))
  tf, _ = fast_tokenizer.import_tf()
  minilm = sources.load(minilm_url)
  texts = saved_model_test.GOLDEN
  with files.local_copy(out) as local:
    got = tf.saved_model.load(local).signatures['serving_default'](text=tf.constant(texts))
  batch = saved_model_test.ids_of(minilm.vocab_file, texts)
  np.testing.assert_array_equal(got['input_mask'].numpy(), batch['input_mask'])
  ours = saved_model.numpy_outputs(minilm, batch)
  for key in ('sequence_output', 'pooled_output', 'mean_pooled_output'):
    np.testing.assert_allclose(got[key].numpy(), ours[key], atol=1e-4, err_msg=key)


def test_export_refusals_hold_for_urls(minilm_url, gcs_bucket):
  for output, where in ((minilm_url, 'is the source'), (minilm_url + '/', 'is the source'),
                        (files.join(minilm_url, 'hf'), 'is inside the source'),
                        (gcs_bucket, 'holds the source')):
    with pytest.raises(FileExistsError, match=where):
      export.export(minilm_url, 'hf', output, overwrite=True)
  run = files.join(gcs_bucket, 'run')  # A bertjax run: its config.json beside checkpoints/.
  files.write_atomically(files.join(run, 'config.json'), '{}')
  files.write_atomically(files.join(run, 'checkpoints', '3', 'meta', 'metadata'), '{}')
  for output in (run, files.join(run, 'hf'), files.join(run, 'checkpoints', '9')):
    with pytest.raises(FileExistsError, match=f'the bertjax run {run}:'):
      export.export(minilm_url, 'hf', output, overwrite=True)
  foreign = files.join(gcs_bucket, 'foreign')
  files.write_atomically(files.join(foreign, 'keep.txt'), 'mine')
  with pytest.raises(FileExistsError, match='not empty: pass overwrite=True'):
    export.export(minilm_url, 'hf', foreign)
  with pytest.raises(FileExistsError, match='not written by bertjax.export'):
    export.export(minilm_url, 'hf', foreign, overwrite=True)
  assert files.walk_files(foreign) == ['keep.txt']
  # An earlier export in the bucket is replaced by --overwrite, its files that the new one
  # lacks removed; a file added to it by hand stops that.
  earlier = files.join(gcs_bucket, 'earlier')
  export.export(minilm_url, 'hf', earlier)
  export.export(minilm_url, 'tf1', earlier, overwrite=True)
  assert assert_complete_export(earlier)['format'] == 'tf1'
  assert not files.exists(files.join(earlier, 'model.safetensors'))
  files.write_atomically(files.join(earlier, 'NOTES.md'), 'mine')
  with pytest.raises(FileExistsError, match='did not write .*NOTES.md'):
    export.export(minilm_url, 'tf1', earlier, overwrite=True)
  assert files.read_text(files.join(earlier, 'NOTES.md')) == 'mine'
  with pytest.raises(FileNotFoundError, match=f'^{gcs_bucket}/nowhere does not exist'):
    export.export(files.join(gcs_bucket, 'nowhere'), 'hf', files.join(gcs_bucket, 'out'))
  # A typo in the output's bucket is named before the export is made, by the URL as given.
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/hf: the bucket'):
    export_folder.check('gs://no-such-bucket-xyz/hf', overwrite=False, source=minilm_url)


def _write(output, text, overwrite=False, meanwhile=lambda: None, also=''):
  """export_writing.write of an export of config.json (`text`) and the file `also` to `output`;
  `meanwhile` runs after the export is made and before it is uploaded."""
  def write_into(folder):
    for name, content in (('config.json', text), (also, '')):
      if name:
        with open(os.path.join(folder, name), 'w', encoding='utf-8') as f:
          f.write(content)
    meanwhile()
  export_writing.write(output, 'hf', 'src', write_into, overwrite)


def test_an_output_written_meanwhile_in_a_bucket_is_checked_again(gcs_bucket):
  # The report's race: a file written into the output while the export runs, which the upload
  # deleted (no --overwrite), and a second export to the same output whose files the first
  # one deleted. Checked again before the upload, as a local output is before its rename.
  out = files.join(gcs_bucket, 'race')
  notes = files.join(out, 'notes.txt')
  export_folder.check(out, overwrite=False)
  with pytest.raises(FileExistsError, match='exists and is not empty: pass --overwrite'):
    _write(out, 'export', meanwhile=lambda: files.write_atomically(notes, 'mine'))
  assert files.walk_files(out) == ['notes.txt']
  twice = files.join(gcs_bucket, 'twice')
  export_folder.check(twice, overwrite=False)
  with pytest.raises(FileExistsError, match='exists and is not empty: pass --overwrite'):
    _write(twice, 'first', meanwhile=lambda: _write(twice, 'second'))
  assert assert_complete_export(twice)['files'] == ['config.json']
  assert files.read_text(files.join(twice, 'config.json')) == 'second'
  # --overwrite replaces an earlier export written meanwhile, not a user's file added to it.
  _write(twice, 'third', overwrite=True, meanwhile=lambda: _write(twice, 'x', overwrite=True))
  assert files.read_text(files.join(twice, 'config.json')) == 'third'
  assert_complete_export(twice)
  added = files.join(twice, 'NOTES.md')
  with pytest.raises(FileExistsError, match='did not write .*NOTES.md'):
    _write(twice, 'fourth', overwrite=True, meanwhile=lambda: files.write_atomically(added, 'me'))
  assert files.read_text(added) == 'me'
  assert files.read_text(files.join(twice, 'config.json')) == 'third'


def test_a_file_added_after_the_last_check_is_kept_by_overwrite(gcs_bucket, monkeypatch):
  # What is left of the race: a file written between the re-check and the upload is not seen
  # by the check, but the upload removes only what the earlier export's manifest listed.
  out = files.join(gcs_bucket, 'earlier')
  _write(out, 'earlier', also='old.bin')
  checked = export_folder.check
  added = files.join(out, 'notes.txt')

  def check_then_write(*args, **kwargs):
    replaced = checked(*args, **kwargs)
    files.write_atomically(added, 'mine')
    return replaced
  monkeypatch.setattr(export_folder, 'check', check_then_write)
  _write(out, 'new', overwrite=True)
  assert files.read_text(added) == 'mine'
  assert files.walk_files(out) == sorted([MANIFEST, 'config.json', 'notes.txt'])
  assert json.loads(files.read_text(files.join(out, MANIFEST)))['files'] == ['config.json']


def test_an_export_cut_short_in_a_bucket_is_refused_by_its_readers(minilm_url, gcs_bucket,
                                                                   tmp_path):
  # An upload SIGKILLed midway leaves its manifest in progress over two exports' files mixed.
  out = files.join(gcs_bucket, 'cut_short')
  export.export(minilm_url, 'hf', out)
  manifest = files.join(out, MANIFEST)
  written = json.loads(files.read_text(manifest))
  files.write_atomically(manifest, json.dumps({**written, 'in_progress': True}))
  refused = (f'^{re.escape(out)} is an export cut short \\(its {re.escape(MANIFEST)} says in '
             'progress.*: rerun the export that writes it, with --overwrite: '
             + re.escape(f'python -m bertjax.export --from={minilm_url} --format=hf '
                         f'--output={out} --overwrite.') + '$')
  with pytest.raises(ValueError, match=refused):
    sources.format_of(out)
  with pytest.raises(ValueError, match=refused):
    sources.load(out)
  with pytest.raises(ValueError, match=refused):
    export.export(out, 'tf1', files.join(gcs_bucket, 'again'))
  proc = run_export(f'--from={out}', '--format=hf', f'--output={tmp_path / "again"}')
  assert proc.returncode == 1, proc.stderr[-3000:]
  lines = printed(proc)
  assert len(lines) == 1 and lines[0].startswith(f'error: {out} is an export cut short'), lines
  assert not (tmp_path / 'again').exists() and not files.exists(files.join(gcs_bucket, 'again'))
  # The rerun it names replaces it; what it wrote reads again.
  export.export(minilm_url, 'hf', out, overwrite=True)
  assert sources.format_of(out) == 'hf'


def test_a_bertjax_run_in_a_bucket_reads_as_the_local_one(fine_tuned_sst2, gcs_bucket):
  workdir, _ = fine_tuned_sst2
  url = files.join(gcs_bucket, 'runs', 'sst2')
  files.copy_tree(str(workdir), url)
  local = checkpoint_reader.read(str(workdir))
  read = checkpoint_reader.read(url)
  assert read.step == local.step and read.directory == files.join(url, 'checkpoints')
  assert checkpoint_reader.steps(read.directory) == checkpoint_reader.steps(local.directory)
  ours, theirs = checkpoint.flatten(read.params), checkpoint.flatten(local.params)
  assert set(ours) == set(theirs)
  for name, value in theirs.items():
    np.testing.assert_array_equal(ours[name], value, err_msg=name)
  step_url = files.join(url, 'checkpoints', str(read.step))
  assert checkpoint_reader.read(step_url).step == read.step
  assert init_from.run_folder(step_url) == url and init_from.run_config(url)['job'] == 'finetune'
  assert init_from.model_config(url) == init_from.model_config(str(workdir))
  bundle, reference = sources.load(url), sources.load(str(workdir))
  assert (bundle.kind, bundle.labels, bundle.pooling) == (reference.kind, reference.labels,
                                                          reference.pooling)
  assert bundle.vocab_file == files.join(url, init_from.RUN_VOCAB)
  assert bundle.source == step_url
  with pytest.raises(FileExistsError, match=f'is inside the bertjax run {url}:'):
    export.export(reference.source, 'hf', files.join(url, 'checkpoints', 'hf'))


@pytest.mark.parametrize('setting', ['no_bucket', 'no_network'])
def test_a_bucket_that_cannot_be_read_is_one_line_within_a_minute(setting, gcs_emulator,
                                                                  tmp_path):
  env = dict(os.environ)
  if setting == 'no_network':  # A closed local port stands for no network.
    env['STORAGE_EMULATOR_HOST'] = 'http://127.0.0.1:9'
  start = time.time()
  proc = run_export('--from=gs://no-such-bucket-xyz/run', '--format=hf',
                    f'--output={tmp_path / "x"}', env=env, timeout=120)
  assert time.time() - start < 60
  assert proc.returncode == 1, proc.stderr[-3000:]
  lines = printed(proc)
  assert len(lines) == 1 and lines[0].startswith('error: gs://no-such-bucket-xyz/run'), lines
  assert 'gs:/no-such' not in proc.stdout + proc.stderr
  what = {'no_bucket': 'the bucket gs://no-such-bucket-xyz does not exist',
          'no_network': 'cannot be reached: check the network'}[setting]
  assert what in lines[0], lines[0]
  assert not (tmp_path / 'x').exists()


def test_a_run_or_model_missing_from_a_bucket_is_named(gcs_bucket):
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/run: the bucket '
                     'gs://no-such-bucket-xyz does not exist'):
    checkpoint_reader.read('gs://no-such-bucket-xyz/run')
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/bert: the bucket '
                     'gs://no-such-bucket-xyz does not exist'):
    init_from.model_config('gs://no-such-bucket-xyz/bert')
  run = files.join(gcs_bucket, 'run')
  with pytest.raises(FileNotFoundError, match=f'^{run} does not exist'):
    checkpoint_reader.read(run)
  with pytest.raises(FileNotFoundError, match=f'^init_from={run} does not exist'):
    init_from.model_config(run)
  files.write_atomically(files.join(run, 'checkpoints', 'notes.txt'), 'no step yet')
  with pytest.raises(FileNotFoundError, match=f'^{run} holds no checkpoint'):
    checkpoint_reader.read(run)

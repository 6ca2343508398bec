"""The pod user's chain with every path in a bucket (a real GCS JSON API on 127.0.0.1): tiny
pre-training with --workdir=gs://..., fine-tuning from it with its task files in the bucket,
predict from and to the bucket, export from the bucket to the bucket in three formats (one
command), and the exported models loaded back by transformers and TensorFlow equal to bertjax's
own outputs.

Each step is its own process, as on a pod. tf.data reads the pre-training TFRecords through
TensorFlow's file systems, whose GCS client has no endpoint setting: those files stay local
here (on a pod they are read from gs:// by that client).
"""

import json
import subprocess
import sys

import finetune_runs
import numpy as np
import pretrain_runs
import pytest

from bertjax import files

pytestmark = pytest.mark.usefixtures('gcs_emulator')


def _run(cmd, env, what):
  proc = subprocess.run(cmd, cwd=pretrain_runs.REPO, env=env, capture_output=True, text=True,
                        timeout=pretrain_runs.TIMEOUT_S)
  assert proc.returncode == 0, f'{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n' \
                               f'{proc.stderr[-5000:]}'
  return proc


@pytest.fixture(scope='module')
def chain(gcs_emulator, tmp_path_factory):  # pylint: disable=redefined-outer-name,unused-argument
  """Runs the chain once; returns (bucket, local tmp, the sentences predicted)."""
  import gcsfs  # pylint: disable=g-import-not-at-top
  bucket = 'gs://chain'
  gcsfs.GCSFileSystem(token='anon').mkdir('chain')
  tmp = tmp_path_factory.mktemp('chain')
  env = pretrain_runs.environment(1, tmp / 'jax_cache')
  corpus = pretrain_runs.corpus_files(tmp_path_factory)
  files.copy(corpus['data.vocab_file'], f'{bucket}/data/vocab.txt')
  corpus['data.vocab_file'] = f'{bucket}/data/vocab.txt'
  # One layer: the paths are the subject, and each command of the chain traces, compiles and
  # exports less.
  fields = pretrain_runs.fields(corpus, model__num_layers=1)
  _run(pretrain_runs.command(f'{bucket}/pre', 3, fields), env, 'pre-training')

  data = finetune_runs.write_sst2(tmp / 'sst2', n_train=32, n_dev=16, n_test=8)
  files.copy_tree(str(data), f'{bucket}/sst2')
  _run([sys.executable, '-m', 'bertjax.main',
        '--config=configs/finetune.py:task=sst2,seq=16,batch=16,lr=1e-3,epochs=1',
        f'--config.init_from={bucket}/pre', f'--config.data.data_dir={bucket}/sst2',
        '--config.eval_batch_size=16', f'--workdir={bucket}/fine'], env, 'fine-tuning')

  sentences = [line.split('\t')[1] for line in
               (data / 'test.tsv').read_text().splitlines()[1:]]
  files.write_atomically(f'{bucket}/in.txt', '\n'.join(sentences) + '\n')
  _run([sys.executable, '-m', 'bertjax.predict', f'--workdir={bucket}/fine',
        f'--input_file={bucket}/in.txt', f'--output_file={bucket}/out/predictions.jsonl'],
       env, 'predict')
  # The three formats from one read of the run: each into export/<format>.
  exported = _run([sys.executable, '-m', 'bertjax.export', f'--from={bucket}/fine',
                   '--format=hf,tf1,saved_model', f'--output={bucket}/export'], env, 'export')
  summary = exported.stdout.splitlines()[-1]
  assert summary.endswith(f'; hf {bucket}/export/hf, tf1 {bucket}/export/tf1, saved_model '
                          f'{bucket}/export/saved_model'), summary
  return bucket, tmp, sentences


def test_every_step_wrote_into_the_bucket(chain):
  bucket, _, sentences = chain
  pre = files.listdir(f'{bucket}/pre')
  assert 'checkpoints' in pre and 'vocab.txt' in pre, pre
  fine = files.listdir(f'{bucket}/fine')
  assert {'checkpoints', 'config.json', 'vocab.txt'} <= set(fine), fine
  assert not files.exists(f'{bucket}/fine/.lock')  # The run's lease is given back at its end.
  rows = [json.loads(row) for row in files.read_text(
      f'{bucket}/out/predictions.jsonl').splitlines()]
  assert len(rows) == len(sentences) and all(r['label'] in ('0', '1') for r in rows)
  assert files.isfile(f'{bucket}/export/hf/model.safetensors')
  assert files.isfile(f'{bucket}/export/saved_model/saved_model.pb')
  assert files.isfile(f'{bucket}/export/tf1/bert_config.json')


def test_exports_from_the_bucket_equal_bertjax(chain):
  """transformers on the hf export and TensorFlow on the SavedModel give the probabilities
  predict wrote from the bucket's run."""
  bucket, _, sentences = chain
  rows = [json.loads(row) for row in files.read_text(
      f'{bucket}/out/predictions.jsonl').splitlines()]
  ours = np.array([[r['probabilities'][k] for k in ('0', '1')] for r in rows])
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  with files.local_copy(f'{bucket}/export/hf') as local:
    tok = transformers.BertTokenizer.from_pretrained(local)
    model = transformers.BertForSequenceClassification.from_pretrained(local).eval()
    batch = tok(sentences, padding='max_length', max_length=16, truncation=True,
                return_tensors='pt')
    with torch.no_grad():
      theirs = torch.softmax(model(**batch).logits, -1).numpy()
  np.testing.assert_allclose(theirs, ours, atol=2e-6)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import  (its ops)
  with files.local_copy(f'{bucket}/export/saved_model') as local:
    serve = tf.saved_model.load(local).signatures['serving_default']
    served = serve(text=tf.constant(sentences))['probabilities'].numpy()
  np.testing.assert_allclose(served, ours, atol=1e-5)
  # TensorFlow reads the TF1 export's classifier: run_classifier.py's names, the hf weights.
  with files.local_copy(f'{bucket}/export/tf1') as local:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(local) or
                                      f'{local}/bert_model.ckpt')
    np.testing.assert_array_equal(reader.get_tensor('output_weights'),
                                  model.classifier.weight.detach().numpy())

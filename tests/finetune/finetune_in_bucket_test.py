"""Fine-tuning and inference with every path in a bucket (a real GCS JSON API on 127.0.0.1, see
gcs_emulator.py): the task files read from gs://, the workdir written to gs://, predict from and
to gs://, and the readers' errors naming the URL as the user gave it (never `gs:/...`).

Each command is its own process, as on a pod; the run is a tiny classifier on the user's own
CSV / JSONL / TSV files, so that the whole module takes seconds, not minutes.
"""

import io
import json
import pathlib
import re
import subprocess
import sys
import uuid

import finetune_runs
import numpy as np
import pretrain_runs
import pytest

from bertjax import embed
from bertjax import extract_features
from bertjax import files
from bertjax import predict
from bertjax import text_files
from bertjax.finetune import job
from bertjax.finetune.tasks import bbc_news
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import glue_readers
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import user_data
from bertjax.finetune.tasks import wordnet_glosses
from configs import embed as embed_config
from configs import finetune as finetune_config

pytestmark = pytest.mark.usefixtures('gcs_emulator')

REPO = pathlib.Path(__file__).resolve().parents[2]
LABELS = ('cold', 'warm')


def _rows(n, seed):
  """(text, label) pairs a tiny model learns in a few steps: one telling word per text."""
  rng = np.random.default_rng(seed)
  words = {'warm': finetune_runs.POSITIVE, 'cold': finetune_runs.NEGATIVE}
  labels = rng.choice(LABELS, n)
  return [(' '.join([*rng.choice(finetune_runs.FILLER, 3), rng.choice(words[y])]), str(y))
          for y in labels]


def _run(args, env, cwd, what, expect_ok=True):
  proc = subprocess.run([sys.executable, '-m', *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=pretrain_runs.TIMEOUT_S, check=False)
  if expect_ok:
    assert proc.returncode == 0, f'{what} failed ({proc.returncode}):\n{proc.stderr[-5000:]}'
  return proc


def _finetune_flags(bucket, **fields):
  """bertjax.main's flags for this module's classifier on the bucket's task files."""
  return [f'--config={REPO}/configs/finetune.py:task=classification,size=tiny,seq=16,batch=16,'
          'lr=3e-3,epochs=2', f'--config.data.train_file={bucket}/data/train.csv',
          f'--config.data.eval_file={bucket}/data/eval.jsonl',
          f'--config.data.test_file={bucket}/data/test.tsv', '--config.data.text_fields=review',
          '--config.data.label_field=sentiment', '--config.eval_batch_size=16',
          *[f'--config.{k}={v}' for k, v in fields.items()], f'--workdir={bucket}/run']


@pytest.fixture(scope='module')
def bucket_run(gcs_emulator, tmp_path_factory):  # pylint: disable=unused-argument
  """(bucket, local scratch folder, env, test texts): a classifier fine-tuned by `bertjax.main`
  with its train / eval / test files in the bucket and --workdir=gs://.../run."""
  import gcsfs  # pylint: disable=g-import-not-at-top
  name = f'finetune-{uuid.uuid4().hex[:8]}'
  gcsfs.GCSFileSystem(token='anon').mkdir(name)
  bucket = f'gs://{name}'
  tmp = tmp_path_factory.mktemp('remote_finetune')
  train, evaluation, test = _rows(48, 0), _rows(16, 1), _rows(6, 2)
  files.write_atomically(f'{bucket}/data/train.csv', 'review,sentiment\n' + ''.join(
      f'{t},{y}\n' for t, y in train))
  files.write_atomically(f'{bucket}/data/eval.jsonl', ''.join(
      json.dumps({'review': t, 'sentiment': y}) + '\n' for t, y in evaluation))
  files.write_atomically(f'{bucket}/data/test.tsv', 'review\n' + ''.join(
      f'{t}\n' for t, _ in test))
  env = pretrain_runs.environment(1, tmp / 'jax_cache')
  # cwd: a scratch folder, so that a path mangled to `gs:/...` and written locally shows there.
  # --workdir=gs://.../run/: the slash a shell's completion leaves (said without it).
  trained = _run(['bertjax.main', *_finetune_flags(bucket, **{'checkpoint.every_steps': 1000}
                                                   )[:-1], f'--workdir={bucket}/run/'],
                 env, tmp, 'fine-tuning')
  (tmp / 'fine-tuning.out').write_text(trained.stdout)
  return bucket, tmp, env, [t for t, _ in test]


def test_fine_tuning_reads_and_writes_the_bucket(bucket_run):
  bucket, tmp, _, _ = bucket_run
  run = f'{bucket}/run'
  saved = json.loads(files.read_text(f'{run}/config.json'))
  assert saved['kind'] == 'classification' and saved['labels'] == list(LABELS)
  assert saved['data']['train_file'] == f'{bucket}/data/train.csv'  # Kept as given.
  assert len(saved['data']['vocab_sha256']) == 64
  assert files.isdir(f'{run}/checkpoints')
  results = json.loads(files.read_text(f'{run}/eval_results.json'))
  assert 0 <= results['accuracy'] <= 1
  evaluated = files.glob(f'{run}/predictions/step_*/validation_predictions.jsonl')
  assert evaluated, files.walk_files(run)
  rows = [json.loads(line) for line in files.read_text(evaluated[-1]).splitlines()]
  assert len(rows) == 16 and all(r['label'] in LABELS for r in rows)
  assert not (tmp / 'gs:').exists()  # Nothing written to a mangled local `gs:/...` path.
  # --workdir's trailing slash was echoed: `TensorBoard gs://b/run/`.
  summary = (tmp / 'fine-tuning.out').read_text().splitlines()[-1]
  assert summary.endswith(f'checkpoints {run}/checkpoints (step 6), TensorBoard {run}'), summary
  assert f'eval results {run}/eval_results.json, predictions {run}/predictions/step_6' in summary


def test_eval_and_predict_modes_write_into_the_bucket(bucket_run):
  """mode=predict (the test file's predictions) by the command line; mode=eval (results and
  predictions of the eval file) in this process: both read the run from the bucket."""
  bucket, tmp, env, texts = bucket_run
  _run(['bertjax.main', *_finetune_flags(bucket, mode='predict')], env, tmp, 'mode=predict')
  written = files.glob(f'{bucket}/run/predictions/predict_step_*/test_predictions.jsonl')
  assert len(written) == 1, files.walk_files(f'{bucket}/run/predictions')
  rows = [json.loads(line) for line in files.read_text(written[0]).splitlines()]
  assert len(rows) == len(texts) and all(r['label'] in LABELS and 'gold' not in r for r in rows)

  config = finetune_config.get_config('task=classification,size=tiny,seq=16,batch=16')
  config.unlock()
  for field, value in (('eval_file', 'eval.jsonl'), ('test_file', 'test.tsv'),
                       ('train_file', 'train.csv')):
    config.data[field] = f'{bucket}/data/{value}'
  config.data.text_fields, config.data.label_field = 'review', 'sentiment'
  config.eval_batch_size, config.mode = 16, 'eval'
  paths = job.run(config, f'{bucket}/run')
  assert paths and all(p.startswith(f'{bucket}/run/predictions/eval_step_') for p in paths)
  results = json.loads(files.read_text(f'{files.parent(paths[0])}/validation_results.json'))
  assert 0 <= results['accuracy'] <= 1


@pytest.fixture(scope='module')
def local_copy(bucket_run):
  """(the bucket's run copied to a local folder, the local file of the test texts)."""
  bucket, tmp, _, texts = bucket_run
  files.copy_tree(f'{bucket}/run', str(tmp / 'run_copy'))
  (tmp / 'in.txt').write_text('\n'.join(texts) + '\n', encoding='utf-8')
  files.copy(str(tmp / 'in.txt'), f'{bucket}/in.txt')
  return tmp / 'run_copy', tmp / 'in.txt'


def test_predict_from_and_to_the_bucket_equals_the_run_copied_locally(bucket_run, local_copy):
  bucket, tmp, env, texts = bucket_run
  _run(['bertjax.predict', f'--workdir={bucket}/run', f'--input_file={bucket}/in.txt',
        f'--output_file={bucket}/out/predictions.jsonl'], env, tmp, 'predict')
  remote = [json.loads(line) for line in
            files.read_text(f'{bucket}/out/predictions.jsonl').splitlines()]
  local = predict.Predictor.from_workdir(local_copy[0]).predict(texts)
  assert [r['label'] for r in remote] == [r['label'] for r in local]
  for got, want in zip(remote, local, strict=True):
    assert got['probabilities'] == pytest.approx(want['probabilities'], abs=1e-5)


def test_gcsfs_alias_gcs_url_reads_the_same_run(bucket_run, local_copy):
  """gcs://bucket/run (gcsfs' alias, which bertjax.files takes) reaches orbax as gs://: its
  clients know no gcs://, and the checkpoints would be reported unreadable."""
  from bertjax.training import checkpoint  # pylint: disable=g-import-not-at-top
  bucket, _, _, texts = bucket_run
  alias = bucket.replace('gs://', 'gcs://', 1)
  assert checkpoint.checkpoint_dir(f'{alias}/run/') == f'{bucket}/run/checkpoints'
  got = predict.Predictor.from_workdir(f'{alias}/run').predict(texts)
  want = predict.Predictor.from_workdir(local_copy[0]).predict(texts)
  for a, b in zip(got, want, strict=True):
    assert a['probabilities'] == pytest.approx(b['probabilities'], abs=1e-5)


def test_extract_features_from_and_to_the_bucket_equals_local(bucket_run, local_copy):
  bucket, tmp, env, texts = bucket_run
  _run(['bertjax.extract_features', f'--init={bucket}/run', f'--input_file={bucket}/in.txt',
        f'--output_file={bucket}/features/out.jsonl', '--layers=-1,0', '--max_seq_length=16'],
       env, tmp, 'extract_features')
  remote = files.read_text(f'{bucket}/features/out.jsonl')
  assert not [n for n in files.listdir(f'{bucket}/features') if n != 'out.jsonl']
  extract_features.run(str(local_copy[0]), str(local_copy[1]), str(tmp / 'features.jsonl'),
                       layers=(-1, 0), max_seq_length=16)
  local = (tmp / 'features.jsonl').read_text(encoding='utf-8').splitlines()
  assert len(local) == len(texts)
  for got, want in zip(remote.splitlines(), local, strict=True):
    got, want = json.loads(got), json.loads(want)
    assert [f['token'] for f in got['features']] == [f['token'] for f in want['features']]
    np.testing.assert_allclose([x['values'] for f in got['features'] for x in f['layers']],
                               [x['values'] for f in want['features'] for x in f['layers']],
                               atol=1e-5)


def test_embed_reads_and_writes_the_bucket(gcs_bucket, minilm_dir):
  sentences = ['The weather is lovely today.', "It's so sunny outside!"]
  files.write_atomically(f'{gcs_bucket}/sentences.txt', '\n'.join(sentences) + '\n')
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    config.input_file, config.max_seq_length = f'{gcs_bucket}/sentences.txt', 16
  vectors = embed.run(config, f'{gcs_bucket}/embed')
  assert vectors.shape == (2, 384)
  saved = np.load(io.BytesIO(files.read_bytes(f'{gcs_bucket}/embed/embeddings.npy')))
  np.testing.assert_array_equal(saved, vectors)
  similarity = np.loadtxt(io.StringIO(files.read_text(f'{gcs_bucket}/embed/similarity.txt')))
  np.testing.assert_allclose(similarity, vectors @ vectors.T, atol=1e-4)


def test_a_missing_task_file_in_the_bucket_is_named_as_given(bucket_run):
  bucket, tmp, env, _ = bucket_run
  missing = f'{bucket}/data/no-such-train.csv'
  proc = _run(['bertjax.main',
               f'--config={REPO}/configs/finetune.py:task=classification,size=tiny,seq=16',
               f'--config.data.train_file={missing}', '--config.data.text_fields=review',
               '--config.data.label_field=sentiment', f'--workdir={tmp / "never"}'], env, tmp,
              'fine-tuning on a missing file', expect_ok=False)
  assert proc.returncode != 0 and missing in proc.stderr, proc.stderr[-3000:]
  assert bucket.replace('gs://', 'gs:/') not in proc.stderr.replace(bucket, '')


def test_readers_name_the_url_of_a_missing_or_non_utf8_file(gcs_bucket):
  data = f'{gcs_bucket}/data'
  contents = {'bad.csv': b'review,sentiment\ncaf\xe9,warm\n',  # Latin-1, not UTF-8.
              'sst2/train.tsv': b'sentence\tlabel\ncaf\xe9\t1\n',
              'conll.txt': b'caf\xe9 O\n', 'wordnet/data.noun': b'caf\xe9\n'}
  for name, content in contents.items():
    files.write_atomically(f'{data}/{name}', content)
  with pytest.raises(ValueError, match=f'{data}/bad.csv is not UTF-8 text'):
    user_data.read_texts(f'{data}/bad.csv', fields=('review',), label_field='sentiment')
  with pytest.raises(FileNotFoundError, match=f'{data}/none.csv does not exist'):
    user_data.read_texts(f'{data}/none.csv', fields=('review',), label_field='sentiment')
  with pytest.raises(ValueError, match=f'{data}/sst2/train.tsv is not UTF-8 text'):
    glue_readers.read_examples('sst2', f'{data}/sst2', 'train')
  with pytest.raises(FileNotFoundError, match=f'{data}/sst2/dev.tsv does not exist'):
    glue_readers.read_examples('sst2', f'{data}/sst2', 'validation')
  with pytest.raises(ValueError, match=f'{data}/conll.txt is not utf-8-sig text'):
    conll.read_conll(f'{data}/conll.txt')
  with pytest.raises(FileNotFoundError, match=f'CoNLL file {data}/none.txt does not exist'):
    conll.read_conll(f'{data}/none.txt')
  with pytest.raises(FileNotFoundError, match=f"SQuAD file '{data}/dev-v1.1.json' does not"):
    squad.read_squad(f'{data}/dev-v1.1.json', version_2_with_negative=False, is_training=False)
  with pytest.raises(ValueError, match=f'{data}/wordnet/data.noun:1: not UTF-8'):
    wordnet_glosses.read_wordnet(f'{data}/wordnet')
  with pytest.raises(FileNotFoundError, match=f'BBC News folder {data}/bbc does not exist'):
    bbc_news.read_bbc(f'{data}/bbc')


def test_a_missing_bucket_is_named_by_the_readers(gcs_emulator):  # pylint: disable=unused-argument
  """A typo in the bucket's name is said to be one, not reported as a missing file."""
  from bertjax.text import tokenizer  # pylint: disable=g-import-not-at-top
  data = 'gs://no-such-bucket-xyz/data'
  bucket = r'the bucket gs://no-such-bucket-xyz does not exist or these credentials cannot see'
  readers = [
      lambda: user_data.read_texts(f'{data}/t.csv', fields=('review',), label_field='sentiment'),
      lambda: glue_readers.read_examples('sst2', f'{data}/sst2', 'train'),
      lambda: conll.read_conll(f'{data}/eng.train'),
      lambda: squad.read_squad(f'{data}/dev-v1.1.json', version_2_with_negative=False,
                               is_training=False),
      lambda: tokenizer.load_vocab(f'{data}/vocab.txt'),
      lambda: text_files.read_text_lines(f'{data}/in.txt'),
      lambda: predict.Predictor.from_workdir(f'{data}/run')]
  for read in readers:
    with pytest.raises(FileNotFoundError, match=f'^{data}/.*: {bucket}'):
      read()


def test_user_files_may_be_globs_and_comma_lists_in_a_bucket_or_locally(gcs_bucket, tmp_path):
  rows = _rows(12, 3)
  for root in (gcs_bucket, str(tmp_path)):
    for shard in range(3):  # Three CSV shards and one JSON lines file: 4 rows each.
      part = rows[4 * shard:4 * shard + 4]
      files.write_atomically(files.join(root, 'shards', f'train-{shard}.csv'),
                             'review,sentiment\n' + ''.join(f'{t},{y}\n' for t, y in part))
    files.write_atomically(files.join(root, 'eval.jsonl'), ''.join(
        json.dumps({'review': t, 'sentiment': y}) + '\n' for t, y in rows[:4]))
    config = finetune_config.get_config('task=classification,size=tiny')
    config.unlock()
    config.data.train_file = (f'{files.join(root, "shards", "train-[12].csv")},'
                              f'{files.join(root, "shards", "train-0.csv")}')
    config.data.eval_file = files.join(root, 'eval.jsonl')
    config.data.text_fields, config.data.label_field = 'review', 'sentiment'
    task = registry.get_task('classification', config.data)
    train, _ = task.read('train')
    assert [e.text_a for e in train] == [t for t, _ in rows[4:] + rows[:4]]
    assert len(task.read('validation')[0]) == 4
    config.data.train_file = files.join(root, 'shards', 'nothing-*.csv')
    with pytest.raises(FileNotFoundError, match=re.escape(f'{config.data.train_file} matches no')):
      registry.get_task('classification', config.data)

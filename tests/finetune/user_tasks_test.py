"""Fine-tuning on a user's own files, end to end with a tiny model: train, eval, predict on the
test file, and bertjax.predict on raw text giving what eval gave the same examples."""

import json
import os
import pathlib
import subprocess
import sys
import zipfile

import finetune_runs
import numpy as np
import pytest

from bertjax import export
from bertjax import predict
from bertjax import predict_inputs
from bertjax.finetune import job
from bertjax.pretraining_data import embedded
from configs import finetune as finetune_config

REPO = pathlib.Path(__file__).resolve().parents[2]
# The user's files, learning and predict agreeing with eval are the subject of the training
# tests: one device (tests/conftest.py); sharding has its own tests, bertjax.predict runs on 8.
ONE_DEVICE = pytest.mark.usefixtures('one_device')


def _config(task, seq=24, epochs=10.0, **data):
  config = finetune_config.get_config(f'task={task},size=tiny,seq={seq},batch=16,lr=3e-3,'
                                      f'epochs={epochs}')
  config.unlock()
  config.model.vocab_size = embedded.VOCAB_SIZE
  config.eval_batch_size = 16
  config.log_every_steps = 10
  config.checkpoint.every_steps = 1000
  for key, value in data.items():
    config.data[key] = str(value) if isinstance(value, pathlib.Path) else value
  return config


def _read_jsonl(path):
  return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def _last_predictions(workdir, name):
  steps = sorted((pathlib.Path(workdir) / 'predictions').glob('step_*'),
                 key=lambda p: int(p.name.split('_')[1]))
  return steps[-1] / name


@ONE_DEVICE
def test_csv_classification_labels_saved_and_predict_agrees_with_eval(tmp_path):
  rng = np.random.default_rng(0)
  labels = rng.choice(['warm', 'cold', 'grim'], 120)
  words = {'warm': finetune_runs.POSITIVE, 'cold': finetune_runs.NEGATIVE}
  rows = [('grim tidings' if y == 'grim' else ' '.join(rng.choice(words[y], 4)), y)
          for y in labels]
  train = tmp_path / 'train.csv'
  train.write_text('review,sentiment\n' + ''.join(f'"{t}",{y}\n' for t, y in rows[:90]))
  (tmp_path / 'eval.tsv').write_text('review\tsentiment\n' + ''.join(
      f'{t}\t{y}\n' for t, y in rows[90:]))
  workdir = tmp_path / 'run'
  result = job.train_and_evaluate(_config('classification', train_file=train,
                                          eval_file=tmp_path / 'eval.tsv', text_fields='review',
                                          label_field='sentiment'), str(workdir))
  assert result['accuracy'] > 0.6, result
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['kind'] == 'classification' and saved['labels'] == ['cold', 'grim', 'warm']

  evaluated = _read_jsonl(_last_predictions(workdir, 'validation_predictions.jsonl'))
  texts = [t for t, _ in rows[90:]]
  predicted = predict.Predictor.from_workdir(workdir, batch_size=8).predict(texts)
  assert [p['label'] for p in predicted] == [e['label'] for e in evaluated]
  assert len({p['label'] for p in predicted}) >= 2
  for p, e in zip(predicted, evaluated, strict=True):
    assert p['probabilities'] == pytest.approx(e['probabilities'], abs=1e-4)

  # The command line, raw text and JSON lines on standard input.
  stdin = f'{texts[0]}\n{json.dumps({"review": texts[1]})}\n'
  out = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}'],
                       input=stdin, capture_output=True, text=True, cwd=REPO, check=False,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert out.returncode == 0, out.stderr[-2000:]
  assert [json.loads(line)['label'] for line in out.stdout.splitlines()] == [
      e['label'] for e in evaluated[:2]]

  # Exported, the labels read from the data are transformers' id2label.
  export.export(str(workdir), 'hf', tmp_path / 'hf')
  hf_config = json.loads((tmp_path / 'hf' / 'config.json').read_text())
  assert hf_config['id2label'] == {'0': 'cold', '1': 'grim', '2': 'warm'}

  # The same workdir with a training file whose label set changed: refused, nothing rewritten.
  train.write_text('review,sentiment\n' + ''.join(f'"{t}",{"hot" if y == "warm" else y}\n'
                                                  for t, y in rows[:90]))
  with pytest.raises(ValueError, match=r"fine-tuned with labels \['cold', 'grim', 'warm'\], but "
                                       r"the training data now has \['cold', 'grim', 'hot'\]"):
    job.train_and_evaluate(_config('classification', train_file=train,
                                   eval_file=tmp_path / 'eval.tsv', text_fields='review',
                                   label_field='sentiment'), str(workdir))
  assert json.loads((workdir / 'config.json').read_text())['labels'] == saved['labels']

  # Its config.json's labels reordered by hand: eval and predict would give every example
  # another label; the checkpoint's own record of its head's order refuses them.
  edited = json.loads((workdir / 'config.json').read_text())
  edited['labels'] = ['warm', 'grim', 'cold']
  (workdir / 'config.json').write_text(json.dumps(edited))
  for mode in ('eval', 'predict'):
    config = _config('classification', eval_file=tmp_path / 'eval.tsv',
                     test_file=tmp_path / 'eval.tsv', text_fields='review',
                     label_field='sentiment')
    config.mode = mode
    with pytest.raises(ValueError, match=r"was saved with the labels \['cold', 'grim', 'warm'\] "
                       r"\(its head's order\), but the run's config.json lists \['warm', 'grim', "
                       r"'cold'\]"):
      job.run(config, str(workdir))


@ONE_DEVICE
def test_tagging_iobes_jsonl_and_predict_agrees_with_eval(tmp_path):
  rng = np.random.default_rng(1)

  def sentence():
    words = list(rng.choice(finetune_runs.FILLER, 5))
    tags = ['O'] * 5
    at = int(rng.integers(0, 4))
    if rng.random() < 0.5:
      words[at], tags[at] = str(rng.choice(finetune_runs.POSITIVE)), 'S-GOOD'
    else:
      words[at:at + 2] = ['foul', str(rng.choice(finetune_runs.NEGATIVE))]
      tags[at:at + 2] = ['B-BAD', 'E-BAD']
    return {'tokens': words, 'tags': tags}

  rows = [sentence() for _ in range(110)]
  finetune_runs_dir = tmp_path
  train = finetune_runs_dir / 'train.jsonl'
  train.write_text(''.join(json.dumps(r) + '\n' for r in rows[:90]))
  (tmp_path / 'eval.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows[90:]))
  workdir = tmp_path / 'run'
  result = job.train_and_evaluate(_config('tagging', seq=16, epochs=8.0, train_file=train,
                                          eval_file=tmp_path / 'eval.jsonl'), str(workdir))
  assert result['f1'] > 0.5, result  # Entity F1, IOBES chunks as conlleval counts them.
  evaluated = [line.split() for line in _last_predictions(
      workdir, 'validation_predictions.txt').read_text().splitlines()]
  eval_tags, sentence_tags = [], []
  for fields in evaluated + [[]]:
    if fields:
      sentence_tags.append(fields[2])
    elif sentence_tags:
      eval_tags.append(sentence_tags)
      sentence_tags = []
  predicted = predict.Predictor.from_workdir(workdir).predict(
      [' '.join(r['tokens']) for r in rows[90:]])
  assert [p['tags'] for p in predicted] == eval_tags
  assert predicted[0]['tokens'] == rows[90]['tokens']


SWAG_HEADER = ('video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,'
               'ending3,label\n')


def _swag_rows(rng, n):
  """SWAG's exact columns: the true ending repeats sent1's key word, the others do not."""
  lines = []
  for i in range(n):
    key = str(rng.choice(finetune_runs.POSITIVE + finetune_runs.NEGATIVE))
    endings = [' '.join(rng.choice(finetune_runs.FILLER, 3)) for _ in range(4)]
    label = int(rng.integers(0, 4))
    endings[label] = f'{key} {endings[label]}'
    sent1 = f'the {key} king doth speak.'
    lines.append(f'lsmdc{i},{i},"{sent1} The lord","{sent1}",The lord,gold,'
                 + ','.join(f'"{e}."' for e in endings) + f',{label}\n')
  return lines


@ONE_DEVICE
def test_swag_csv_train_eval_predict_and_raw_text(tmp_path):
  rng = np.random.default_rng(2)
  lines = _swag_rows(rng, 100)
  (tmp_path / 'train.csv').write_text(SWAG_HEADER + ''.join(lines[:80]))
  (tmp_path / 'val.csv').write_text(SWAG_HEADER + ''.join(lines[80:]))
  # SWAG's test file: the same columns without the label.
  (tmp_path / 'test.csv').write_text(SWAG_HEADER.replace(',label', '') + ''.join(
      line.rsplit(',', 1)[0] + '\n' for line in lines[80:]))
  workdir = tmp_path / 'run'
  config = _config('swag', seq=24, epochs=10.0, train_file=tmp_path / 'train.csv',
                   eval_file=tmp_path / 'val.csv', test_file=tmp_path / 'test.csv')
  result = job.train_and_evaluate(config, str(workdir))
  assert result['accuracy'] > 0.4, result  # Chance: 0.25.
  evaluated = _read_jsonl(_last_predictions(workdir, 'validation_predictions.jsonl'))
  assert set(evaluated[0]) == {'guid', 'choice', 'probabilities', 'gold'}

  config.unlock()
  config.mode = 'predict'
  written = job.run_predict(config, str(workdir))
  tested = _read_jsonl(written[0])
  assert [t['choice'] for t in tested] == [e['choice'] for e in evaluated]
  assert 'gold' not in tested[0]

  import csv  # pylint: disable=g-import-not-at-top
  records = list(csv.DictReader((tmp_path / 'val.csv').open()))
  predictor = predict.Predictor.from_workdir(workdir)
  as_json = predictor.predict([{k: r[k] for k in r if k != 'label'} for r in records])
  as_text = predictor.predict([' ||| '.join([r['sent1']] + [f'{r["sent2"]} {r[f"ending{i}"]}'
                                                           for i in range(4)])
                               for r in records])
  assert [p['choice'] for p in as_json] == [e['choice'] for e in evaluated]
  assert [p['choice'] for p in as_text] == [e['choice'] for e in evaluated]
  with pytest.raises(ValueError, match='this model chooses among 4'):
    predictor.predict(['a ||| b ||| c'])


@ONE_DEVICE
def test_span_on_squad_json_files_and_predict_agrees_with_eval(tmp_path, allennlp_wheel):
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    (tmp_path / 'squad.json').write_bytes(wheel.read('allennlp/tests/fixtures/data/squad.json'))
  workdir = tmp_path / 'run'
  config = _config('span', seq=96, epochs=2.0, train_file=tmp_path / 'squad.json',
                   eval_file=tmp_path / 'squad.json')
  config.data.doc_stride = 48
  config.data.max_query_length = 24
  result = job.train_and_evaluate(config, str(workdir))
  assert {'exact_match', 'f1'} <= set(result)
  evaluated = json.loads(_last_predictions(workdir, 'predictions.json').read_text())
  dataset = json.loads((tmp_path / 'squad.json').read_text())['data']
  questions = [(qa['id'], qa['question'], p['context']) for article in dataset
               for p in article['paragraphs'] for qa in p['qas']]
  predicted = predict.Predictor.from_workdir(workdir).predict(
      [{'question': q, 'context': c} for _, q, c in questions])
  assert [p['answer'] for p in predicted] == [evaluated[qid] for qid, _, _ in questions]
  assert all(0 < p['score'] <= 1 for p in predicted)


@ONE_DEVICE
def test_a_best_metric_of_squad_v2_on_v1_files_is_refused_before_any_step(tmp_path,
                                                                          allennlp_wheel):
  """Hostile pass of session 35, 6: task=span takes either version's names until its files are
  read, and best_f1 (v2.0's) on v1.1 files was refused at the first eval, that eval lost."""
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    (tmp_path / 'squad.json').write_bytes(wheel.read('allennlp/tests/fixtures/data/squad.json'))
  config = _config('span', seq=96, epochs=2.0, train_file=tmp_path / 'squad.json',
                   eval_file=tmp_path / 'squad.json')
  config.data.doc_stride, config.data.max_query_length = 48, 24
  config.checkpoint.best_metric = 'best_f1'
  with pytest.raises(ValueError, match=r"^config.checkpoint.best_metric='best_f1' is not an eval "
                     r'metric of this job; valid: loss, exact_match, f1\.$'):
    job.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run' / 'checkpoints').exists()


def test_predict_refuses_a_pretraining_workdir_and_blank_lines(tmp_path):
  with pytest.raises(FileNotFoundError, match='holds no fine-tuning run'):
    predict.Predictor.from_workdir(tmp_path)
  (tmp_path / 'config.json').write_text('{"model_type": "bert"}')  # Pass T: was the line above.
  with pytest.raises(ValueError, match='is a transformers model, not a fine-tuning run: predict '
                     "reads bertjax's fine-tuning runs"):
    predict.Predictor.from_workdir(tmp_path)
  with pytest.raises(ValueError, match=r'in.txt:2 is empty'):
    predict_inputs.read_inputs(['a', ' ', 'b'], 'in.txt')

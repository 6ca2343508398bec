"""A SentencePiece vocabulary through the whole chain, with a tiny model and few steps.

The embedded corpus -> learn_vocab's SentencePiece model -> create_pretraining_data with it
(static masks; unmasked for dynamic whole-word masking) -> pre-training -> fine-tuning a
classifier and a tagger from that run (the tokenizer comes from its workdir) -> predict on raw
text -> extract_features. The ids are checked against SentencePiece's own, and data or models
of another vocab are refused.
"""

import json
import pathlib
import shutil

import finetune_runs
import numpy as np
import pretrain_runs
import pytest
import sentencepiece
import spm_runs

from bertjax import export
from bertjax import extract_features
from bertjax import predict
from bertjax import pretrain
from bertjax.finetune import job
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import squad_answers
from bertjax.input import input_pipeline
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.pretraining_data import embedded
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import vocab_files
from bertjax.text import vocab_learner

VOCAB, SEQ, PREDICTIONS = spm_runs.VOCAB, spm_runs.SEQ, spm_runs.PREDICTIONS

# The sentence and tagging fine-tunes here are about the SentencePiece chain, not sharding: one
# device (conftest.py); job_test evaluates those kinds on 8. The span and multiple-choice runs,
# and the pre-training runs (whose step the chain compiled), keep the 8 devices.
ONE_DEVICE = pytest.mark.usefixtures('one_device')


@pytest.fixture(scope='module')
def chain(tmp_path_factory):
  spm_model, workdir = spm_runs.shared_pretrained(tmp_path_factory)
  root = workdir.parent
  corpus = root / 'corpus.txt'
  data = {'static': str(root / 'static' / 'train-*-of-*'),
          'unmasked': spm_runs.make_data(root / 'unmasked', corpus, static_masking=False,
                                         spm_model_file=str(spm_model))}
  fields = spm_runs.pretrain_fields(spm_model, data['static'])
  processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
  return root, corpus, spm_model, processor, data, workdir, fields


def _restored_ids(batch):
  """input_ids with the masked positions given back their original ids."""
  ids = batch['input_ids'].copy()
  for row in range(ids.shape[0]):
    chosen = batch['masked_lm_weights'][row] > 0
    ids[row, batch['masked_lm_positions'][row][chosen]] = batch['masked_lm_ids'][row][chosen]
  return ids


def test_pretraining_data_holds_sentencepiece_ids(chain):
  _, corpus, spm_model, processor, data, workdir, _ = chain
  # SentencePiece's own ids of every corpus line (lower-cased, as the uncased model reads it).
  stream = ' ' + ' '.join(' '.join(map(str, processor.encode(line.lower())))
                          for line in corpus.read_text().splitlines() if line) + ' '
  batch = next(input_pipeline.pretrain_dataset(
      data['static'], global_batch_size=8, max_seq_length=SEQ,
      max_predictions_per_seq=PREDICTIONS, seed=0, shuffle=False).as_numpy_iterator())
  cls_id, sep_id = processor.piece_to_id('[CLS]'), processor.piece_to_id('[SEP]')
  for row in _restored_ids(batch):
    assert row[0] == cls_id
    first_sep = int(np.flatnonzero(row == sep_id)[0])
    segment_a = row[1:first_sep]
    # Segment A is whole sentences of one document: a run of the corpus's ids.
    assert f' {" ".join(map(str, segment_a))} ' in stream
  # The run keeps its SentencePiece model as its vocab; a reader gets a SentencePiece tokenizer.
  kept = workdir / 'vocab.txt'
  assert kept.read_bytes() == spm_model.read_bytes() and vocab_files.is_sentencepiece(kept)
  tok = vocab_files.for_model(kept, do_lower_case=True)
  assert isinstance(tok, sentencepiece_tokenizer.SentencePieceTokenizer)
  with pytest.raises(ValueError, match='uncased vocab .* pass do_lower_case=True'):
    vocab_files.for_model(kept, do_lower_case=False)


def test_dynamic_whole_word_masks_never_split_a_word(chain):
  root, _, spm_model, processor, data, _, fields = chain
  config = pretrain_runs.config(2, fields | {'data.train_files': data['unmasked'],
                                             'data.eval_files': data['unmasked'],
                                             'data.dynamic_masking': True,
                                             'data.masking': 'whole_word'})
  plan = [pretrain.check_data(config, phase, str(spm_model), '')
          for phase in pretrain.phases(config, str(root / 'dynamic'))]
  masking = pretrain.masking_config(config, str(spm_model))
  batches = input_pipeline.pretrain_dataset(
      plan[0].train_files, global_batch_size=16, max_seq_length=SEQ,
      max_predictions_per_seq=PREDICTIONS, seed=3, masking=masking)
  pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
  multi_piece_words = 0
  for batch in batches.take(4).as_numpy_iterator():
    original = _restored_ids(batch)
    for row in range(original.shape[0]):
      length = int(batch['input_mask'][row].sum())
      chosen = set(batch['masked_lm_positions'][row][batch['masked_lm_weights'][row] > 0])
      assert chosen
      # Words by SentencePiece's own marks: a piece without '▁' continues the word before,
      # unless that is a special token (a segment cut at its front starts mid-word).
      special = [pieces[i].startswith(('[', '<')) for i in original[row, :length]]
      starts = [p for p in range(length) if special[p] or (p and special[p - 1])
                or pieces[original[row, p]].startswith('▁')]
      for start, end in zip(starts, starts[1:] + [length], strict=True):
        masked = chosen & set(range(start, end))
        assert not masked or len(masked) == end - start, (row, start, end, masked)
        multi_piece_words += bool(masked) and end - start > 1
  assert multi_piece_words > 0  # Words of several pieces were masked, whole.
  # The job itself trains on these batches.
  metrics = pretrain.train_and_evaluate(config, str(root / 'dynamic'))
  assert np.isfinite(metrics['mlm_loss'])


def test_data_of_another_vocab_is_refused(chain):
  root, corpus, spm_model, _, data, _, fields = chain
  wordpiece = spm_runs.make_data(root / 'wordpiece', corpus, vocab_file=str(embedded.vocab_path()))
  config = pretrain_runs.config(2, fields | {'data.train_files': wordpiece,
                                             'data.eval_files': ''})
  with pytest.raises(ValueError, match=r'made with a 8192-entry vocab .*vocab\.txt'):
    pretrain.train_and_evaluate(config, str(root / 'refused1'))
  other = root / 'other.model'  # Same size, another corpus: other ids.
  vocab_learner.learn_sentencepiece(str(embedded.corpus_path('eval')), other, VOCAB)
  config = pretrain_runs.config(2, fields | {'data.vocab_file': str(other)})
  # The data's SentencePiece model is named (the report records it as spm_model_file).
  with pytest.raises(ValueError, match=r'made with another vocab \(.*spm\.model, sha256 .* than '
                     r'data.vocab_file=.*other\.model .*the ids would mean other tokens'):
    pretrain.train_and_evaluate(config, str(root / 'refused2'))


def test_a_vocab_other_than_the_runs_is_refused_by_every_reader_of_it(chain, tmp_path):
  """A pre-training run's own copy of its vocab (vocab.txt) is what another vocab is
  told from, by export, extract_features, fine-tuning and continued pre-training from it."""
  root, corpus, spm_model, _, data, workdir, fields = chain
  wordpiece = root / 'wordpiece-1024.txt'  # The run's size, another kind: only the ids differ.
  wordpiece.write_text(''.join(w + '\n' for w in list(
      vocab_files.load_vocab(embedded.vocab_path()))[:spm_runs.VOCAB]))
  rows = tmp_path / 'train.tsv'
  rows.write_text('text\tlabel\n' + ''.join(f'a warm day {n}\twarm\na cold day {n}\tcold\n'
                                            for n in range(8)))  # Distinct: some held out.
  other = root / 'other-vocab.model'  # Same size, another corpus: other ids.
  vocab_learner.learn_sentencepiece(str(embedded.corpus_path('eval')), other, spm_runs.VOCAB)
  for vocab, why in ((wordpiece, 'a SentencePiece model vs a WordPiece vocab'),
                     (other, 'two different SentencePiece models')):
    said = rf'is not the vocab {workdir} was trained with \(.*vocab\.txt: {why}\)'
    with pytest.raises(ValueError, match='^vocab_file=.*' + said):  # export()'s keyword.
      export.export(str(workdir), 'hf', str(tmp_path / 'hf'), vocab_file=str(vocab))
    with pytest.raises(ValueError, match='--vocab_file=.*' + said):
      sources.load(str(workdir), vocab_file=str(vocab))
    config = spm_runs.finetune_config_for('classification', workdir, train_file=rows,
                                          vocab_file=vocab)
    with pytest.raises(ValueError, match='config.data.vocab_file=.*' + said):
      job.train_and_evaluate(config, str(tmp_path / 'finetune'))
  # Continued pre-training on data made with the other model, named as the data's vocab.
  made = spm_runs.make_data(tmp_path / 'other', corpus, spm_model_file=str(other))
  config = pretrain_runs.config(2, fields | {'data.train_files': made, 'data.eval_files': '',
                                             'data.vocab_file': str(other),
                                             'init_from': str(workdir)})
  with pytest.raises(ValueError, match=rf'data.vocab_file=.*other-vocab.model is not the vocab '
                     rf'{workdir} was trained with'):
    pretrain.train_and_evaluate(config, str(tmp_path / 'continued'))
  # Its own vocab, wherever it lies, is read as before.
  assert sources.load(str(workdir), vocab_file=str(spm_model)).vocab_file == str(spm_model)
  assert not (tmp_path / 'hf').exists() and not (tmp_path / 'finetune' / 'checkpoints').exists()


def _last_predictions(workdir, name):
  steps = sorted((workdir / 'predictions').glob('step_*'), key=lambda p: int(p.name[5:]))
  return steps[-1] / name


def _reads_back(workdir, spm_model, **predictor_args):
  """(a Predictor of the fine-tuned run, its last eval's predictions), once the run is checked
  to keep the SentencePiece model as its vocab and its predictor to tokenize with it."""
  saved = json.loads((workdir / 'config.json').read_text())
  assert pathlib.Path(saved['data']['vocab_file']).read_bytes() == spm_model.read_bytes()
  predictor = predict.Predictor.from_workdir(workdir, **predictor_args)
  assert isinstance(predictor.tokenizer, sentencepiece_tokenizer.SentencePieceTokenizer)
  evaluated = [json.loads(line) for line in _last_predictions(
      workdir, 'validation_predictions.jsonl').read_text().splitlines()]
  return predictor, evaluated


@ONE_DEVICE
def test_finetune_predict_and_features_with_the_pretraining_tokenizer(chain, tmp_path):
  _, _, spm_model, processor, _, pretrained, _ = chain
  rng = np.random.default_rng(0)
  labels = rng.choice(['warm', 'cold'], 100)
  words = {'warm': finetune_runs.POSITIVE, 'cold': finetune_runs.NEGATIVE}
  rows = [(' '.join(rng.choice(words[y] + finetune_runs.FILLER, 5)), y) for y in labels]
  for name, part in (('train.tsv', rows[:80]), ('eval.tsv', rows[80:])):
    (tmp_path / name).write_text('text\tlabel\n' + ''.join(f'{t}\t{y}\n' for t, y in part))
  workdir = tmp_path / 'classify'
  job.train_and_evaluate(spm_runs.finetune_config_for(
      'classification', pretrained, train_file=tmp_path / 'train.tsv',
      eval_file=tmp_path / 'eval.tsv'), str(workdir))
  # No data.vocab_file: the run took the pre-training run's SentencePiece model.
  predictor, evaluated = _reads_back(workdir, spm_model, batch_size=8)
  text = rows[80][0]
  assert predictor.tokenizer.encode(text.upper()) == processor.encode(text)
  predicted = predictor.predict([t for t, _ in rows[80:]])
  assert [p['label'] for p in predicted] == [e['label'] for e in evaluated]

  # Regression on the same texts: the share of warm words, read back as numbers.
  scores = [sum(w in finetune_runs.POSITIVE for w in t.split()) / 5 for t, _ in rows]
  for name, part in (('train_r.tsv', slice(0, 80)), ('eval_r.tsv', slice(80, None))):
    (tmp_path / name).write_text('text\tlabel\n' + ''.join(
        f'{t}\t{s}\n' for (t, _), s in zip(rows[part], scores[part], strict=True)))
  regressor = tmp_path / 'regress'
  job.train_and_evaluate(spm_runs.finetune_config_for(
      'regression', pretrained, train_file=tmp_path / 'train_r.tsv',
      eval_file=tmp_path / 'eval_r.tsv'), str(regressor))
  predictor, evaluated = _reads_back(regressor, spm_model)
  predicted = [p['value'] for p in predictor.predict([t for t, _ in rows[80:]])]
  np.testing.assert_allclose(predicted, [e['value'] for e in evaluated], atol=1e-5)
  assert np.corrcoef(predicted, scores[80:])[0, 1] > 0.5  # It learned the warm words.

  # Tagging, from the same pre-training run.
  def sentence():
    tokens = list(rng.choice(finetune_runs.FILLER, 5))
    at = int(rng.integers(0, 5))
    tokens[at] = str(rng.choice(finetune_runs.POSITIVE))
    return {'tokens': tokens, 'tags': ['B-GOOD' if i == at else 'O' for i in range(5)]}

  tagged = [sentence() for _ in range(100)]
  for name, part in (('train.jsonl', tagged[:80]), ('eval.jsonl', tagged[80:])):
    (tmp_path / name).write_text(''.join(json.dumps(r) + '\n' for r in part))
  tagger = tmp_path / 'tag'
  job.train_and_evaluate(spm_runs.finetune_config_for(
      'tagging', pretrained, train_file=tmp_path / 'train.jsonl',
      eval_file=tmp_path / 'eval.jsonl'), str(tagger))
  evaluated = [line.split()[2] for line in _last_predictions(
      tagger, 'validation_predictions.txt').read_text().splitlines() if line.strip()]
  predicted = predict.Predictor.from_workdir(tagger).predict(
      [' '.join(r['tokens']) for r in tagged[80:]])
  assert [t for p in predicted for t in p['tags']] == evaluated

  # Features of raw text from the pre-training run, in SentencePiece's pieces.
  lines = ['Thou art more lovely', 'In the beginning God created the heaven']
  (tmp_path / 'in.txt').write_text('\n'.join(lines) + '\n')
  extract_features.run(str(pretrained), str(tmp_path / 'in.txt'), str(tmp_path / 'out.jsonl'),
                       layers=(-1,), max_seq_length=16, batch_size=2)
  out = [json.loads(line) for line in (tmp_path / 'out.jsonl').read_text().splitlines()]
  for line, record in zip(lines, out, strict=True):
    assert [f['token'] for f in record['features']] == [
        '[CLS]', *processor.encode(line.lower(), out_type=str), '[SEP]']
    assert len(record['features'][0]['layers'][0]['values']) == 64


def _squad_file(path, paragraphs):
  """SQuAD v1.1 JSON of [(context, [(question, answer), ...])], each answer at its first place."""
  data = [{'title': 'spm', 'paragraphs': [
      {'context': context, 'qas': [
          {'id': f'q{p}_{q}', 'question': question,
           'answers': [{'text': answer, 'answer_start': context.index(answer)}]}
          for q, (question, answer) in enumerate(qas)]}
      for p, (context, qas) in enumerate(paragraphs)]}]
  path.write_text(json.dumps({'version': '1.1', 'data': data}))
  return path


def test_span_decoding_gives_the_original_text_of_sentencepiece_pieces(chain, tmp_path):
  _, _, spm_model, _, _, _, _ = chain
  tok = vocab_files.for_model(spm_model, do_lower_case=True)
  context = ("Steve Smith's Café, (1895-1943): THE Lord's anointed;  thou art more LOVELY, "
             'and Ａll the heaven.')
  answers = ["Smith's Café", '1895', "THE Lord's", 'anointed', 'thou art more LOVELY', 'Steve',
             'Ａll the heaven']
  path = _squad_file(tmp_path / 'gold.json', [(context, [('which?', a) for a in answers])])
  examples, skips = squad.read_squad(path, False)
  assert not skips
  features, meta = squad.convert_examples(examples, tok, max_seq_length=64, doc_stride=16,
                                          max_query_length=8)
  # The pieces are SentencePiece's: '▁' word starts and pieces that continue a word.
  pieces = {t for m in meta for t in m['tokens']}
  assert '▁the' in pieces and {'e', 've'} <= pieces  # '▁st' 'e' 've': Steve.
  start_NxL = np.zeros(features['input_ids'].shape, np.float32)
  end_NxL = np.zeros_like(start_NxL)
  rows = np.arange(len(meta))
  start_NxL[rows, features['start_position']] = 1.0
  end_NxL[rows, features['end_position']] = 1.0
  predictions, _, _ = squad_answers.postprocess(start_NxL, end_NxL, examples, features, meta)
  # Each gold span reads back as the original's characters (casing, accents, NFKC-changed
  # letters of the same length), not as pieces; '1895' is cut out of '(1895-1943):'.
  assert predictions == {f'q0_{i}': a for i, a in enumerate(answers)}


def _span_rows(rng, n):
  """Paragraphs whose answer is the one 'good' word, capitalised and followed by punctuation."""
  rows = []
  for _ in range(n):
    words = [str(w) for w in rng.choice(finetune_runs.FILLER, 7)]
    key = str(rng.choice(finetune_runs.POSITIVE)).capitalize()
    words.insert(int(rng.integers(1, 7)), f'{key},')
    words[0] = words[0].capitalize()
    rows.append((' '.join(words) + '.', [('Which word is good?', key)]))
  return rows


def test_span_finetunes_and_predicts_raw_text_from_the_sentencepiece_run(chain, tmp_path):
  _, _, _, _, _, pretrained, _ = chain
  rows = _span_rows(np.random.default_rng(1), 100)
  train = _squad_file(tmp_path / 'train.json', rows[:80])
  evaluation = _squad_file(tmp_path / 'eval.json', rows[80:])
  workdir = tmp_path / 'span'
  config = spm_runs.finetune_config_for('span', pretrained, train_file=train, eval_file=evaluation)
  config.data.max_seq_length = 32
  config.data.max_query_length = 8
  config.data.doc_stride = 16
  result = job.train_and_evaluate(config, str(workdir))
  assert {'exact_match', 'f1'} <= set(result)
  evaluated = json.loads(_last_predictions(workdir, 'predictions.json').read_text())
  predictor = predict.Predictor.from_workdir(workdir)
  assert isinstance(predictor.tokenizer, sentencepiece_tokenizer.SentencePieceTokenizer)
  predicted = predictor.predict([{'question': qas[0][0], 'context': context}
                                 for context, qas in rows[80:]])
  answers = [p['answer'] for p in predicted]
  assert answers == [evaluated[f'q{i}_0'] for i in range(20)]
  for answer, (context, _) in zip(answers, rows[80:], strict=True):
    # The original's characters: its capitals and spacing, no '▁' nor lower-cased pieces.
    assert answer and answer in context and '▁' not in answer, (answer, context)
  assert any(any(c.isupper() for c in a) for a in answers)


def test_multiple_choice_from_a_transformers_folder_with_spiece_model(chain, tmp_path):
  _, _, spm_model, processor, _, pretrained, _ = chain
  # The pre-trained run as a transformers folder whose vocab is an ALBERT-style spiece.model.
  # The weights through hf_checkpoint.save, which writes WordPiece tokenizers only: it is
  # handed a stand-in vocab.txt of the same size, then the folder's tokenizer is spiece.model.
  hf_dir = tmp_path / 'hf'
  hf_dir.mkdir()
  bundle = sources.load(str(pretrained))
  stand_in = tmp_path / 'stand_in_vocab.txt'
  specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  stand_in.write_text(''.join(f'{t}\n' for t in specials + [f'w{i}' for i in range(5, VOCAB)]))
  bundle.vocab_file = str(stand_in)
  hf_checkpoint.save(bundle, hf_dir)
  for name in ('vocab.txt', 'tokenizer.json'):
    (hf_dir / name).unlink(missing_ok=True)
  shutil.copy(spm_model, hf_dir / 'spiece.model')
  assert init_from.vocab_file(str(hf_dir)) == str(hf_dir / 'spiece.model')

  rng = np.random.default_rng(2)
  records = []
  for _ in range(100):
    key = str(rng.choice(finetune_runs.POSITIVE + finetune_runs.NEGATIVE))
    choices = [' '.join(rng.choice(finetune_runs.FILLER, 3)) for _ in range(3)]
    label = int(rng.integers(0, 3))
    choices[label] = f'{key} {choices[label]}'
    records.append({'context': f'The {key} king doth speak.', 'choices': choices,
                    'label': label})
  for name, part in (('train.jsonl', records[:80]), ('eval.jsonl', records[80:])):
    (tmp_path / name).write_text(''.join(json.dumps(r) + '\n' for r in part))
  workdir = tmp_path / 'choice'
  job.train_and_evaluate(spm_runs.finetune_config_for(
      'multiple_choice', hf_dir, train_file=tmp_path / 'train.jsonl',
      eval_file=tmp_path / 'eval.jsonl'), str(workdir))
  predictor, evaluated = _reads_back(workdir, spm_model)
  context = records[80]['context']
  assert predictor.tokenizer.encode(context) == processor.encode(context.lower())
  predicted = predictor.predict([' ||| '.join([r['context'], *r['choices']])
                                 for r in records[80:]])
  assert [p['choice'] for p in predicted] == [e['choice'] for e in evaluated]

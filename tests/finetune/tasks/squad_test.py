"""SQuAD tests: the real v1.1 sample through features and back, scored by the official script.

Gold logits (one-hot at each window's labelled start/end) must decode to the gold answers, so
reading, windowing, span tightening, max-context selection and the text projection are all
checked at once; the official v1.1 scorer (from the allennlp wheel, exec'd as a reference)
must agree with bertjax.squad_metrics. v2.0 is built from the same sample by moving questions
to a paragraph that does not answer them.
"""

import collections
import copy
import json
import logging
import math
import pathlib
import zipfile

import numpy as np
import pytest

from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import squad_answers
from bertjax.finetune.tasks import squad_metrics
from bertjax.text import tokenizer
from configs import finetune as finetune_config

SAMPLE = 'allennlp/tests/fixtures/data/squad.json'
SCORER = 'allennlp/tools/squad_eval.py'


@pytest.fixture(scope='module')
def sample(allennlp_wheel):
  """The SQuAD v1.1 sample (2 paragraphs, 5 questions, one with 3 gold answers)."""
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    return json.loads(wheel.read(SAMPLE))


@pytest.fixture(scope='module')
def official(allennlp_wheel):
  """The official SQuAD v1.1 evaluation script's functions, as a namespace."""
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    source = wheel.read(SCORER).decode('utf-8')
  namespace = {'__name__': 'squad_eval_v1_1'}
  exec(compile(source, SCORER, 'exec'), namespace)  # A reference: allennlp is never imported.
  return namespace


@pytest.fixture(scope='module')
def tok(minilm_dir):
  return tokenizer.FullTokenizer(minilm_dir / 'vocab.txt', do_lower_case=True)


def _write(tmp_path, dataset, name='squad.json'):
  path = tmp_path / name
  path.write_text(json.dumps(dataset), encoding='utf-8')
  return path


def _questions(dataset):
  return [qa for article in dataset['data'] for p in article['paragraphs'] for qa in p['qas']]


def _gold_logits(features):
  """One-hot start/end logits at each feature's labelled positions ([CLS] when none)."""
  n, length = features['input_ids'].shape
  start = np.zeros((n, length), np.float32)
  end = np.zeros((n, length), np.float32)
  start[np.arange(n), features['start_position']] = 1.0
  end[np.arange(n), features['end_position']] = 1.0
  return start, end


def _features_by_example(features):
  by_example = collections.defaultdict(list)
  for feature_index, example_index in enumerate(features['example_index']):
    by_example[int(example_index)].append(feature_index)
  return by_example


def test_reads_words_positions_and_all_gold_answers(sample, tmp_path):
  path = _write(tmp_path, sample)
  examples, skips = squad.read_squad(path, False)
  questions = _questions(sample)
  assert not skips
  assert [e.qas_id for e in examples] == [qa['id'] for qa in questions]
  contexts = [p['context'] for a in sample['data'] for p in a['paragraphs'] for _ in p['qas']]
  for example, qa, context in zip(examples, questions, contexts, strict=True):
    assert example.doc_tokens == context.split()
    assert example.answers == [a['text'] for a in qa['answers']]
    assert example.orig_answer_text == qa['answers'][0]['text']
    assert not example.is_impossible
    # The located words hold the answer, and are the words its characters fall in.
    words = ' '.join(example.doc_tokens[example.start_position:example.end_position + 1])
    assert example.orig_answer_text in words
    start = qa['answers'][0]['answer_start']
    assert len(context[:start].split()) == example.start_position
  assert max(len(e.answers) for e in examples) == 3


def test_features_follow_the_contract_and_stride(sample, tmp_path, tok):
  examples, _ = squad.read_squad(_write(tmp_path, sample), False)
  max_seq_length, doc_stride, max_query_length = 64, 16, 12
  features, meta = squad.convert_examples(examples, tok, max_seq_length, doc_stride,
                                          max_query_length)
  n = len(meta)
  assert {k: (v.dtype, v.shape) for k, v in features.items()} == {
      'input_ids': (np.int32, (n, max_seq_length)),
      'input_mask': (np.int32, (n, max_seq_length)),
      'segment_ids': (np.int32, (n, max_seq_length)),
      'start_position': (np.int32, (n,)),
      'end_position': (np.int32, (n,)),
      'example_index': (np.int32, (n,)),
  }
  by_example = _features_by_example(features)
  assert sorted(by_example) == list(range(len(examples)))
  assert min(len(rows) for rows in by_example.values()) >= 3  # Several windows per example.
  for example_index, rows in by_example.items():
    example = examples[example_index]
    query = tok.tokenize(example.question_text)[:max_query_length]
    doc = [piece for word in example.doc_tokens for piece in tok.tokenize(word)]
    covered = collections.Counter()
    for k, f in enumerate(rows):
      tokens = meta[f]['tokens']
      window = doc[k * doc_stride:k * doc_stride + max_seq_length - len(query) - 3]
      assert tokens == ['[CLS]', *query, '[SEP]', *window, '[SEP]']
      length = len(tokens)
      assert features['input_ids'][f, :length].tolist() == tok.convert_tokens_to_ids(tokens)
      assert not features['input_ids'][f, length:].any()
      assert features['input_mask'][f].tolist() == [1] * length + [0] * (max_seq_length - length)
      assert features['segment_ids'][f].tolist() == (
          [0] * (len(query) + 2) + [1] * (len(window) + 1) + [0] * (max_seq_length - length))
      for position, orig in meta[f]['token_to_orig_map'].items():
        assert tokens[position] in tok.tokenize(example.doc_tokens[orig])
        covered[(k * doc_stride + position - len(query) - 2)] += (
            meta[f]['token_is_max_context'][position])
    # The last window reaches the end, and every token has exactly one best window.
    assert meta[rows[-1]]['tokens'][-2] == doc[-1]
    assert covered == collections.Counter({i: 1 for i in range(len(doc))})
    # The windows that hold the whole answer label it, tightened to the answer's wordpieces.
    answer = tok.tokenize(example.orig_answer_text)
    labelled = [f for f in rows if features['start_position'][f]]
    assert labelled
    for f in labelled:
      start, end = features['start_position'][f], features['end_position'][f]
      assert meta[f]['tokens'][start:end + 1] == answer
    for f in rows:
      if f not in labelled:
        assert features['end_position'][f] == 0


def test_gold_logits_score_100_by_both_scorers(sample, tmp_path, tok, official):
  examples, _ = squad.read_squad(_write(tmp_path, sample), False)
  features, meta = squad.convert_examples(examples, tok, max_seq_length=64, doc_stride=16,
                                          max_query_length=12)
  predictions, nbest, null_odds = squad_answers.postprocess(*_gold_logits(features), examples,
                                                    features, meta)
  assert predictions == {e.qas_id: e.orig_answer_text for e in examples}
  assert not null_odds
  for example in examples:
    top = nbest[example.qas_id][0]
    assert (top['text'], top['start_logit'], top['end_logit']) == (
        example.orig_answer_text, 1.0, 1.0)
    assert math.isclose(sum(entry['probability'] for entry in nbest[example.qas_id]), 1.0)
  ours = squad_metrics.evaluate_v1(sample, predictions)
  reference = official['evaluate'](sample['data'], predictions)
  assert ours == pytest.approx(reference)
  assert ours == {'exact_match': 100.0, 'f1': 100.0}

  paths = squad_answers.write_predictions(tmp_path / 'out', predictions, nbest, null_odds)
  assert sorted(paths) == ['nbest_predictions.json', 'predictions.json']
  with open(paths['predictions.json'], encoding='utf-8') as f:
    assert official['evaluate'](sample['data'], json.load(f)) == reference


def test_every_gold_answer_maps_to_a_span_and_back(sample, tmp_path, tok):
  """Each gold answer (as its own question) decodes to exactly its text, mid-word ends too."""
  dataset = copy.deepcopy(sample)
  expected = {}
  for article in dataset['data']:
    for paragraph in article['paragraphs']:
      split = []
      for qa in paragraph['qas']:
        for k, answer in enumerate(qa['answers']):
          split.append({'id': f'{qa["id"]}_{k}', 'question': qa['question'], 'answers': [answer]})
          expected[split[-1]['id']] = ' '.join(answer['text'].split())
      paragraph['qas'] = split
  examples, skips = squad.read_squad(_write(tmp_path, dataset), False)
  assert not skips and len(examples) == len(expected) == 7
  features, meta = squad.convert_examples(examples, tok, max_seq_length=384)
  assert len(meta) == len(examples)  # One window each: even the whole-paragraph answer fits.
  predictions, _, _ = squad_answers.postprocess(*_gold_logits(features), examples, features, meta,
                                        max_answer_length=384)
  assert predictions == expected
  assert 'Father Julius Nieuwl' in predictions.values()  # Ends inside 'Nieuwland'.


def test_each_token_is_predicted_only_from_its_most_centred_window(tok):
  """Two windows of 5 words, stride 2, on 7 one-wordpiece words: [0..4] and [2..6]."""
  words = ['The', 'cat', 'sat', 'on', 'a', 'red', 'mat']
  example = squad.Example('q', 'who', words, 'sat', 2, 2, False, ['sat'])
  features, meta = squad.convert_examples([example], tok, max_seq_length=9, doc_stride=2,
                                          max_query_length=1)
  assert [m['tokens'][3:-1] for m in meta] == [[w.lower() for w in words[:5]],
                                                [w.lower() for w in words[2:]]]
  # Word 2: context (2 left, 2 right) in the first window, (0, 4) in the second. Word 3: (3, 1)
  # and (1, 3), a tie that the first window wins. Word 4: (4, 0) and (2, 2).
  assert [m['token_is_max_context'] for m in meta] == [
      {3: True, 4: True, 5: True, 6: True, 7: False},
      {3: False, 4: False, 5: True, 6: True, 7: True}]
  assert features['start_position'].tolist() == features['end_position'].tolist() == [5, 3]
  start = np.zeros((2, 9), np.float32)
  end = np.zeros((2, 9), np.float32)
  start[0, 5] = end[0, 5] = 1.0  # 'sat' in the window that centres it.
  start[1, 4] = end[1, 4] = 5.0  # 'on', scored higher, but in a window that does not.
  predictions, nbest, _ = squad_answers.postprocess(start, end, [example], features, meta)
  assert predictions == {'q': 'sat'}
  assert max(entry['start_logit'] for entry in nbest['q']) == 1.0  # None starts at that 'on'.
  start[:] = end[:] = 0.0
  start[0, 4], end[0, 7], end[0, 5] = 3.0, 3.0, 1.0  # 'cat sat on a' scores 6, 'cat sat' 4.
  for max_answer_length, expected in ((4, 'cat sat on a'), (3, 'cat sat')):
    predictions, _, _ = squad_answers.postprocess(start, end, [example], features, meta,
                                          max_answer_length=max_answer_length)
    assert predictions == {'q': expected}


@pytest.mark.parametrize('version_2', [False, True])
def test_an_answer_does_not_depend_on_how_far_its_row_was_padded(tok, version_2):
  """Eval cuts a batch to its longest row and pads the outputs back with zeros; predict runs full
  rows. Padding positions must not crowd the real ones out of the n best: an uncertain model
  (every logit negative) still answers 'paris' whatever stands past the window's tokens."""
  words = 'The cat sat on a mat in Paris near Rome with John Smith today'.split()
  example = squad.Example('q', 'where ?', words, '', -1, -1, False, ['Paris'])
  length = 64
  features, meta = squad.convert_examples([example], tok, max_seq_length=length, doc_stride=32,
                                          max_query_length=8, is_training=False)
  num_tokens = len(meta[0]['tokens'])
  assert num_tokens < 32
  logits = np.random.default_rng(0).normal(-6.0, 1.0, size=(1, length, 2))
  logits[0, meta[0]['tokens'].index('paris')] = -1.0
  logits[0, 0] = -2.0  # [CLS]: the null answer scores below 'paris'.
  answers = []
  for padding in (logits[0, num_tokens:], np.zeros_like(logits[0, num_tokens:]),
                  np.full_like(logits[0, num_tokens:], 3.0)):
    rows = logits.copy()
    rows[0, num_tokens:] = padding
    decoded = squad_answers.decode(rows[..., 0], rows[..., 1], [example], features, meta,
                                   version_2_with_negative=version_2)
    answers.append((decoded.predictions['q'], [e['text'] for e in decoded.nbest['q']],
                    decoded.null_odds.get('q')))
  assert answers[0][0] == 'Paris'
  assert answers[1] == answers[0] and answers[2] == answers[0]


def test_answer_span_is_tightened_as_the_original_does(tok):
  # run_squad.py's rule: the span shrinks to the answer's own wordpieces ('1895' inside
  # '(1895-1943)'); an answer that starts inside a word ('boarding' in 'snowboarding': 'snow',
  # '##boarding') keeps the whole word, as there the pieces differ.
  doc = tok.tokenize('(1895-1943)')
  assert squad._improve_answer_span(doc, 0, len(doc) - 1, tok, '1895') == (1, 1)
  doc = tok.tokenize('snowboarding')
  assert doc == ['snow', '##boarding']
  assert squad._improve_answer_span(doc, 0, 1, tok, 'boarding') == (0, 1)


def test_get_final_text_projects_onto_original_characters():
  assert squad_answers.get_final_text('steve smith', "Steve Smith's", True) == 'Steve Smith'
  assert squad_answers.get_final_text('1882', '1882,', True) == '1882'
  assert squad_answers.get_final_text('cafe', 'the Café.', True) == 'Café'
  assert squad_answers.get_final_text('not there', 'Steve Smith', True) == 'Steve Smith'
  assert squad_answers.get_final_text('Smith', "Steve Smith's", False) == 'Smith'


def _v2_dataset(sample):
  """The sample as v2.0: the first paragraph's questions also asked, unanswerable, of the second."""
  dataset = {'version': 'v2.0', 'data': copy.deepcopy(sample['data'])}
  first, second = dataset['data'][0]['paragraphs'][:2]
  for paragraph in (first, second):
    for qa in paragraph['qas']:
      qa['is_impossible'] = False
  second['qas'] += [
      {'id': qa['id'] + '_moved', 'question': qa['question'], 'answers': [],
       'plausible_answers': qa['answers'][:1], 'is_impossible': True} for qa in first['qas']]
  return dataset


def test_v2_unanswerable_questions_point_at_cls_and_predict_empty(sample, tmp_path, tok):
  dataset = _v2_dataset(sample)
  path = _write(tmp_path, dataset)
  examples, skips = squad.read_squad(path, True)
  assert not skips and len(examples) == 7
  impossible = [e for e in examples if e.is_impossible]
  assert [e.qas_id for e in impossible] == [qa['id'] + '_moved' for qa in
                                          sample['data'][0]['paragraphs'][0]['qas']]
  assert all((e.start_position, e.end_position, e.orig_answer_text, e.answers) == (-1, -1, '', [])
             for e in impossible)
  features, meta = squad.convert_examples(examples, tok, max_seq_length=64, doc_stride=16,
                                          max_query_length=12)
  by_example = _features_by_example(features)
  for example_index, example in enumerate(examples):
    rows = by_example[example_index]
    assert len(rows) >= 3
    labelled = features['start_position'][rows].any() or features['end_position'][rows].any()
    assert labelled != example.is_impossible
  predictions, nbest, null_odds = squad_answers.postprocess(
      *_gold_logits(features), examples, features, meta, version_2_with_negative=True)
  assert predictions == {e.qas_id: '' if e.is_impossible else e.orig_answer_text
                         for e in examples}
  # Null score minus best span score: [CLS] (2) vs a 0 span, or the gold span (2) vs [CLS] (0).
  assert null_odds == {e.qas_id: 2.0 if e.is_impossible else -2.0 for e in examples}
  assert all('' in [entry['text'] for entry in nbest[e.qas_id]] for e in examples)
  result = squad_metrics.evaluate_v2(dataset, predictions, null_odds)
  assert dict(result) == {
      'exact': 100.0, 'f1': 100.0, 'total': 7,
      'HasAns_exact': 100.0, 'HasAns_f1': 100.0, 'HasAns_total': 5,
      'NoAns_exact': 100.0, 'NoAns_f1': 100.0, 'NoAns_total': 2,
      'best_exact': 100.0, 'best_exact_thresh': -2.0, 'best_f1': 100.0, 'best_f1_thresh': -2.0}

  paths = squad_answers.write_predictions(tmp_path / 'out', predictions, nbest, null_odds)
  loaded = {name: json.loads((tmp_path / 'out' / name).read_text()) for name in paths}
  assert sorted(loaded) == ['nbest_predictions.json', 'null_odds.json', 'predictions.json']
  assert squad_metrics.evaluate_v2(dataset, loaded['predictions.json'],
                                   loaded['null_odds.json']) == result
  # Evaluation reading keeps the same questions, and no gold answer for the unanswerable.
  eval_examples, _ = squad.read_squad(path, True, is_training=False)
  assert [e.answers for e in eval_examples] == [e.answers for e in examples]


def test_null_score_threshold_flips_a_prediction(sample, tmp_path, tok):
  dataset = _v2_dataset(sample)
  examples, _ = squad.read_squad(_write(tmp_path, dataset), True)
  features, meta = squad.convert_examples(examples, tok, max_seq_length=64, doc_stride=16,
                                          max_query_length=12)
  start, end = _gold_logits(features)
  flipped = examples[0]
  assert not flipped.is_impossible
  rows = _features_by_example(features)[0]
  start[rows, 0] = end[rows, 0] = 1.5  # Null score 3 against the gold span's 2: odds 1.0.

  def run(threshold):
    return squad_answers.postprocess(start, end, examples, features, meta,
                                     version_2_with_negative=True,
                                     null_score_diff_threshold=threshold)

  at_zero, _, null_odds = run(0.0)
  at_one, _, null_odds_at_one = run(1.0)
  assert null_odds == null_odds_at_one
  assert null_odds[flipped.qas_id] == 1.0
  assert at_zero[flipped.qas_id] == ''
  assert at_one[flipped.qas_id] == flipped.orig_answer_text
  others = [e.qas_id for e in examples if e is not flipped]
  assert [at_zero[q] for q in others] == [at_one[q] for q in others]

  num_answerable = sum(not e.is_impossible for e in examples)
  result = squad_metrics.evaluate_v2(dataset, at_zero, null_odds)
  assert result['HasAns_exact'] == pytest.approx(100.0 * (num_answerable - 1) / num_answerable)
  assert result['NoAns_exact'] == 100.0
  assert result['exact'] == pytest.approx(100.0 * (len(examples) - 1) / len(examples))
  # The answered predictions score 100 at the scorer's default threshold (1.0, not exceeded),
  # and 100 is the best over thresholds, first reached at the flipped question's odds.
  result = squad_metrics.evaluate_v2(dataset, at_one, null_odds)
  assert (result['exact'], result['best_exact'], result['best_exact_thresh']) == (
      100.0, 100.0, 1.0)
  # A lower scorer threshold overrides it again.
  result = squad_metrics.evaluate_v2(dataset, at_one, null_odds, threshold=0.5)
  assert result['HasAns_exact'] == pytest.approx(100.0 * (num_answerable - 1) / num_answerable)


# (prediction, gold answers, exact match and F1 worked out by hand).
METRIC_CASES = [
    ('The Eiffel Tower', ['eiffel tower'], 1, 1.0),  # Articles and case.
    ('U.S.A.', ['USA'], 1, 1.0),  # Punctuation removed inside words.
    ('  New\tYork \n', ['new york'], 1, 1.0),  # Whitespace.
    ('a banana', ['banana'], 1, 1.0),  # 'an' inside a word is not an article.
    ('the quick brown fox', ['brown fox jumps'], 0, 2 / 3),  # P = R = 2/3.
    ('Paris, France', ['paris'], 0, 2 / 3),  # P = 1/2, R = 1.
    ('Broncos', ['Denver Broncos', 'the Broncos', 'Carolina'], 1, 1.0),  # Best over answers.
    ('fox fox', ['fox'], 0, 2 / 3),  # Repeated tokens count once each: P = 1/2, R = 1.
    ('Denver', ['Carolina Panthers'], 0, 0.0),
    ('the', ['an'], 1, 0.0),  # Both normalise to nothing: exact, but v1.1 F1 is 0.
]


@pytest.mark.parametrize('prediction,golds,exact,f1', METRIC_CASES)
def test_metrics_equal_the_official_v1_script(prediction, golds, exact, f1, official):
  assert squad_metrics.normalize_answer(prediction) == official['normalize_answer'](prediction)
  ours_f1 = squad_metrics.max_over_ground_truths(squad_metrics.f1_score, prediction, golds)
  assert ours_f1 == pytest.approx(f1)
  assert ours_f1 == pytest.approx(official['metric_max_over_ground_truths'](
      official['f1_score'], prediction, golds))
  ours_exact = squad_metrics.max_over_ground_truths(squad_metrics.exact_match_score,
                                                    prediction, golds)
  assert ours_exact == official['metric_max_over_ground_truths'](
      official['exact_match_score'], prediction, golds)
  assert ours_exact == exact


def test_evaluate_v1_equals_the_official_script(official):
  qas = [{'id': f'q{i}', 'question': '?', 'answers': [{'text': g, 'answer_start': 0}
                                                      for g in golds]}
         for i, (_, golds, _, _) in enumerate(METRIC_CASES)]
  dataset = {'version': '1.1', 'data': [{'title': 't', 'paragraphs': [
      {'context': 'unused', 'qas': qas}]}]}
  predictions = {f'q{i}': case[0] for i, case in enumerate(METRIC_CASES)}
  del predictions['q0']  # Unanswered: scores 0 and still counts.
  ours = squad_metrics.evaluate_v1(dataset, predictions)
  assert ours == pytest.approx(official['evaluate'](dataset['data'], predictions))
  n = len(METRIC_CASES)
  assert ours['f1'] == pytest.approx(100.0 * sum(case[3] for case in METRIC_CASES[1:]) / n)
  assert ours['exact_match'] == pytest.approx(100.0 * sum(case[2] for case in METRIC_CASES[1:]) / n)


def test_evaluate_v2_on_hand_worked_cases():
  qas = [
      {'id': 'q1', 'answers': [{'text': 'Denver Broncos'}]},
      {'id': 'q2', 'answers': [{'text': 'Paris'}, {'text': 'the city of Paris'}]},
      {'id': 'q3', 'answers': []},
      {'id': 'q4', 'answers': []},
  ]
  dataset = {'data': [{'paragraphs': [{'context': 'unused', 'qas': qas}]}]}
  predictions = {'q1': 'Broncos', 'q2': 'city of Paris', 'q3': '', 'q4': 'something'}
  # q1: exact 0, F1 2/3 (P 1, R 1/2); q2: exact; q3: '' is right; q4: wrong.
  result = squad_metrics.evaluate_v2(dataset, predictions)
  assert dict(result) == pytest.approx({
      'exact': 50.0, 'f1': 100 * (2 / 3 + 2) / 4, 'total': 4,
      'HasAns_exact': 50.0, 'HasAns_f1': 100 * (2 / 3 + 1) / 2, 'HasAns_total': 2,
      'NoAns_exact': 50.0, 'NoAns_f1': 50.0, 'NoAns_total': 2})
  null_odds = {'q1': -1.0, 'q2': -3.0, 'q3': 0.5, 'q4': 2.0}
  result = squad_metrics.evaluate_v2(dataset, predictions, null_odds)
  # q4's odds exceed the default threshold 1.0: taken as '' and right.
  assert (result['exact'], result['NoAns_exact']) == (75.0, 100.0)
  # All '' scores 2 (q3, q4); answering q2 (odds -3) adds 1; q1 adds 0 exact, 2/3 F1; q3 adds 0;
  # answering q4 loses 1.
  assert result['best_exact'] == 75.0 and result['best_exact_thresh'] == -3.0
  assert result['best_f1'] == pytest.approx(100 * (3 + 2 / 3) / 4)
  assert result['best_f1_thresh'] == -1.0
  result = squad_metrics.evaluate_v2(dataset, predictions, null_odds, threshold=-2.0)
  assert result['HasAns_exact'] == 50.0 and result['HasAns_f1'] == pytest.approx(50.0)
  # v2.0 F1 of two empty answers is 1 (v1.1 gives 0); a question without prediction scores 0.
  assert squad_metrics.f1_score_v2('', 'the') == 1.0 and squad_metrics.f1_score('', '') == 0.0
  del predictions['q3']
  assert squad_metrics.evaluate_v2(dataset, predictions)['NoAns_exact'] == 0.0
  with pytest.raises(ValueError, match='null_odds has no entry'):
    squad_metrics.evaluate_v2(dataset, predictions, {'q1': 0.0})


def test_misplaced_answers_are_counted_skips_in_training_kept_in_eval(sample, tmp_path, tok,
                                                                      caplog):
  dataset = copy.deepcopy(sample)
  qas = _questions(dataset)
  qas[0]['answers'][0]['answer_start'] += 7  # 'Saint Bernadette Soubirous' is not there.
  qas[2]['answers'][0]['answer_start'] = 10_000  # Past the paragraph's end.
  qas[1]['answers'][0]['answer_start'] += 7  # Its second gold answer is still in place.
  path = _write(tmp_path, dataset)
  with caplog.at_level(logging.WARNING):
    examples, skips = squad.read_squad(path, False)
  assert skips == collections.Counter({'answer text not at answer_start': 2,
                                       'answer_start outside the context': 1})
  assert [e.qas_id for e in examples] == [qa['id'] for qa in qas[3:]]
  assert qas[0]['id'] in caplog.text and qas[2]['id'] in caplog.text

  eval_examples, eval_skips = squad.read_squad(path, False, is_training=False)
  assert [e.qas_id for e in eval_examples] == [qa['id'] for qa in qas]
  assert eval_skips == collections.Counter({
      'answer text not at answer_start (kept for evaluation)': 1,
      'answer_start outside the context (kept for evaluation)': 1})
  assert eval_examples[1].orig_answer_text == qas[1]['answers'][1]['text']
  assert (eval_examples[0].start_position, eval_examples[0].answers) == (
      -1, [qas[0]['answers'][0]['text']])
  with pytest.raises(ValueError, match=f"{qas[0]['id']}.*no located answer"):
    squad.convert_examples(eval_examples, tok, is_training=True)
  features, _ = squad.convert_examples(eval_examples, tok, is_training=False)
  unlocated = np.isin(features['example_index'], [0, 2])
  assert not features['start_position'][unlocated].any()
  assert features['start_position'][~unlocated].all()


def test_bad_files_and_versions_raise_clear_errors(sample, tmp_path, tok):
  with pytest.raises(FileNotFoundError, match='does not exist'):
    squad.read_squad(tmp_path / 'missing.json', False)
  empty = tmp_path / 'empty.json'
  empty.write_text(' \n')
  with pytest.raises(ValueError, match='is empty'):
    squad.read_squad(empty, False)
  truncated = tmp_path / 'truncated.json'
  truncated.write_text(json.dumps(sample)[:500])
  with pytest.raises(ValueError, match='is not one JSON document'):
    squad.read_squad(truncated, False)
  with pytest.raises(ValueError, match='no "data"'):
    squad.read_squad(_write(tmp_path, {'version': '1.1'}, 'nodata.json'), False)

  v1 = _write(tmp_path, sample, 'v1.json')
  with pytest.raises(ValueError, match=r'is v1\.1.*version_2_with_negative=False'):
    squad.read_squad(v1, True)
  labelled_v1 = _write(tmp_path, {'version': '1.1', **sample}, 'v1_labelled.json')
  with pytest.raises(ValueError, match=r"is v1\.1 \(version field '1\.1'\)"):
    squad.read_squad(labelled_v1, True)
  v2 = _v2_dataset(sample)
  with pytest.raises(ValueError, match=r'is v2\.0.*version_2_with_negative=True'):
    squad.read_squad(_write(tmp_path, v2, 'v2.json'), False)
  del v2['version']  # Still v2.0 by its is_impossible fields.
  with pytest.raises(ValueError, match=r'is v2\.0.*version_2_with_negative=True'):
    squad.read_squad(_write(tmp_path, v2, 'v2_unlabelled.json'), False)
  broken = copy.deepcopy(sample)
  del _questions(broken)[1]['question']
  with pytest.raises(ValueError, match=f"question '{_questions(sample)[1]['id']}' has no "
                                       "'question'"):
    squad.read_squad(_write(tmp_path, broken, 'broken.json'), False)

  examples, _ = squad.read_squad(v1, False)
  with pytest.raises(ValueError, match='max_seq_length=67 leaves no room'):
    squad.convert_examples(examples, tok, max_seq_length=67, max_query_length=64)
  with pytest.raises(ValueError, match='doc_stride=0'):
    squad.convert_examples(examples, tok, doc_stride=0)
  features, meta = squad.convert_examples(examples, tok, max_seq_length=68, max_query_length=64)
  start, end = _gold_logits(features)
  with pytest.raises(ValueError, match='one row per feature'):
    squad_answers.postprocess(start[1:], end[1:], examples, features, meta)
  with pytest.raises(ValueError, match='examples were passed'):
    squad_answers.postprocess(start, end, examples[:1], features, meta)


def _span_data(tmp_path, train, dev, test=None, **fields):
  """config.data of task=span over SQuAD datasets written to tmp_path (small windows)."""
  config = finetune_config.get_config('task=span')
  config.unlock()
  config.data.train_file = str(_write(tmp_path, train, 'train.json'))
  config.data.eval_file = str(dev if isinstance(dev, pathlib.Path) else
                              _write(tmp_path, dev, 'dev.json'))
  if test is not None:
    config.data.test_file = str(_write(tmp_path, test, 'test.json'))
  config.data.max_seq_length, config.data.doc_stride, config.data.max_query_length = 64, 16, 12
  for key, value in fields.items():
    config.data[key] = value
  return config.data


def _task_outputs(task, split, tok, adjust=None):
  """(examples, features, meta, outputs [N, L, 2]) of gold one-hot logits on `split`."""
  examples, _ = task.read(split)
  features, meta = task.featurize(examples, tok, is_training=False)
  start, end = _gold_logits(features)
  if adjust is not None:
    adjust(examples, features, start, end)
  return examples, features, meta, np.stack([start, end], -1)


def _one_question(qid, version=None, **fields):
  qa = {'id': qid, 'question': 'who speaks', 'answers': [{'text': 'the king',
                                                         'answer_start': 0}], **fields}
  dataset = {'data': [{'title': 't', 'paragraphs': [
      {'context': 'the king doth speak', 'qas': [qa]}]}]}
  if version:
    dataset['version'] = version
  return dataset


def test_integer_question_ids_are_scored_as_their_text(tmp_path):
  """An id written as a JSON number (`"id": 7`) is read as '7' and so keyed in predictions and
  null odds (JSON keys are text): the scorers must look it up as '7', not score it 0."""
  v1 = _one_question(7, '1.1')
  examples, _ = squad.read_squad(_write(tmp_path, v1), is_training=False)
  assert [e.qas_id for e in examples] == ['7']
  assert squad_metrics.evaluate_v1(v1, {'7': 'the king'}) == {'exact_match': 100.0, 'f1': 100.0}
  v2 = _one_question(7, 'v2.0', is_impossible=False)
  result = squad_metrics.evaluate_v2(v2, {'7': 'the king'}, {'7': -1.0})
  assert (result['exact'], result['best_exact'], result['best_exact_thresh']) == (
      100.0, 100.0, -1.0)


def test_a_v1_eval_question_without_answers_is_refused_when_read(tmp_path, caplog):
  dataset = _one_question('q1', '1.1')
  dataset['data'][0]['paragraphs'][0]['qas'].append(
      {'id': 'q_none', 'question': 'who else', 'answers': []})
  path = _write(tmp_path, dataset)
  with pytest.raises(ValueError, match=f"SQuAD file '{path}': question 'q_none' has no answers"):
    squad.read_squad(path, is_training=False)
  # Training skips it, counted; the scorer itself names it rather than dying in max().
  examples, skips = squad.read_squad(path)
  assert [e.qas_id for e in examples] == ['q1'] and skips == collections.Counter(
      {'answerable question without answers': 1})
  with pytest.raises(ValueError, match="question 'q_none' has no answers"):
    squad_metrics.evaluate_v1(dataset, {'q1': 'the king', 'q_none': ''})


def test_an_unlabelled_test_file_is_read_for_predictions(sample, tmp_path, tok):
  """config.data.test_file may hold questions without answers (and, for v2.0, without
  is_impossible): mode=predict reads them; eval data still needs its labels."""
  unlabelled = copy.deepcopy(sample)
  for qa in _questions(unlabelled):
    del qa['answers']
  path = _write(tmp_path, unlabelled, 'test.json')
  for v2 in (False, True):
    examples, skips = squad.read_squad(path, v2, is_training=False, labelled=False)
    assert [e.qas_id for e in examples] == [qa['id'] for qa in _questions(sample)]
    assert not skips and all(e.answers == [] and not e.is_impossible for e in examples)
  with pytest.raises(ValueError, match="question '.*' has no 'answers'"):
    squad.read_squad(path, is_training=False)  # Labelled: eval data.
  task = registry.get_task('span', _span_data(tmp_path, sample, sample, test=unlabelled))
  examples, features, meta, outputs = _task_outputs(task, 'test', tok)
  written = pathlib.Path(task.write_predictions(outputs, features, meta, examples, 'test',
                                                str(tmp_path / 'out')))
  assert sorted(json.loads(written.read_text())) == sorted(qa['id'] for qa in _questions(sample))


def test_the_eval_file_is_decoded_alike_by_reading_and_scoring(sample, tmp_path, tok):
  """A UTF-8 BOM before the JSON: read_squad reads it, so the scorer's copy must too (it read
  it with plain read_text and failed at the first eval, after the whole training)."""
  dev = tmp_path / 'dev_bom.json'
  dev.write_bytes(b'\xef\xbb\xbf' + json.dumps(sample).encode('utf-8'))
  task = registry.get_task('span', _span_data(tmp_path, sample, dev))
  examples, features, meta, outputs = _task_outputs(task, 'validation', tok)
  assert task.evaluate(outputs, features, meta, examples) == {'exact_match': 100.0, 'f1': 100.0}


def test_span_finds_the_squad_version_as_read_squad_does(sample, tmp_path):
  v2 = _v2_dataset(sample)
  answerable_v2 = copy.deepcopy(v2)  # v2.0 all the same, with no impossible question.
  for paragraph in answerable_v2['data'][0]['paragraphs']:
    paragraph['qas'] = [qa for qa in paragraph['qas'] if not qa['is_impossible']]
  unversioned = copy.deepcopy(answerable_v2)
  del unversioned['version']  # v2.0 by its is_impossible fields.
  for train in (v2, answerable_v2, unversioned):
    assert registry.get_task('span', _span_data(tmp_path, train, v2)).version_2
  assert not registry.get_task('span', _span_data(tmp_path, sample, sample)).version_2
  # JSON's own spacing (`"is_impossible" : true`) is the same file.
  spaced = tmp_path / 'spaced.json'
  spaced.write_text(json.dumps(v2).replace('"is_impossible": ', '"is_impossible" : '))
  data = _span_data(tmp_path, v2, spaced)
  data.train_file = str(spaced)
  assert registry.get_task('span', data).version_2
  for train, dev, v1_file in ((sample, v2, 'train.json'), (v2, sample, 'dev.json')):
    with pytest.raises(ValueError, match=(
        r'task=span: config.data.train_file .*train.json is (v1.1|v2.0).* but '
        r'config.data.eval_file .*dev.json is .*: both must be one version; .*give every '
        f'question of .*{v1_file} "is_impossible": false')) as error:
      registry.get_task('span', _span_data(tmp_path, train, dev)).read('train')
    assert 'version_2_with_negative' not in str(error.value)


def test_a_context_without_wordpieces_predicts_nothing_and_claims_nothing(tok, tmp_path):
  """A paragraph of zero-width characters has no window: '' with no n-best entry (its
  probability 1.0 claimed full confidence), infinite odds in v2.0, written as standard JSON."""
  blank = squad.Example('blank', 'who', ['\u200b'], '', -1, -1, False, [])
  words, _ = squad.split_paragraph('the king doth speak')
  normal = squad.Example('normal', 'who speaks', words, '', -1, -1, False, [])
  features, meta = squad.convert_examples([blank, normal], tok, max_seq_length=24,
                                          doc_stride=8, max_query_length=4, is_training=False)
  assert set(features['example_index'].tolist()) == {1}
  start, end = np.zeros((2, len(meta), 24))
  start[:, 6] = end[:, 7] = 5.0  # 'the king' in the normal question's window.
  for v2 in (False, True):
    predictions, nbest, null_odds = squad_answers.postprocess(
        start, end, [blank, normal], features, meta, version_2_with_negative=v2)
    assert predictions['blank'] == '' and nbest['blank'] == []
    assert predictions['normal'] != '' and nbest['normal'][0]['probability'] > 0.5
  assert null_odds['blank'] == math.inf
  squad_answers.write_predictions(tmp_path, predictions, nbest, null_odds)

  def refuse(constant):
    raise ValueError(f'{constant} is not standard JSON')
  written = json.loads((tmp_path / 'null_odds.json').read_text(), parse_constant=refuse)
  assert written['blank'] > 1e300 and written['normal'] == null_odds['normal']


def _flip(examples, features, start, end, qid_index=0, null=1.5):
  """Null score 2 * null at every window of example qid_index (its gold span scores 2)."""
  rows = _features_by_example(features)[qid_index]
  start[rows, 0] = end[rows, 0] = null


def test_null_odds_weigh_the_best_span_even_when_n_best_holds_only_the_null(sample, tmp_path,
                                                                               tok):
  dataset = _v2_dataset(sample)
  examples, _ = squad.read_squad(_write(tmp_path, dataset), True)
  features, meta = squad.convert_examples(examples, tok, max_seq_length=64, doc_stride=16,
                                          max_query_length=12)
  start, end = _gold_logits(features)
  _flip(examples, features, start, end)  # Null 3 against the gold span's 2: odds 1.0.
  flipped = examples[0]
  for n_best_size in (1, 2, 20):
    outputs = {}
    for threshold in (0.0, 1.0):
      predictions, nbest, null_odds = squad_answers.postprocess(
          start, end, examples, features, meta, version_2_with_negative=True,
          null_score_diff_threshold=threshold, n_best_size=n_best_size)
      outputs[threshold] = predictions[flipped.qas_id]
      assert null_odds[flipped.qas_id] == 1.0, n_best_size
      assert len(nbest[flipped.qas_id]) <= max(n_best_size, 2)
    assert outputs == {0.0: '', 1.0: flipped.orig_answer_text}, n_best_size


def test_best_thresholds_weigh_the_answers_cut_at_the_configured_threshold(sample, tmp_path,
                                                                           tok):
  """At threshold 0 the flipped question answers '' (odds 1.0); best_* search the thresholds
  above it too, so they must see its best span: 100 at threshold 1.0."""
  dataset = _v2_dataset(sample)
  examples, _ = squad.read_squad(_write(tmp_path, dataset), True)
  features, meta = squad.convert_examples(examples, tok, max_seq_length=64, doc_stride=16,
                                          max_query_length=12)
  start, end = _gold_logits(features)
  _flip(examples, features, start, end)
  decoded = squad_answers.decode(start, end, examples, features, meta,
                                 version_2_with_negative=True)
  assert decoded.predictions[examples[0].qas_id] == ''
  assert decoded.best_spans[examples[0].qas_id] == examples[0].orig_answer_text
  assert decoded[:3] == squad_answers.postprocess(start, end, examples, features, meta,
                                                  version_2_with_negative=True)
  result = squad_metrics.evaluate_v2(dataset, decoded.predictions, decoded.null_odds,
                                     threshold=0.0, best_spans=decoded.best_spans)
  assert result['exact'] == pytest.approx(100.0 * 6 / 7)
  assert (result['best_exact'], result['best_exact_thresh']) == (100.0, 1.0)
  assert (result['best_f1'], result['best_f1_thresh']) == (100.0, 1.0)
  # The fine-tuning task's evaluation passes them (its threshold: 0, config's default).
  task = registry.get_task('span', _span_data(tmp_path, dataset, dataset))
  examples, features, meta, outputs = _task_outputs(task, 'validation', tok, _flip)
  task_result = task.evaluate(outputs, features, meta, examples)
  assert (task_result['best_exact'], task_result['best_exact_thresh']) == (100.0, 1.0)
  assert task_result['exact'] == pytest.approx(100.0 * 6 / 7)


def test_a_dev_file_rewritten_at_the_same_path_is_scored_from_its_new_answers(tmp_path):
  """Pass U: a second fine-tuning in one process scored against the first file's answers."""
  from bertjax.finetune.tasks import registry  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'dev.json'
  path.write_text(json.dumps({'data': [{'title': 'a'}]}))
  assert registry._squad_json(str(path)) == [{'title': 'a'}]  # pylint: disable=protected-access
  path.write_text(json.dumps({'data': [{'title': 'b'}]}))
  assert registry._squad_json(str(path)) == [{'title': 'b'}]  # pylint: disable=protected-access

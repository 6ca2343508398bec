"""SQuAD scores as the official v1.1 and v2.0 evaluation scripts compute them.

Published SQuAD numbers are these scripts' numbers, so each rule is theirs: answers are
compared after lower-casing and removing punctuation, the articles a/an/the and extra
whitespace; exact match and bag-of-tokens F1 take the best over the gold answers; scores are
percentages. v2.0 adds that the only right answer to an unanswerable question is '' (F1 is 1
when both sides are empty, where v1.1 gives 0), a no-answer threshold on the null odds, and the
HasAns/NoAns breakdown. One departure: a question with no prediction scores 0 in both (the
v2.0 script drops it from the total, then fails on the breakdown).
"""

import collections
import re
import string

from absl import logging

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r'\b(a|an|the)\b', re.UNICODE)


def normalize_answer(text):
  """Lower-cases, drops ASCII punctuation and the articles a/an/the, collapses whitespace."""
  text = ''.join(c for c in text.lower() if c not in _PUNCTUATION)
  return ' '.join(_ARTICLES.sub(' ', text).split())


def exact_match_score(prediction, ground_truth):
  """1.0 when both normalise to the same text, else 0.0."""
  return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction, ground_truth):
  """v1.1's token F1: the harmonic mean of token precision and recall (0 without overlap)."""
  prediction_tokens = normalize_answer(prediction).split()
  truth_tokens = normalize_answer(ground_truth).split()
  num_same = sum((collections.Counter(prediction_tokens) &
                  collections.Counter(truth_tokens)).values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(prediction_tokens)
  recall = num_same / len(truth_tokens)
  return 2 * precision * recall / (precision + recall)


def f1_score_v2(prediction, ground_truth):
  """v2.0's token F1: as v1.1, but 1.0 when both are empty (a right no-answer)."""
  if not normalize_answer(prediction) or not normalize_answer(ground_truth):
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))
  return f1_score(prediction, ground_truth)


def max_over_ground_truths(metric_fn, prediction, ground_truths):
  """The best score of `prediction` against any of the gold answers."""
  return max(metric_fn(prediction, truth) for truth in ground_truths)


def _articles(dataset_json):
  """The list of articles, from a loaded SQuAD file or its 'data' list."""
  if isinstance(dataset_json, dict):
    if 'data' not in dataset_json:
      raise ValueError('dataset_json has no "data": pass the loaded SQuAD json file')
    return dataset_json['data']
  return dataset_json


def _questions(dataset_json):
  """(question id as a string, question) of every question.

  Predictions and null odds are keyed by the id as text (JSON object keys are strings, and
  read_squad keys an integer id `7` as '7'), so an integer id is compared as its text.
  """
  for article in _articles(dataset_json):
    for paragraph in article['paragraphs']:
      for qa in paragraph['qas']:
        yield str(qa['id']), qa


def _missing(qid):
  logging.warning('SQuAD question %s has no prediction: it scores 0', qid)


def evaluate_v1(dataset_json, predictions):
  """{'exact_match', 'f1'} in percent over every question, as the official v1.1 script."""
  exact = f1 = total = 0.0
  for qid, qa in _questions(dataset_json):
    total += 1
    truths = [answer['text'] for answer in qa['answers']]
    if not truths:  # v1.1 has no unanswerable questions: there is nothing to score against.
      raise ValueError(f'SQuAD v1.1 question {qid!r} has no answers: give it its gold answers '
                       'or remove it (squad.read_squad refuses such a file when it reads it)')
    if qid not in predictions:
      _missing(qid)
      continue
    exact += max_over_ground_truths(exact_match_score, predictions[qid], truths)
    f1 += max_over_ground_truths(f1_score, predictions[qid], truths)
  if not total:
    raise ValueError('the SQuAD dataset holds no questions: pass the file the predictions are for')
  return {'exact_match': 100.0 * exact / total, 'f1': 100.0 * f1 / total}


def _best_threshold(predictions, scores, null_odds, has_answer):
  """Best score (percent) over no-answer thresholds, and the threshold, as the v2.0 script."""
  # At a threshold below every odds, everything is answered ''; raising it past each question's
  # odds switches that question to its prediction.
  score = best = sum(1 for qid in scores if not has_answer[qid])
  best_threshold = 0.0
  for qid in sorted(scores, key=lambda qid: null_odds[qid]):
    if has_answer[qid]:
      score += scores[qid]
    elif predictions.get(qid):
      score -= 1
    if score > best:
      best, best_threshold = score, null_odds[qid]
  return 100.0 * best / len(scores), best_threshold


def _raw_scores(predictions, truths_of, warn):
  """{qid: exact}, {qid: f1} of each question's prediction (0 without one)."""
  exact_raw, f1_raw = {}, {}
  for qid, truths in truths_of.items():
    if qid not in predictions:
      if warn:
        _missing(qid)
      exact_raw[qid] = f1_raw[qid] = 0.0
      continue
    exact_raw[qid] = max_over_ground_truths(exact_match_score, predictions[qid], truths)
    f1_raw[qid] = max_over_ground_truths(f1_score_v2, predictions[qid], truths)
  return exact_raw, f1_raw


def evaluate_v2(dataset_json, predictions, null_odds=None, threshold=1.0, best_spans=None):
  """exact/f1 (percent), HasAns_/NoAns_ breakdown, best_* over thresholds when null_odds given.

  A question whose null odds exceed `threshold` counts as answered '' (the v2.0 script's
  --na-prob-thresh, default 1.0); without null_odds every question's odds are 0, as there.
  best_spans ({qid: the best non-null span's text}, squad_answers.decode's): what each question
  answers at a threshold above its odds, for best_*; without it they read `predictions`, as the
  v2.0 script does, and cannot find a threshold above the one the predictions were cut at.
  """
  truths_of, has_answer = {}, {}
  for qid, qa in _questions(dataset_json):
    has_answer[qid] = bool(qa['answers'])
    truths_of[qid] = [a['text'] for a in qa['answers'] if normalize_answer(a['text'])] or ['']
  exact_raw, f1_raw = _raw_scores(predictions, truths_of, warn=True)
  if not has_answer:
    raise ValueError('the SQuAD dataset holds no questions: pass the file the predictions are for')
  if null_odds is not None:
    missing = [qid for qid in has_answer if qid not in null_odds]
    if missing:
      raise ValueError(f'null_odds has no entry for {len(missing)} questions (e.g. {missing[0]!r}):'
                       ' pass the null_odds postprocess returned for this dataset')
    odds = {qid: float(null_odds[qid]) for qid in has_answer}
  else:
    odds = {qid: 0.0 for qid in has_answer}

  def thresholded(raw):
    return {qid: float(not has_answer[qid]) if odds[qid] > threshold else score
            for qid, score in raw.items()}

  exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
  result = collections.OrderedDict()
  for prefix, qids in (('', list(has_answer)),
                       ('HasAns_', [q for q, has in has_answer.items() if has]),
                       ('NoAns_', [q for q, has in has_answer.items() if not has])):
    if qids:
      result[prefix + 'exact'] = 100.0 * sum(exact[q] for q in qids) / len(qids)
      result[prefix + 'f1'] = 100.0 * sum(f1[q] for q in qids) / len(qids)
      result[prefix + 'total'] = len(qids)
  if null_odds is not None:
    answered = predictions
    if best_spans is not None:
      answered = {qid: best_spans.get(qid, '') for qid in has_answer}
      exact_raw, f1_raw = _raw_scores(answered, truths_of, warn=False)
    result['best_exact'], result['best_exact_thresh'] = _best_threshold(
        answered, exact_raw, odds, has_answer)
    result['best_f1'], result['best_f1_thresh'] = _best_threshold(
        answered, f1_raw, odds, has_answer)
  return result

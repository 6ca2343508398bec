"""Metrics equal scikit-learn/scipy on random data and conlleval's counts on hand-built cases."""

import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk_metrics

from bertjax.finetune import metrics


@pytest.mark.parametrize('seed', range(5))
def test_classification_metrics_equal_sklearn(seed):
  rng = np.random.default_rng(seed)
  size = int(rng.integers(5, 400))
  gold = rng.integers(0, 2, size)
  # Predictions correlated with gold, so scores are away from 0 and a sign error would show.
  pred = np.where(rng.random(size) < 0.7, gold, rng.integers(0, 2, size))
  assert metrics.accuracy(pred, gold) == pytest.approx(sk_metrics.accuracy_score(gold, pred))
  assert metrics.f1(pred, gold) == pytest.approx(sk_metrics.f1_score(gold, pred))
  assert metrics.matthews_corrcoef(pred, gold) == pytest.approx(
      sk_metrics.matthews_corrcoef(gold, pred))


def test_multiclass_mcc_and_accuracy_equal_sklearn():
  rng = np.random.default_rng(7)
  gold = rng.integers(0, 3, 500)
  pred = np.where(rng.random(500) < 0.5, gold, rng.integers(0, 3, 500))
  assert metrics.matthews_corrcoef(pred, gold) == pytest.approx(
      sk_metrics.matthews_corrcoef(gold, pred))
  assert metrics.accuracy(pred, gold) == pytest.approx(np.mean(pred == gold))


def test_macro_f1_equals_sklearn():
  rng = np.random.default_rng(7)
  gold = rng.integers(0, 5, 300)
  pred = np.where(rng.random(300) < 0.6, gold, rng.integers(0, 5, 300))
  pred[pred == 3] = 2  # Class 3 never predicted: its F1 is 0.
  # Class 5 is in neither: scikit-learn's default leaves it out of the mean, as bertjax does.
  expected = sk_metrics.f1_score(gold, pred, average='macro', zero_division=0)
  assert metrics.macro_f1(pred, gold, 6) == pytest.approx(expected, abs=1e-12)
  assert metrics.macro_f1(np.array([0, 1, 0, 1]), np.array([0, 1, 0, 1]), 3) == 1.0


def test_degenerate_classification_scores_are_zero():
  gold = np.array([0, 1, 1, 0, 1])
  # Constant predictions: MCC undefined (sklearn also says 0); F1 with no predicted positives.
  assert metrics.matthews_corrcoef(np.zeros(5, int), gold) == 0.0
  assert metrics.matthews_corrcoef(np.ones(5, int), gold) == 0.0
  assert metrics.f1(np.zeros(5, int), gold) == 0.0
  assert metrics.f1(np.zeros(5, int), np.zeros(5, int)) == 0.0
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    assert sk_metrics.f1_score(np.zeros(5, int), np.zeros(5, int), zero_division=0) == 0.0
  assert metrics.matthews_corrcoef(gold, gold) == 1.0
  assert metrics.matthews_corrcoef(1 - gold, gold) == -1.0


@pytest.mark.parametrize('seed', range(5))
def test_correlations_equal_scipy(seed):
  rng = np.random.default_rng(seed)
  size = int(rng.integers(3, 300))
  gold = rng.uniform(0, 5, size)
  pred = gold + rng.normal(0, 1.5, size)
  assert metrics.pearson(pred, gold) == pytest.approx(stats.pearsonr(pred, gold)[0])
  assert metrics.spearman(pred, gold) == pytest.approx(stats.spearmanr(pred, gold)[0])


def test_spearman_with_ties_equals_scipy():
  rng = np.random.default_rng(3)
  # STS-B gold scores are in steps of 0.2, so ties are the normal case.
  gold = rng.integers(0, 26, 200) / 5.0
  pred = np.round(gold + rng.normal(0, 1.0, 200), 1)
  assert len(np.unique(gold)) < 200 and len(np.unique(pred)) < 200
  assert metrics.spearman(pred, gold) == pytest.approx(stats.spearmanr(pred, gold)[0])
  np.testing.assert_allclose(metrics.rank_average_ties(pred), stats.rankdata(pred))
  np.testing.assert_array_equal(metrics.rank_average_ties([3, 1, 3, 2, 3]), [4, 1, 4, 2, 4])


def test_constant_inputs_correlate_zero():
  gold = np.array([0.5, 1.0, 4.0, 2.5])
  for constant in (np.full(4, 0.1), np.zeros(4)):
    assert metrics.pearson(constant, gold) == 0.0
    assert metrics.spearman(constant, gold) == 0.0
    assert metrics.pearson(gold, constant) == 0.0
  assert metrics.pearson(gold, gold) == pytest.approx(1.0)
  assert metrics.spearman(-gold, gold) == pytest.approx(-1.0)


def test_bad_metric_inputs_are_refused():
  with pytest.raises(ValueError, match='3 predictions but 2 gold'):
    metrics.accuracy([0, 1, 1], [0, 1])
  with pytest.raises(ValueError, match='no examples'):
    metrics.pearson([], [])
  with pytest.raises(ValueError, match='must be 0 or 1'):
    metrics.f1([0, 2], [0, 1])


def test_chunks_decode_iob2_and_iob1_alike():
  iob2 = ['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC', 'I-LOC', 'B-ORG']
  iob1 = ['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC', 'I-LOC', 'I-ORG']
  expected = [('PER', 0, 2), ('LOC', 3, 4), ('LOC', 4, 6), ('ORG', 6, 7)]
  assert metrics.chunks(iob2) == expected
  assert metrics.chunks(iob1) == expected
  # An I- of another type starts a new chunk; a lone B- is a one-word chunk.
  assert metrics.chunks(['I-PER', 'I-ORG', 'I-ORG', 'B-MISC']) == [
      ('PER', 0, 1), ('ORG', 1, 3), ('MISC', 3, 4)]
  with pytest.raises(ValueError, match='not a chunk tag'):
    metrics.chunks(['PER'])


def test_chunks_decode_iobes_ioes_and_bilou_as_conlleval():
  expected = [('PER', 0, 2), ('LOC', 3, 4), ('LOC', 4, 6), ('ORG', 6, 7)]
  iobes = ['B-PER', 'E-PER', 'O', 'S-LOC', 'B-LOC', 'E-LOC', 'S-ORG']
  bilou = ['B-PER', 'L-PER', 'O', 'U-LOC', 'B-LOC', 'L-LOC', 'U-ORG']
  # IOE1: E- closes a chunk only where the next one of the same type follows at once.
  ioe1 = ['I-PER', 'I-PER', 'O', 'E-LOC', 'I-LOC', 'I-LOC', 'I-ORG']
  assert metrics.chunks(iobes) == expected
  assert metrics.chunks(bilou) == expected
  assert metrics.chunks(ioe1) == expected
  # An S- inside a chunk ends it and stands alone; an I- after E- starts a new chunk.
  assert metrics.chunks(['B-X', 'I-X', 'S-X', 'I-X']) == [('X', 0, 2), ('X', 2, 3),
                                                          ('X', 3, 4)]


def test_token_scores_for_tags_without_chunks():
  gold = [['NN', 'VB', 'DT'], ['NN']]
  pred = [['NN', 'NN', 'DT'], ['VB']]
  scores = metrics.token_scores(gold, pred, ('DT', 'NN', 'VB'))
  assert scores['accuracy'] == 0.5
  # F1: DT 1, NN 2*1/(2+2)=0.5, VB 0 -> mean 0.5.
  assert scores['macro_f1'] == pytest.approx(0.5)


def test_entity_scores_hand_counted():
  gold = [
      # IOB1 gold: PER 0-2, LOC 3-4, LOC 4-6 (B- splits the adjacent LOCs), ORG at the end.
      ['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC', 'I-LOC', 'I-ORG'],
      ['O', 'I-MISC', 'I-MISC', 'O'],
  ]
  pred = [
      # IOB2 prediction: PER right; LOC 3-6 merged (boundary error: wrong, and both gold LOCs
      # missed); ORG at the sentence end right.
      ['B-PER', 'I-PER', 'O', 'B-LOC', 'I-LOC', 'I-LOC', 'B-ORG'],
      # MISC span right but typed ORG (type mismatch), plus a spurious PER.
      ['O', 'B-ORG', 'I-ORG', 'B-PER'],
  ]
  # gold chunks 5, predicted 5 (PER, LOC, ORG, ORG, PER), correct 2 (PER, ORG).
  # tokens 11; equal tag strings: I-PER, O, I-LOC (positions 1, 2, 5) and the first O of
  # sentence 2 = 4 (IOB1 against IOB2 tags differ as strings even where the chunks agree).
  scores = metrics.entity_scores(gold, pred)
  assert scores['precision'] == pytest.approx(2 / 5)
  assert scores['recall'] == pytest.approx(2 / 5)
  assert scores['f1'] == pytest.approx(2 / 5)
  assert scores['accuracy'] == pytest.approx(4 / 11)


def test_entity_scores_boundary_and_sentence_end():
  gold = [['O', 'B-ORG', 'I-ORG'], ['B-PER']]
  # The ORG ends at the sentence end in both; the prediction misses the lone PER and starts
  # the ORG one word late (a boundary error).
  pred = [['O', 'O', 'B-ORG'], ['O']]
  scores = metrics.entity_scores(gold, pred)
  # gold 2, predicted 1, correct 0.
  assert (scores['precision'], scores['recall'], scores['f1']) == (0.0, 0.0, 0.0)
  assert scores['accuracy'] == pytest.approx(1 / 4)
  perfect = metrics.entity_scores(gold, gold)
  assert (perfect['precision'], perfect['recall'], perfect['f1'], perfect['accuracy']) == (
      1.0, 1.0, 1.0, 1.0)
  # Recall 1/2, precision 1/1 when only the PER is found.
  half = metrics.entity_scores(gold, [['O', 'O', 'O'], ['I-PER']])
  assert half['precision'] == 1.0 and half['recall'] == 0.5
  assert half['f1'] == pytest.approx(2 / 3)


def test_entity_scores_refuse_misaligned_input():
  with pytest.raises(ValueError, match='sentence 0 has 2 gold tags but 1 predicted'):
    metrics.entity_scores([['O', 'O']], [['O']])
  with pytest.raises(ValueError, match='1 gold sentences but 0 predicted'):
    metrics.entity_scores([['O']], [])

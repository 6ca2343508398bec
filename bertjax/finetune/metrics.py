"""Evaluation metrics for fine-tuning, computed on the host with numpy.

GLUE and CoNLL scores are what papers report, so each metric follows the definition of the
reference scorer rather than a convenient variant: Matthews correlation and F1 as scikit-learn
computes them, Spearman with averaged ranks for ties (scipy's), and entity scores over chunks as
CoNLL's conlleval script counts them (an exact match of type, start and end). Degenerate inputs
(a constant prediction, no predicted positives) score 0 instead of NaN, which is what GLUE's
leaderboard shows for them and what keeps a model-selection loop comparing numbers.
Everything here runs once per evaluation on arrays of at most a few hundred thousand rows, so
clarity wins over speed; none of it needs JAX.
"""

import numpy as np


def _pair(pred, gold, name):
  """pred and gold as 1-D arrays of equal, non-zero length."""
  pred_N = np.asarray(pred).reshape(-1)
  gold_N = np.asarray(gold).reshape(-1)
  if pred_N.shape != gold_N.shape:
    raise ValueError(f'{name}: {pred_N.size} predictions but {gold_N.size} gold values; '
                     'pass one prediction per gold example')
  if pred_N.size == 0:
    raise ValueError(f'{name}: no examples to score; the evaluation split is empty')
  return pred_N, gold_N


def accuracy(pred, gold) -> float:
  """Fraction of predictions equal to the gold label."""
  pred_N, gold_N = _pair(pred, gold, 'accuracy')
  return float(np.mean(pred_N == gold_N))


def f1(pred, gold) -> float:
  """Binary F1 of the positive class 1 (GLUE's MRPC/QQP F1); 0 when it has no true positive."""
  pred_N, gold_N = _pair(pred, gold, 'f1')
  for name, values in (('predictions', pred_N), ('gold labels', gold_N)):
    if not np.isin(values, (0, 1)).all():
      raise ValueError(f'f1: {name} must be 0 or 1 (binary, positive class 1); got values '
                       f'{sorted(set(np.unique(values).tolist()) - {0, 1})[:5]}')
  true_pos = np.sum((pred_N == 1) & (gold_N == 1))
  # F1 = 2TP / (2TP + FP + FN), which needs no precision/recall division by zero.
  denom = np.sum(pred_N == 1) + np.sum(gold_N == 1)
  return float(2 * true_pos / denom) if denom else 0.0


def macro_f1(pred, gold, num_classes: int) -> float:
  """Unweighted mean of each class's one-vs-rest F1 over the classes of 0..num_classes-1 that
  the gold labels or the predictions hold: scikit-learn's f1_score(average='macro'), so a class
  the eval set lacks and the model never predicts does not pull the mean down (a rare class a
  stratified split kept for training alone). 0 when there is nothing to score."""
  pred_N, gold_N = _pair(pred, gold, 'macro_f1')
  scores = []
  for c in range(num_classes):
    true_pos = np.sum((pred_N == c) & (gold_N == c))
    denom = np.sum(pred_N == c) + np.sum(gold_N == c)
    if denom:
      scores.append(2 * true_pos / denom)
  return float(np.mean(scores)) if scores else 0.0


def matthews_corrcoef(pred, gold) -> float:
  """Matthews correlation (CoLA's metric); the multi-class form, 0 when undefined."""
  pred_N, gold_N = _pair(pred, gold, 'matthews_corrcoef')
  classes, index_N = np.unique(np.concatenate([gold_N, pred_N]), return_inverse=True)
  gold_index_N, pred_index_N = index_N[:gold_N.size], index_N[gold_N.size:]
  confusion_CxC = np.zeros((classes.size, classes.size), np.float64)
  np.add.at(confusion_CxC, (gold_index_N, pred_index_N), 1.0)
  # Gorodkin's R_K: (c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)); equals phi for two classes.
  true_C = confusion_CxC.sum(axis=1)
  pred_C = confusion_CxC.sum(axis=0)
  correct = np.trace(confusion_CxC)
  total = confusion_CxC.sum()
  cov_pred_gold = correct * total - true_C @ pred_C
  cov_pred = total * total - pred_C @ pred_C
  cov_gold = total * total - true_C @ true_C
  if cov_pred == 0 or cov_gold == 0:  # One side constant: the correlation is undefined.
    return 0.0
  return float(cov_pred_gold / np.sqrt(cov_pred * cov_gold))


def pearson(pred, gold) -> float:
  """Pearson correlation (STS-B); 0 when either side is constant."""
  pred_N, gold_N = _pair(pred, gold, 'pearson')
  return _pearson(pred_N.astype(np.float64), gold_N.astype(np.float64))


def _pearson(x_N, y_N):
  # Exact equality, not a small variance: a constant 0.1 centres to non-zero rounding noise.
  if (x_N == x_N[0]).all() or (y_N == y_N[0]).all():
    return 0.0
  x_N = x_N - x_N.mean()
  y_N = y_N - y_N.mean()
  r = (x_N @ y_N) / np.sqrt((x_N @ x_N) * (y_N @ y_N))
  return float(np.clip(r, -1.0, 1.0))


def rank_average_ties(values) -> np.ndarray:
  """1-based ranks, tied values sharing the mean of the ranks they span (scipy's 'average')."""
  values_N = np.asarray(values).reshape(-1)
  _, inverse_N, counts_U = np.unique(values_N, return_inverse=True, return_counts=True)
  last_rank_U = np.cumsum(counts_U)
  return (last_rank_U - (counts_U - 1) / 2.0)[inverse_N]


def spearman(pred, gold) -> float:
  """Spearman rank correlation (STS-B), ties given averaged ranks; 0 when either is constant."""
  pred_N, gold_N = _pair(pred, gold, 'spearman')
  return _pearson(rank_average_ties(pred_N), rank_average_ties(gold_N))


# BILOU's L(ast) and U(nit) are IOBES's E(nd) and S(ingle).
_PREFIXES = {'B': 'B', 'I': 'I', 'E': 'E', 'S': 'S', 'L': 'E', 'U': 'S'}


def _split_tag(tag):
  """(prefix, type) of a chunk tag: 'O' -> ('O', ''), 'B-PER' -> ('B', 'PER'), 'L-X' -> ('E',
  'X')."""
  if tag == 'O':
    return 'O', ''
  prefix, sep, kind = tag.partition('-')
  if not sep or prefix not in _PREFIXES or not kind:
    raise ValueError(f'tag {tag!r} is not a chunk tag: expected O or B-, I-, E-, S- (L-, U-) '
                     'followed by a type; set config.data.tag_scheme=plain for per-token tags')
  return _PREFIXES[prefix], kind


def _ends(prev, tag, prev_kind, kind):
  """conlleval's endOfChunk: does a chunk end between the previous tag and this one?"""
  return (prev in ('E', 'S') or (prev in ('B', 'I') and tag in ('B', 'S', 'O'))
          or (prev != 'O' and prev_kind != kind))


def _starts(prev, tag, prev_kind, kind):
  """conlleval's startOfChunk: does a chunk start at this tag?"""
  return (tag in ('B', 'S') or (prev in ('E', 'S', 'O') and tag in ('E', 'I'))
          or (tag != 'O' and prev_kind != kind))


def chunks(tags) -> list[tuple[str, int, int]]:
  """Entity chunks of one sentence's tags as (type, start, end exclusive), as conlleval finds them.

  conlleval's rules, so IOB2 (every chunk opens with B-), IOB1 (CoNLL-2003: a chunk opens with
  I-, and B- only separates two adjacent chunks of one type), IOBES/IOES (E- ends a chunk, S- is
  a one-word chunk) and BILOU (L-, U-) all decode: a chunk starts at B- or S-, at I- or E- after
  O, E- or S-, and at any tag whose type differs from the previous one's; it ends after E- or
  S-, before B-, S- or O, and where the type changes.
  """
  found = []
  start, prev, prev_kind = None, 'O', ''
  for position, tag in enumerate(tags):
    prefix, kind = _split_tag(tag)
    if start is not None and _ends(prev, prefix, prev_kind, kind):
      found.append((prev_kind, start, position))
      start = None
    if _starts(prev, prefix, prev_kind, kind):
      start = position
    prev, prev_kind = prefix, kind
  if start is not None:  # A chunk still open at the end of the sentence ends with it.
    found.append((prev_kind, start, len(tags)))
  return found


def token_scores(gold_tag_seqs, pred_tag_seqs, labels) -> dict[str, float]:
  """Per-token accuracy and macro F1 over `labels`: tags that form no chunks (POS, supersenses)."""
  gold = [t for tags in gold_tag_seqs for t in tags]
  pred = [t for tags in pred_tag_seqs for t in tags]
  index = {label: i for i, label in enumerate(labels)}
  gold_N = np.array([index.get(t, -1) for t in gold])
  pred_N = np.array([index.get(t, -1) for t in pred])
  return {'accuracy': accuracy(pred_N, gold_N),
          'macro_f1': macro_f1(pred_N, gold_N, len(labels))}


def entity_scores(gold_tag_seqs, pred_tag_seqs) -> dict[str, float]:
  """conlleval's scores: chunk precision, recall, F1 and token accuracy over sentences.

  A predicted chunk counts only when a gold chunk has the same type, start and end; sentences
  are scored separately, so no chunk spans two of them.
  """
  gold_tag_seqs, pred_tag_seqs = list(gold_tag_seqs), list(pred_tag_seqs)
  if len(gold_tag_seqs) != len(pred_tag_seqs):
    raise ValueError(f'entity_scores: {len(gold_tag_seqs)} gold sentences but '
                     f'{len(pred_tag_seqs)} predicted; pass one tag sequence per sentence')
  num_gold = num_pred = num_correct = num_tokens = num_tokens_correct = 0
  for index, (gold_tags, pred_tags) in enumerate(zip(gold_tag_seqs, pred_tag_seqs, strict=True)):
    if len(gold_tags) != len(pred_tags):
      raise ValueError(f'entity_scores: sentence {index} has {len(gold_tags)} gold tags but '
                       f'{len(pred_tags)} predicted; every word needs exactly one prediction')
    gold_chunks = set(chunks(gold_tags))
    pred_chunks = set(chunks(pred_tags))
    num_gold += len(gold_chunks)
    num_pred += len(pred_chunks)
    num_correct += len(gold_chunks & pred_chunks)
    num_tokens += len(gold_tags)
    num_tokens_correct += sum(g == p for g, p in zip(gold_tags, pred_tags, strict=True))
  if num_tokens == 0:
    raise ValueError('entity_scores: no tokens to score; the evaluation data is empty')
  precision = num_correct / num_pred if num_pred else 0.0
  recall = num_correct / num_gold if num_gold else 0.0
  f1_score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {'precision': precision, 'recall': recall, 'f1': f1_score,
          'accuracy': num_tokens_correct / num_tokens}

"""SQuAD: start/end logits of every window back to answer text, n-best lists and null odds.

run_squad.py's decoding step for step (see squad.py): candidate spans per window, the n best
distinct texts projected back onto the original characters (`get_final_text`), and for SQuAD
2.0 the null score against the best span.

Departures, each where the original would fail: the best span the null odds weigh is found
among all candidates, not only the n-best list (`_best_non_null`); a paragraph without any
window is no prediction (no n-best entry), not a nonce answer with probability 1.
"""

import collections
import functools
import json
import math
import sys
import typing

import numpy as np

from bertjax import files
from bertjax.text import tokenizer as tokenization


def _strip_spaces(text):
  chars, ns_to_s_map = [], {}
  for i, c in enumerate(text):
    if c != ' ':
      ns_to_s_map[len(chars)] = i
      chars.append(c)
  return ''.join(chars), ns_to_s_map


def get_final_text(pred_text, orig_text, do_lower_case, normal_form=None):
  """Projects de-tokenized piece text back onto the original words' characters.

  E.g. pred 'steve smith', orig "Steve Smith's" -> 'Steve Smith'. `normal_form(orig_text)`:
  the original as the tokenizer spells it (its normal_form; default: WordPiece's
  BasicTokenizer with `do_lower_case`, as run_squad.py). Falls back to `orig_text` when the
  alignment is lost (the tokenizer changed the characters' count, e.g. ligatures).
  """
  if normal_form is None:
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case, never_split=())
    tok_text = ' '.join(basic.tokenize(orig_text))
  else:
    tok_text = normal_form(orig_text)
  start = tok_text.find(pred_text)
  if start == -1:
    return orig_text
  end = start + len(pred_text) - 1
  orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    return orig_text
  tok_s_to_ns_map = {s: ns for ns, s in tok_ns_to_s_map.items()}
  orig_start = orig_ns_to_s_map.get(tok_s_to_ns_map.get(start))
  orig_end = orig_ns_to_s_map.get(tok_s_to_ns_map.get(end))
  if orig_start is None or orig_end is None:
    return orig_text
  return orig_text[orig_start:orig_end + 1]


def _best_indexes(logits_L, n_best_size):
  # Stable, so equal logits keep the earlier position first, as the original's sorted() does.
  return np.argsort(-logits_L, kind='stable')[:n_best_size].tolist()


def _softmax(scores):
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


def _candidate_spans(feature_indexes, start_NxL, end_NxL, meta, *, n_best_size,
                     max_answer_length, version_2_with_negative):
  """(spans best first, the null score, its logits) of one example over its windows.

  A span is (score, start_logit, end_logit, feature, start_index, end_index); run_squad.py's
  rules: both ends in the window's document part, start in its max-context half, end >= start,
  at most max_answer_length tokens; SQuAD 2.0 adds the best null (0, 0) span.

  The n_best_size positions are ranked among the window's own tokens only: positions past them
  hold padding, whose outputs depend on how far its batch was padded (a row cut to its batch's
  longest and padded back with zeros; full rows in predict), so an answer would change with the
  other rows of its batch. run_squad.py ranks every position and then drops padding ones, the
  same whenever a trained model's padding logits stay below its top n_best_size.
  """
  prelim = []
  score_null, null_logits, null_feature = math.inf, (0.0, 0.0), None
  for f in feature_indexes:
    start_L, end_L = start_NxL[f], end_NxL[f]
    if version_2_with_negative and start_L[0] + end_L[0] < score_null:
      score_null = start_L[0] + end_L[0]
      null_logits, null_feature = (float(start_L[0]), float(end_L[0])), f
    num_tokens = len(meta[f]['tokens'])
    token_to_orig_map = meta[f]['token_to_orig_map']
    token_is_max_context = meta[f]['token_is_max_context']
    end_indexes = _best_indexes(end_L[:num_tokens], n_best_size)
    for start in _best_indexes(start_L[:num_tokens], n_best_size):
      if start >= num_tokens or start not in token_to_orig_map:
        continue
      if not token_is_max_context.get(start, False):
        continue
      for end in end_indexes:
        if end >= num_tokens or end not in token_to_orig_map:
          continue
        if end < start or end - start + 1 > max_answer_length:
          continue
        prelim.append((start_L[start] + end_L[end], float(start_L[start]), float(end_L[end]),
                       f, start, end))
  if null_feature is not None:
    prelim.append((score_null, *null_logits, null_feature, 0, 0))
  prelim.sort(key=lambda p: p[0], reverse=True)  # Stable: ties keep window order.
  return prelim, score_null, null_logits


def _span_text(entry, meta, example, do_lower_case):
  """The answer text of a candidate span (a `_candidate_spans` entry with start > 0)."""
  _, _, _, f, start, end = entry
  # The tokenizer that made the pieces reads them back: WordPiece joins '##' pieces to their
  # word, SentencePiece starts a word at each '▁'.
  tok = meta[f]['tokenizer']
  tok_text = tok.pieces_text(meta[f]['tokens'][start:end + 1])
  orig_map = meta[f]['token_to_orig_map']
  orig_text = ' '.join(example.doc_tokens[orig_map[start]:orig_map[end] + 1])
  return get_final_text(tok_text, orig_text, do_lower_case, tok.normal_form)


def _nbest(prelim, meta, example, *, n_best_size, do_lower_case, null_logits):
  """The n best distinct answer texts with their logits; null_logits: SQuAD 2.0's '' entry."""
  nbest, seen = [], set()
  for entry in prelim:
    if len(nbest) >= n_best_size:
      break
    text = _span_text(entry, meta, example, do_lower_case) if entry[4] > 0 else ''
    if text in seen:
      continue
    seen.add(text)
    nbest.append((text, entry[1], entry[2]))
  if null_logits is not None and '' not in seen:
    nbest.append(('', *null_logits))
  if not nbest:  # Windows, but no valid span in any (v1.1): the original's nonce, but ''.
    nbest.append(('', 0.0, 0.0))
  return nbest


def _best_valid_span(feature_indexes, start_NxL, end_NxL, meta, max_answer_length):
  """The best-scoring span under _candidate_spans' rules over every position (not only the
  n best starts and ends) as a `_candidate_spans` entry, or None when no window has one."""
  best = None
  for f in feature_indexes:
    positions = sorted(p for p in meta[f]['token_to_orig_map']
                       if p < len(meta[f]['tokens']))
    starts = [p for p in positions if meta[f]['token_is_max_context'].get(p, False)]
    if not starts:
      continue
    start_S, end_E = np.asarray(starts), np.asarray(positions)
    length_SxE = end_E[None, :] - start_S[:, None] + 1
    score_SxE = np.where((length_SxE >= 1) & (length_SxE <= max_answer_length),
                         start_NxL[f][start_S][:, None] + end_NxL[f][end_E][None, :], -np.inf)
    s, e = np.unravel_index(np.argmax(score_SxE), score_SxE.shape)
    if np.isfinite(score_SxE[s, e]) and (best is None or score_SxE[s, e] > best[0]):
      start, end = int(start_S[s]), int(end_E[e])
      best = (score_SxE[s, e], float(start_NxL[f][start]), float(end_NxL[f][end]), f, start, end)
  return best


def _best_non_null(prelim, meta, example, do_lower_case, search):
  """(text, start_logit, end_logit) of the best span with a text, or None.

  The original takes it from the n-best list; with a small n_best_size the null entry can fill
  that list, or (n_best_size=1, [CLS] the best start) no span is a candidate at all, and the
  original fails. So it is the first such candidate (the n-best list's first non-empty text
  whenever that list has one), else `search()`: the best valid span of every position.
  """
  candidates = [entry for entry in prelim if entry[4] > 0]
  if not candidates and (found := search()) is not None:
    candidates = [found]
  for entry in candidates:
    text = _span_text(entry, meta, example, do_lower_case)
    if text:
      return text, entry[1], entry[2]
  return None


class Decoded(typing.NamedTuple):
  """What postprocess decodes, and for SQuAD 2.0 the answer each question gets if answered."""

  predictions: dict  # qid -> answer text ('' for no answer; v2.0: cut at the threshold).
  nbest: dict  # qid -> [{'text', 'probability', 'start_logit', 'end_logit'}], best first.
  null_odds: dict  # v2.0: qid -> null score minus the best span's (inf: no span); v1.1: {}.
  best_spans: dict  # v2.0: qid -> the best span's text, whatever the threshold ('' if none).


def decode(start_logits, end_logits, examples, features, meta, *, n_best_size=20,
           max_answer_length=30, do_lower_case=True, version_2_with_negative=False,
           null_score_diff_threshold=0.0) -> Decoded:
  """Start/end logits [N, L] -> Decoded (postprocess's three outputs and best_spans, which the
  v2.0 best-threshold search reads: answered at any threshold, a question says its best span).

  A question with no window at all (a paragraph with no wordpieces, e.g. only zero-width
  characters) was never read: it predicts '' with an empty n-best list (no candidate was
  scored, so none claims a probability) and, in v2.0, infinite null odds.
  """
  start_NxL = np.asarray(start_logits, np.float64)
  end_NxL = np.asarray(end_logits, np.float64)
  example_index_N = np.asarray(features['example_index'])
  num_features = len(meta)
  if start_NxL.ndim != 2 or start_NxL.shape != end_NxL.shape or (
      start_NxL.shape[0] != num_features or example_index_N.shape != (num_features,)):
    raise ValueError(
        f'start_logits {start_NxL.shape} and end_logits {end_NxL.shape} must both be [N, L] '
        f'with one row per feature ({num_features} in meta, example_index '
        f'{example_index_N.shape}): pass the logits of the features convert_examples returned, '
        'in its order')
  if num_features and not 0 <= example_index_N.min() <= example_index_N.max() < len(examples):
    raise ValueError(f'features refer to example {example_index_N.max()} but {len(examples)} '
                     'examples were passed: pass the examples the features were made from')
  features_of = collections.defaultdict(list)
  for feature_index, example_index in enumerate(example_index_N.tolist()):
    features_of[example_index].append(feature_index)

  out = Decoded({}, {}, {}, {})
  for example_index, example in enumerate(examples):
    qid = example.qas_id
    if not features_of[example_index]:  # Never read: no prediction to score.
      out.predictions[qid], out.nbest[qid] = '', []
      if version_2_with_negative:
        out.null_odds[qid], out.best_spans[qid] = math.inf, ''
      continue
    prelim, score_null, null_logits = _candidate_spans(
        features_of[example_index], start_NxL, end_NxL, meta, n_best_size=n_best_size,
        max_answer_length=max_answer_length, version_2_with_negative=version_2_with_negative)
    nbest = _nbest(prelim, meta, example, n_best_size=n_best_size, do_lower_case=do_lower_case,
                   null_logits=null_logits if version_2_with_negative else None)

    probs = _softmax([s + e for _, s, e in nbest])
    out.nbest[qid] = [
        {'text': text, 'probability': prob, 'start_logit': s, 'end_logit': e}
        for (text, s, e), prob in zip(nbest, probs, strict=True)]
    if not version_2_with_negative:
      out.predictions[qid] = nbest[0][0]
      continue
    best_non_null = _best_non_null(prelim, meta, example, do_lower_case, functools.partial(
        _best_valid_span, features_of[example_index], start_NxL, end_NxL, meta,
        max_answer_length))
    # No valid span anywhere: no answer, with odds no threshold can overturn.
    score_diff = math.inf if best_non_null is None else float(
        score_null - best_non_null[1] - best_non_null[2])
    out.null_odds[qid] = score_diff
    out.best_spans[qid] = '' if best_non_null is None else best_non_null[0]
    out.predictions[qid] = '' if score_diff > null_score_diff_threshold else best_non_null[0]
  return out


def postprocess(start_logits, end_logits, examples, features, meta, **options):
  """Start/end logits [N, L] -> (predictions {qid: text}, nbest {qid: [...]}, null_odds); the
  options are decode's."""
  return decode(start_logits, end_logits, examples, features, meta, **options)[:3]


def write_predictions(output_dir, predictions, nbest, null_odds):
  """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json, each whole or
  not at all (output_dir: a local folder or a URL); returns their paths."""
  contents = {'predictions.json': predictions, 'nbest_predictions.json': nbest}
  if null_odds:  # What the v2.0 scorer reads with --na-prob-file.
    # Standard JSON has no Infinity: the odds of a question without any span (no threshold
    # can make it answer) are written as the largest float, which every reader loads.
    contents['null_odds.json'] = {qid: sys.float_info.max if odds == math.inf else odds
                                  for qid, odds in null_odds.items()}
  paths = {}
  for name, content in contents.items():
    paths[name] = files.join(output_dir, name)
    files.write_atomically(paths[name], json.dumps(content, indent=4, ensure_ascii=False) + '\n')
  return paths

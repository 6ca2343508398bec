"""SQuAD: start/end logits of every window back to answer text, n-best lists and null odds.

run_squad.py's decoding step for step (see squad.py): candidate spans per window, the n best
distinct texts projected back onto the original characters (`get_final_text`), and for SQuAD
2.0 the null score against the best span.
"""

import collections
import json
import math

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
    end_indexes = _best_indexes(end_L, n_best_size)
    for start in _best_indexes(start_L, n_best_size):
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


def _nbest(prelim, meta, example, *, n_best_size, do_lower_case, null_logits):
  """The n best distinct answer texts with their logits; null_logits: SQuAD 2.0's '' entry."""
  nbest, seen = [], set()
  for _, start_logit, end_logit, f, start, end in prelim:
    if len(nbest) >= n_best_size:
      break
    if start > 0:
      # The tokenizer that made the pieces reads them back: WordPiece joins '##' pieces to
      # their word, SentencePiece starts a word at each '▁'.
      tok = meta[f]['tokenizer']
      tok_text = tok.pieces_text(meta[f]['tokens'][start:end + 1])
      orig_map = meta[f]['token_to_orig_map']
      orig_text = ' '.join(example.doc_tokens[orig_map[start]:orig_map[end] + 1])
      text = get_final_text(tok_text, orig_text, do_lower_case, tok.normal_form)
    else:
      text = ''
    if text in seen:
      continue
    seen.add(text)
    nbest.append((text, start_logit, end_logit))
  if null_logits is not None and '' not in seen:
    nbest.append(('', *null_logits))
  if not nbest:  # No window at all (an empty paragraph): the original's nonce, but ''.
    nbest.append(('', 0.0, 0.0))
  return nbest


def postprocess(start_logits, end_logits, examples, features, meta, *, n_best_size=20,
                max_answer_length=30, do_lower_case=True, version_2_with_negative=False,
                null_score_diff_threshold=0.0):
  """Start/end logits [N, L] -> (predictions {qid: text}, nbest {qid: [...]}, null_odds)."""
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

  predictions, all_nbest, null_odds = {}, {}, {}
  for example_index, example in enumerate(examples):
    prelim, score_null, null_logits = _candidate_spans(
        features_of[example_index], start_NxL, end_NxL, meta, n_best_size=n_best_size,
        max_answer_length=max_answer_length, version_2_with_negative=version_2_with_negative)
    nbest = _nbest(prelim, meta, example, n_best_size=n_best_size, do_lower_case=do_lower_case,
                   null_logits=null_logits if version_2_with_negative else None)

    probs = _softmax([s + e for _, s, e in nbest])
    all_nbest[example.qas_id] = [
        {'text': text, 'probability': prob, 'start_logit': s, 'end_logit': e}
        for (text, s, e), prob in zip(nbest, probs, strict=True)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0][0]
      continue
    best_non_null = next((n for n in nbest if n[0]), None)
    # No valid span anywhere: no answer, with odds no threshold can overturn.
    score_diff = math.inf if best_non_null is None else float(
        score_null - best_non_null[1] - best_non_null[2])
    null_odds[example.qas_id] = score_diff
    predictions[example.qas_id] = (
        '' if score_diff > null_score_diff_threshold else best_non_null[0])
  return predictions, all_nbest, null_odds


def write_predictions(output_dir, predictions, nbest, null_odds):
  """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json, each whole or
  not at all (output_dir: a local folder or a URL); returns their paths."""
  contents = {'predictions.json': predictions, 'nbest_predictions.json': nbest}
  if null_odds:  # What the v2.0 scorer reads with --na-prob-file.
    contents['null_odds.json'] = null_odds
  paths = {}
  for name, content in contents.items():
    paths[name] = files.join(output_dir, name)
    files.write_atomically(paths[name], json.dumps(content, indent=4, ensure_ascii=False) + '\n')
  return paths

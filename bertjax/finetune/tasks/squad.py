"""SQuAD v1.1 / v2.0: reading and windowed features (squad_answers.py: logits back to text).

The algorithm is google-research/bert's run_squad.py, kept step for step because a model
fine-tuned with it is only comparable to the paper's numbers if the labels and the decoding are
the same: paragraphs split on whitespace into words, answers located by character offset, the
wordpiece span tightened to the tokenized answer (`_improve_answer_span`), long paragraphs cut
into overlapping windows with each token scored in the window where it has the most context, and
predicted pieces projected back onto the original characters (`get_final_text`; WordPiece or
SentencePiece, each tokenizer reading its own pieces back as text).

Departures, each where the original would crash or silently mislabel: a training question with
several answers trains on the first (the original raises); a training answer that is not where
`answer_start` says is a counted, logged skip; an evaluation question is never dropped, so the
official scorers see every question; a question with no valid span predicts '' instead of the
original's placeholder 'empty'; a v1.1 evaluation question without answers is refused when read
(the scorer would die on it at the first eval); a test file (labelled=False) may hold questions
without answers; a v2.0 question without `is_impossible` (copies converted from other formats)
is unanswerable when its answers are empty, as evaluate-v2.0.py reads it.
"""

import collections
import json
import os
import typing

from absl import logging
import numpy as np

from bertjax import compressed_text
from bertjax import files
from bertjax import text_files
from bertjax.finetune.tasks import task as task_lib
from bertjax.text import sentencepiece_tokenizer

# Characters that separate words of a paragraph (the original's list, incl. narrow no-break space).
_WHITESPACE = frozenset(' \t\r\n\u202f')
_SKIP_NOT_FOUND = 'answer text not at answer_start'
_SKIP_OUT_OF_RANGE = 'answer_start outside the context'
_SKIP_NO_ANSWER = 'answerable question without answers'


class Example(typing.NamedTuple):
  """One question on one paragraph; positions are word indices into `doc_tokens`."""

  qas_id: str
  question_text: str
  doc_tokens: list  # The paragraph split on whitespace.
  orig_answer_text: str  # The answer trained on; '' when impossible or not located.
  start_position: int  # First word of that answer; -1 when impossible or not located.
  end_position: int  # Last word (inclusive); -1 likewise.
  is_impossible: bool
  answers: list  # Every gold answer text (empty for an impossible question).


def load_json(path):
  """A SQuAD file's JSON (local or a URL), decoded as JSON bytes are (UTF-8, a BOM allowed), or
  an error saying what is wrong with it: every reader of a SQuAD file reads it with this."""
  path = os.fspath(path)
  missing = (f'SQuAD file {path!r} does not exist: pass the path of a file in SQuAD\'s JSON '
             '(train-v1.1.json, dev-v1.1.json, train-v2.0.json, dev-v2.0.json or your own)')
  files.require_file(path, missing)
  raw = compressed_text.decompressed(path)  # A .gz, .bz2 or .xz file decompressed.
  if not raw.strip():
    raise ValueError(f'SQuAD file {path!r} is empty: {_FORMAT}; a download cut short reads so '
                     'too: download it again')
  if error := text_files.not_text(path, raw[:64]):  # gzip: said as such, not as cut short.
    raise ValueError(error)
  try:
    dataset = json.loads(raw)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f'SQuAD file {path!r} is not one JSON document ({e}): {_FORMAT} (not JSON '
                     'lines or CSV); a download cut short reads so too: download it '
                     'again') from None
  if not isinstance(dataset, dict) or not isinstance(dataset.get('data'), list):
    raise ValueError(f'SQuAD file {path!r} has no "data" list of articles: {_FORMAT}')
  return dataset


# What a SQuAD file holds, as messages say it.
_FORMAT = ('span tasks read SQuAD\'s JSON, {"version": ..., "data": [{"paragraphs": [{"context": '
           '..., "qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}')


def _field(obj, key, kind, path, where):
  value = obj.get(key) if isinstance(obj, dict) else None
  if not isinstance(value, kind):
    names = ' or '.join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    raise ValueError(f'SQuAD file {path!r}: {where} has no {key!r} ({names}): the file is '
                     'damaged or not in the SQuAD format')
  return value


def is_version_2(dataset) -> bool:
  """Whether a loaded SQuAD file is v2.0: by its version field, else (some copies drop the
  field) by its contents: v2.0 marks every question with is_impossible, and copies converted
  from other formats that drop it too hold questions with `answers: []` beside answered ones
  (v1.1 has none; a file to predict may have no answers at all)."""
  version = str(dataset.get('version', ''))
  if version:
    return version.lstrip('v').startswith('2')
  questions = [qa for article in dataset['data'] if isinstance(article, dict)
               for p in article.get('paragraphs', ()) if isinstance(p, dict)
               for qa in p.get('qas', ()) if isinstance(qa, dict)]
  answered = {bool(qa['answers']) for qa in questions if isinstance(qa.get('answers'), list)}
  return any('is_impossible' in qa for qa in questions) or answered == {True, False}


def version_name(is_v2: bool) -> str:
  """How messages name a SQuAD version."""
  return 'v2.0 (with unanswerable questions)' if is_v2 else 'v1.1'


def _check_version(dataset, path, version_2_with_negative):
  """Refuses a v1.1 file read as v2.0 and the reverse, by its version field or its contents."""
  is_v2 = is_version_2(dataset)
  if is_v2 != version_2_with_negative:
    version = str(dataset.get('version', ''))
    raise ValueError(
        f'SQuAD file {path!r} is {version_name(is_v2)} (version field {version or "absent"!r}) '
        f'but is read as {version_name(not is_v2)}: read it with '
        f'version_2_with_negative={is_v2} (fine-tuning: task={"squad_v2" if is_v2 else "squad_v1"};'
        ' task=span finds the version in its files), or pass the file of the other version')


def split_paragraph(context):
  """Whitespace-split words of a paragraph and, per character, the index of its word."""
  doc_tokens, char_to_word_offset = [], []
  prev_is_whitespace = True
  for c in context:
    if c in _WHITESPACE:
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def locate_answer(context, doc_tokens, char_to_word_offset, text, answer_start):
  """(first word, last word) of an answer, or (None, reason) when it is not at answer_start."""
  if not text or answer_start < 0 or answer_start + len(text) > len(context):
    return None, _SKIP_OUT_OF_RANGE
  # Whitespace before the first word maps to word -1; the answer then starts at word 0.
  start = max(char_to_word_offset[answer_start], 0)
  end = char_to_word_offset[answer_start + len(text) - 1]
  # Whitespace-normalised containment, as the original checks: an answer may end mid-word.
  if ' '.join(text.split()) not in ' '.join(doc_tokens[start:end + 1]):
    return None, _SKIP_NOT_FOUND
  return start, end


def read_squad(path, version_2_with_negative=False, *, is_training=True, labelled=True):
  """Reads a SQuAD json file into (examples, Counter of skip reasons).

  Training questions whose answer cannot be located are skipped and counted; evaluation
  questions (is_training=False) are all kept, with every gold answer, located or not. A v1.1
  evaluation question without answers is an error (the scorer has nothing to score it
  against). labelled=False reads questions to predict (a test file): `answers` and
  `is_impossible` may be missing (none; answerable), and the file's version is not checked,
  since a question is predicted alike from a file of either version.
  """
  dataset = load_json(path)
  path = os.fspath(path)
  if labelled:
    _check_version(dataset, path, version_2_with_negative)
  examples, skips, seen = [], collections.Counter(), {}
  for a, article in enumerate(dataset['data']):
    for p, paragraph in enumerate(_field(article, 'paragraphs', list, path, f'article {a}')):
      where = f'article {a} paragraph {p}'
      context = _field(paragraph, 'context', str, path, where)
      doc_tokens, char_to_word_offset = split_paragraph(context)
      for q, qa in enumerate(_field(paragraph, 'qas', list, path, where)):
        qas_id = str(_field(qa, 'id', (str, int), path, f'{where} question {q}'))
        if not is_training:  # Predictions are keyed by id: a second one would replace the first.
          if qas_id in seen:
            raise ValueError(f'SQuAD file {path!r}: {where} question {q} has the id {qas_id!r} '
                             f'of {seen[qas_id]} (ids are compared as text): predictions and '
                             'scores are kept per id, so give each question its own')
          seen[qas_id] = f'{where} question {q}'
        question = _field(qa, 'question', str, path, f'question {qas_id!r}')
        answers, is_impossible = [], False
        if labelled or 'answers' in qa:
          answers = _field(qa, 'answers', list, path, f'question {qas_id!r}')
        if version_2_with_negative and 'is_impossible' in qa:
          if not isinstance(qa['is_impossible'], bool):
            raise ValueError(f'SQuAD file {path!r}: question {qas_id!r} has is_impossible '
                             f'{qa["is_impossible"]!r}, not true or false')
          is_impossible = qa['is_impossible']
        elif version_2_with_negative and labelled:  # Unmarked: as evaluate-v2.0.py reads it.
          is_impossible = not answers
        if labelled and not is_training and not answers and not is_impossible and (
            not version_2_with_negative):
          raise ValueError(f'SQuAD file {path!r}: question {qas_id!r} has no answers: a v1.1 '
                           'evaluation question needs its gold answers (v1.1 has no '
                           'unanswerable questions); add them or remove the question')
        texts, span, text, reason = [], None, '', _SKIP_NO_ANSWER
        for answer in answers:
          where_answer = f'an answer of question {qas_id!r}'
          answer_text = _field(answer, 'text', str, path, where_answer)
          answer_start = _field(answer, 'answer_start', int, path, where_answer)
          texts.append(answer_text)
          # Training uses the first answer only; evaluation takes the first that is located.
          if span is None and not is_impossible and (not is_training or len(texts) == 1):
            start, found = locate_answer(context, doc_tokens, char_to_word_offset, answer_text,
                                         answer_start)
            if start is None:
              reason = found
            else:
              span, text = (start, found), answer_text
        if is_impossible:
          texts = []  # v2.0 dev lists no answers here; plausible_answers are never gold.
        elif span is None and (labelled or answers):  # An unlabelled question skips nothing.
          if is_training:
            skips[reason] += 1
            logging.warning('SQuAD %s: skipping question %s: %s (answer %r)', path, qas_id,
                            reason, texts[0] if texts else None)
            continue
          skips[reason + task_lib.KEPT] += 1
        start, end = span if span is not None else (-1, -1)
        examples.append(Example(qas_id, question, doc_tokens, text, start, end, is_impossible,
                                texts))
  if not examples:  # Said here, not as an empty concatenation after training.
    raise ValueError(f'SQuAD file {path!r} holds no questions' + (
        f' whose answer could be located: all {sum(skips.values())} were skipped '
        f'({dict(skips)}; why above)' if skips else f': {_FORMAT}'))
  if skips:
    logging.warning('SQuAD %s: %d questions read; %s', path, len(examples), dict(skips))
  return examples, skips


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
  """Tightens a word-aligned piece span to the tokenized answer ('1895' in '(1895-1943)').

  The original compares pieces, and WordPiece keeps exactly that (its labels are the paper's).
  A SentencePiece answer tokenized alone starts with '▁', which '1895' after '(' does not
  have: where no span's pieces are the answer's, its pieces' text is compared
  (tokenizer.pieces_text).
  """
  answer_pieces = tokenizer.tokenize(orig_answer_text)
  answer_text = tokenizer.pieces_text(answer_pieces)
  passes = [lambda pieces: pieces == answer_pieces]
  if isinstance(tokenizer, sentencepiece_tokenizer.SentencePieceTokenizer):
    passes.append(lambda pieces: answer_text and tokenizer.pieces_text(pieces) == answer_text)
  for same in passes:
    for new_start in range(input_start, input_end + 1):
      for new_end in range(input_end, new_start - 1, -1):
        if same(doc_tokens[new_start:new_end + 1]):
          return new_start, new_end
  return input_start, input_end


def _check_is_max_context(doc_spans, cur_span_index, position):
  """Whether window `cur_span_index` gives token `position` its most balanced context."""
  best_score, best_span_index = None, None
  for span_index, (span_start, span_length) in enumerate(doc_spans):
    end = span_start + span_length - 1
    if position < span_start or position > end:
      continue
    # The original's length term: windows come in order and only the last is shorter, so a
    # tie goes to the earlier window with or without it.
    score = min(position - span_start, end - position) + 0.01 * span_length
    if best_score is None or score > best_score:
      best_score, best_span_index = score, span_index
  return cur_span_index == best_span_index


def _doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  spans, start = [], 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def convert_examples(examples, tokenizer, max_seq_length=384, doc_stride=128,
                     max_query_length=64, is_training=True):
  """Examples -> (feature arrays [N, ...], per-feature meta); one feature per doc window."""
  if max_seq_length <= max_query_length + 3:
    raise ValueError(
        f'max_seq_length={max_seq_length} leaves no room for the paragraph after a question of '
        f'up to max_query_length={max_query_length} wordpieces plus [CLS] and two [SEP]: raise '
        'max_seq_length or lower max_query_length')
  if doc_stride < 1:
    raise ValueError(f'doc_stride={doc_stride} must be at least 1 (128 in the paper)')
  rows = collections.defaultdict(list)
  meta = []
  cls_id, sep_id = tokenizer.convert_tokens_to_ids(['[CLS]', '[SEP]'])
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    tok_to_orig_index, orig_to_tok_index, all_doc_tokens = [], [], []
    for i, word in enumerate(example.doc_tokens):
      orig_to_tok_index.append(len(all_doc_tokens))
      for sub_token in tokenizer.tokenize(word):
        tok_to_orig_index.append(i)
        all_doc_tokens.append(sub_token)

    has_span = not example.is_impossible and example.start_position >= 0
    if is_training and not example.is_impossible and not has_span:
      raise ValueError(
          f'question {example.qas_id!r} has no located answer: read training files with '
          'read_squad(..., is_training=True), which skips such questions')
    if has_span:
      tok_start = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end = len(all_doc_tokens) - 1
      tok_start, tok_end = _improve_answer_span(all_doc_tokens, tok_start, tok_end, tokenizer,
                                                example.orig_answer_text)

    doc_spans = _doc_spans(len(all_doc_tokens), max_seq_length - len(query_tokens) - 3,
                           doc_stride)
    doc_offset = len(query_tokens) + 2  # [CLS] query [SEP]
    query_ids = tokenizer.convert_tokens_to_ids(query_tokens)
    for span_index, (span_start, span_length) in enumerate(doc_spans):
      window = all_doc_tokens[span_start:span_start + span_length]
      tokens = ['[CLS]', *query_tokens, '[SEP]', *window, '[SEP]']
      token_to_orig_map = {doc_offset + i: tok_to_orig_index[span_start + i]
                           for i in range(span_length)}
      token_is_max_context = {
          doc_offset + i: _check_is_max_context(doc_spans, span_index, span_start + i)
          for i in range(span_length)}
      input_ids = [cls_id, *query_ids, sep_id, *tokenizer.convert_tokens_to_ids(window), sep_id]
      pad = max_seq_length - len(input_ids)
      rows['input_ids'].append(input_ids + [0] * pad)
      rows['input_mask'].append([1] * len(input_ids) + [0] * pad)
      rows['segment_ids'].append([0] * doc_offset + [1] * (span_length + 1) + [0] * pad)
      # Windows without the whole answer are kept and point at [CLS], as in the original.
      start_position = end_position = 0
      if has_span and span_start <= tok_start and tok_end < span_start + span_length:
        start_position = tok_start - span_start + doc_offset
        end_position = tok_end - span_start + doc_offset
      rows['start_position'].append(start_position)
      rows['end_position'].append(end_position)
      rows['example_index'].append(example_index)
      # The tokenizer too: it alone knows how its pieces read back as text (squad_answers).
      meta.append({'tokens': tokens, 'token_to_orig_map': token_to_orig_map,
                   'token_is_max_context': token_is_max_context, 'tokenizer': tokenizer})
  features = {
      key: np.asarray(rows[key], np.int32).reshape(-1, max_seq_length)
      for key in ('input_ids', 'input_mask', 'segment_ids')}
  for key in ('start_position', 'end_position', 'example_index'):
    features[key] = np.asarray(rows[key], np.int32).reshape(-1)
  return features, meta

"""CoNLL-2003 named-entity tagging: column files, word-aligned features, entity scores.

The task tags words while BERT sees wordpieces, so each word is predicted from its first piece
(the BERT paper's choice); later pieces carry weight 0. A window holds one sentence (as
transformers' run_ner), not the paper's "maximal document context": expect test F1 a few
tenths below the paper's 92.4 (Base) / 92.8 (Large). Scores are conlleval's, over words: the
alignment here gives every word exactly one prediction, including words of sentences too long
for one window (split into consecutive windows of whole words, nothing dropped) and words
longer than a window (cut to their first pieces: only the first one is predicted from anyway).

Files are the shared task's column format (`word POS chunk NER`, or any columns with the tag
last), blank lines between sentences and `-DOCSTART-` lines between documents. CoNLL-2003
writes entities in IOB1 (I- opens a chunk, B- only splits two adjacent chunks of one type);
bertjax.metrics decodes IOB1 and IOB2 alike, as conlleval does, so the tags are kept as given.
"""

import dataclasses
import os

from absl import logging
import numpy as np

from bertjax import files
from bertjax.finetune import metrics

# CoNLL-2003's nine tags; a tag's index is its class id.
LABELS = ('O', 'B-PER', 'I-PER', 'B-ORG', 'I-ORG', 'B-LOC', 'I-LOC', 'B-MISC', 'I-MISC')


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One sentence: its words and their gold tags (one each; None where the data has none)."""

  words: tuple[str, ...]
  tags: tuple[str | None, ...]


@dataclasses.dataclass(frozen=True)
class Alignment:
  """Which word of its sentence each labelled feature position stands for.

  word_index: int32 [N, L], the word's index in sentence features['example_index'][n] at the
  first wordpiece of each word, -1 at every other position.
  """

  word_index: np.ndarray


def read_conll(path, encoding='utf-8') -> list[Sentence]:
  """Sentences of a CoNLL column file (tag = last column); `-DOCSTART-` lines are skipped."""
  path = os.fspath(path)
  missing = (f'CoNLL file {path} does not exist: pass the path of eng.train, eng.testa or '
             'eng.testb (or any file in that column format)')
  files.require_file(path, missing)
  sentences = []
  words, tags = [], []

  def end_sentence():
    if words:
      sentences.append(Sentence(tuple(words), tuple(tags)))
      words.clear()
      tags.clear()

  if encoding.lower().replace('_', '-') in ('utf-8', 'utf8'):
    encoding = 'utf-8-sig'  # A byte order mark is no part of the first word.
  width = None  # (columns, line number) of the first word line: every one must have as many.
  try:
    # Lines end at \n, \r\n or \r only; columns are separated by spaces or tabs only.
    with files.open(path, encoding=encoding) as f:
      for line_number, line in enumerate(f, 1):
        fields = [c for c in line.rstrip('\n').replace('\t', ' ').split(' ') if c]
        if not line.strip():
          end_sentence()
          continue
        if fields[0] == '-DOCSTART-':
          end_sentence()
          continue
        if len(fields) < 2:
          raise ValueError(f'{path}:{line_number}: {line.strip()!r} has no tag column: CoNLL '
                           'lines are `word ... tag` separated by spaces or tabs')
        width = width or (len(fields), line_number)
        if len(fields) != width[0]:
          raise ValueError(f'{path}:{line_number}: {len(fields)} columns where line {width[1]} '
                           f'has {width[0]} ({line.strip()[:60]!r}): every word line needs the '
                           'same columns; fix the line (a word holds no space)')
        words.append(fields[0])
        tags.append(fields[-1])
  except UnicodeDecodeError as e:
    raise ValueError(f'{path} is not {encoding} text ({e.reason} at byte {e.start}): pass '
                     'encoding= the file\'s encoding (e.g. latin-1)') from None
  end_sentence()
  if not sentences:
    raise ValueError(f'{path} holds no sentences: the file is empty or not in CoNLL format')
  return sentences


def _word_pieces(tokenizer, word, window):
  """A word's wordpieces, at least one ([UNK] for a word that tokenizes to nothing)."""
  pieces = tokenizer.tokenize(word) or [getattr(tokenizer, 'unk_token', '[UNK]')]
  return pieces[:window], len(pieces) > window


def convert_sentences(sentences, tokenizer, max_seq_length, labels=LABELS):
  """(features, Alignment) for tagging: [CLS] pieces [SEP] per window of whole words.

  label_ids/label_weights are set on the first piece of each word; a sentence whose pieces
  do not fit in max_seq_length - 2 takes several consecutive rows (same example_index). A word
  without a gold tag (None: unlabelled test data) is aligned and predicted like any other,
  with label weight 0.
  """
  window = max_seq_length - 2
  if window < 1:
    raise ValueError(f'max_seq_length={max_seq_length} leaves no room for words after [CLS] '
                     'and [SEP]: use 128 (the BERT paper\'s CoNLL setting)')
  label_index = {label: index for index, label in enumerate(labels)}
  rows = []  # (sentence index, pieces, [(position, word index, label id)])
  num_truncated_words = 0
  for s_index, sentence in enumerate(sentences):
    if len(sentence.words) != len(sentence.tags):
      raise ValueError(f'sentence {s_index} has {len(sentence.words)} words but '
                       f'{len(sentence.tags)} tags: each word needs exactly one tag')
    pieces, labelled = [], []
    for w_index, (word, tag) in enumerate(zip(sentence.words, sentence.tags, strict=True)):
      if tag is not None and tag not in label_index:
        raise ValueError(f'sentence {s_index} word {w_index} ({word!r}) has tag {tag!r}, not '
                         f'one of {labels}: pass labels= the tag set of your data')
      word_pieces, truncated = _word_pieces(tokenizer, word, window)
      num_truncated_words += truncated
      if len(pieces) + len(word_pieces) > window:  # Whole words only: start the next row.
        rows.append((s_index, pieces, labelled))
        pieces, labelled = [], []
      labelled.append((len(pieces) + 1, w_index, label_index.get(tag)))  # +1 for [CLS].
      pieces.extend(word_pieces)
    rows.append((s_index, pieces, labelled))
  if num_truncated_words:
    logging.warning('CoNLL: %d words longer than max_seq_length - 2 = %d wordpieces were cut '
                    'to their first pieces', num_truncated_words, window)

  num = len(rows)
  input_ids_NxL = np.zeros((num, max_seq_length), np.int32)
  input_mask_NxL = np.zeros((num, max_seq_length), np.int32)
  label_ids_NxL = np.zeros((num, max_seq_length), np.int32)
  label_weights_NxL = np.zeros((num, max_seq_length), np.float32)
  word_index_NxL = np.full((num, max_seq_length), -1, np.int32)
  example_index_N = np.zeros(num, np.int32)
  for row, (s_index, pieces, labelled) in enumerate(rows):
    tokens = ['[CLS]'] + pieces + ['[SEP]']
    input_ids_NxL[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    input_mask_NxL[row, :len(tokens)] = 1
    example_index_N[row] = s_index
    for position, w_index, label_id in labelled:
      word_index_NxL[row, position] = w_index
      if label_id is not None:  # No gold tag: nothing to learn or score here.
        label_ids_NxL[row, position] = label_id
        label_weights_NxL[row, position] = 1.0
  features = {'input_ids': input_ids_NxL, 'input_mask': input_mask_NxL,
              'segment_ids': np.zeros((num, max_seq_length), np.int32),
              'example_index': example_index_N, 'label_ids': label_ids_NxL,
              'label_weights': label_weights_NxL}
  return features, Alignment(word_index=word_index_NxL)


def word_predictions(logits, features, meta, sentences, labels=LABELS) -> list[list[str]]:
  """One predicted tag per word of every sentence, from logits [N, L, C] of its first piece."""
  logits_NxLxC = np.asarray(logits)
  word_index_NxL = np.asarray(meta.word_index)
  example_index_N = np.asarray(features['example_index'])
  expected = (*word_index_NxL.shape, len(labels))
  if logits_NxLxC.shape != expected or example_index_N.shape[0] != expected[0]:
    raise ValueError(f'CoNLL logits have shape {logits_NxLxC.shape}, expected [N, L, C] = '
                     f'{list(expected)} (one row per feature, in feature order, C = len(labels))')
  pred_NxL = logits_NxLxC.argmax(axis=-1)
  predicted = [[None] * len(sentence.words) for sentence in sentences]
  for row, position in zip(*np.nonzero(word_index_NxL >= 0), strict=True):
    s_index, w_index = int(example_index_N[row]), int(word_index_NxL[row, position])
    if s_index >= len(predicted) or w_index >= len(predicted[s_index]):
      raise ValueError(f'feature row {row} points at sentence {s_index} word {w_index}, which '
                       'does not exist: pass the sentences the features were made from')
    if predicted[s_index][w_index] is not None:
      raise ValueError(f'sentence {s_index} word {w_index} is predicted twice: the features '
                       'and alignment do not belong together')
    predicted[s_index][w_index] = labels[pred_NxL[row, position]]
  for s_index, tags in enumerate(predicted):
    if None in tags:
      raise ValueError(f'sentence {s_index} word {tags.index(None)} has no prediction: pass '
                       'all feature rows of the sentences, in the order convert_sentences made')
  return predicted


def evaluate(logits, features, meta, sentences, labels=LABELS) -> dict[str, float]:
  """conlleval's entity precision/recall/F1 and word accuracy of the predicted tags."""
  predicted = word_predictions(logits, features, meta, sentences, labels)
  return metrics.entity_scores([sentence.tags for sentence in sentences], predicted)


def _one_column(text: str) -> str:
  """`text` as one column: inner whitespace (a JSONL token 'New York') becomes '_', so that
  conlleval's whitespace split still finds every line's columns."""
  return '_'.join(text.split())


def write_predictions(path, sentences, predicted_tags) -> str:
  """Writes `word gold pred` lines (conlleval's input), or `word pred` when the sentences have
  no gold tags (unlabelled test data), a blank line after each sentence; whitespace inside a
  word or tag is written as '_' (`New_York`), so that each line keeps its column count."""
  path = os.fspath(path)
  if len(predicted_tags) != len(sentences):
    raise ValueError(f'{len(predicted_tags)} predicted sentences for {len(sentences)} '
                     'sentences: pass word_predictions() of these sentences')
  for s_index, (sentence, tags) in enumerate(zip(sentences, predicted_tags, strict=True)):
    if len(tags) != len(sentence.words):
      raise ValueError(f'sentence {s_index} has {len(sentence.words)} words but '
                       f'{len(tags)} predicted tags: pass word_predictions() of these sentences')
  gold = {tag is not None for sentence in sentences for tag in sentence.tags}
  if len(gold) > 1:  # One column count in a file: conlleval reads every line alike.
    raise ValueError('some words have gold tags and others none: pass sentences that are all '
                     'labelled (word gold pred lines) or all unlabelled (word pred lines)')
  lines = []
  for sentence, tags in zip(sentences, predicted_tags, strict=True):
    for word, gold_tag, pred in zip(sentence.words, sentence.tags, tags, strict=True):
      columns = (word, pred) if gold_tag is None else (word, gold_tag, pred)
      lines.append(' '.join(_one_column(c) for c in columns) + '\n')
    lines.append('\n')
  files.write_atomically(path, ''.join(lines))  # A local path or a URL.
  return path

"""Pre-training instances from tokenized documents: BERT's packing, NSP and masking, streamed.

The semantics are google-research/bert's create_pretraining_data.py, per document and per
`dupe_factor` pass: a target length (max_seq_length - 3, or with probability short_seq_prob a
uniform 2..max_seq_length - 3, drawn once per document and pass), sentences packed into a chunk
until the target is met or the document ends, segment A = the chunk's first 1..k-1 sentences,
B = the rest (IsNext) or, for NotNext, sentences of another document from a random sentence on
until the target is met (the chunk's unused sentences are put back); the pair truncated, always
from the longer segment, at a random end; `[CLS] A [SEP] B [SEP]`; then masking (masking.py).

Where this differs from the original, and why:
  * NSP balance. The original makes every one-sentence chunk NotNext, so 55-57% of the labels
    are NotNext. Here NotNext is drawn with probability 0.5 for every chunk (the paper's rule);
    a one-sentence chunk drawn IsNext takes the document's next sentence as B; if it is the
    document's last sentence, the sentences before it become A (as many as the target needs);
    a document of one sentence is split at a random word boundary inside it. Only a document
    of a single one-token sentence cannot be IsNext (counted as `forced_not_next`).
  * NotNext pool. The original picks the other document uniformly from the whole corpus, which
    it holds in memory. Here it is picked uniformly from a window of this worker's documents
    around the current one: up to pool_documents / 2 before and after it (fewer when they hold
    more than pool_tokens / 2 tokens). Memory then does not grow with the corpus. Documents
    whose neighbours in the input are related (chapters of one book) get harder negatives.
  * Order. The original shuffles all documents before and all instances after; a stream
    cannot, so the writer shuffles records in a bounded buffer (pretraining_data/writer.py) and the
    input pipeline shuffles again.
  * Masking budget: 15% of the maskable tokens rather than of all tokens (see masking.py),
    which also holds the strategies (masking=wordpiece|whole_word|ngram|span).
  * Truncation removes the same number of tokens from each segment as the original, and draws
    how many of them come off the front as a Binomial(n, 1/2): the distribution of the
    original's token-by-token coin flips, in one vectorised step per batch.
Packing, truncation and masking draw from three separate seeded streams, so a run with
static_masking=False makes exactly the instances of the same run with masking, unmasked.
"""

import bisect
import collections
import dataclasses
import random

import numpy as np

from bertjax.pretraining_data import masking
from bertjax.records import packing

# The longest instance written: past any BERT's position table (a longer length is a typo).
MAX_SEQ_LENGTH = 65536


@dataclasses.dataclass(frozen=True)
class Settings:
  """Instance-creation settings; the names are the original's flags."""

  max_seq_length: int = 128  # Tokens per instance including [CLS] and two [SEP]s.
  max_predictions_per_seq: int = 20  # Cap on masked positions per instance.
  masked_lm_prob: float = 0.15  # Fraction of maskable tokens chosen for prediction.
  short_seq_prob: float = 0.1  # Probability of a shorter target length per document pass.
  dupe_factor: int = 10  # Passes over each document, each with new packing and masks.
  # wordpiece (the original), whole_word (its --do_whole_word_mask), ngram (TF Model Garden's),
  # span (SpanBERT's): see masking.py.
  masking: str = 'wordpiece'
  static_masking: bool = True  # False: unmasked instances for masking in the input pipeline.
  pool_documents: int = 1000  # NotNext candidates: documents around the current one.
  pool_tokens: int = 20_000_000  # ... and at most this many tokens in them.
  # False (MLM only, RoBERTa's DOC-SENTENCES): `[CLS] sentences [SEP]`, contiguous sentences of
  # one document up to the target length, no pairs and no next_sentence_labels feature.
  nsp: bool = True
  # Instances per written row: 1 = one per row (the original); more packs them (packing.py).
  max_instances_per_row: int = 1

  def validate(self):
    """Raises ValueError for settings the algorithm cannot honour."""
    if self.max_seq_length < (5 if self.nsp else 3):
      raise ValueError(f'max_seq_length={self.max_seq_length}: need at least 5 ([CLS] A [SEP] '
                       'B [SEP] with one token in each segment and room for a short target; '
                       '3 without NSP)')
    if self.max_seq_length > MAX_SEQ_LENGTH:  # A typo: its advice was to mask 15M tokens.
      raise ValueError(f'max_seq_length={self.max_seq_length} is past {MAX_SEQ_LENGTH:,} '
                       'tokens: pass the length the model trains at, at most its position '
                       'table (max_position_embeddings: 512 for BERT; the paper trains at 128, '
                       'then 512)')
    masking.check_strategy(self.masking)
    if not self.static_masking and self.masking != 'wordpiece':
      raise ValueError(f'masking={self.masking} chooses static masks, but static_masking=False '
                       'writes unmasked instances: choose it where they are masked '
                       f'(--config.data.masking={self.masking})')
    if self.static_masking and self.max_predictions_per_seq < 1:
      raise ValueError(f'max_predictions_per_seq={self.max_predictions_per_seq}: need >= 1')
    for name in ('masked_lm_prob', 'short_seq_prob'):
      if not 0 <= getattr(self, name) <= 1:
        raise ValueError(f'{name}={getattr(self, name)}: a probability, in [0, 1]')
    if self.static_masking:
      if not self.masked_lm_prob:
        raise ValueError('masked_lm_prob=0 would still mask one token per instance (the '
                         'least it masks): pass a rate in (0, 1), e.g. 0.15 (BERT)')
      if self.masked_lm_prob == 1:  # Training reads the files' rate, in (0, 1) as its own.
        raise ValueError('masked_lm_prob=1 masks every token (nothing left to predict from), '
                         'which training refuses (config.data.masked_lm_prob in (0, 1)): pass '
                         'a rate in (0, 1), e.g. 0.15 (BERT)')
      # The cap must not silently lower the rate (as dynamic masking refuses it too): a full
      # instance's share must fit the predictions.
      maskable, wanted = masking.full_row_budget(self.max_seq_length, self.masked_lm_prob,
                                                 self.nsp)
      if wanted > self.max_predictions_per_seq:
        raise ValueError(
            f'masked_lm_prob={self.masked_lm_prob} masks {wanted} of a full instance\'s '
            f'{maskable} tokens, but max_predictions_per_seq={self.max_predictions_per_seq} '
            f'caps it: set max_predictions_per_seq to {wanted} or more (BERT: 20 at 128 '
            'tokens, 80 at 512)')
    if self.max_instances_per_row < 1:
      raise ValueError(f'max_instances_per_row={self.max_instances_per_row}: need >= 1 (1 = '
                       'unpacked)')
    # An instance's fewest tokens, as above (training's bound too: config_check). More packs no
    # more, in larger rows: pack=9999 wrote 6 GB at 128 tokens.
    least, what = (5, '[CLS] A [SEP] B [SEP]') if self.nsp else (3, '[CLS] A [SEP]')
    if self.max_instances_per_row > (most := max(self.max_seq_length // least, 1)):
      raise ValueError(f'max_instances_per_row={self.max_instances_per_row} exceeds the {most} '
                       f'instances of {least} tokens ({what}) a row of '
                       f'max_seq_length={self.max_seq_length} could hold: pass {min(most, 3)} '
                       '(MLPerf BERT packs 3) or less')
    for name, low in (('dupe_factor', 1), ('pool_documents', 2), ('pool_tokens', 1)):
      if getattr(self, name) < low:
        raise ValueError(f'{name}={getattr(self, name)}: need >= {low}')
    self._check_predictions()

  def _check_predictions(self):
    """Refuses static masks that training would refuse (config_check: the files'
    max_predictions_per_seq over max_seq_length). A packed row (--pack) holds max_seq_length
    tokens and max_predictions_per_seq predictions in all: the same rule."""
    predictions, length = self.max_predictions_per_seq, self.max_seq_length
    if self.static_masking and predictions > length:
      maskable, wanted = masking.full_row_budget(length, self.masked_lm_prob, self.nsp)
      raise ValueError(
          f'max_predictions_per_seq={predictions} exceeds max_seq_length={length}: training '
          "refuses such files (config.data.max_predictions_per_seq, the files' value, must be at "
          f'most data.max_seq_length); set max_predictions_per_seq from {wanted} to {length} '
          f'(masked_lm_prob={self.masked_lm_prob} masks {wanted} of a full instance\'s '
          f'{maskable} tokens), or a longer max_seq_length')


def truncation(len_a, len_b, max_tokens):
  """(cut_a, cut_b): tokens the original's truncate_seq_pair removes from each segment.

  It removes one token at a time from the longer segment (B on ties) until the pair fits:
  first the difference in length, then alternately from B and A. Vectorised over arrays.
  """
  excess = np.maximum(len_a + len_b - max_tokens, 0)
  from_longer = np.minimum(excess, np.abs(len_a - len_b))
  rest = excess - from_longer
  a_longer = len_a > len_b
  return (np.where(a_longer, from_longer, 0) + rest // 2,
          np.where(a_longer, 0, from_longer) + rest - rest // 2)


def _sentence_end(bounds, start, min_tokens):
  """End index of the fewest sentences from `start` with at least min_tokens tokens."""
  return bisect.bisect_left(bounds, bounds[start] + min_tokens, start + 1, len(bounds) - 1)


class InstanceMaker:
  """Turns a stream of Documents into instance batches (dicts of numpy arrays)."""

  def __init__(self, settings, encoder, seed, counts):
    settings.validate()
    self.settings = settings
    self.encoder = encoder
    self.counts = counts
    # seed: a tuple of non-negative ints (the random seed, the worker or file index).
    self._rng = random.Random(f'instances-{seed}')
    self._np_rng = np.random.default_rng([*seed, 1])
    self._truncation_rng = np.random.default_rng([*seed, 2])
    self._before = collections.deque()  # Processed documents still in the pool.
    self._after = collections.deque()  # Documents read but not processed yet.
    self._tokens = [0, 0]  # Tokens in _before and in _after.
    self._specs = []  # (A tokens, a0, a1, B tokens, b0, b1, is_random) awaiting a batch.

  def add(self, document):
    """Adds a document; documents are processed once enough later ones are in the pool."""
    self.counts['sentences'] += len(document.bounds) - 1
    if self.settings.nsp:
      document = self._split_long_sentences(document)
    self._after.append(document)
    self._tokens[1] += len(document.tokens)
    half_docs, half_tokens = self.settings.pool_documents // 2, self.settings.pool_tokens // 2
    while len(self._after) > half_docs or (len(self._after) > 1 and
                                           self._tokens[1] > half_tokens):
      self._process_next()

  def finish(self):
    """Processes the documents still waiting."""
    while self._after:
      self._process_next()

  def num_pending(self):
    return len(self._specs)

  def _process_next(self):
    document = self._after.popleft()
    self._tokens[1] -= len(document.tokens)
    self.counts['documents'] += 1
    self.counts['document_tokens'] += len(document.tokens)
    if self.encoder.unk_id is not None:
      self.counts['unk_tokens'] += int(np.count_nonzero(document.tokens == self.encoder.unk_id))
    for _ in range(self.settings.dupe_factor):
      self._add_instances(document)
    self._before.append(document)
    self._tokens[0] += len(document.tokens)
    half_docs, half_tokens = self.settings.pool_documents // 2, self.settings.pool_tokens // 2
    while len(self._before) > half_docs or (self._before and self._tokens[0] > half_tokens):
      self._tokens[0] -= len(self._before.popleft().tokens)

  def _split_long_sentences(self, document):
    """The document with each sentence longer than a pair's room cut into pieces of half that
    room: the original truncates such a sentence to one row and drops the rest of it (all but
    a row of an unpunctuated paragraph of --input_format=text). Two halves make a row, so
    pairs of pieces lose at most a token to truncation."""
    room = self.settings.max_seq_length - 3
    bounds = np.asarray(document.bounds)
    if not (np.diff(bounds) > room).any():
      return document
    half = (room + 1) // 2
    pieces = [np.arange(s0, s1, half if s1 - s0 > room else room)
              for s0, s1 in zip(bounds[:-1], bounds[1:], strict=True)]
    self.counts['long_sentences_split'] += int((np.diff(bounds) > room).sum())
    return document._replace(bounds=[*np.concatenate(pieces).tolist(), int(bounds[-1])])

  def _random_other_document(self, document):
    size = len(self._before) + len(self._after)
    if size == 0:  # Nothing else in this stream: the original falls back to the same one.
      self.counts['not_next_from_same_document'] += 1
      return document
    index = int(self._rng.random() * size)
    if index < len(self._before):
      return self._before[index]
    return self._after[index - len(self._before)]

  def _add_single_segments(self, doc):
    """One MLM-only pass over `doc`: runs of whole sentences, each run ended once it reaches
    the target length or before a sentence that would overflow the row; a sentence longer
    than the row alone is cut into row-sized pieces (nothing is dropped)."""
    rand = self._rng.random
    max_tokens = self.settings.max_seq_length - 2
    target = max_tokens
    if rand() < self.settings.short_seq_prob:
      target = 1 + int(rand() * max_tokens)  # randint(1, max_tokens), as the original's.

    def emit(a0, a1):
      self._specs.append((doc.tokens, a0, a1, doc.tokens, 0, 0, False))

    bounds = doc.bounds
    start = bounds[0]
    for i in range(len(bounds) - 1):
      s0, s1 = bounds[i], bounds[i + 1]
      if s1 - start > max_tokens and s0 > start:
        emit(start, s0)
        start = s0
      while s1 - start > max_tokens:
        emit(start, start + max_tokens)
        start += max_tokens
      if s1 - start >= target:
        emit(start, s1)
        start = s1
    if bounds[-1] > start:
      emit(start, bounds[-1])

  def _add_instances(self, doc):
    """One pass of the original's create_instances_from_document over `doc`."""
    if not self.settings.nsp:
      self._add_single_segments(doc)
      return
    rand = self._rng.random
    max_tokens = self.settings.max_seq_length - 3
    target = max_tokens
    if rand() < self.settings.short_seq_prob:
      target = 2 + int(rand() * (max_tokens - 1))  # randint(2, max_tokens).
    bounds = doc.bounds
    num_sentences = len(bounds) - 1
    chunk_start = i = 0
    while i < num_sentences:
      if i < num_sentences - 1 and bounds[i + 1] - bounds[chunk_start] < target:
        i += 1
        continue
      size = i + 1 - chunk_start
      a_end = chunk_start + (1 + int(rand() * (size - 1)) if size >= 2 else 1)
      a0, a1 = bounds[chunk_start], bounds[a_end]
      b_doc = doc
      is_random = rand() < 0.5
      if not is_random and size >= 2:
        b0, b1 = a1, bounds[i + 1]
      elif not is_random and i + 1 < num_sentences:  # One sentence: the next one is B.
        b0, b1 = a1, bounds[i + 2]
        i += 1
        self.counts['is_next_from_next_sentence'] += 1
      elif not is_random and i > 0:  # The last sentence alone: the ones before it are A.
        b0, b1 = a0, a1
        first = bisect.bisect_right(bounds, bounds[i] - (target - (b1 - b0)), 0, i) - 1
        a0, a1 = bounds[max(0, min(first, i - 1))], bounds[i]
        self.counts['is_next_from_previous_sentences'] += 1
      elif not is_random and a1 - a0 >= 2:  # A one-sentence document: split it.
        starts = np.flatnonzero(~self.encoder.continuation[doc.tokens[a0 + 1:a1]]) + a0 + 1
        if starts.size:
          split = int(starts[int(rand() * starts.size)])
        else:
          split = a0 + 1 + int(rand() * (a1 - a0 - 1))
        a1, b0, b1 = split, split, a1
        self.counts['is_next_split_sentence'] += 1
      else:
        if not is_random:
          self.counts['forced_not_next'] += 1
        is_random = True
        b_doc = self._random_other_document(doc)
        b_bounds = b_doc.bounds
        start = int(rand() * (len(b_bounds) - 1))
        b0 = b_bounds[start]
        b1 = b_bounds[_sentence_end(b_bounds, start, target - (a1 - a0))]
        i = a_end - 1  # The chunk's sentences not used in A start the next chunk.
      self._specs.append((doc.tokens, a0, a1, b_doc.tokens, b0, b1, is_random))
      chunk_start = i + 1
      i += 1

  def pop_batch(self, size):
    """Feature arrays of up to `size` instances, in the order they were made."""
    specs, self._specs = self._specs[:size], self._specs[size:]
    num, seq = len(specs), self.settings.max_seq_length
    a_tokens, a0, a1, b_tokens, b0, b1, is_random = zip(*specs, strict=True)
    a0, a1, b0, b1 = (np.array(x, np.int64) for x in (a0, a1, b0, b1))
    specials = 3 if self.settings.nsp else 2  # [CLS] A [SEP] (B [SEP]).
    cut_a, cut_b = truncation(a1 - a0, b1 - b0, seq - specials)
    # Each cut token comes off the front or the back with probability 1/2, as in the original.
    front_a = self._truncation_rng.binomial(cut_a, 0.5)
    front_b = self._truncation_rng.binomial(cut_b, 0.5)
    a0, a1 = a0 + front_a, a1 - (cut_a - front_a)
    b0, b1 = b0 + front_b, b1 - (cut_b - front_b)
    len_a, len_b = a1 - a0, b1 - b0
    self.counts['truncated_tokens'] += int(cut_a.sum() + cut_b.sum())
    # One gather for the whole batch from the documents it uses, laid end to end.
    slots = {}
    a_slot = [slots.setdefault(id(t), len(slots)) for t in a_tokens]
    b_slot = [slots.setdefault(id(t), len(slots)) for t in b_tokens]
    arrays = {id(t): t for t in a_tokens + b_tokens}
    used = [arrays[key] for key in slots]
    doc_start = np.cumsum([0] + [len(t) for t in used[:-1]])
    tokens = np.concatenate(used)
    piece_src = np.stack([doc_start[a_slot] + a0, doc_start[b_slot] + b0], axis=1).ravel()
    piece_lens = np.stack([len_a, len_b], axis=1).ravel()
    piece_cols = np.stack([np.ones(num, np.int64), len_a + 2], axis=1).ravel()
    piece_dest = np.repeat(np.arange(num), 2) * seq + piece_cols
    within = np.arange(piece_lens.sum()) - np.repeat(np.cumsum(piece_lens) - piece_lens,
                                                     piece_lens)
    ids = np.zeros((num, seq), np.int32)
    ids.ravel()[np.repeat(piece_dest, piece_lens) + within] = (
        tokens[np.repeat(piece_src, piece_lens) + within])
    is_random = np.array(is_random, np.int64)
    rows = np.arange(num)
    length = len_a + len_b + specials  # Without NSP both [SEP]s below are the same one.
    ids[:, 0] = self.encoder.cls_id
    ids[rows, len_a + 1] = self.encoder.sep_id
    ids[rows, length - 1] = self.encoder.sep_id
    pos = np.arange(seq)
    input_mask = pos < length[:, None]
    segment_ids = input_mask & (pos >= (len_a + 2)[:, None])
    self.counts['instances'] += num
    self.counts['instance_tokens'] += int(length.sum())
    self.counts['not_next'] += int(is_random.sum())
    # Booleans viewed as uint8 (no copy): 0/1 values, as the original's int64 features hold.
    features = {'input_ids': ids, 'input_mask': input_mask.view(np.uint8),
                'segment_ids': segment_ids.view(np.uint8)}
    if self.settings.static_masking:
      # As the original, [CLS] and [SEP] are never chosen, wherever they are; nor [MASK], as
      # in dynamic masking (a model whose [MASK] is a user-defined piece reads it from text).
      candidates = (input_mask & (ids != self.encoder.cls_id) & (ids != self.encoder.sep_id)
                    & (ids != self.encoder.mask_id))
      masked, positions, label_ids, weights = masking.mask_batch(
          ids, candidates, self._np_rng, masked_lm_prob=self.settings.masked_lm_prob,
          max_predictions=self.settings.max_predictions_per_seq,
          vocab_size=self.encoder.vocab_size, mask_id=self.encoder.mask_id,
          strategy=self.settings.masking, continuation=self.encoder.continuation)
      self.counts['masked_lm_predictions'] += int(weights.sum())
      self.counts['maskable_tokens'] += int(candidates.sum())
      features.update(input_ids=masked, masked_lm_positions=positions, masked_lm_ids=label_ids,
                      masked_lm_weights=weights)
    if self.settings.nsp:
      features['next_sentence_labels'] = is_random[:, None]
    return features


def instance_batches(documents, settings, encoder, seed, counts, batch_size=1024):
  """Yields feature batches (dicts of [N, ...] arrays) made from a stream of Documents: N
  instances, or with settings.max_instances_per_row > 1 the rows they pack into
  (packing.pack_arrays, within each batch); counts['rows'] counts what is yielded."""
  maker = InstanceMaker(settings, encoder, seed, counts)

  def rows(batch):
    if settings.max_instances_per_row > 1:
      batch = packing.pack_arrays(batch, settings.max_instances_per_row)
    counts['rows'] += len(batch['input_ids'])
    return batch

  for document in documents:
    maker.add(document)
    while maker.num_pending() >= batch_size:
      yield rows(maker.pop_batch(batch_size))
  maker.finish()
  while maker.num_pending():
    yield rows(maker.pop_batch(batch_size))

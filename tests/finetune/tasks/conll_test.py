"""CoNLL-2003: reading the column format, first-piece alignment, windows, entity scores."""

import zipfile

import numpy as np
import pytest

from bertjax.finetune.tasks import conll
from bertjax.text import tokenizer

FIXTURE = 'allennlp/tests/fixtures/data/conll2003.txt'


@pytest.fixture
def tok(minilm_dir):
  return tokenizer.FullTokenizer(minilm_dir / 'vocab.txt', do_lower_case=True)


@pytest.fixture
def fixture_file(allennlp_wheel, tmp_path):
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    text = wheel.read(FIXTURE).decode('utf-8')
  path = tmp_path / 'conll2003.txt'
  path.write_text(text, encoding='utf-8')
  return path, text


def gold_logits(features, meta, sentences, labels=conll.LABELS):
  """One-hot logits [N, L, C] of each word's gold tag at its labelled position."""
  logits = np.zeros((*meta.word_index.shape, len(labels)), np.float32)
  for row, position in zip(*np.nonzero(meta.word_index >= 0), strict=True):
    sentence = sentences[features['example_index'][row]]
    tag = sentence.tags[meta.word_index[row, position]]
    logits[row, position, labels.index(tag)] = 1.0
  return logits


def test_reads_allennlp_fixture(fixture_file, tok):
  path, text = fixture_file
  sentences = conll.read_conll(path)
  # Counted from the text independently: blocks between blank lines, minus document markers.
  blocks = [[line for line in block.split('\n') if line and not line.startswith('-DOCSTART-')]
            for block in text.split('\n\n')]
  blocks = [block for block in blocks if block]
  assert len(sentences) == len(blocks) == 2
  assert sum(len(s.words) for s in sentences) == sum(len(b) for b in blocks) == 14
  for sentence, block in zip(sentences, blocks, strict=True):
    assert list(sentence.words) == [line.split('\t')[0] for line in block]
    assert list(sentence.tags) == [line.split('\t')[3] for line in block]
  assert sentences[0].words[:3] == ('U.N.', 'official', 'Ekeus')
  assert sentences[0].tags[:3] == ('I-ORG', 'O', 'I-PER')

  for max_seq_length in (32, 5):  # 5 splits both sentences into several windows.
    features, meta = conll.convert_sentences(sentences, tok, max_seq_length, conll.LABELS)
    logits = gold_logits(features, meta, sentences)
    assert conll.evaluate(logits, features, meta, sentences) == {
        'precision': 1.0, 'recall': 1.0, 'f1': 1.0, 'accuracy': 1.0}
  assert features['input_ids'].shape[0] > len(sentences)
  # Predicting O for U.N. loses one of the 6 entities (IOB1: 3 per sentence): P 5/5, R 5/6.
  u_n = (features['example_index'] == 0)[:, None] & (meta.word_index == 0)
  logits[u_n] = np.eye(len(conll.LABELS))[0]
  scores = conll.evaluate(logits, features, meta, sentences)
  assert scores['precision'] == 1.0 and scores['recall'] == pytest.approx(5 / 6)
  assert scores['accuracy'] == pytest.approx(13 / 14)


def test_word_of_several_pieces_is_labelled_on_its_first(tok):
  sentences = [conll.Sentence(('U.N.', 'official', 'Ekeus', 'heads'), ('I-ORG', 'O', 'I-PER', 'O'))]
  features, meta = conll.convert_sentences(sentences, tok, 16, conll.LABELS)
  length = int(features['input_mask'][0].sum())
  assert tok.convert_ids_to_tokens(features['input_ids'][0, :length].tolist()) == [
      '[CLS]', 'u', '.', 'n', '.', 'official', 'ek', '##eus', 'heads', '[SEP]']
  # First pieces at 1 (u), 5 (official), 6 (ek), 8 (heads).
  np.testing.assert_array_equal(np.nonzero(features['label_weights'][0])[0], [1, 5, 6, 8])
  assert features['label_weights'].dtype == np.float32
  assert features['label_ids'][0, [1, 5, 6, 8]].tolist() == [
      conll.LABELS.index(t) for t in ('I-ORG', 'O', 'I-PER', 'O')]
  assert meta.word_index[0, :10].tolist() == [-1, 0, -1, -1, -1, 1, 2, -1, 3, -1]
  assert not features['segment_ids'].any() and features['example_index'].tolist() == [0]
  assert (features['input_ids'][0, 10:] == 0).all()


def test_long_sentence_takes_two_windows_of_whole_words(tok):
  sentences = [conll.Sentence(('Joel', 'Ekeus', 'lives', 'in', 'Seattle'),
                              ('B-PER', 'I-PER', 'O', 'O', 'B-LOC')),
               conll.Sentence(('Seattle',), ('B-LOC',))]
  # 4 pieces fit a window: joel ek ##eus lives | in seattle.
  features, meta = conll.convert_sentences(sentences, tok, 6, conll.LABELS)
  rows = [tok.convert_ids_to_tokens(ids[:int(mask.sum())].tolist())
          for ids, mask in zip(features['input_ids'], features['input_mask'], strict=True)]
  assert rows == [['[CLS]', 'joel', 'ek', '##eus', 'lives', '[SEP]'],
                  ['[CLS]', 'in', 'seattle', '[SEP]'],
                  ['[CLS]', 'seattle', '[SEP]']]
  assert features['example_index'].tolist() == [0, 0, 1]
  assert meta.word_index.tolist() == [[-1, 0, 1, -1, 2, -1],
                                      [-1, 3, 4, -1, -1, -1],
                                      [-1, 0, -1, -1, -1, -1]]
  assert features['label_weights'].sum() == 6


def test_word_longer_than_the_window_is_cut(tok):
  sentences = [conll.Sentence(('Joel', 'supercalifragilistic', 'Joel'), ('B-PER', 'B-MISC', 'O'))]
  features, meta = conll.convert_sentences(sentences, tok, 5, conll.LABELS)
  rows = [tok.convert_ids_to_tokens(ids[:int(mask.sum())].tolist())
          for ids, mask in zip(features['input_ids'], features['input_mask'], strict=True)]
  # Its 6 pieces (super ##cal ##if ##rag ##ilis ##tic) cut to the window of 3.
  assert rows == [['[CLS]', 'joel', '[SEP]'], ['[CLS]', 'super', '##cal', '##if', '[SEP]'],
                  ['[CLS]', 'joel', '[SEP]']]
  assert meta.word_index[:, 1].tolist() == [0, 1, 2]
  assert features['label_ids'][:, 1].tolist() == [conll.LABELS.index(t)
                                                  for t in sentences[0].tags]
  predicted = conll.word_predictions(gold_logits(features, meta, sentences), features, meta,
                                     sentences)
  assert predicted == [['B-PER', 'B-MISC', 'O']]


@pytest.mark.parametrize('max_seq_length', [3, 4, 7, 64])
def test_alignment_round_trip(tok, fixture_file, max_seq_length):
  rng = np.random.default_rng(max_seq_length)
  words = [w for s in conll.read_conll(fixture_file[0]) for w in s.words]
  words += ['supercalifragilistic', 'unaffable', '\u200b']  # The last tokenizes to nothing.
  sentences = []
  for _ in range(12):
    size = int(rng.integers(1, 15))
    sentences.append(conll.Sentence(
        tuple(rng.choice(words, size)), tuple(rng.choice(conll.LABELS, size))))
  features, meta = conll.convert_sentences(sentences, tok, max_seq_length, conll.LABELS)
  # Labels at the labelled positions are the words' tags, via the alignment.
  logits = gold_logits(features, meta, sentences)
  np.testing.assert_array_equal(
      features['label_ids'], np.where(meta.word_index >= 0, logits.argmax(-1), 0))
  np.testing.assert_array_equal(features['label_weights'], meta.word_index >= 0)
  # Predictions come back one per word, every word once, in order.
  logits_from_labels = np.eye(len(conll.LABELS), dtype=np.float32)[features['label_ids']]
  predicted = conll.word_predictions(logits_from_labels, features, meta, sentences)
  assert predicted == [list(s.tags) for s in sentences]
  assert meta.word_index.max() < 15 and (features['input_mask'].sum(1) <= max_seq_length).all()


def test_bad_inputs(tok, tmp_path):
  with pytest.raises(ValueError, match=r"word 1 \('Seattle'\) has tag 'B-CITY', not one of"):
    conll.convert_sentences([conll.Sentence(('in', 'Seattle'), ('O', 'B-CITY'))], tok, 8)
  with pytest.raises(FileNotFoundError, match='eng.train'):
    conll.read_conll(tmp_path / 'missing.txt')
  (tmp_path / 'bad.txt').write_text('-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects\n')
  with pytest.raises(ValueError, match=r"bad.txt:4: 'rejects' has no tag column"):
    conll.read_conll(tmp_path / 'bad.txt')
  (tmp_path / 'empty.txt').write_text('-DOCSTART- -X- -X- O\n\n')
  with pytest.raises(ValueError, match='holds no sentences'):
    conll.read_conll(tmp_path / 'empty.txt')
  with pytest.raises(ValueError, match='no room for words'):
    conll.convert_sentences([], tok, 2)
  sentences = [conll.Sentence(('Joel', 'lives', 'here'), ('B-PER', 'O', 'O'))]
  features, meta = conll.convert_sentences(sentences, tok, 3)  # One word a row.
  logits = gold_logits(features, meta, sentences)
  with pytest.raises(ValueError, match=r'shape \(2, 3, 9\), expected \[N, L, C\] = \[3, 3, 9\]'):
    conll.word_predictions(logits[1:], features, meta, sentences)
  dropped = ({k: v[1:] for k, v in features.items()}, conll.Alignment(meta.word_index[1:]))
  with pytest.raises(ValueError, match='sentence 0 word 0 has no prediction'):
    conll.word_predictions(logits[1:], *dropped, sentences)


def test_reads_space_separated_documents_and_writes_conlleval_input(tok, tmp_path):
  (tmp_path / 'eng.testa').write_text(
      '-DOCSTART- -X- -O O\n\nCRICKET NNP I-NP O\n- : O O\n\n\nLEICESTERSHIRE NNP I-NP I-ORG\n'
      'TAKE NNP I-NP O\n-DOCSTART- -X- -O O\nAT NNP I-NP O\n')
  sentences = conll.read_conll(tmp_path / 'eng.testa')
  assert sentences == [conll.Sentence(('CRICKET', '-'), ('O', 'O')),
                       conll.Sentence(('LEICESTERSHIRE', 'TAKE'), ('I-ORG', 'O')),
                       conll.Sentence(('AT',), ('O',))]
  predicted = [['O', 'O'], ['B-ORG', 'I-ORG'], ['I-LOC']]
  path = conll.write_predictions(tmp_path / 'out' / 'pred.txt', sentences, predicted)
  assert open(path).read() == ('CRICKET O O\n- O O\n\nLEICESTERSHIRE I-ORG B-ORG\nTAKE O I-ORG\n'
                               '\nAT O I-LOC\n\n')
  with pytest.raises(ValueError, match='sentence 1 has 2 words but 1 predicted tags'):
    conll.write_predictions(tmp_path / 'x.txt', sentences, [['O', 'O'], ['O'], ['O']])


def test_a_line_with_other_columns_than_the_file_is_an_error(tmp_path):
  path = tmp_path / 'eng.testa'
  path.write_text('-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\n'
                  'German JJ B-NP I-NP I-MISC\n')
  with pytest.raises(ValueError, match=r"eng.testa:6: 5 columns where line 3 has 4 \('German JJ "
                                       r"B-NP I-NP I-MISC'\): every word line needs the same "
                                       r'columns; fix the line'):
    conll.read_conll(path)


def test_a_bom_u2028_and_a_no_break_space_are_no_separators(tmp_path):
  path = tmp_path / 'eng.train'
  path.write_bytes('\ufeff-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nre\u2028jects VBZ B-VP O\n'
                   '10\u00a0000 CD I-NP O\r\n'.encode('utf-8'))
  assert conll.read_conll(path) == [conll.Sentence(('EU', 're\u2028jects', '10\u00a0000'),
                                                   ('I-ORG', 'O', 'O'))]


def test_predictions_without_gold_are_two_columns_and_words_keep_one_column(tmp_path):
  """conlleval splits lines on whitespace: a word holding a space ('New York', possible in
  JSONL) is written New_York; sentences without gold (None) are `word pred`."""
  labelled = [conll.Sentence(('Anna', 'New York'), ('B-PER', 'B-LOC'))]
  path = conll.write_predictions(tmp_path / 'gold.txt', labelled, [['B-PER', 'O']])
  assert open(path).read() == 'Anna B-PER B-PER\nNew_York B-LOC O\n\n'
  unlabelled = [conll.Sentence(('Anna', 'New\tYork '), (None, None))]
  path = conll.write_predictions(tmp_path / 'none.txt', unlabelled, [['B-PER', 'O']])
  assert open(path).read() == 'Anna B-PER\nNew_York O\n\n'
  with pytest.raises(ValueError, match='some words have gold tags and others none'):
    conll.write_predictions(tmp_path / 'mixed.txt', labelled + unlabelled,
                            [['O', 'O'], ['O', 'O']])

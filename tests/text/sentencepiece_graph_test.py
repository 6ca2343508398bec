"""The in-graph SentencePiece tokenizer (a SavedModel's) gives bertjax's ids: casing, accents,
digits with commas, CJK, final sigma, characters newer than Python's Unicode tables, empty."""

import gzip
import itertools
import random

import pytest

from bertjax.pretraining_data import embedded
from bertjax.text import fast_tokenizer
from bertjax.text import sentencepiece_graph
from bertjax.text import vocab_files
from bertjax.text import vocab_learner

ODD_TEXTS = ['', 'The KING doth Speak', 'Café, naïve RÉSUMÉ; Ångström', '1895, 9,000 and 3.14',
             '日本語 中文 한국어', 'Ｆｕｌｌ ﬁne ½', "``so'' said   he\t\n", 'İ ß Ǆ straße',
             "o'er th' 22, x,y", 'ΟΔΟΣ ΣΟΦΟΣ, Σ中 ΑΣ.Β ΑΣ\'', '¹²³, ①, 9,a ,9, ,,',
             '\u3000x\u00a0y\u2028z\x1c', 'a\u0301\u0301b ḉ', '[MASK] x', '1,2,3,4,',
             '\u2581a \u2581 9,', 'ǅ ǈ ᾈ ﬃ', 'x\U0001ccefY\U0001ccdb',
             # NUL: TF's regex_split and lower end a string there.
             'a\x00B c', '\x00', 'ΑΣ\x00Σ É\x00\x00', '\x00x\U0001ccef\x00']


def random_texts(seed: int, count: int) -> list[str]:
  """Text drawn from all of Unicode and from characters the normalisation treats specially."""
  rng = random.Random(seed)
  special = list(" ,,,0123456789ΣσΑαÉé\u0301\u02b0'`.:·\t\u3000中İ\U0001ccef")
  return [''.join(rng.choice(special) if rng.random() < 0.6 else chr(rng.randrange(0x30000))
                  for _ in range(rng.randint(0, 30))).encode('utf-8', 'replace').decode()
          for _ in range(count)]


@pytest.fixture(scope='module')
def models(tmp_path_factory):
  root = tmp_path_factory.mktemp('spm_graph')
  out = {}
  for lower in (True, False):
    path = root / f'{lower}.model'
    vocab_learner.learn_sentencepiece(str(embedded.corpus_path()), path, 512,
                                      do_lower_case=lower, input_sentence_size=5_000)
    out[lower] = path
  return out


@pytest.mark.parametrize('lower', [True, False])
def test_in_graph_ids_equal_bertjax_ids(models, lower):
  tf, tf_text = fast_tokenizer.import_tf()
  ours = vocab_files.for_model(models[lower], do_lower_case=lower)
  graph = sentencepiece_graph.Tokenizer(tf, tf_text, models[lower].read_bytes(), lower)
  texts = ODD_TEXTS + random_texts(0, 3000)
  got = graph.tokenize(tf.constant(texts)).to_list()
  wrong = [(t, ours.tokenize(t)) for t, ids in zip(texts, got, strict=True)
           if ids != ours.encode(t)]
  assert not wrong, wrong[:5]
  # The digit-comma rule and the final sigma did happen (the cases are exercised).
  if lower:
    assert graph.preprocess(tf.constant(['ΟΔΟΣ'])).numpy()[0].decode() == 'οδος'
    assert ',' in ours.convert_ids_to_tokens(got[ODD_TEXTS.index('1,2,3,4,')])


def test_in_graph_special_tokens_typed_in_the_text_are_text(tmp_path):
  """As bertjax's tokenizer (tokenizer_test): a user-defined [MASK] matched in the text, or a
  cased '[MASK]' spelt by an unknown run, gave the [MASK] id in the graph too."""
  sentencepiece = pytest.importorskip('sentencepiece')
  tf, tf_text = fast_tokenizer.import_tf()
  with gzip.open(embedded.corpus_path(), 'rt', encoding='utf-8') as f:
    lines = [line.lower() for line in itertools.islice(f, 3000) if line.strip()]
  texts = ODD_TEXTS + ['The [MASK] sat [SEP] on <unk> [CLS] x', '[MASK]', 'a[MASK]b 9,[SEP]',
                       '[SEP][SEP] x [MASK], 9,', '[mask] [ MASK ]']
  for kind in ('user_defined_symbols', 'control_symbols'):
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(tmp_path / kind), vocab_size=400,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, minloglevel=2,
        **{kind: ['[CLS]', '[SEP]', '[MASK]']})
    model = tmp_path / f'{kind}.model'
    ours = vocab_files.for_model(model, do_lower_case=False, check_casing=False)
    graph = sentencepiece_graph.Tokenizer(tf, tf_text, model.read_bytes(), False)
    got = graph.tokenize(tf.constant(texts)).to_list()
    assert got == [ours.encode(t) for t in texts], kind
    assert not {ours.vocab[t] for t in ('[CLS]', '[SEP]', '[MASK]')} & {i for r in got for i in r}

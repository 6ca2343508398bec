"""A SentencePiece model's tokenizer as transformers' AlbertTokenizer (ALBERT's tokenization).

A transformers folder gets the model file as `spiece.model` (AlbertTokenizer's name for it) and a
`tokenizer.json` built here with the tokenizers library, in the pipeline AlbertTokenizer builds:
ALBERT's normalisation (`` and '' to ", NFKD accent stripping, lower case) then the model's own
normaliser (its precompiled charsmap), whitespace split with '▁' word starts, the unigram model
with the piece scores. transformers reads the tokenizer.json, so loading needs neither the
sentencepiece package nor its protobuf (transformers 5 cannot convert a .model file where
protobuf is older than the sentencepiece_model_pb2 it ships).

ALBERT keeps a trailing comma after digits a piece of its own ('9,' -> '9', ','): AlbertTokenizer
does it by scoring such pieces 100 lower (transformers' AlbertConverter), and so does this file.
`check` tokenizes probe texts both ways and refuses a model whose ids would differ (a BPE model, a
model without the dummy '▁' prefix or with extra whitespace kept, user-defined pieces).
"""

import json

from absl import logging

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.text import vocab_files

MODEL_FILE = 'spiece.model'  # transformers' AlbertTokenizer.vocab_files_names.
# The pieces bertjax builds inputs with, by name; the unknown and padding pieces are the model's
# own (special_tokens).
SPECIAL = {'cls_token': '[CLS]', 'sep_token': '[SEP]', 'mask_token': '[MASK]',
           'bos_token': '[CLS]', 'eos_token': '[SEP]'}
# Texts whose ids must agree: casing, accents, digits and commas, CJK, full-width letters,
# ligatures, quotes, runs of spaces, the empty string, SentencePiece's own '▁' typed in the text
# (transformers' Metaspace splits words there; a model without NFKC keeps it a piece).
PROBES = ('', 'Hello World', 'THE KING doth SPEAK, and ALL listen.', 'Café naïve résumé ÅNGSTRÖM',
          'in 1895, 9,000 men; 3.14 and 1,2,3, 42,', '日本語のテキスト 中文 한국어',
          'Ａll ｆｕｌｌｗｉｄｔｈ ①②', "``quoted'' text \"here\"", '  many   spaces\there\n  x  ',
          'emoji 🙂 ﬁ ligature ½', 'İstanbul ß straße Ǆ', 'x,y 1,2 a1, 22, 9,',
          "don't won't o'er th'", 'ÀÉÎÕÜ àéîõü ñ ç', 'tab\tnew\nline\r\nend',
          'a \u2581b \u2581 x\u2581y')


def _fields(data: bytes):
  """(field number, wire type, value) of a serialized protobuf message, in order: varints as
  ints, length-delimited fields as bytes (fixed-width ones skipped as bytes too)."""
  i = 0

  def varint():
    nonlocal i
    shift = value = 0
    while True:
      byte = data[i]
      i += 1
      value |= (byte & 0x7F) << shift
      shift += 7
      if byte < 0x80:
        return value
  while i < len(data):
    key = varint()
    number, wire = key >> 3, key & 7
    if wire == 0:
      yield number, wire, varint()
    elif wire == 2:
      size = varint()
      yield number, wire, data[i:i + size]
      i += size
    elif wire in (1, 5):
      size = 8 if wire == 1 else 4
      yield number, wire, data[i:i + size]
      i += size
    else:
      raise ValueError(f'unsupported protobuf wire type {wire}')


def _normalizer(model_bytes: bytes) -> tuple[bytes, int, bool]:
  """(precompiled charsmap, model type: 1 unigram, 2 BPE, ..., byte_fallback) of a serialized
  ModelProto."""
  charsmap, model_type, byte_fallback = b'', 1, False
  for number, _, value in _fields(model_bytes):
    if number == 2:  # trainer_spec: model_type is its field 3, byte_fallback its field 35.
      model_type = next((v for n, w, v in _fields(value) if n == 3 and w == 0), 1)
      byte_fallback = any(n == 35 and w == 0 and v for n, w, v in _fields(value))
    elif number == 3:  # normalizer_spec: precompiled_charsmap is its field 2.
      charsmap = next((v for n, w, v in _fields(value) if n == 2 and w == 2), b'')
  return charsmap, model_type, byte_fallback


def _keeps_digit_comma(piece: str) -> bool:
  """transformers' check_number_comma: a piece that does not end in a digit and a comma."""
  return len(piece) < 2 or piece[-1] != ',' or not piece[-2].isdigit()


def _without_transformers(result: bundle_lib.Bundle) -> list[str]:
  """The formats that hold `result` with a tokenizer of their own (the model file itself)."""
  return bundle_lib.holders(result, bundle_lib.TRANSFORMERS_TOKENIZER_FORMATS)


def special_tokens(ours) -> dict:
  """AlbertTokenizer's special tokens for bertjax's SentencePieceTokenizer `ours`: SPECIAL, and
  the model's own unknown piece (--unk_piece) and padding piece (--pad_id; without one, the
  piece of id 0, which bertjax pads with: spm_train's default <unk>)."""
  sp = ours.sp_model
  pad = sp.pad_id() if sp.pad_id() >= 0 else 0
  return {**SPECIAL, 'pad_token': sp.IdToPiece(pad), 'unk_token': sp.IdToPiece(sp.unk_id())}


def tokenizer_class(ours) -> str:
  """AlbertTokenizer, or where the model's unknown piece is not id 1 (spm_train's default puts
  <unk> at 0) the class that reads tokenizer.json as it is: transformers 5's AlbertTokenizer
  rebuilds the unigram model with its unknown id fixed at 1, so unknown text got another id."""
  return 'AlbertTokenizer' if ours.sp_model.unk_id() == 1 else 'PreTrainedTokenizerFast'


class NotUnigramError(ValueError):
  """A SentencePiece model transformers' AlbertTokenizer cannot read (bpe, byte_fallback)."""


def build(spm_model_file: str, do_lower_case: bool, keep_accents: bool = False):
  """The tokenizers.Tokenizer that AlbertTokenizer builds for this model and casing."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders  # pylint: disable=g-import-not-at-top
  from tokenizers import normalizers  # pylint: disable=g-import-not-at-top
  from tokenizers import pre_tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import processors  # pylint: disable=g-import-not-at-top
  ours = vocab_files.for_model(spm_model_file, do_lower_case, check_casing=False)
  sp = ours.sp_model
  charsmap, model_type, byte_fallback = _normalizer(files.read_bytes(spm_model_file))
  if model_type != 1:
    raise NotUnigramError(f'SentencePiece model {spm_model_file} is not a unigram model (type '
                          f'{model_type}): AlbertTokenizer reads unigram models only, so '
                          'transformers would give other ids')
  if byte_fallback:  # Its bytes of a recomposed Hangul syllable differ even with byte pieces.
    raise NotUnigramError(f'SentencePiece model {spm_model_file} spells characters outside '
                          'its pieces as bytes (byte_fallback), which the tokenizer.json of '
                          'AlbertTokenizer does not, so transformers would give other ids')
  vocab = []
  for i in range(sp.GetPieceSize()):
    piece, score = sp.IdToPiece(i), sp.GetScore(i)
    vocab.append((piece, score if _keeps_digit_comma(piece) else score - 100))
  tok = tokenizers.Tokenizer(tokenizers.models.Unigram(vocab, unk_id=sp.unk_id(),
                                                       byte_fallback=False))
  steps = [normalizers.Replace('``', '"'), normalizers.Replace("''", '"')]
  if not keep_accents:
    steps += [normalizers.NFKD(), normalizers.StripAccents()]
  if do_lower_case:
    steps.append(normalizers.Lowercase())
  if charsmap:
    steps.append(normalizers.Precompiled(charsmap))
  tok.normalizer = normalizers.Sequence(steps)
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.WhitespaceSplit(),
      pre_tokenizers.Metaspace(replacement='▁', prepend_scheme='always')])
  tok.decoder = decoders.Metaspace(replacement='▁', prepend_scheme='always')
  cls, sep = SPECIAL['cls_token'], SPECIAL['sep_token']
  tok.post_processor = processors.TemplateProcessing(
      single=f'{cls}:0 $A:0 {sep}:0', pair=f'{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1',
      special_tokens=[(cls, sp.PieceToId(cls)), (sep, sp.PieceToId(sep))])
  tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                          for t in dict.fromkeys(special_tokens(ours).values())
                          if t in ours.vocab])  # check() refuses a model that lacks one.
  return tok, ours


def check(result: bundle_lib.Bundle, tok, ours):
  """Refuses a tokenizer.json whose ids differ from bertjax's on the probes or the vocab's own
  pieces (spelt as text)."""
  missing = [t for t in dict.fromkeys(SPECIAL.values()) if t not in ours.vocab]
  if missing:  # bertjax builds its inputs with them by name: its own inputs are not known.
    raise ValueError(f'SentencePiece model {result.vocab_file} lacks {", ".join(missing)}, '
                     'which bertjax builds BERT inputs with by these names (ALBERT\'s <cls> '
                     '<sep> <mask> are not taken for them; a model that bertjax trains has them, '
                     'as learn_vocab --model=sentencepiece writes them), so a transformers '
                     'tokenizer for it would build inputs bertjax never made; '
                     f'{bundle_lib.use(_without_transformers(result))}.')
  pieces = [p.replace('▁', ' ') for p in ours.vocab if not p.startswith(('[', '<'))]
  texts = list(PROBES) + [''.join(pieces[i:i + 16]) for i in range(0, len(pieces), 16)]
  for text in texts:
    want, got = ours.encode(text), tok.encode(text, add_special_tokens=False).ids
    if want != got:
      raise ValueError(
          f'SentencePiece model {result.vocab_file}: transformers\' AlbertTokenizer would give '
          f'other ids than bertjax for {text!r} ({got[:12]} vs {want[:12]}): its normaliser or '
          'options differ from ALBERT\'s (transformers\' lower-casing of a final Σ, or its '
          'dropping of combining marks); '
          f'{bundle_lib.use(_without_transformers(result))}.')
  _warn_typed_specials(result, tok, ours)


# Special tokens typed in a text, which bertjax reads as text (as BERT's WordPiece does).
TYPED_SPECIALS = 'the [MASK] sat [SEP] on[CLS] the mat'


def _warn_typed_specials(result: bundle_lib.Bundle, tok, ours):
  """Says where transformers reads `[MASK]`, `[SEP]` or `[CLS]` typed in a text otherwise than
  bertjax: a cased model whose specials are pieces its unigram model matches in text (even with
  split_special_tokens, which a task model's tokenizer sets), where bertjax reads them as text.
  No tokenizer.json setting keeps those ids and stops the match, so the export is written."""
  if not bundle_lib.tokenizer_settings(result)['split_special_tokens']:
    return  # transformers' default, kept for an encoder or MLM model: typed [MASK] is a mask.
  tok.encode_special_tokens = True
  try:
    got = tok.encode(TYPED_SPECIALS, add_special_tokens=False).ids
  finally:
    tok.encode_special_tokens = False
  if got != ours.encode(TYPED_SPECIALS):
    logging.warning('%s: transformers\' tokenizer reads [MASK], [SEP] or [CLS] typed in a text '
                    'as those tokens (this cased SentencePiece model holds them as pieces its '
                    'unigram model matches in text), where bertjax reads them as text: such '
                    'texts get other ids and outputs in transformers. Lower-cased models '
                    '(learn_vocab\'s default), and --format=saved_model, read them as '
                    'bertjax does.', result.vocab_file)


def write(result: bundle_lib.Bundle, output_dir):
  """spiece.model, tokenizer.json, tokenizer_config.json and special_tokens_map.json, after
  `check`."""
  try:
    tok, ours = build(result.vocab_file, result.do_lower_case)
  except NotUnigramError as e:
    raise ValueError(f'{e}; {bundle_lib.use(_without_transformers(result))}.') from None
  check(result, tok, ours)
  files.copy(result.vocab_file, files.join(output_dir, MODEL_FILE))
  files.write_atomically(files.join(output_dir, 'tokenizer.json'), tok.to_str(pretty=True))
  files.write_atomically(files.join(output_dir, 'tokenizer_config.json'), json.dumps(
      {'tokenizer_class': tokenizer_class(ours), 'do_lower_case': result.do_lower_case,
       'keep_accents': False, 'remove_space': True,
       # BERT's segment ids: AlbertTokenizer's own list leaves token_type_ids out.
       'model_input_names': ['input_ids', 'token_type_ids', 'attention_mask'],
       **bundle_lib.tokenizer_settings(result), **special_tokens(ours)},
      indent=2) + '\n')
  files.write_atomically(files.join(output_dir, 'special_tokens_map.json'), json.dumps(
      special_tokens(ours), indent=2) + '\n')

"""A model as it travels between formats: architecture, weights, what it is for, its tokenizer.

Every importer (hf_checkpoint, tf1_checkpoint, a bertjax workdir) produces a Bundle and every
exporter consumes one, so a format only knows its own name table. `params` is flat and unscanned
(`bert/layers_<i>/...`), float32 numpy, holding only tensors the source really had.
"""

import dataclasses

import numpy as np

from bertjax import files
from bertjax.text import tokenizer
from bertjax.text import vocab_files
from bertjax.training import kinds

# What each export format holds is the kind table's (training/kinds.py: each kind's holder per
# format, or why the format cannot hold it); these are views of it for the export's messages.
FORMAT_KINDS = {fmt: kinds.held_by(fmt) for fmt in kinds.FORMATS}
POOLED_HEADS = tuple(name for name, kind in kinds.KINDS.items() if kind.pooled)
# hf and tf1 read a sequence-level head off BERT's [CLS] pooler (transformers' Bert*For*,
# google-research/bert's get_pooled_output()): a head trained on mean-pooled outputs would
# predict something else there. The SavedModel carries its own graph, pooling included;
# sentence-transformers writes the pooling as a module.
CLS_POOLED_FORMATS = ('hf', 'tf1', 'onnx')  # onnx: converted from the hf export.
# The formats that write a SentencePiece model's tokenizer as its readers tokenize (the others
# would write its pieces as a WordPiece vocab.txt: ids that mean other tokens).
SENTENCEPIECE_FORMATS = ('hf', 'tf1', 'sentence_transformers', 'saved_model', 'onnx')


def cannot_hold(fmt: str, kind: str, pooling: str = 'cls') -> str | None:
  """Why `fmt` cannot hold a `kind` model pooled by `pooling` faithfully, or None."""
  why = kinds.get(kind).why_not(fmt)
  if why is not None:
    return (f'--format={fmt} cannot hold its head ({fmt} holds: {", ".join(FORMAT_KINDS[fmt])})'
            f': {why}')
  if fmt in CLS_POOLED_FORMATS and kinds.get(kind).pooled and pooling != 'cls':
    return (f'its head reads {pooling}-pooled outputs but --format={fmt}\'s readers take '
            "BERT's [CLS] pooler, so they would predict something else")
  return None


def formats_for(kind: str, pooling: str = 'cls') -> list[str]:
  return [f for f in FORMAT_KINDS if cannot_hold(f, kind, pooling) is None]


# Formats that carry BERT's pooler whatever the head (the original modeling.py's variables; the
# SavedModel serves the encoder module, which computes it).
POOLER_FORMATS = ('tf1', 'saved_model')


# The formats whose tokenizer is transformers' (AlbertTokenizer for a SentencePiece model).
TRANSFORMERS_TOKENIZER_FORMATS = ('hf', 'sentence_transformers', 'onnx')


def _serves_texts_only(bundle: 'Bundle') -> bool:
  """Whether the SavedModel refuses `bundle`: a SentencePiece model of a kind served by
  answers or tags (its in-graph tokenizer gives no offsets or words)."""
  served = kinds.get(bundle.kind).holder('saved_model')
  return bundle.is_sentencepiece() and served is not None and served.signature != 'texts'


def holders(bundle: 'Bundle', without: tuple = ()) -> list[str]:
  """The formats that hold `bundle` whole: its head, its pooler where a format carries one, its
  lower-casing and its tokenizer; `without`: formats known to refuse it for another reason."""
  pooler = 'bert/pooler/kernel' in bundle.params
  return [f for f in formats_for(bundle.kind, bundle.pooling)
          if f not in without and (pooler or f not in POOLER_FORMATS)
          and (f in ('hf', 'sentence_transformers') or not bundle.lowercase_input)
          and not (f == 'saved_model' and _serves_texts_only(bundle))]


def use(formats) -> str:
  """'use --format=a or --format=b', or that no format holds the model."""
  return (f'use --format={" or --format=".join(formats)}' if formats else
          'no export format holds it (its checkpoint is read by bertjax itself)')


def check_holds(result: 'Bundle', fmt: str):
  """Refuses `fmt` for `result` when it cannot hold its head faithfully, naming what can: every
  writer calls it, so a library caller that skips the export command is refused the same way."""
  pooler = 'bert/pooler/kernel' in result.params
  if fmt in POOLER_FORMATS and not pooler:
    # A BertModel (an encoder's) needs its pooler in hf too.
    hf = kinds.get(result.kind).holder('hf')
    can = [f for f in holders(result) if f == 'onnx' or (f == 'hf' and not hf.pooler)]
    raise ValueError(f'{result.source} has no pooler (a masked-LM, span or tagging model, or a '
                     f'BertModel without its pooling layer): --format={fmt} carries one; '
                     f'{use(can)}.')
  if fmt not in ('hf', 'sentence_transformers') and result.lowercase_input:
    raise ValueError(f'{result.source} lower-cases its text before its cased tokenizer (its '
                     "sentence_bert_config.json's do_lower_case), which "
                     f'--format={fmt} cannot carry (its tokenizer would see the capitals): '
                     f'{use(holders(result))}.')
  why = cannot_hold(fmt, result.kind, result.pooling)
  if why is None:
    return
  fix = use(holders(result))
  if kinds.get(result.kind).pooled and result.pooling != 'cls':
    fix += (' (SentenceTransformer(DIR).encode(texts) returns its logits, transformers '
            'loads its encoder), or fine-tune with --config.pooling=cls for every format')
  raise ValueError(f'{result.source} is a {result.kind} model; {why}: {fix}.')


@dataclasses.dataclass
class Bundle:
  config: dict  # The encoder's architecture (encoder_config.default_config fields).
  params: dict  # Flat, unscanned, float32 numpy: 'bert/...', and the head's.
  kind: str  # One of training/kinds.KINDS.
  vocab_file: str  # '' when the source has none beside it.
  do_lower_case: bool
  labels: tuple = ()  # Class names (classification) or tags (tagging).
  labels_named: bool = True  # False: the source had only class numbers (a TF1 classifier).
  # Sequence-level heads: 'cls' (BERT's pooler) or 'mean'; a sentence-transformers encoder's also
  # 'max' (embed computes it: inference.POOLINGS).
  pooling: str = 'cls'
  # The tokens a text is cut to: what a run was fine-tuned with, a sentence-transformers model's or
  # a transformers folder's tokenizer's length (hf_tokenizer_files.cut_length); TF1 keeps none.
  max_seq_length: int = 128
  source: str = ''  # Where it came from, for messages.
  step: int | None = None  # A bertjax run's checkpoint step read (None: another format).
  # What a sentence-transformers model does after the encoder, read from the source's own files
  # (modules.json, config_sentence_transformers.json): its embeddings L2-normalised, the prompts
  # prepended by name (encode(prompt_name='query')), the similarity function. `embedding` says
  # the source is such a model (its transformers export writes these files too).
  embedding: bool = False
  normalize: bool = False
  # sentence_bert_config.json's do_lower_case: the text lower-cased before a cased tokenizer
  # (inference.tokenizer wraps it so), kept by the sentence-transformers export.
  lowercase_input: bool = False
  prompts: dict = dataclasses.field(default_factory=dict)
  # The prompt encode() prepends when none is named (config_sentence_transformers.json's
  # default_prompt_name: '' for none).
  default_prompt_name: str = ''
  similarity_fn_name: str = 'cosine'
  # The Pooling module's include_prompt (False: a prompt's tokens are left out of the pooling),
  # written back by the sentence-transformers export.
  include_prompt: bool = True
  ignored: tuple = ()  # Source tensors that are not model weights (optimizer slots, step).
  # What the source computes that bertjax does not (a sentence-transformers pooling such as
  # mean_sqrt_len, a Dense module), said as a sentence: embed warns of it, an export refuses it
  # ('' for nothing).
  not_computed: str = ''
  # WordPiece's longest word (longer: [UNK]): a transformers folder's tokenizer.json's
  # max_input_chars_per_word, a fine-tuning run's (its source's), else the original BERT's 200.
  max_chars_per_word: int = tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD
  # The transformers tokenizer's model_max_length when set (export --max_seq_length); 0: what
  # tokenizer_settings says.
  tokenizer_max_length: int = 0
  # The length a transformers folder's own tokenizer cuts at (its model_max_length, within the
  # positions): a model with no task keeps it in an hf export, as the folder had it; 0: none.
  source_tokenizer_length: int = 0
  # A transformers source's config.json fields that bertjax does not model but transformers
  # reads (pad_token_id: the embedding row its training keeps still; classifier_dropout): an hf
  # export writes them back as they were.
  hf_fields: dict = dataclasses.field(default_factory=dict)

  def encoder_params(self) -> dict:
    return {k: v for k, v in self.params.items() if k.startswith('bert/')}

  def is_sentencepiece(self) -> bool:
    """Whether the vocab is a SentencePiece model (told by the file, whatever its name)."""
    return bool(self.vocab_file) and vocab_files.is_sentencepiece(self.vocab_file)

  def vocab_entries(self) -> int | None:
    return len(vocab_files.load_vocab(self.vocab_file)) if self.vocab_file else None


def tokenizer_settings(bundle: Bundle) -> dict:
  """What a transformers tokenizer written for `bundle` sets so that it gives bertjax's ids.

  A task head or a sentence-embedding model reads texts as bertjax's predict and embed do: cut
  at the length it was trained with, and `[SEP]`, `[MASK]`... in a text are text, split as
  BERT's tokenizer splits them (split_special_tokens). A model with no task (an encoder, MLM
  and NSP heads) keeps transformers' defaults: its position table as the length, and `[MASK]`
  in a text a mask, as fill-mask pipelines write it.
  """
  positions = bundle.config['max_position_embeddings']
  reads_texts = kinds.get(bundle.kind).example is not None or bundle.embedding
  length = bundle.tokenizer_max_length or (
      bundle.max_seq_length if reads_texts else bundle.source_tokenizer_length or positions)
  return {'model_max_length': min(length, positions), 'split_special_tokens': reads_texts}


def check_tokenizer(bundle: Bundle, fmt: str):
  """Refuses a format that cannot yet write `bundle`'s SentencePiece tokenizer faithfully."""
  if bundle.is_sentencepiece() and fmt not in SENTENCEPIECE_FORMATS:
    held = (f'--format={" or --format=".join(SENTENCEPIECE_FORMATS)} hold'
            if SENTENCEPIECE_FORMATS else 'no format holds')
    raise ValueError(f'{bundle.source}\'s vocab {bundle.vocab_file} is a SentencePiece model: '
                     f'--format={fmt} cannot yet write its tokenizer (it would write its pieces '
                     f'as a WordPiece vocab, whose ids mean other tokens); {held} it.')
  if fmt == 'saved_model' and _serves_texts_only(bundle):
    # Its answer and tag signatures cut text by WordPiece's byte offsets and words.
    raise ValueError(f'{bundle.source} is a {bundle.kind} model whose vocab {bundle.vocab_file} '
                     'is a SentencePiece model: --format=saved_model holds SentencePiece '
                     'models of sentence-level kinds only (its in-graph tokenizer gives no '
                     f'offsets for answers or words for tags); {use(holders(bundle))}.')


def kind_of(params: dict) -> str:
  """'pretraining' when the MLM and NSP heads are there, 'masked_lm' for the MLM head alone,
  else 'encoder' (task heads are told by their source's metadata, not by name: a classifier and
  a tagger share `classifier/`)."""
  if any(k.startswith('mlm/') for k in params):
    return 'pretraining' if any(k.startswith('nsp/') for k in params) else 'masked_lm'
  return 'encoder'


def check_head(kind: str, labels, params: dict, source: str, run: bool = True):
  """The head's outputs must be what the run (`run`; else the model's own config) recorded:
  one per label (classification, tagging), one (regression, multiple choice), two (span).
  `params` is flat."""
  table = kinds.get(kind)
  if table.outputs is None:  # No task head (an encoder, pre-training's heads).
    return
  name = f'{table.head_params[0]}kernel'
  want = table.outputs(len(labels))
  if name in params and params[name].shape[-1] != want:
    said = f'{want} ({list(labels) if labels else kind})'
    raise ValueError(
        f'{source}: its {kind} head has {params[name].shape[-1]} outputs but the run recorded '
        f'{said}: config.json\'s kind or labels were edited, or the checkpoint is not this '
        'run\'s (copied in from another?); restore the config.json the run wrote, or use the '
        'run that wrote the checkpoint.' if run else
        f'{source}: its {kind} head has {params[name].shape[-1]} outputs but its config '
        f'describes {said}: the weights and their config do not match; restore the config '
        'saved with these weights.')


def relabel(bundle: 'Bundle', labels):
  """--labels: names for a classifier's classes or a tagger's tags where the source has only
  their numbers (a TF1 run_classifier.py checkpoint); never renaming or reordering recorded
  ones."""
  given = ','.join(labels)
  if not kinds.get(bundle.kind).named_labels:
    raise ValueError(f'--labels={given} names classes or tags, but {bundle.source} (kind '
                     f'{bundle.kind}) has none: drop --labels.')
  if not all(label.strip() for label in labels):  # '--labels=,' or 'neg,,pos'
    raise ValueError(f'--labels={given} holds an empty name: name every class, class 0 first '
                     '(e.g. --labels=negative,positive).')
  if len(set(labels)) != len(labels):  # Two classes of one name: one would never be said.
    raise ValueError(f'--labels={given} names a class twice: name each class once, class 0 '
                     'first.')
  if len(labels) != len(bundle.labels):
    raise ValueError(f'--labels={given} names {len(labels)} class{"es" * (len(labels) != 1)} '
                     f'but the model has {len(bundle.labels)}: name each, class 0 first.')
  if tuple(labels) != tuple(bundle.labels) and bundle.labels_named:
    raise ValueError(f'{bundle.source} records its labels {list(bundle.labels)} (class 0 '
                     f'first): --labels={given} would rename or reorder them; drop --labels.')
  bundle.labels = tuple(labels)


# Vocab padding fills the embedding rows up to the next multiple of one of these (NVIDIA: 30,528
# rows for 30,522 entries; 64 and 128 for matmul tiles; Megatron: 128 x its tensor-parallel
# size, 30,720 at 8).
PADDING_MULTIPLES = (8, 64, 128, 256, 512, 1024)


def padded_sizes(entries: int) -> list[int]:
  """The row counts a vocab of `entries` is padded to: the smallest multiple of one of
  PADDING_MULTIPLES at or above it."""
  return sorted({-(-entries // m) * m for m in PADDING_MULTIPLES})


def vocab_misfit(entries: int, rows: int) -> str:
  """Why a vocab of `entries` cannot be the one `rows` embedding rows were trained with ('' when
  it can). Fewer entries are padding only when `rows` is a padded size (padded_sizes): any more
  rows were trained tokens the vocab does not name."""
  if entries == rows:
    return ''
  if entries > rows:
    return f'ids {rows}..{entries - 1} have no embedding row'
  if rows in padded_sizes(entries):
    return ''
  return (f'{rows} rows is not vocab padding of {entries} entries (that is '
          f'{" or ".join(map(str, padded_sizes(entries)))} rows), so rows '
          f'{entries}..{rows - 1} are trained tokens the vocab does not name')


def run_padded(source: str, vocab_file: str, rows: int) -> bool:
  """Whether `source` is (in) a bertjax run whose config.json records `rows` rows and this vocab
  (by hash, where the run recorded one: fine-tuning does): its padding is the run's own, any
  multiple of 128 (training/train_state pads so; padding rows are never targets)."""
  from bertjax.interop import init_from  # pylint: disable=g-import-not-at-top  (imports this)
  try:
    run = init_from.run_config(source) if source and vocab_file else None
  except ValueError:
    return False
  if not run or (run.get('model') or {}).get('vocab_size') != rows:
    return False
  recorded = (run.get('data') or {}).get('vocab_sha256')
  return not recorded or files.sha256(vocab_file) == recorded


def misfit_at(source: str, vocab_file: str, entries: int, rows: int) -> str:
  """vocab_misfit for the vocab and rows of `source`, a bertjax run's own padding accepted."""
  why = vocab_misfit(entries, rows)
  if why and entries < rows and rows % 128 == 0 and run_padded(source, vocab_file, rows):
    return ''
  return why


def _misfit(bundle: Bundle) -> tuple[int | None, int, str]:
  """(vocab entries, embedding rows, misfit_at's reason) of `bundle`."""
  entries = bundle.vocab_entries()
  rows = bundle.params['bert/embeddings/word_embeddings/embedding'].shape[0]
  if entries is None:
    return None, rows, ''
  return entries, rows, misfit_at(bundle.source, bundle.vocab_file, entries, rows)


def check_vocab(bundle: Bundle):
  """The vocab file must have as many entries as the embedding rows, or fewer when the rows are
  its padding (vocab_misfit: NVIDIA's 30,528 for 30,522; a multiple of 64 or 128)."""
  entries, rows, why = _misfit(bundle)
  if why:
    raise ValueError(
        f'vocab file {bundle.vocab_file} has {entries} entries but {bundle.source}\'s word '
        f'embeddings have {rows} rows ({why}): it is not the vocab this checkpoint was trained '
        f'with; pass that one (--vocab_file=VOCAB, {rows} entries or fewer padded to {rows}).')


def cut_vocab_padding(bundle: Bundle) -> dict:
  """params with padded vocab rows (beyond the vocab file's entries) cut off; rows that are not
  padding (check_vocab refuses them) are all kept, never cut."""
  entries, rows, why = _misfit(bundle)
  params = dict(bundle.params)
  if entries is None or entries >= rows or why:
    return params
  for name in ('bert/embeddings/word_embeddings/embedding', 'mlm/output_bias'):
    if name in params and params[name].shape[0] > entries:
      params[name] = np.ascontiguousarray(params[name][:entries])
  return params

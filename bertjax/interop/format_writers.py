"""Each export format's checks of the model read (what it cannot hold, the casing its vocab
reads), its writer, and the lines that load what it wrote: what bertjax.export runs per format.
"""

import json

from absl import logging

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import hf_checkpoint
from bertjax.interop import sentence_transformers
from bertjax.interop import tf1_checkpoint
from bertjax.text import vocab_casing
from bertjax.text import vocab_files
from bertjax.training import kinds


def check(result: bundle_lib.Bundle, fmt: str):
  """Refuses what `fmt` cannot hold of the model read; says what it leaves out (a head, the
  pooling)."""
  bundle_lib.check_holds(result, fmt)
  if kinds.get(result.kind).heads_dropped(fmt):  # Said, as the summary line names the kind.
    heads = ', '.join(sorted({name.split('/')[0] for name in result.params
                              if not name.startswith('bert/')}))
    logging.warning('%s is a %s model: --format=%s holds its encoder only, its heads (%s) are '
                    'not written; --format=hf or tf1 keeps them', result.source, result.kind,
                    fmt, heads)
  if fmt == 'tf1' and result.pooling != 'cls':
    logging.warning('%s is %s-pooled: in google-research/bert, %s-pool get_sequence_output() '
                    'over the input mask (get_pooled_output() is the [CLS] pooler)',
                    result.source, result.pooling, result.pooling)


def check_casing(result: bundle_lib.Bundle, given: bool | None):
  """Refuses a casing the vocab contradicts: `given` is --do_lower_case's value (None: the
  source's own casing was read)."""
  def fix(lower: bool) -> str:
    flag = '--do_lower_case' if lower else '--nodo_lower_case'
    if given is not None:  # The flag contradicts the source's vocab.
      return f'drop --{"no" if given is False else ""}do_lower_case (the source\'s own casing).'
    return f'pass {flag} (the casing the source records does not read its vocab).'
  if result.vocab_file:
    vocab_casing.validate_case_matches_vocab(
        vocab_files.load_vocab(result.vocab_file), result.do_lower_case,
        f'vocab file {result.vocab_file}', fix)


def writer(fmt: str):
  """fmt's writer: writer(fmt)(result, folder) writes the model into an empty folder."""
  if fmt == 'hf':
    return _save_hf
  if fmt == 'sentence_transformers':
    return sentence_transformers.save
  if fmt == 'tf1':
    return _save_tf1
  if fmt == 'onnx':
    from bertjax.interop import onnx_export  # pylint: disable=g-import-not-at-top
    return onnx_export.save
  from bertjax.interop import saved_model  # pylint: disable=g-import-not-at-top
  return saved_model.save


def _save_hf(result: bundle_lib.Bundle, output: str):
  hf_checkpoint.save(result, output)
  # An embedding model stays one: SentenceTransformer(DIR) finds its pooling, length and
  # normalisation instead of guessing them (mean, 512, none).
  if sentence_transformers.is_written_for(result):
    sentence_transformers.write_modules(result, output)


def _save_tf1(result: bundle_lib.Bundle, output: str):
  bundle_lib.check_tokenizer(result, 'tf1')
  tf1_checkpoint.save(result, output)
  if result.vocab_file:
    # A SentencePiece model beside the checkpoint as google-research/albert ships its
    # 30k-clean.model (its scripts take --spm_model_file); a WordPiece vocab as vocab.txt.
    name = (tf1_checkpoint.SENTENCEPIECE_MODEL if result.is_sentencepiece() else 'vocab.txt')
    files.copy(result.vocab_file, files.join(output, name))
  # What google-research/bert's scripts are told by flags, kept for bertjax's importer.
  files.write_atomically(files.join(output, 'bertjax_export.json'), json.dumps(
      {'kind': result.kind, 'labels': list(result.labels), 'pooling': result.pooling,
       'do_lower_case': result.do_lower_case, 'max_seq_length': result.max_seq_length,
       # A sentence-transformers model's own, so that it comes back as one.
       'embedding': result.embedding, 'normalize': result.normalize,
       'prompts': result.prompts, 'default_prompt_name': result.default_prompt_name,
       'similarity_fn_name': result.similarity_fn_name, 'include_prompt': result.include_prompt,
       'max_chars_per_word': result.max_chars_per_word},
      indent=2) + '\n')


def loading_lines(fmt: str, output: str) -> list[str]:
  """What a user types to load the export (read from what was written)."""
  if fmt == 'saved_model':
    from bertjax.interop import saved_model  # pylint: disable=g-import-not-at-top
    return saved_model.loading_lines(output)
  if fmt == 'sentence_transformers':
    return sentence_transformers.loading_lines(output)
  if fmt == 'onnx':
    from bertjax.interop import onnx_export  # pylint: disable=g-import-not-at-top
    return onnx_export.loading_lines(output)
  return []

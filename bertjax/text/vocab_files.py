"""A tokenizer from a checkpoint's vocab: a WordPiece vocab.txt or a SentencePiece .model."""

from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer


def from_files(vocab_file=None, spm_model_file=None, do_lower_case=True, **kwargs):
  """A WordPiece FullTokenizer for a vocab file, or a SentencePieceTokenizer for a .model."""
  if (vocab_file is None) == (spm_model_file is None):
    raise ValueError('pass exactly one of vocab_file= (WordPiece vocab.txt, BERT) and '
                     'spm_model_file= (SentencePiece .model, ALBERT)')
  if spm_model_file is not None:
    return sentencepiece_tokenizer.SentencePieceTokenizer(spm_model_file,
                                                          do_lower_case=do_lower_case, **kwargs)
  return tokenizer.FullTokenizer(vocab_file, do_lower_case=do_lower_case, **kwargs)

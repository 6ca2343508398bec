"""A sentence-transformers model whose Pooling leaves its prompts out (include_prompt false), on
the real all-MiniLM-L6-v2 with SentenceTransformer as the reference: bertjax pools a prompt with
the text, so it says so (embed's not_computed) and its exports are refused; without a prompt to
prepend nothing differs."""

import json
import shutil

from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
import sentence_transformers as st_library

from bertjax import embed
from bertjax import export
from bertjax.interop import sentence_transformers
from bertjax.interop import sources

TEXTS = ['The weather is lovely today.', 'He drove to the stadium!', 'a']
# An empty prompt is none: SentenceTransformer masks nothing for it.
PROMPTS = {'query': 'query: ', 'document': ''}
LEFT_OUT = r'its Pooling leaves (the|a) prompt out \(include_prompt false\)'


def minilm_with(minilm_dir, directory, *, include_prompt: bool, prompts: dict,
                default: str | None = None):
  """A copy of all-MiniLM-L6-v2 whose Pooling sets include_prompt, with these prompts and
  default_prompt_name."""
  shutil.copytree(minilm_dir, directory, ignore=shutil.ignore_patterns('README.md', '.git*'))
  for name, more in [('1_Pooling/config.json', {'include_prompt': include_prompt}),
                     ('config_sentence_transformers.json',
                      {'prompts': prompts, 'default_prompt_name': default})]:
    path = directory / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **more}))
  return directory


def encode_st(directory, **kwargs) -> np.ndarray:
  return st_library.SentenceTransformer(str(directory), device='cpu').encode(TEXTS, **kwargs)


def check_refused(folder, tmp_path):
  """Every export, and the library writer, refuse it before writing anything."""
  for fmt in ('sentence_transformers', 'hf', 'tf1'):
    with pytest.raises(ValueError, match=f'cannot export: {LEFT_OUT}'):
      export.export(folder, fmt, tmp_path / fmt)
    assert not (tmp_path / fmt).exists()
  with pytest.raises(ValueError, match=f'cannot export: {LEFT_OUT}'):
    sentence_transformers.save(sources.load(folder), tmp_path / 'library')
  assert not (tmp_path / 'library').exists()


def test_a_default_prompt_left_out_of_the_pooling_is_said_and_refused(minilm_dir, tmp_path):
  """Hostile pass: bertjax mean-pooled the default prompt's tokens that SentenceTransformer
  leaves out (max abs diff 0.0987), saying nothing, and exported it as include_prompt true."""
  folder = minilm_with(minilm_dir, tmp_path / 'st', include_prompt=False, prompts=PROMPTS,
                       default='query')
  embedder = embed.Embedder.from_pretrained(folder)
  assert embedder.not_computed == ("its Pooling leaves the prompt out (include_prompt false) "
                                   "but bertjax pools its default prompt 'query: ' with the text")
  assert np.abs(embedder.encode(TEXTS) - encode_st(folder)).max() > 1e-2  # What it says.
  check_refused(folder, tmp_path)


def test_a_default_prompt_pooled_with_the_text_embeds_as_sentence_transformers(minilm_dir,
                                                                               tmp_path):
  """The same model with include_prompt true: bertjax's vectors are SentenceTransformer's."""
  folder = minilm_with(minilm_dir, tmp_path / 'st', include_prompt=True, prompts=PROMPTS,
                       default='query')
  embedder = embed.Embedder.from_pretrained(folder)
  assert embedder.not_computed == ''
  np.testing.assert_allclose(embedder.encode(TEXTS), encode_st(folder), atol=1e-5)


def test_prompts_left_out_without_a_default_are_read_and_kept(minilm_dir, tmp_path):
  """No default prompt: bertjax prepends none, so its vectors are SentenceTransformer's; the
  exports keep include_prompt false, so encode(prompt_name=...) of an export pools as the
  source's does (a TF1 export and its transformers export read back)."""
  folder = minilm_with(minilm_dir, tmp_path / 'st', include_prompt=False, prompts=PROMPTS)
  embedder = embed.Embedder.from_pretrained(folder)
  assert embedder.not_computed == ''
  np.testing.assert_allclose(embedder.encode(TEXTS), encode_st(folder), atol=1e-5)
  tf1 = export.export(folder, 'tf1', tmp_path / 'tf1')
  out = export.export(tf1, 'sentence_transformers', tmp_path / 'out')
  assert json.loads((out / '1_Pooling' / 'config.json').read_text())['include_prompt'] is False
  np.testing.assert_allclose(encode_st(out, prompt_name='query'),
                             encode_st(folder, prompt_name='query'), atol=1e-5)


def test_include_prompt_false_without_a_prompt_changes_nothing(minilm_dir, tmp_path):
  """Only empty prompts: nothing is prepended, nothing is masked; read and exported as usual."""
  folder = minilm_with(minilm_dir, tmp_path / 'st', include_prompt=False,
                       prompts={'document': ''}, default='document')
  embedder = embed.Embedder.from_pretrained(folder)
  assert embedder.not_computed == ''
  theirs = encode_st(folder)
  np.testing.assert_allclose(embedder.encode(TEXTS), theirs, atol=1e-5)
  out = export.export(folder, 'sentence_transformers', tmp_path / 'out')
  np.testing.assert_allclose(encode_st(out), theirs, atol=1e-5)


def test_an_export_keeps_include_prompt_false(minilm_dir, tmp_path):
  """A prompt given to encode() of the export is left out of the pooling as the source's is."""
  folder = minilm_with(minilm_dir, tmp_path / 'st', include_prompt=False, prompts={})
  out = export.export(folder, 'sentence_transformers', tmp_path / 'out')
  assert json.loads((out / '1_Pooling' / 'config.json').read_text())['include_prompt'] is False
  np.testing.assert_allclose(encode_st(out, prompt='query: '), encode_st(folder, prompt='query: '),
                             atol=1e-5)

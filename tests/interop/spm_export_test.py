"""Exports of a model whose vocab is a SentencePiece model: a tiny pre-training run on
learn_vocab's model and a classifier fine-tuned from it (tests/spm_runs.py). A format that cannot
write the SentencePiece tokenizer faithfully refuses, naming the ones that can."""

import pytest
import spm_runs

from bertjax import export
from bertjax.interop import hf_checkpoint
from bertjax.interop import sources


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp('spm_export')
  spm_model, pretrained = spm_runs.pretrained(root)
  classify, texts = spm_runs.classifier(pretrained, root / 'finetune', epochs=1)
  return {'spm_model': spm_model, 'pretrained': pretrained, 'classify': classify,
          'texts': texts}


@pytest.mark.parametrize('fmt', ['hf', 'tf1', 'saved_model', 'sentence_transformers'])
def test_a_format_without_sentencepiece_refuses(runs, fmt, tmp_path):
  with pytest.raises(ValueError, match=r'vocab .*vocab\.txt is a SentencePiece model: '
                     rf'--format={fmt} cannot yet write its tokenizer'):
    export.export(runs['classify'], fmt, tmp_path / 'out')
  assert not (tmp_path / 'out').exists()
  # The writer itself refuses too (a library caller skips export's checks).
  if fmt == 'hf':
    (tmp_path / 'direct').mkdir()
    with pytest.raises(ValueError, match='SentencePiece model'):
      hf_checkpoint.save(sources.load(str(runs['classify'])), tmp_path / 'direct')
    assert not (tmp_path / 'direct' / 'vocab.txt').exists()

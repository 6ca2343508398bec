"""Pre-training refuses data of another vocab, and missing eval files, before compiling."""

import numpy as np
import pretrain_runs
import pytest

from bertjax import pretrain
from bertjax.pretraining_data import embedded


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  return pretrain_runs.corpus_files(tmp_path_factory)


def config(corpus, **fields):
  return pretrain_runs.config(4, pretrain_runs.fields(corpus, **fields))


def check(cfg):
  pretrain.check_data(cfg, cfg.data.train_files, cfg.data.eval_files, cfg.data.vocab_file, '')


def test_matching_vocab_passes(corpus):
  check(config(corpus))


def test_data_of_a_larger_vocab_is_refused(corpus):
  with pytest.raises(ValueError, match=r'8192-entry vocab .* vocab_size=4096: set '
                     'data.vocab_file'):
    check(config(corpus, model__vocab_size=4096, data__vocab_file=''))


def test_data_of_another_vocab_of_the_same_size_is_refused(corpus, tmp_path):
  lines = embedded.vocab_path().read_text(encoding='utf-8').splitlines()
  other = tmp_path / 'vocab.txt'
  other.write_text('\n'.join(lines[:-2] + [lines[-1], lines[-2]]) + '\n')  # Two ids swapped.
  with pytest.raises(ValueError, match='made with another vocab .* the ids would mean'):
    check(config(corpus, data__vocab_file=str(other)))


def test_eval_files_matching_nothing_fail_at_the_start(corpus, tmp_path):
  with pytest.raises(FileNotFoundError, match='no files match'):
    check(config(corpus, data__eval_files=str(tmp_path / 'nothing-*')))


def test_batches_with_ids_past_the_vocab_are_refused():
  batch = {'input_ids': np.array([[2, 5, 30000]]), 'masked_lm_ids': np.array([[5]])}
  with pytest.raises(ValueError, match=r'token id 30000 .* vocab_size=8192'):
    pretrain.check_ids(batch, 8192, 'train-*')
  pretrain.check_ids(batch, 30522, 'train-*')

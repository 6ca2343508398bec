"""create_pretraining_data's input and flags, from session 36's hostile pass: an earlier set's
report inside the input glob, an input changed or removed while read, flags read in another mode
only, and a set on the same output made otherwise."""

import json

from absl import app
import hostile_creation_test
import pytest

from bertjax import create_pretraining_data as cli
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import writer

corpus, vocab_file = hostile_creation_test.corpus, hostile_creation_test.vocab_file


def create(text, output, vocab, random_seed=7, **kwargs):
  return writer.create(str(text), str(output), hostile_creation_test.SETTINGS, vocab_file=vocab,
                       random_seed=random_seed, num_workers=1, **kwargs)


def test_an_earlier_sets_report_in_the_input_glob_is_skipped_not_read_as_text(corpus, vocab_file,
                                                                            tmp_path):
  """2: the second run over `o4/*` tokenized the first run's JSON report as a document."""
  (tmp_path / 'small.txt').write_bytes(corpus.read_bytes())
  first = create(f'{tmp_path}/*', tmp_path / 'train', vocab_file, num_output_shards=1)
  second = create(f'{tmp_path}/*', tmp_path / 'again', vocab_file, num_output_shards=1)
  assert second['counts']['documents'] == first['counts']['documents'] == 40
  assert second['input_files'] == [str(tmp_path / 'small.txt')]
  assert second['skipped']['counts'] == {'binary_file': 1, 'data_report': 1}
  assert any('train.json (the report of a create_pretraining_data set, not text' in place
             for place in json.dumps(second['skipped']).split('"'))


def test_an_input_changed_or_gone_while_read_is_refused(tmp_path):
  """3: an input emptied after the start's check added nothing, and the run ended well."""
  text = tmp_path / 'a.txt'
  text.write_text('one sentence .\nanother one .\n\nand more .\n')
  size = text.stat().st_size
  read = list(text_input.raw_documents([str(text)], 'lines', 1000, text_input.Skips(), {},
                                       sizes=(size,)))
  assert read == [['one sentence .', 'another one .'], ['and more .']]
  with pytest.raises(ValueError, match=f'{text} changed while it was read \\({size + 9} bytes '
                     f'when the run started, {size} now\\): rerun once it is complete, or leave '
                     'it out of --input_file'):
    list(text_input.raw_documents([str(text)], 'lines', 1000, text_input.Skips(), {},
                                  sizes=(size + 9,)))
  with pytest.raises(FileNotFoundError, match=f'{tmp_path}/gone.txt was deleted or moved while '
                     'the run read its input: put it back and rerun, or leave it out'):
    list(text_input.raw_documents([str(tmp_path / 'gone.txt')], 'lines', 1000,
                                  text_input.Skips(), {}))
  # Session 56's hostile pass: removed, or replaced by a move, once opened: read whole from the
  # old copy, the report naming a file that holds other text now, and nothing said.
  for change, said in ((lambda: text.unlink(), 'was removed while it was read'),
                       (lambda: (tmp_path / 'new.txt').replace(text), 'changed while it was '
                        'read \\(replaced, or written to\\)')):
    text.write_text('one sentence .\nanother one .\n\nand more .\n')
    (tmp_path / 'new.txt').write_text('other text .\n')
    documents = text_input.raw_documents([str(text)], 'lines', 1000, text_input.Skips(), {},
                                         sizes=(size,))
    assert next(documents) == ['one sentence .', 'another one .']
    change()
    with pytest.raises(ValueError, match=f'^{text} {said}: rerun once'):
      list(documents)


def test_flags_read_in_another_mode_only_are_refused():
  """4, 6: --tfds_split without --tfds_name read the text files without a word; --masking under
  --nostatic_masking was recorded in the report, never applied."""
  with pytest.raises(app.UsageError, match=r'^--tfds_split, --tfds_data_dir are read with '
                     r'--tfds_name only: add --tfds_name=<dataset>, or leave them out'):
    cli.check_tfds_flags(['input_file', 'tfds_split', 'tfds_data_dir'])
  cli.check_tfds_flags(['tfds_name', 'tfds_split'])
  cli.check_tfds_flags(['input_file'])
  with pytest.raises(app.UsageError, match=r'^--masking is read with static masking only.*'
                     r'\(--config\.data\.masking\)'):
    cli.check_unmasked(False, ['masking', 'static_masking'])
  with pytest.raises(app.UsageError, match=r'^--do_whole_word_mask is read .*\(--config\.data\.'
                     r'masking\)'):
    cli.check_unmasked(False, ['do_whole_word_mask'])
  cli.check_unmasked(True, ['masking', 'do_whole_word_mask'])


def test_a_set_made_otherwise_is_replaced_only_with_overwrite(corpus, vocab_file, tmp_path):
  """7: a rerun with other flags replaced the earlier set without a word."""
  first = create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2)
  shards = {p: open(p, 'rb').read() for p in first['output_files']}  # noqa: SIM115
  assert create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2)['output_files'] == (
      first['output_files'])  # The same command again remakes its set.
  with pytest.raises(ValueError, match=f'{tmp_path}/train.json holds a set made otherwise '
                     r'\(random_seed 7, now 8\): pass --overwrite to replace it'):
    create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2, random_seed=8)
  assert {p: open(p, 'rb').read() for p in first['output_files']} == shards  # noqa: SIM115
  replaced = create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2, random_seed=8,
                    overwrite=True)
  assert replaced['settings']['random_seed'] == 8

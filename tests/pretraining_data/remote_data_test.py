"""create_pretraining_data with every path in a bucket (the GCS emulator), in a separate
process: input text, vocab, shards and report by URL; a missing vocab URL is named."""

import gzip
import itertools
import re
import subprocess
import sys

import pytest

from bertjax import files
from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import output_checks
from bertjax.pretraining_data import writer
from bertjax.records import file_set
from bertjax.records import tfrecord


def _create(*flags):
  return subprocess.run([sys.executable, '-m', 'bertjax.create_pretraining_data', *flags,
                         '--max_seq_length=32', '--max_predictions_per_seq=5',
                         '--dupe_factor=1', '--num_workers=1', '--tokenizer=reference'],
                        capture_output=True, text=True, timeout=300, check=False)


def test_shards_and_report_are_written_to_a_bucket_from_text_there(gcs_bucket):
  with gzip.open(embedded.corpus_path('eval'), 'rt', encoding='utf-8') as f:
    files.write_atomically(f'{gcs_bucket}/text/a.txt', ''.join(itertools.islice(f, 400)))
  flags = [f'--input_file={gcs_bucket}/text/*.txt', f'--output_file={gcs_bucket}/data/train',
           '--num_output_shards=2']
  missing = _create(*flags, f'--vocab_file={gcs_bucket}/nope/vocab.txt')
  assert missing.returncode == 1
  assert f"vocab file '{gcs_bucket}/nope/vocab.txt' does not exist" in missing.stderr
  assert not files.exists(f'{gcs_bucket}/data')

  files.copy(str(embedded.vocab_path()), f'{gcs_bucket}/vocab.txt')
  done = _create(*flags, f'--vocab_file={gcs_bucket}/vocab.txt')
  assert done.returncode == 0, done.stderr[-3000:]
  assert files.listdir(f'{gcs_bucket}/data') == [
      'train-00000-of-00002', 'train-00001-of-00002', 'train.json']
  # The reader's checks (sizes, counts, the vocab's digest) pass on the bucket's files.
  resolved = file_set.resolve(f'{gcs_bucket}/data/train-*')
  file_set.check_vocab(resolved, model_vocab_size=embedded.VOCAB_SIZE,
                       vocab_file=f'{gcs_bucket}/vocab.txt')
  for path in resolved.files:
    records = list(tfrecord.read_records(files.read_bytes(path)))
    assert len(records) == resolved.record_counts[path] > 0


def test_an_output_over_an_input_or_ending_in_a_slash_is_refused(gcs_bucket, tmp_path):
  """Before any work: --output_file naming a corpus file its glob matches (or the vocab) was
  overwritten by the shard; `gs://b/data/` became an object named `data/` after the work."""
  settings = instances.Settings(max_seq_length=32, max_predictions_per_seq=5)
  for root in (gcs_bucket, str(tmp_path)):
    corpus, vocab = files.join(root, 'text', 'a.txt'), files.join(root, 'vocab.txt')
    files.write_atomically(corpus, 'One sentence here.\nAnother one there.\n')
    files.copy(str(embedded.vocab_path()), vocab)
    for output, error in ((corpus, 'output {} is the input'), (vocab, 'output {} is the input'),
                          (files.join(root, 'data') + '/', '--output_file={} ends in /')):
      with pytest.raises(ValueError, match='^' + re.escape(error.format(output))):
        writer.create(files.join(root, 'text', '*.txt'), output, settings, vocab_file=vocab)
    assert files.read_text(corpus) == 'One sentence here.\nAnother one there.\n'
    assert files.listdir(root) == ['text', 'vocab.txt']
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/train: the bucket'):
    output_checks.check_outputs(['gs://no-such-bucket-xyz/train'], f'{gcs_bucket}/train.json')

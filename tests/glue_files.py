"""Hand-made GLUE files in each task's real layout, with the examples they must read as."""

import os

from bertjax.finetune.tasks import glue

Ex = glue.Example

MNLI_COLS = ('index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t'
              'sentence1_parse\tsentence2_parse\tsentence1\tsentence2')
STSB_COLS = 'index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2'
AX_TEXT = ('index\tsentence1\tsentence2\n'
           '0\tThe cat sat on the mat.\tThe cat did not sit on the mat.\n'
           '1\t"Nobody" came.\tSomeone came.\n')
AX_EXAMPLES = [Ex('0', 'The cat sat on the mat.', 'The cat did not sit on the mat.', None),
               Ex('1', '"Nobody" came.', 'Someone came.', None)]

# {task: (glue folder, {file: text}, {split: expected examples})}. Texts start with bare quotes
# in places: read with quoting on, they would swallow the tabs that follow.
GLUE_FILES = {
    'cola': ('CoLA', {
        # No header in train/dev: the first line is an example.
        'train.tsv': 'gj04\t1\t\tOur friends won\'t buy this analysis.\n'
                     'gj04\t0\t*\tThey drank the pub.\n',
        'dev.tsv': 'bc01\t1\t\t"Nobody" left.\n',
        'test.tsv': 'index\tsentence\n0\tBill whistled past the house.\n1\tHe left.\n',
    }, {
        'train': [Ex('0', 'Our friends won\'t buy this analysis.', None, '1'),
                  Ex('1', 'They drank the pub.', None, '0')],
        'validation': [Ex('0', '"Nobody" left.', None, '1')],
        'test': [Ex('0', 'Bill whistled past the house.', None, None),
                 Ex('1', 'He left.', None, None)],
    }),
    'sst2': ('SST-2', {
        'train.tsv': 'sentence\tlabel\n" the witness " is grand \t1\nit stinks \t0\n',
        'dev.tsv': 'sentence\tlabel\nit \'s a charming journey . \t1\n',
        'test.tsv': 'index\tsentence\n0\tuneasy mishmash of styles .\n',
    }, {
        'train': [Ex('0', '" the witness " is grand ', None, '1'),
                  Ex('1', 'it stinks ', None, '0')],
        'validation': [Ex('0', 'it \'s a charming journey . ', None, '1')],
        'test': [Ex('0', 'uneasy mishmash of styles .', None, None)],
    }),
    'mrpc': ('MRPC', {
        # The byte-order mark GLUE's MRPC files may carry must not hide the 'Quality' column.
        'train.tsv': '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
                     '1\t702876\t702977\tAmrozi accused his brother .\t"Amrozi" accused him .\n',
        'dev.tsv': 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
                   '0\t1\t2\tYucaipa owned it .\tYucaipa bought it in 1995 .\n',
        'test.tsv': 'index\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
                    '0\t1089874\t1089925\tPCCW chief .\tCurrent chief .\n',
    }, {
        'train': [Ex('0', 'Amrozi accused his brother .', '"Amrozi" accused him .', '1')],
        'validation': [Ex('0', 'Yucaipa owned it .', 'Yucaipa bought it in 1995 .', '0')],
        'test': [Ex('0', 'PCCW chief .', 'Current chief .', None)],
    }),
    'stsb': ('STS-B', {
        'train.tsv': f'{STSB_COLS}\tscore\n'
                     '0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane takes off.\t'
                     'An air plane takes off.\t5.000\n'
                     '1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays.\t'
                     'A cat sleeps.\t0.500\n',
        'dev.tsv': f'{STSB_COLS}\tscore\n'
                   '7\tmain-news\theadlines\t2013\t0002\tnone\tnone\tX rose.\tX fell.\t1.6\n',
        'test.tsv': f'{STSB_COLS}\n3\tmain-news\theadlines\t2015\t0003\tnone\tnone\tA b.\tC d.\n',
    }, {
        'train': [Ex('0', 'A plane takes off.', 'An air plane takes off.', 5.0),
                  Ex('1', 'A man plays.', 'A cat sleeps.', 0.5)],
        'validation': [Ex('7', 'X rose.', 'X fell.', 1.6)],
        'test': [Ex('3', 'A b.', 'C d.', None)],
    }),
    'qqp': ('QQP', {
        # The third line is a malformed row of the kind QQP's train.tsv holds: skipped, counted.
        'train.tsv': 'id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n'
                     '133273\t213221\t213222\tHow is life?\tWhat is life?\t0\n'
                     '\tWas Muhammad a real historical figure?\t0\n'
                     '402555\t536040\t536041\tHow do I cook?\tHow to cook?\t1\n',
        'dev.tsv': 'id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n'
                   '201359\t303345\t303346\tWhy?\tWhy not?\t0\n',
        'test.tsv': 'id\tquestion1\tquestion2\n0\tWould you?\tCould you?\n',
    }, {
        'train': [Ex('133273', 'How is life?', 'What is life?', '0'),
                  Ex('402555', 'How do I cook?', 'How to cook?', '1')],
        'validation': [Ex('201359', 'Why?', 'Why not?', '0')],
        'test': [Ex('0', 'Would you?', 'Could you?', None)],
    }),
    'mnli': ('MNLI', {
        # train has one annotator label, dev five, before gold_label; test has none.
        'train.tsv': f'{MNLI_COLS}\tlabel1\tgold_label\n'
                     '0\t31193\t31193n\tgovernment\t( a )\t( b )\t(ROOT a)\t(ROOT b)\t'
                     'Conceptually cream skimming.\tProduct and geography.\tneutral\tneutral\n',
        'dev_matched.tsv': f'{MNLI_COLS}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n'
                           '0\t63735\t63735n\tslate\t( a )\t( b )\t(ROOT a)\t(ROOT b)\t'
                           'The new rights are nice.\tEveryone loves them.\tneutral\tentailment\t'
                           'neutral\tneutral\tneutral\tneutral\n',
        'dev_mismatched.tsv': f'{MNLI_COLS}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n'
                              '0\t75290\t75290c\tletters\t( a )\t( b )\t(ROOT a)\t(ROOT b)\t'
                              'Your gift helps.\tIt does not.\tcontradiction\tcontradiction\t'
                              'contradiction\tcontradiction\tcontradiction\tcontradiction\n',
        'test_matched.tsv': f'{MNLI_COLS}\n0\t31193\t31193n\tgovernment\t( a )\t( b )\t'
                            '(ROOT a)\t(ROOT b)\tHello there.\tHi.\n',
        'test_mismatched.tsv': f'{MNLI_COLS}\n5\t1\t1e\tletters\t( a )\t( b )\t(ROOT a)\t'
                               '(ROOT b)\tThanks.\tThank you.\n',
        # GLUE's diagnostic set (the leaderboard's AX, predicted by the MNLI model), where the
        # GLUE download puts it: the root's diagnostic/, beside MNLI/. No labels.
        '../diagnostic/diagnostic.tsv': AX_TEXT,
    }, {
        'train': [Ex('0', 'Conceptually cream skimming.', 'Product and geography.', 'neutral')],
        'validation_matched': [Ex('0', 'The new rights are nice.', 'Everyone loves them.',
                                  'neutral')],
        'validation_mismatched': [Ex('0', 'Your gift helps.', 'It does not.', 'contradiction')],
        'test_matched': [Ex('0', 'Hello there.', 'Hi.', None)],
        'test_mismatched': [Ex('5', 'Thanks.', 'Thank you.', None)],
        'test_ax': AX_EXAMPLES,
    }),
    'qnli': ('QNLI', {
        'train.tsv': 'index\tquestion\tsentence\tlabel\n'
                     '0\tWhen did it end?\tIt ended in 1945.\tentailment\n'
                     '1\tWho won?\tThe sky is blue.\tnot_entailment\n',
        'dev.tsv': 'index\tquestion\tsentence\tlabel\n0\tWhat?\tThat.\tentailment\n',
        'test.tsv': 'index\tquestion\tsentence\n0\tWhere?\tHere.\n',
    }, {
        'train': [Ex('0', 'When did it end?', 'It ended in 1945.', 'entailment'),
                  Ex('1', 'Who won?', 'The sky is blue.', 'not_entailment')],
        'validation': [Ex('0', 'What?', 'That.', 'entailment')],
        'test': [Ex('0', 'Where?', 'Here.', None)],
    }),
    'rte': ('RTE', {
        'train.tsv': 'index\tsentence1\tsentence2\tlabel\n'
                     '0\tNo weapons were found.\tWeapons were found.\tnot_entailment\n',
        'dev.tsv': 'index\tsentence1\tsentence2\tlabel\n0\tDana won.\tDana played.\tentailment\n',
        'test.tsv': 'index\tsentence1\tsentence2\n0\tMaude left.\tMaude is gone.\n',
    }, {
        'train': [Ex('0', 'No weapons were found.', 'Weapons were found.', 'not_entailment')],
        'validation': [Ex('0', 'Dana won.', 'Dana played.', 'entailment')],
        'test': [Ex('0', 'Maude left.', 'Maude is gone.', None)],
    }),
    'wnli': ('WNLI', {
        'train.tsv': 'index\tsentence1\tsentence2\tlabel\n'
                     '0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1\n',
        'dev.tsv': 'index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tIt is.\t0\n',
        'test.tsv': 'index\tsentence1\tsentence2\n0\tMaude and Dora.\tDora saw.\n',
    }, {
        'train': [Ex('0', 'I stuck a pin through a carrot.', 'The carrot had a hole.', '1')],
        'validation': [Ex('0', 'The drain is clogged.', 'It is.', '0')],
        'test': [Ex('0', 'Maude and Dora.', 'Dora saw.', None)],
    }),
}


def write_glue(root, names=None):
  """Writes the hand-made GLUE files under root/<task folder>/ (MNLI's diagnostic set under
  root/diagnostic/); returns root."""
  for name in names or GLUE_FILES:
    folder, files, _ = GLUE_FILES[name]
    for file_name, text in files.items():
      path = root / folder / file_name
      os.makedirs(path.parent, exist_ok=True)
      path.write_text(text, encoding='utf-8')
  return root


def write_tfds(data_dir, name, version, records):
  """A prepared TFDS dataset `name` ('glue/mnli') written the way TFDS writes one (records of
  each split in `records`, {split: [feature dicts]}, and metadata), without a download."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  # Slow: only here.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  features = tfds.builder(name, data_dir=str(data_dir)).info.features
  out = data_dir / name / version
  out.mkdir(parents=True)
  for split, rows in records.items():
    with tf.io.TFRecordWriter(str(out / f'glue-{split}.tfrecord-00000-of-00001')) as writer:
      for row in rows:
        writer.write(features.serialize_example(row))
  tfds.folder_dataset.write_metadata(
      data_dir=str(out), features=features, split_infos=None, check_data=False,
      filename_template='{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}')

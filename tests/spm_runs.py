"""A tiny SentencePiece chain, shared: learn_vocab's model on the embedded corpus, TFRecords made
with it, a pre-training run and a classifier fine-tuned from that run (2 layers, hidden 64)."""

import itertools

import finetune_runs
import numpy as np
import pretrain_runs

from bertjax import pretrain
from bertjax.finetune import job
from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import writer
from bertjax.text import vocab_learner
from configs import finetune as finetune_config

VOCAB = 1024  # A multiple of 128: model.vocab_size needs no padding.
SEQ, PREDICTIONS = pretrain_runs.SEQ, pretrain_runs.PREDICTIONS


def write_corpus(path, split, sentences_per_document=40, documents=40):
  """The first sentences of an embedded corpus split, cut into short documents."""
  lines = list(itertools.islice(itertools.chain.from_iterable(embedded.documents(split)),
                                sentences_per_document * documents))
  chunks = [lines[i:i + sentences_per_document]
            for i in range(0, len(lines), sentences_per_document)]
  path.write_text(''.join(''.join(s + '\n' for s in chunk) + '\n' for chunk in chunks))
  return path


def learn_model(path):
  """learn_vocab's SentencePiece model (unigram, ALBERT's special pieces) of the corpus."""
  vocab_learner.learn_sentencepiece(str(embedded.corpus_path()), path, VOCAB,
                                    input_sentence_size=20_000)
  return path


def make_data(folder, corpus, static_masking=True, **vocab):
  """Pre-training TFRecords of `corpus` tokenized by `vocab` (spm_model_file= or vocab_file=)."""
  settings = instances.Settings(max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
                                dupe_factor=1, static_masking=static_masking)
  writer.create(str(corpus), str(folder / 'train'), settings, num_output_shards=1,
                num_workers=1, **vocab)
  return str(folder / 'train-*-of-*')


def pretrain_fields(spm_model, data: str) -> dict:
  """The small pre-training run's config fields, on `data` made with `spm_model`."""
  return pretrain_runs.fields({'data.train_files': data, 'data.eval_files': data,
                               'data.vocab_file': str(spm_model)}, model__vocab_size=VOCAB)


def pretrained(root, steps=4):
  """(spm model, pre-training workdir) of a fresh run under `root`."""
  spm_model = learn_model(root / 'spm.model')
  corpus = write_corpus(root / 'corpus.txt', 'train')
  data = make_data(root / 'static', corpus, spm_model_file=str(spm_model))
  workdir = root / 'pretrain'
  pretrain.train_and_evaluate(pretrain_runs.config(steps, pretrain_fields(spm_model, data)),
                              str(workdir))
  return spm_model, workdir


_SHARED = {}


def shared_pretrained(tmp_path_factory):
  """The session's one `pretrained` run (spm model, workdir), made on first use: the chain and
  export tests read it and write only beside it, in folders of their own."""
  if 'run' not in _SHARED:
    _SHARED['run'] = pretrained(tmp_path_factory.mktemp('spm_pretrained'))
  return _SHARED['run']


def finetune_config_for(task, init_from, epochs=3, **data):
  """A fine-tuning config of `task` from `init_from`, data fields (train_file=...) as given."""
  config = finetune_config.get_config(f'task={task},init_from={init_from},seq=24,batch=16,'
                                      f'lr=3e-3,epochs={epochs}')
  config.unlock()
  config.eval_batch_size = 16
  config.checkpoint.every_steps = 1000
  for key, value in data.items():
    config.data[key] = str(value)
  return config


def classifier(init_from, folder, epochs=3):
  """A warm/cold classifier fine-tuned from `init_from` in folder/'classify'; returns
  (workdir, eval texts)."""
  rng = np.random.default_rng(0)
  labels = rng.choice(['warm', 'cold'], 100)
  words = {'warm': finetune_runs.POSITIVE, 'cold': finetune_runs.NEGATIVE}
  rows = [(' '.join(rng.choice(words[y] + finetune_runs.FILLER, 5)), y) for y in labels]
  folder.mkdir(parents=True, exist_ok=True)
  for name, part in (('train.tsv', rows[:80]), ('eval.tsv', rows[80:])):
    (folder / name).write_text('text\tlabel\n' + ''.join(f'{t}\t{y}\n' for t, y in part))
  workdir = folder / 'classify'
  config = finetune_config_for('classification', init_from, epochs,
                               train_file=folder / 'train.tsv', eval_file=folder / 'eval.tsv')
  job.train_and_evaluate(config, str(workdir))
  return workdir, [t for t, _ in rows[80:]]

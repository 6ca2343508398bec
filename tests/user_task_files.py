"""Real data written as a user's own task files: BBC News as CSV, WordNet examples as JSONL."""

import csv
import pathlib

import ml_collections
import wordnet_examples

from bertjax.finetune.tasks import bbc_news
from bertjax.finetune.tasks import labelled_split
from configs import finetune as finetune_config

write_jsonl = wordnet_examples.write_jsonl


def bbc_rows(bbc_dir, num_train, num_eval, seed=0):
  """(train, eval) rows {text, topic}: title and first paragraph of each article."""
  examples = bbc_news.read_bbc(bbc_dir)
  train, evaluation = labelled_split.split(examples, eval_fraction=0.2, seed=seed,
                                           max_train=num_train, max_eval=num_eval)

  def rows(items):
    return [{'text': ' '.join(e.text_a.split('\n')[:2]), 'topic': e.label} for e in items]
  return rows(train), rows(evaluation)


def write_csv(path, rows, fields):
  with open(path, 'w', encoding='utf-8', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
  return pathlib.Path(path)


def data_config(**fields):
  """configs/finetune.py's task=classification data fields, with `fields` set."""
  data = ml_collections.ConfigDict(finetune_config.get_config('task=classification').data.to_dict())
  for key, value in fields.items():
    data[key] = value
  return data

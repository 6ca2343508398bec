"""Tagging and multiple-choice tasks built from WordNet's example sentences, with their baselines.

Real text with real labels for the tagging and multiple-choice kinds (written as a user's own
JSONL files by the tests and bench/finetune_bench.py, which puts tests/ on sys.path: test data,
not part of the library). WordNet 3.0 glosses end with example
sentences ("I can breathe better when the air is clean").
In an example of a synset, the synset's word (lemma) shows the sense: `read_sentences` finds
that word in the sentence (inflected forms allowed: up to three extra letters per word) and
keeps the sentences where it occurs exactly once (39,027 of them). Tagging marks that span with
its synset's supersense (B-/I-noun.artifact, ...; 45 types, IOB2) or, coarse, its part of
speech (B-/I-noun, verb, adj, adv), every other word O: the model must find the word the
sentence illustrates and tell its sense class. Multiple choice
blanks it out and offers it among three words of the same part of speech taken from other
examples.
"""

import collections
import json
import re

import numpy as np

from bertjax import files
from bertjax.finetune import metrics
from bertjax.finetune.tasks import wordnet_glosses

WORDNET_FILES = ('noun', 'verb', 'adj', 'adv')
_EXAMPLE = re.compile(r'"([^"]+)"')
_WORD = re.compile(r"[\w'-]+")


def _clean(token):
  match = _WORD.search(token)
  return match.group(0).lower() if match else ''


def _find(words, lemma_parts):
  """Start positions where the lemma's words occur (each possibly inflected)."""
  cleaned = [_clean(w) for w in words]
  found = []
  for start in range(len(words) - len(lemma_parts) + 1):
    if all(cleaned[start + i].startswith(part) and len(cleaned[start + i]) - len(part) <= 3
           for i, part in enumerate(lemma_parts)):
      found.append(start)
  return found


def glosses(directory='/usr/share/wordnet'):
  """Yields (part of speech, supersense, lemmas, definition, example sentences) per synset of
  WordNet 3.0's data.* files (wordnet_glosses.parse_synset checks and reads each line)."""
  for name in WORDNET_FILES:
    path = files.join(directory, f'data.{name}')
    with files.open(path, encoding='utf-8') as f:
      for number, line in enumerate(f, start=1):
        if line.startswith('  '):  # The licence header.
          continue
        _, _, supersense, definition = wordnet_glosses.parse_synset(line, path, number)
        head, _, gloss = line.partition(' | ')
        fields = head.split()
        lemmas = [re.sub(r'\(.*\)$', '', fields[4 + 2 * i]).lower()
                  for i in range(int(fields[3], 16))]
        yield name, supersense, lemmas, definition, _EXAMPLE.findall(gloss)


def read_sentences(directory='/usr/share/wordnet'):
  """[(words, start, end, supersense, pos)]: each example sentence with its lemma's span."""
  out, seen = [], set()
  for name, supersense, lemmas, _, examples in glosses(directory):
    for example in examples:
      words = example.split()
      if not 3 <= len(words) <= 30 or example.lower() in seen:
        continue
      hits = [(lemma, start) for lemma in lemmas for start in _find(words, lemma.split('_'))]
      if len(hits) != 1:
        continue
      seen.add(example.lower())
      lemma, start = hits[0]
      out.append((tuple(words), start, start + len(lemma.split('_')), supersense, name))
  return out


def split(items, num_train, num_eval, seed=0):
  """(train, eval) at random; eval keeps only supersenses that training has."""
  order = np.random.default_rng(seed).permutation(len(items))
  train = [items[i] for i in order[:num_train]]
  known = {item[3] for item in train}
  rest = [items[i] for i in order[num_train:] if items[i][3] in known]
  return train, rest[:num_eval]


def tagging_rows(items, coarse=False):
  """{tokens, tags}: the lemma's span tagged with its supersense (coarse: its part of speech)."""
  rows = []
  for words, start, end, supersense, pos in items:
    supersense = pos if coarse else supersense
    tags = ['O'] * len(words)
    tags[start] = f'B-{supersense}'
    for i in range(start + 1, end):
      tags[i] = f'I-{supersense}'
    rows.append({'tokens': list(words), 'tags': tags})
  return rows


def choice_rows(items, seed=0, num_choices=4):
  """Blanked sentence, the lemma's words among distractors of the same part of speech."""
  rng = np.random.default_rng(seed)
  by_pos = collections.defaultdict(list)
  for words, start, end, _, pos in items:
    by_pos[pos].append(' '.join(_clean(w) for w in words[start:end]))
  rows = []
  for words, start, end, _, pos in items:
    answer = ' '.join(_clean(w) for w in words[start:end])
    pool = sorted(set(by_pos[pos]) - {answer})
    distractors = [pool[i] for i in rng.choice(len(pool), num_choices - 1, replace=False)]
    choices = distractors + [answer]
    order = rng.permutation(num_choices)
    choices = [choices[i] for i in order]
    context = ' '.join([*words[:start], '_____', *words[end:]])
    rows.append({'context': context, 'choices': choices, 'label': choices.index(answer)})
  return rows


def write_jsonl(path, rows):
  files.write_atomically(path, ''.join(json.dumps(r) + '\n' for r in rows))
  return path


def most_frequent_tag_baseline(train_rows, eval_rows):
  """Entity F1 of tagging each word with its most frequent training tag (unseen words: O)."""
  counts = collections.defaultdict(collections.Counter)
  for row in train_rows:
    for word, tag in zip(row['tokens'], row['tags'], strict=True):
      counts[word.lower()][tag] += 1
  predicted = [[counts[w.lower()].most_common(1)[0][0] if w.lower() in counts else 'O'
                for w in row['tokens']] for row in eval_rows]
  return metrics.entity_scores([r['tags'] for r in eval_rows], predicted)['f1']


def most_frequent_label(train_labels, eval_labels):
  """Accuracy of always answering the most frequent training label."""
  top = collections.Counter(train_labels).most_common(1)[0][0]
  return float(np.mean([label == top for label in eval_labels]))

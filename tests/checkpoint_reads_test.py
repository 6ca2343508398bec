"""One loader reads checkpoints for inference: interop/sources.load (export, extract_features,
embed, predict). A checkpoint read anywhere else in bertjax/ fails here unless ALLOWED names it
with the reason it is not an inference read."""

import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'bertjax'

# Calls that read a checkpoint's weights: orbax's restore, the checked reader, training's
# start-from readers, the format readers, TensorFlow's checkpoint reader.
READS = re.compile(r'\.restore\(|checkpoint_reader\.read\(|\bread_params(_and_source)?\('
                   r'|\bload_params\('
                   r'|\bload_encoder\(|hf_checkpoint\.(read|load)\(|tf1_checkpoint\.(read|load)\('
                   r'|\bload_checkpoint\(')

# (file, what it calls): why it is not a second loader for inference.
ALLOWED = {
    # The loader: a bertjax step through the checked reader, the hf and TF1 formats' readers.
    ('interop/sources.py', 'checkpoint_reader.read('): 'the loader',
    ('interop/sources.py', 'hf_checkpoint.read('): 'the loader',
    ('interop/sources.py', 'tf1_checkpoint.load('): 'the loader',
    # The checked reader itself (digests, a damaged newest step skipped), which the loader
    # and training's init_from call: orbax's restore of one step's params (checkpoint_step.py,
    # the one step folder it reads), nothing written.
    ('training/checkpoint_step.py', '.restore('): 'the reader the loader calls',
    # The training loop's own resume: the whole train state into the run's shardings, a
    # damaged step moved aside; a run resuming itself, not a model read for inference.
    ('training/checkpoint.py', '.restore('): "the loop's resume",
    # TensorFlow's reader inside the TF1 format's module, reached through the loader (and
    # init_from's training load).
    ('interop/tf1_checkpoint.py', 'load_checkpoint('): "the TF1 format's own reader",
    # Training's start-from weights (config.init_from): every tensor placed straight into the
    # model's shardings, its layers stacked for nn.scan where the model scans; a training
    # load, which no inference command reaches.
    ('interop/init_from.py', 'tf1_checkpoint.load('): 'training init_from',
    ('interop/init_from.py', 'hf_checkpoint.load('): 'training init_from',
    ('interop/init_from.py', 'checkpoint_reader.read('): 'training init_from',
    ('interop/init_from.py', 'read_params_and_source('): 'training init_from',
    ('pretrain.py', 'load_params('): 'training init_from (continued pre-training)',
    ('finetune/job.py', 'load_encoder('): 'training init_from (fine-tuning)',
}


def calls(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, call) of every checkpoint read in `path`: not a definition, comment or docstring."""
  found = []
  for number, line in enumerate(path.read_text().splitlines(), 1):
    code = line.split('#', 1)[0]
    if code.lstrip().startswith(('def ', '"""', "'")):
      continue  # A definition or a docstring's mention, not a call.
    found += [(number, match.group(0)) for match in READS.finditer(code)]
  return found


def reads(path: pathlib.Path, relative: str) -> list[str]:
  """'file:line calls X' for every checkpoint read in `path` that ALLOWED does not name."""
  return [f'bertjax/{relative}:{number} calls {call}' for number, call in calls(path)
          if (relative, call) not in ALLOWED]


def test_only_the_loader_reads_checkpoints():
  found = []
  for path in sorted(PACKAGE.rglob('*.py')):
    found += reads(path, path.relative_to(PACKAGE).as_posix())
  assert not found, ('checkpoint reads outside the one loader (interop/sources.load); read '
                     'through it, or allow-list a training load with why:\n' + '\n'.join(found))


def test_every_allowed_read_is_still_there():
  """An allow-list entry whose read has gone is stale (it would let a new read in unseen)."""
  stale = [(f, call) for f, call in ALLOWED
           if call not in {c for _, c in calls(PACKAGE / f)}]  # Called, not only defined.
  assert not stale, stale


def test_the_check_sees_a_read(tmp_path):
  source = tmp_path / 'tool.py'
  source.write_text('import x\nparams = checkpoint_reader.read(workdir).params\n'
                    '# checkpoint_reader.read( in a comment is no call\n')
  assert reads(source, 'embed.py') == ['bertjax/embed.py:2 calls checkpoint_reader.read(']
  assert reads(source, 'interop/sources.py') == []

"""What a start-from directory (`init_from`) holds, and its weights placed into a model's shardings.

`init_from` is one of: a transformers BERT directory (config.json + model.safetensors, maybe
vocab.txt and sentence-transformers' 1_Pooling/), an original TF1 BERT checkpoint
(bert_config.json + bert_model.ckpt.*, a folder or the prefix), a bertjax workdir, its
checkpoints/ folder or one checkpoints/<step>. This module sniffs which, reads the
architecture, vocab and pooling it implies, and loads its parameters: all of them (continued
pre-training) or the encoder only (fine-tuning, the task head fresh), checked by name and shape.

Every location may be a URL (gs://bucket/run) as well as a local path: files are read through
bertjax.files, a bertjax checkpoint's arrays through orbax (which reads URLs itself).
"""

import dataclasses
import json
import os

from absl import logging
from flax import traverse_util

from bertjax import files
from bertjax import paths
from bertjax.interop import export_manifest
from bertjax.interop import hf_checkpoint
from bertjax.interop import hf_names
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import hf_weights
from bertjax.interop import placement
from bertjax.interop import tf1_checkpoint
from bertjax.text import tokenizer
from bertjax.text import vocab_files
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step
from bertjax.training import hosts
from bertjax.training import run_files

ARCHITECTURE_FIELDS = ('vocab_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim',
                       'max_position_embeddings', 'type_vocab_size', 'hidden_act',
                       'layer_norm_eps')

RUN_VOCAB = run_files.RUN_VOCAB


def lookup(config, dotted: str):
  """config's value at a dotted name, or None where it has no such field."""
  value = config
  for key in dotted.split('.'):
    if not hasattr(value, 'keys') or key not in value:
      return None
    value = value[key]
  return value


def configured(config, *, loads_weights: bool = True) -> str:
  """config.init_from as an absolute path or URL ('' when unset); where it is a bertjax run and
  the job `loads_weights` from it, its checkpoint folder of config.init_from_step ('best', a
  number; 'latest' = the run itself, whose newest readable step is read). A job that loads
  none (a resume, eval, predict) reads only what every step of the run shares (shapes, vocab,
  pooling): the run itself, whose step named then may since have been pruned."""
  path = paths.absolute(config.init_from)
  step = config.get('init_from_step', 'latest')
  asking = checkpoint_reader.Asking('config.init_from_step', 'as init_from a run',
                                    f' (init_from={path})')
  if not (path and loads_weights) or checkpoint_reader.parse_step(
      step, text=True, asking=asking) is None:
    return path
  return checkpoint_reader.step_path(path, checkpoint_reader.parse_step(step, text=True,
                                                                       asking=asking), asking)


def named(config) -> str:
  """init_from as a config (or a run's config.json) names it: the absolute path, with its step
  ('RUN (step best)') where init_from_step names one; '' when unset."""
  path = paths.absolute(config.get('init_from') or '')
  step = config.get('init_from_step') or 'latest'
  return f'{path} (step {step})' if path and step != 'latest' else path


_RECORDED_STEP = checkpoint_reader.Asking('config.init_from_step')  # A config's, not a flag.


def began_from(config, run) -> bool:
  """Whether `config`'s init_from names what `run` (its config.json) began from: the same name,
  or the very checkpoint the run read (init_from_step=8 where the run began from 'best' or
  'latest', which was step 8; a run's checkpoints/8 folder named as init_from)."""
  if named(config) == named(run):
    return True
  read, path = lookup(run, 'init_from_read'), paths.absolute(config.get('init_from') or '')
  if not (read and path):
    return False
  try:
    step = checkpoint_reader.parse_step(config.get('init_from_step'), text=True,
                                        asking=_RECORDED_STEP)  # '' in older runs: newest.
  except ValueError:
    return False
  if step is None:
    return path == read
  return isinstance(step, int) and files.join(path, 'checkpoints', str(step)) == read


def is_transformers_dir(path) -> bool:
  """Whether `path` is a transformers model's own folder: its config.json, and neither a
  bertjax run (whose config.json sits beside checkpoints/), a TF1 checkpoint nor the root of a
  sentence-transformers 1.x folder (transformers_model_dir says which is which)."""
  return bool(path) and transformers_model_dir(path) == os.fspath(path)


def transformers_model_dir(path) -> str:
  """The folder holding the transformers model at `path`: `path` itself, or for a
  sentence-transformers 1.x folder (modules.json puts the model in 0_Transformer/, its root
  config.json only the library's version) that module folder (its pooling stays the root's:
  pooling()); '' for another source. The one order every reader tells sources apart by:
  a run, then TF1, then a 1.x layout, then a transformers folder."""
  from bertjax.interop import sentence_transformers  # pylint: disable=g-import-not-at-top
  path = os.fspath(path)
  if not path or paths.is_run(path) or tf1_checkpoint.find(path) is not None:
    return ''
  if inner := sentence_transformers.transformer_folder(path):
    return files.join(path, *inner.split('/'))
  return path if files.exists(files.join(path, 'config.json')) else ''


def model_config(init_from: str) -> dict:
  """The architecture fields (ARCHITECTURE_FIELDS) of the encoder in `init_from`."""
  path = os.fspath(init_from)
  export_manifest.check_exists(path, f'init_from={init_from} does not exist: pass a transformers '
                               'BERT dir, an original TF checkpoint or a bertjax workdir / '
                               'checkpoint.')
  if (tf1 := tf1_checkpoint.find(path)) is not None:
    config_file = files.join(tf1[0], tf1_checkpoint.CONFIG_FILE)
    cfg = tf1_checkpoint.config_from_tf1(tf1_checkpoint.read_config(config_file), config_file)
  elif model := transformers_model_dir(path):
    config_file = files.join(model, 'config.json')
    cfg = hf_names.config_from_hf(hf_checkpoint.read_config(config_file), config_file)
    # Its weights, before the data is read and the model built (where a folder without them,
    # or with a file cut short, was found at the restore, leaving a checkpoints/ folder).
    hf_weights.check_weights(model)
  else:
    cfg = newest_meta(path)['model']
  return {k: cfg[k] for k in ARCHITECTURE_FIELDS}


def newest_meta(path) -> dict:
  """The meta item (step, model config) of the newest step whose meta reads, at a bertjax
  workdir / checkpoints dir / step dir."""
  path = os.fspath(path)
  directory, step = checkpoint_reader.locate(path)
  available = checkpoint_reader.steps(directory)
  if not available and not files.isfile(path):
    if tf1 := checkpoint_reader.tf1_without_config(path):
      raise FileNotFoundError(tf1)
    raise FileNotFoundError(
        f'{path}: neither a transformers BERT dir (config.json + model.safetensors), an '
        'original TF1 checkpoint, nor a bertjax workdir / checkpoints dir / step holding a '
        'checkpoint.')
  for candidate in [step] if step is not None else reversed(available):
    try:
      meta = checkpoint_step.read_meta(files.join(directory, str(candidate)))
      if isinstance(meta.get('model'), dict):
        return meta
    except ValueError:
      continue
  raise ValueError(f'{path}: no checkpoint step has a readable meta item with the model '
                   'config: set config.model (a size) to load it.')


def run_folder(path):
  """The workdir of the bertjax run that wrote `path` (a workdir, checkpoints/ or a step), or
  None. A str (a local path or a URL) comes back for a str; a caller that passes a Path object
  gets one back, to compare with its own."""
  for folder in files.folders_up(path, 2):
    if paths.is_run(folder):
      return folder if isinstance(path, str) else type(path)(folder)
  return None


def check_apart(config, workdir: str):
  """Refuses a workdir inside the model config.init_from names (a bertjax run: the run around
  its step) or around it, before anything is written: a run inside another mixes its files
  with that run's; one around a model makes its folder read as a run, so that every tool then
  refuses to write anywhere in it (a whole bucket, with the workdir at its root)."""
  path = paths.absolute(config.get('init_from') or '')
  if not path or not workdir:
    return
  model = run_folder(path) or path
  work, source = paths.file_key(workdir), paths.file_key(model)
  sep = '/' if files.is_remote(work) else os.sep
  if work.startswith(source + sep):
    raise ValueError(f'--workdir={workdir} is inside {model}, the model --config.init_from '
                     'starts from: the run would write its files among that model\'s; pass a '
                     f'--workdir outside {model}.')
  if source.startswith(work + sep):
    raise ValueError(f'--workdir={workdir} holds {model}, the model --config.init_from starts '
                     'from: the run\'s files around it would make the whole folder read as one '
                     'run (tools then write nowhere in it); pass a --workdir of its own, beside '
                     'the model.')


def run_config(path) -> dict | None:
  """The config.json of the bertjax run that wrote `path` (a workdir, checkpoints/ or a step:
  the config it was written with, a resume's own where a resume with other settings wrote it);
  None where no run wrote it; an error naming the file where it cannot be read."""
  folder = run_folder(path)
  if folder is None:
    return None
  config_file = run_config_file(path, folder)
  try:
    run = json.loads(files.read_text(config_file))
  except ValueError as e:  # Not UTF-8 (files says which byte), or not JSON.
    raise ValueError(f'{config_file} cannot be read ({e}): it was cut short or '
                     'edited. Restore it from a copy (a resumed run also keeps '
                     'config-resumed-at-<step>.json beside it).') from None
  if not isinstance(run, dict):
    raise ValueError(f'{config_file} is not a bertjax run config (a JSON object).')
  return run


def run_config_file(path, folder) -> str:
  """The file run_config reads for `path` in the run at `folder`."""
  step = files.name(os.fspath(path))
  if step.isdigit() and files.name(files.parent(os.fspath(path))) == 'checkpoints':
    return checkpoint_reader.config_file_at(folder, int(step))
  return files.join(folder, 'config.json')


def _checked_vocab(path: str, run: dict) -> str:
  """`path`, when it is the vocab the run recorded (by hash; runs before the hash: unchecked)."""
  recorded = run.get('data', {}).get('vocab_sha256')
  if recorded and files.sha256(path) != recorded:
    raise ValueError(f'{path} is not the vocab this run was trained with (its sha256 differs from '
                     'the one config.json recorded): it was edited or replaced; restore it.')
  return path


def check_same_vocab(init_path: str, vocab: str, given: str, fix: str = ''):
  """Refuses `vocab` (set as `given`, e.g. 'data.vocab_file'; '' for one the job chose, whose
  `fix` is said) where the weights at `init_path` were trained with another one: same size or
  not, every id would mean another token."""
  own = vocab_file(init_path) if init_path and vocab else None
  why = vocab_files.difference(own, vocab) if own else ''
  if why:
    fix = fix or f'drop {given} (its own is read), or start from weights trained with that vocab'
    raise ValueError(f'{f"{given}=" if given else "the vocab "}{vocab} is not the vocab '
                     f'{init_path} was trained with ({own}: {why}): {fix}.')


def vocab_file(init_from: str) -> str | None:
  """The vocab of a checkpoint: a transformers or TF1 dir's vocab.txt, else its SentencePiece
  model (a transformers dir's spiece.model; a TF1 dir's one *.model, as tf1_checkpoint reads it:
  two are refused); a bertjax run's own copy (<workdir>/vocab.txt), else the vocab its
  config.json recorded where that still exists, else the embedded corpus's for a pre-training
  run on it; else None (never a stand-in)."""
  path = os.fspath(init_from)
  if (tf1 := tf1_checkpoint.find(path)) is not None:
    # The importer's own rule, so fine-tuning reads the tokenizer that export and predict read.
    return tf1_checkpoint.vocab_beside(tf1[0]) or None
  if model := transformers_model_dir(path):
    # Its vocab.txt, else a SentencePiece model (ALBERT, T5: the tokenizers read it by its
    # content, vocab_files.for_model), else tokenizer.json's WordPiece vocab (transformers 5.x
    # saves no vocab.txt), as hf_checkpoint reads it for export and predict; a tokenizer
    # bertjax's would not reproduce (its settings, tokens added past the vocab) is refused.
    return hf_tokenizer_files.checked_vocab(model) or None
  folder = run_folder(path)
  run = run_config(path)
  if folder is not None and files.isfile(files.join(folder, RUN_VOCAB)):
    return _checked_vocab(files.join(folder, RUN_VOCAB), run or {})
  if not run or 'data' not in run:
    return None
  recorded = run['data'].get('vocab_file') or ''
  if recorded and files.isfile(recorded):
    return _checked_vocab(recorded, run)
  if run.get('job') == 'pretrain' and not run['data'].get('train_files') and not recorded:
    from bertjax.pretraining_data import embedded  # pylint: disable=g-import-not-at-top
    return str(embedded.vocab_path())
  return None


def word_limit(init_from: str) -> int:
  """WordPiece's longest word (longer: [UNK]) for the model at `init_from`: a transformers
  dir's tokenizer.json's max_input_chars_per_word, what a TF1 export or a fine-tuning run
  recorded of its source, else the original BERT's 200 (TF1 checkpoints, pre-training runs)."""
  path = os.fspath(init_from)
  if (tf1 := tf1_checkpoint.find(path)) is not None:
    return tf1_checkpoint.word_limit(tf1[0])
  if model := transformers_model_dir(path):
    return hf_tokenizer_files.word_limit(model)
  return recorded_word_limit(run_config(path) or {},
                             files.join(run_folder(path) or path, 'config.json'))


def recorded_word_limit(run: dict, where: str = "the run's config.json") -> int:
  """The longest word a run's config.json (`where`) records its tokenizer read (fine-tuning
  records its source's); 200, the original BERT's, for runs that record none."""
  recorded = (run.get('data') or {}).get('max_chars_per_word')
  if recorded is None:
    return tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD
  if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 1:
    raise ValueError(f'{where} records data.max_chars_per_word {json.dumps(recorded)}, not a '
                     'positive whole number: it was edited; restore the config.json the run '
                     'wrote.')
  return recorded


def pooling(init_from: str) -> str | None:
  """'mean' or 'cls' when `init_from` is a sentence-transformers dir that says so (its Pooling
  module, in the layout of any release: sentence_transformers.pooling_of)."""
  from bertjax.interop import sentence_transformers  # pylint: disable=g-import-not-at-top
  if not init_from or not transformers_model_dir(init_from):
    return None
  return sentence_transformers.pooling_of(init_from)  # The root's, in a 1.x layout too.


def read_params(path, with_heads: bool = True):
  """Parameters (numpy tree) from a transformers dir, a TF1 checkpoint, a workdir, its
  checkpoints/ or one step (not an export cut short)."""
  return read_params_and_source(path, with_heads).params


@dataclasses.dataclass(frozen=True)
class Read:
  """What read_params_and_source read: the parameters (numpy tree), the source (the TF1
  prefix, the transformers dir, or the bertjax checkpoint step's folder), the parameter paths
  the source lacks and that were initialised fresh (a transformers folder saved without its
  pooler or heads), and the source's tensors that were not read (its names)."""

  params: dict
  source: str
  fresh: tuple = ()
  unused: tuple = ()


def read_params_and_source(path, with_heads: bool = True) -> Read:
  """read_params' parameters, and what was read (Read): the TF1 prefix, the transformers dir,
  or the bertjax checkpoint step's folder (the newest readable one where `path` names none)."""
  export_manifest.check_complete(path)
  if tf1_checkpoint.find(path) is not None:
    tf1 = tf1_checkpoint.load(path)
    logging.info('init_from %s (TF1 checkpoint, %s): %d tensors; %d not read (optimizer '
                 'slots, counters; any other is warned of)', tf1.source, tf1.kind,
                 len(tf1.params), len(tf1.ignored))
    params = tf1.params if with_heads else tf1.encoder_params()
    return Read(traverse_util.unflatten_dict(params, sep='/'), os.fspath(tf1.source))
  if model := transformers_model_dir(path):
    _, params, report = hf_checkpoint.load(model, with_heads=with_heads)
    if report.initialised:  # transformers warns of these too ("newly initialized").
      logging.warning('init_from %s (transformers) holds no %s: they start at random',
                      path, ', '.join(report.initialised))
    logging.info('init_from %s (transformers): %s', path, report.summary())
    return Read(params if with_heads else {'bert': params}, os.fspath(path),
                tuple(report.initialised), tuple(report.unused))
  read = checkpoint_reader.read(path)
  folder = files.join(read.directory, str(read.step))
  logging.info('read %s (bertjax checkpoint, digests checked)', folder)
  return Read(read.params, folder)


def _read_on_every_host(init_from: str, with_heads: bool) -> Read:
  """read_params_and_source, the same on every host: 'latest' or 'best' of a source run that
  saves meanwhile, or a folder on each host's own disk, may read another step on each, whose
  parameters would be placed as one array. Compared before they are placed; a host's error is
  compared too (the others would wait for it), then raised."""
  fix = ('pass a source on a file system all the hosts share (a bucket) and a step every host '
         'sees: config.init_from_step=N, or a run that is not saving')
  try:
    read = read_params_and_source(init_from, with_heads)
  except Exception as e:  # pylint: disable=broad-except  # Said on every host, then raised.
    hosts.check_same_view('', f'error: {e}', what=f'init_from={init_from}', fix=fix)
    raise
  hosts.check_same_view('', read.source, what=f'init_from={init_from}', fix=fix)
  return read


# A source without the NSP head only (an MLM-only run's, model.nsp=False) to a model with one.
_NO_NSP_HEAD = ('it has no NSP head (pre-trained MLM-only, as model.nsp=False does); set '
                '--config.model.nsp=False to go on MLM-only (pair files\' labels are then ignored)')


def load_params(init_from: str, abstract_params, shardings):
  """Parameters from `init_from` placed into `shardings`; the check is by name and shape.

  Every parameter of the model must be present with the model's shape; extra tensors in the
  checkpoint are reported and ignored. The encoder's layers load stacked (nn.scan) or per layer,
  whichever the model has. Returns (params, unused names, what was read: the checkpoint step's
  folder, read_params_and_source).
  """
  read = _read_on_every_host(init_from, with_heads=True)
  wanted = checkpoint.flatten(abstract_params)
  loaded = placement.encoder_layout_of(checkpoint.flatten(read.params), wanted, init_from)
  nsp_only = all(k.startswith('nsp/') for k in wanted if k not in loaded)
  params = placement.place(loaded, abstract_params, shardings, f'init_from={init_from}',
                           missing_hint=(_NO_NSP_HEAD if nsp_only else
                                         'is it a BERT of this architecture?'),
                           shape_hint='set the model size / vocab_size of the checkpoint.')
  unused = sorted(set(loaded) - set(wanted))
  if unused:
    logging.warning('init_from: %d checkpoint tensors unused: %s', len(unused), unused[:10])
  return params, unused, read.source


def load_encoder(init_from: str, params, shardings, num_layers: int):
  """`params` with the `bert` subtree replaced by the encoder in `init_from`, placed in
  `shardings`. The task head (everything outside `bert`) keeps its fresh initialisation.
  Returns (params, report) where report lists the loaded, fresh and unused parameter names,
  and what was `read` (read_params_and_source).
  """
  read = _read_on_every_host(init_from, with_heads=False)
  source = read.params
  if 'bert' not in source:
    raise ValueError(f'init_from={init_from}: its parameters have no `bert` encoder.')
  wanted = checkpoint.flatten(params['bert'])
  loaded = placement.convert_layer_layout(checkpoint.flatten(source['bert']), wanted,
                                          num_layers)
  bert = placement.place(loaded, params['bert'], shardings['bert'], f'init_from={init_from}',
                         missing_hint='is it a BERT checkpoint?',
                         shape_hint='leave the size empty to take the checkpoint\'s shape.')
  head = sorted(k for k in checkpoint.flatten(params) if not k.startswith('bert/'))
  # A transformers folder saved without its pooler (BertForMaskedLM): drawn, not loaded.
  lacked = sorted(read.fresh)
  report = {'loaded': sorted(f'bert/{k}' for k in wanted if f'bert/{k}' not in lacked),
            'fresh': head, 'lacked': lacked,
            'unused': sorted({*read.unused, *(set(loaded) - set(wanted))}),
            'read': read.source}
  return {**params, 'bert': bert}, report

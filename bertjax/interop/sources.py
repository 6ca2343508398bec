"""Any importable model location -> a Bundle: what export and extract_features read.

Accepted: a transformers BERT directory (with the sentence-transformers modules beside it, if
any; a sentence-transformers 1.x folder, its model in a module folder such as 0_Transformer/),
an original TF1 checkpoint (folder or prefix), a bertjax workdir (pre-training or
fine-tuning), its checkpoints/ folder or one checkpoints/<step>. A bertjax workdir's config.json
says what the model is for: pre-training, or the fine-tuned task (its kind, labels, pooling,
sequence length, vocab and casing).

Every location may be a URL (gs://bucket/run) as well as a local path (see init_from).
"""

import os

from absl import logging

from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import export_manifest
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.interop import sentence_transformers
from bertjax.interop import tf1_checkpoint
from bertjax.model import layer_stack
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import kinds


def format_of(path) -> str:
  """'tf1', 'hf', 'st_layout' (a sentence-transformers 1.x folder: its model in a module
  folder) or 'bertjax' for a location that exists and is not an export cut short
  (export_manifest.check_exists); errors say what was expected."""
  path = os.fspath(path)
  export_manifest.check_exists(path, f'{path} does not exist: pass a bertjax workdir or '
                               'checkpoint, a transformers BERT directory or an original TF '
                               'checkpoint.')
  if tf1_checkpoint.find(path) is not None:
    return 'tf1'
  model = init_from.transformers_model_dir(path)  # The one order (it says which).
  return 'bertjax' if not model else ('hf' if model == path else 'st_layout')


def load(path, vocab_file: str = '', do_lower_case: bool | None = None, *, step=None,
         bert_config_file: str = '', vocab_named: str = '--vocab_file') -> bundle_lib.Bundle:
  """The model at `path`: THE loader of a checkpoint for reading (export, extract_features,
  embed, predict). `step`: a bertjax run's checkpoint ('best', 'latest' or None, a number);
  vocab_file / do_lower_case override what the source says; bert_config_file: a TF1
  checkpoint's config kept apart from it (the original extract_features' flags); vocab_named:
  how a vocab_file the model was not trained with is named (the caller's flag or field)."""
  if bert_config_file:
    if init_from.transformers_model_dir(path):
      raise ValueError(f'{path} is a transformers folder, whose config.json describes it: drop '
                       f'--bert_config_file={bert_config_file} (it is for a TF1 checkpoint).')
    export_manifest.check_complete(path)  # format_of's check, which this TF1 reader skips.
    result = tf1_checkpoint.load(path, config_file=bert_config_file)
  else:
    path = checkpoint_reader.step_path(path, step)
    result = _READERS[format_of(path)](path)
  if vocab_file:
    # Only where the model keeps none beside it (a TF1 checkpoint may not) is it the vocab;
    # elsewhere it must be the model's own (another would map every id to another token).
    init_from.check_same_vocab(path, str(vocab_file), vocab_named)
    result.vocab_file = str(vocab_file)
  if do_lower_case is not None:
    result.do_lower_case = do_lower_case
  bundle_lib.check_head(result.kind, result.labels, result.params, result.source,
                        run=result.step is not None)  # A bertjax run's checkpoint.
  bundle_lib.check_vocab(result)
  if result.ignored:
    logging.info('%s: %d tensors were not read (optimizer slots, counters; any other is '
                 'warned of as it is read), e.g. %s', result.source, len(result.ignored),
                 ', '.join(result.ignored[:4]))
  return result


def _read_hf(path) -> bundle_lib.Bundle:
  result = hf_checkpoint.read(path)
  sentence_transformers.read_modules(result)
  return result


def _read_st_layout(root) -> bundle_lib.Bundle:
  """A sentence-transformers 1.x folder (modules.json puts the model in 0_Transformer/): the
  encoder from the Transformer module's folder, what runs after it from `root`."""
  folder = sentence_transformers.transformer_folder(root)
  result = hf_checkpoint.read(files.join(root, *folder.split('/')))
  sentence_transformers.read_modules(result, root)
  result.source = os.fspath(root)
  return result


# format_of's answer -> its reader.
_READERS = {'tf1': tf1_checkpoint.load, 'hf': _read_hf, 'st_layout': _read_st_layout,
            'bertjax': lambda path: _read_bertjax(os.fspath(path))}


def _task_labels(run: dict, step: str) -> tuple[str, tuple]:
  """(kind, labels) of a fine-tuning run's task, as its config.json records them."""
  if 'labels' in run and 'kind' in run:
    return run['kind'], tuple(run['labels'])
  raise ValueError(f'{step}: the run\'s config.json does not record its task\'s kind and labels '
                   '(every fine-tuning run writes them): restore the config.json the run wrote.')


def _check_run_record(run: dict, meta: dict, step: str):
  """Refuses a run's config.json whose model function, pooling, task, length or tokenization
  differs from what the checkpoint was saved with (its meta): an edited record (pooling mean
  for cls, hidden_act relu for gelu, max_seq_length 16 for 32, kind regression for
  classification, max_chars_per_word, max_windows) gave other outputs from the same weights,
  without a word (Predictor builds from it)."""
  recorded = run.get('model') if isinstance(run.get('model'), dict) else {}
  pairs = [(f'model.{k}', recorded[k], meta['model'][k]) for k in init_from.ARCHITECTURE_FIELDS
           if k in recorded and k in meta['model']]
  pairs += [(name, run[name], meta[name]) for name in ('kind', 'pooling', 'task')
            if name in meta and name in run]
  data = run.get('data') if isinstance(run.get('data'), dict) else {}
  if 'max_seq_length' in meta and 'max_seq_length' in data:  # Older steps have no record.
    pairs.append(('data.max_seq_length', data['max_seq_length'], meta['max_seq_length']))
  saved_data = meta.get('data') if isinstance(meta.get('data'), dict) else {}
  pairs += [(f'data.{k}', data.get(k), saved_data[k]) for k in saved_data if data]  # A field
  # dropped is an edit too: its reader's default may not be what the run had.
  for name, said, saved in pairs:
    if said != saved:  # Named as read: a resume's own config for the steps it wrote.
      said_by = files.name(init_from.run_config_file(step, init_from.run_folder(step)))
      raise ValueError(f"{step} was saved with {name}={saved!r}, but the run's {said_by} says "
                       f"{said!r}: {said_by} was edited or is another run's; restore the one "
                       'the run wrote.')


def _read_bertjax(path: str) -> bundle_lib.Bundle:
  read = checkpoint_reader.read(path)  # The digests checked; a damaged newest step skipped.
  step = files.join(read.directory, str(read.step))
  params = layer_stack.unstack_layers(checkpoint.flatten(read.params))
  meta_model = read.meta.get('model')
  if not isinstance(meta_model, dict):
    raise ValueError(f'{step}: its meta item has no model config: it was not written by a '
                     'bertjax run.')
  config = {k: meta_model[k] for k in init_from.ARCHITECTURE_FIELDS}
  config.update({k: meta_model[k] for k in ('dropout_rate', 'attention_dropout_rate',
                                            'initializer_range') if k in meta_model})
  run = init_from.run_config(step) or {}
  data = run.get('data', {})
  _check_run_record(run, read.meta, step)
  if run.get('job') == 'finetune':
    kind, labels = _task_labels(run, step)
    saved = read.meta.get('labels')
    if saved is not None and tuple(saved) != labels:
      raise ValueError(f"{step} was saved with the labels {saved} (its head's order), but the "
                       f"run's config.json lists {list(labels)}: config.json was edited or is "
                       "another run's; restore the one the run wrote.")
    pooling = run.get('pooling', 'cls')
  else:
    kind, labels, pooling = bundle_lib.kind_of(params), (), 'cls'
    kept = kinds.get(kind).head_params
    task_heads = sorted({prefix for table in kinds.KINDS.values() for prefix in table.head_params
                         if prefix not in kept and any(k.startswith(prefix) for k in params)})
    if task_heads:  # A fine-tuned model whose run record is gone: its head would be dropped.
      raise ValueError(f'{step} holds a task head ({", ".join(task_heads)}) but its run has no '
                       "config.json (the record of the head's kind, labels, casing and length): "
                       'copy back the config.json the run wrote.')
  return bundle_lib.Bundle(
      config=config, params=params, kind=kind, vocab_file=init_from.vocab_file(step) or '',
      do_lower_case=bool(data.get('do_lower_case', True)), labels=labels,
      pooling=pooling if pooling in ('cls', 'mean') else 'cls',
      max_seq_length=int(data.get('max_seq_length', 128)),
      max_chars_per_word=init_from.recorded_word_limit(run, f'{step}\'s run config.json'),
      source=step, step=read.step)

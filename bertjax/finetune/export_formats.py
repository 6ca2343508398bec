"""Which export formats will hold a fine-tuning run's head, told at its start, and the formats
the user asked for (config.export_format) checked against it before any data is read.

What each format holds is bundle.FORMAT_KINDS / cannot_hold (one table); here it is only said:

  classification head on mean-pooled outputs: exports to saved_model (hf and tf1 read only
    [CLS]-pooled heads: fine-tune with pooling=cls for them)
"""

from bertjax import config_check
from bertjax.finetune.tasks import registry
from bertjax.interop import bundle
from bertjax.training import kinds as kind_table

# User-file tasks whose kind is not their name (the others: classification, regression, ...).
_USER_TASK_KINDS = {'swag': 'multiple_choice'}


def task_kind(config) -> str:
  """The kind of config.task's head, known without reading its files (a user task reads its
  training file for its labels when it is made)."""
  if config.task in registry.USER_TASKS:
    return _USER_TASK_KINDS.get(config.task, config.task)
  return registry.get_task(config.task, config.data).kind


def _head(kind: str, pooling: str) -> str:
  if not kind_table.get(kind).pooled:  # Only a pooled head's pooling is worth naming.
    return f'{kind} head'
  return f"{kind} head on {'the [CLS] pooler' if pooling == 'cls' else f'{pooling}-pooled outputs'}"


def _listed(names) -> str:
  return ', '.join(names[:-1]) + f' and {names[-1]}' if len(names) > 1 else names[0]


def _split(kind: str, pooling: str) -> tuple[list, list, list]:
  """(formats that hold the head, those that would with [CLS] pooling, those that never do)."""
  holding = bundle.formats_for(kind, pooling)
  with_cls = bundle.formats_for(kind, 'cls')
  return (holding, [f for f in with_cls if f not in holding],
          [f for f in bundle.FORMAT_KINDS if f not in with_cls])


def statement(kind: str, pooling: str) -> str:
  """One line: the head, the formats that will hold it, and for the others why not (and, where
  [CLS] pooling would do, that)."""
  holding, need_cls, never = _split(kind, pooling)
  notes = []
  if need_cls:
    notes.append(f"{_listed(need_cls)} read{'' if len(need_cls) > 1 else 's'} only "
                 f"[CLS]-pooled heads: fine-tune with pooling=cls for "
                 f"{'them' if len(need_cls) > 1 else 'it'}")
  if never:
    notes.append(f'{_listed(never)} cannot hold a {kind} head')
  line = f'{_head(kind, pooling)}: ' + (f'exports to {", ".join(holding)}' if holding
                                         else 'no export format holds it')
  return line + (f' ({"; ".join(notes)})' if notes else '')


def check(config, kind: str, pooling: str, pooling_from: str = '', trained: bool = False):
  """Refuses, in one line naming why and what to do, a config.export_format that cannot hold
  this run's head; `pooling_from` says where an 'auto' pooling came from, `trained` that the
  workdir holds the run already (its pooling is kept: another one needs a new workdir)."""
  holding, need_cls, _ = _split(kind, pooling)
  for fmt in config_check.export_formats(config.export_format):
    if fmt in holding:
      continue
    other = f'export as {", ".join(holding)}' if holding else 'no format holds this head'
    if fmt in need_cls:
      why = (f"{fmt} reads only [CLS]-pooled heads and this run's {kind} head is on "
             f'{pooling}-pooled outputs{f" ({pooling_from})" if pooling_from else ""}')
      fix = (f'fine-tune with --config.pooling=cls{" in a new --workdir" if trained else ""} '
             f'for {fmt}, or {other}')
    else:
      why = f'{fmt} cannot hold a {kind} head ({fmt} holds: {", ".join(bundle.FORMAT_KINDS[fmt])})'
      fix = other if holding else f'{other}: drop --config.export_format'
    raise ValueError(f'config.export_format={config.export_format!r}: {why}; {fix}.')

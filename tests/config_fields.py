"""Shared by the tests: a config with some of its dotted fields set, as a command line would."""

import pretrain_runs


def configured(config, **fields):
  """A resolved, unlocked copy of config with fields set ('__' for '.': data__train_file)."""
  config = config.copy_and_resolve_references()
  config.unlock()
  return pretrain_runs.set_fields(config, {k.replace('__', '.'): v for k, v in fields.items()})

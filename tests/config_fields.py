"""Shared by the tests: a config with some of its dotted fields set, as a command line would."""


def configured(config, **fields):
  """A resolved, unlocked copy of config with fields set ('__' for '.': data__train_file)."""
  config = config.copy_and_resolve_references()
  config.unlock()
  for key, value in fields.items():
    *parents, leaf = key.split('__')
    node = config
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config

"""The mesh axes and the table mapping logical axis names to them, as config.mesh.rules writes
it: pure Python, so that config_check reads the rules as training/sharding applies them (a
name or axis with spaces, a name given twice), before JAX starts.
"""

import difflib

from bertjax import console

MESH_AXES = ('data', 'fsdp', 'tensor')

# Ordered (logical name, mesh axes); a name absent here is replicated.
RULES = (
    ('batch', ('data', 'fsdp')),
    ('length', None),
    ('activation_embed', None),  # Block edges keep the hidden dim whole (post-LN needs it).
    ('vocab', 'tensor'),
    ('embed', 'fsdp'),
    ('heads', 'tensor'),
    ('kv', None),
    ('mlp', 'tensor'),
    ('layers', None),
)

NAMES = tuple(name for name, _ in RULES)  # The logical names the model's arrays carry.


class RuleError(ValueError):
  """An entry of config.mesh.rules that is no rule (`entry`), or a name given twice."""

  def __init__(self, entry: str, why: str, fix: str):
    super().__init__(f'mesh.rules entry {entry!r} {console.said(why, fix)}')
    self.entry, self.why, self.fix = entry, why, fix


def rules_to_text(rules=RULES) -> str:
  """The rules as one flag value: `batch=data+fsdp,length=,...` (empty = replicated)."""
  def axes(mesh_axes):
    if mesh_axes is None:
      return ''
    return mesh_axes if isinstance(mesh_axes, str) else '+'.join(mesh_axes)
  return ','.join(f'{name}={axes(mesh_axes)}' for name, mesh_axes in rules)


def parse_rules(text: str) -> tuple:
  """rules_to_text's inverse, checked: every entry `name=axis+axis` over MESH_AXES, blanks
  around a name or an axis dropped (`batch = data` is batch=data), each name one of NAMES (an
  unknown one would shard nothing, unseen) and given once (the first would win unseen), each
  axis once in an entry. Raises RuleError."""
  rules, seen = [], set()
  for entry in (e.strip() for e in str(text).split(',') if e.strip()):
    name, sep, value = (part.strip() for part in entry.partition('='))
    axes = tuple(a.strip() for a in value.split('+') if a.strip())
    if not sep or not name or any(a not in MESH_AXES for a in axes):
      raise RuleError(entry, 'is not logical_name=mesh_axis[+mesh_axis] over the mesh axes '
                      f'{", ".join(MESH_AXES)} (empty = replicated)',
                      'e.g. batch=data+fsdp,vocab=tensor')
    if name not in NAMES:
      close = difflib.get_close_matches(name.lower(), NAMES, n=1, cutoff=0.6)
      raise RuleError(entry, f'names {name}, which nothing in the model carries (its logical '
                      f'names: {", ".join(NAMES)}), so it would shard nothing',
                      f'did you mean {close[0]}?' if close else 'name one of those')
    if len(set(axes)) < len(axes):
      raise RuleError(entry, 'names a mesh axis twice (a dimension is split over an axis once)',
                      'name each axis once, e.g. batch=data+fsdp')
    if name in seen:
      raise RuleError(entry, f'names {name} a second time (the first would be applied)',
                      'keep one entry for it')
    seen.add(name)
    rules.append((name, None if not axes else axes[0] if len(axes) == 1 else axes))
  return tuple(rules)

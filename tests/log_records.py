"""What a module logs, read in a test through the module's own `logging` (absl's): pytest's
caplog sees nothing in an xdist worker whose earlier tests changed absl's logger."""


def recorded_warnings(monkeypatch, module, level: str = 'warning') -> list:
  """The lines `module` logs at `level` ('warning', 'info') from now on (passed on to absl
  too), formatted."""
  lines, absl_logging = [], module.logging

  class Recorded:
    def __getattr__(self, name):
      if name != level:
        return getattr(absl_logging, name)

      def record(message, *args):
        lines.append(message % args)
        getattr(absl_logging, level)(message, *args)
      return record

  monkeypatch.setattr(module, 'logging', Recorded())
  return lines

"""What a module logs, read in a test through the module's own `logging` (absl's): pytest's
caplog sees nothing in an xdist worker whose earlier tests changed absl's logger."""


def recorded_warnings(monkeypatch, module) -> list:
  """The warnings `module` logs from now on (passed on to absl too), as formatted lines."""
  lines, absl_logging = [], module.logging

  class Recorded:
    def __getattr__(self, name):
      return getattr(absl_logging, name)

    def warning(self, message, *args):
      lines.append(message % args)
      absl_logging.warning(message, *args)

  monkeypatch.setattr(module, 'logging', Recorded())
  return lines

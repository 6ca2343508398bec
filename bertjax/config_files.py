"""A config file loaded: --config=FILE[:ARG]'s get_config(ARG), as bertjax.main's --config flag
imports it (a copy kept anywhere finds the checkout's configs/; a package named configs that
hides them is named), each failure one line; and the digest of configs/ that a GKE pod checks
its image's against the launcher's.
"""

import hashlib
import json
import os
import pathlib  # local: config files are imported from local paths only
import sys
import urllib.parse
import urllib.request


class ConfigFileError(ValueError):
  """A --config=FILE[:ARG] that does not load: no such file, or the file or get_config(ARG)
  raises (an unknown key or value in ARG, a syntax error)."""


def load_config_file(spec: str):
  """get_config(ARG) of a --config=FILE[:ARG], or a ConfigFileError of one line saying why not."""
  path, _, arg = spec.partition(':')
  if not os.path.isfile(path):  # local: config_flags imports it
    where = ('is a folder: name a config file' if os.path.isdir(path)  # local: same
             else f': no config file {path!r} (from {os.getcwd()})')
    raise ConfigFileError(f'--config={spec}{" " if where[0] != ":" else ""}{where}; the configs '
                          'are configs/pretrain.py, configs/finetune.py, configs/embed.py')
  try:
    return load_file(path, arg)
  except Exception as e:  # pylint: disable=broad-except  # Whatever the file raises.
    raise ConfigFileError(f'--config={spec} does not load: {one_line(e)}') from None


def check_job_config(config, spec: str):
  """Refuses a config that is no bertjax job's: get_config() gave something without a `job`
  field (config_check and the jobs read it first)."""
  try:
    config['job']  # pylint: disable=pointless-statement
  except (KeyError, TypeError, AttributeError, IndexError):
    raise ConfigFileError(f'--config={spec} is not a bertjax config: its get_config() gave '
                          f'{type(config).__name__} without a job field; load '
                          'configs/pretrain.py, configs/finetune.py or configs/embed.py (or a '
                          'copy of one)') from None


def _import_checkout_configs():
  """Makes the checkout's configs/ importable (its folder on sys.path) for a copied config file
  run from elsewhere: `from configs import common` is found from the checkout's root only (a
  copy in /tmp failed with 'No module named configs'). Where this install has no checkout
  beside it, the error says what to do."""
  root = pathlib.Path(__file__).resolve().parents[1]  # local: the installed package's folder
  if not (root / 'configs' / 'common.py').is_file():  # local: same
    raise ModuleNotFoundError(
        'it imports configs/ (from configs import common), found in the folder above the file '
        "or in the checkout bertjax was installed from with pip install -e, and neither holds "
        "it here: put your copy in a bertjax checkout's configs/ folder")
  sys.path.append(str(root))


def load_file(path: str, arg: str):
  """get_config(arg) of a config file, as config_flags calls it (its own errors unwrapped)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  module_spec = importlib.util.spec_from_file_location('_bertjax_config_check', path)
  if module_spec is None:  # Not a .py name: no loader for it.
    raise ValueError(f'{path} is not a Python file: a config is a .py file whose '
                     'get_config(arg) returns a ConfigDict')
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
  except ImportError as e:  # Also a folder of the user's named configs/ (a namespace package
    # without common.py): "cannot import name 'common' from 'configs'".
    if e.name not in ('configs', 'configs.common'):
      raise
    package = getattr(sys.modules.get('configs'), '__file__', None)  # None: a namespace one.
    if package:  # A package named configs, imported first, hides the checkout's.
      raise ImportError(_foreign_configs(os.path.dirname(package), path)) from None
    _import_checkout_configs()
    module_spec.loader.exec_module(module)  # Now from the checkout's configs/.
  if not callable(getattr(module, 'get_config', None)):
    raise AttributeError(f'{path} defines no get_config(arg) function')
  return module.get_config(arg) if arg else module.get_config()


def _foreign_configs(folder: str, config_file: str) -> str:
  """Why `from configs import common` found another package, `folder`, and what to do: the
  user's own configs/ (the file's folder, or the current one), a pip package's, or a folder on
  PYTHONPATH."""
  hides = ("is a Python package named configs (it holds __init__.py), which hides bertjax's "
           'configs/ (from configs import common)')
  if folder in (os.path.dirname(os.path.abspath(config_file)), os.path.abspath('configs')):
    return f'{folder} {hides}: remove its __init__.py, or rename the folder'
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  owners = sorted({dist.metadata['Name'] for dist in importlib.metadata.distributions()
                   if _installs(dist, folder)})
  if owners:
    return (f'{folder} {hides}, installed by pip package {", ".join(owners)}: pip uninstall '
            f'{" ".join(owners)}, or run from an environment without it')
  above = os.path.dirname(folder)
  listed = [os.path.abspath(p) for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
  if above in listed:
    return (f'{folder} {hides}, found through PYTHONPATH: drop {above} from PYTHONPATH, or '
            'rename that folder')
  return (f'{folder} {hides}, found on the import path (sys.path: the current folder, a .pth '
          'file or site-packages): rename that folder, or run from an environment without it')


def _installs(dist, folder: str) -> bool:
  """Whether distribution `dist` (importlib.metadata) installed the package in `folder`: a file
  of its RECORD lies in it, or it is an editable install of a source tree holding it."""
  try:
    if any(os.path.abspath(dist.locate_file(f)).startswith(folder + os.sep)
           for f in dist.files or ()):
      return True
    source = json.loads(dist.read_text('direct_url.json') or '{}')  # local: pip's metadata
  except (OSError, ValueError):  # Metadata unreadable: not this one's to name.
    return False
  url = source.get('url', '')
  return (source.get('dir_info', {}).get('editable', False) and url.startswith('file://')
          and folder.startswith(os.path.abspath(
              urllib.request.url2pathname(urllib.parse.urlparse(url).path)) + os.sep))


def one_line(error: BaseException) -> str:
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text}' if text else type(error).__name__


# Set by launch/gke_jobset.py: the digest of the launcher's configs/, which it checked the job's
# config against; a pod whose image holds other configs/ refuses to run (configs_check).
CONFIGS_DIGEST_ENV = 'BERTJAX_CONFIGS_SHA256'


def configs_digest(folder) -> str:
  """sha256 of a configs/ folder: its .py files' paths (relative) and bytes, in sorted order."""
  root = pathlib.Path(folder)  # local: config files are imported from local paths only
  digest = hashlib.sha256()
  files = sorted(p for p in root.rglob('*.py') if '__pycache__' not in p.parts)  # local: same
  for path in files:
    digest.update(path.relative_to(root).as_posix().encode() + b'\0')
    digest.update(path.read_bytes() + b'\0')  # local: a config file, read as it was loaded
  return digest.hexdigest()


def configs_check(config_file: str):
  """Refuses a job whose configs/ (the folder holding `config_file`) differ from those the
  launcher checked it against (CONFIGS_DIGEST_ENV): a GKE image built before configs/ changed
  would run other settings than the ones checked, silently."""
  want = os.environ.get(CONFIGS_DIGEST_ENV)
  if not want:
    return
  above = pathlib.Path(config_file).resolve().parents  # local: config files are local
  folder = next((p for p in above if p.name == 'configs'), None)
  if folder is None or configs_digest(folder) != want:
    raise ValueError(f'this image\'s configs/ ({folder or "none holds " + config_file}) differ '
                     'from the ones the launcher checked the job against: rebuild and push the '
                     'image from that checkout (docker build -f launch/Dockerfile), then launch '
                     'again')

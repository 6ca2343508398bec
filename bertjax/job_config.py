"""A job's config as the job functions take it from Python: that job's ConfigDict, its fields.

The configs are locked (configs/common.py), so `config.learning_rate = 3e-4` fails with the close
valid names; but inside `with config.unlocked():` (a notebook's cell, a copy of a config file with
a field of its own) it adds a field no part of bertjax reads, and the run would train without it
and without a word. `check_for` refuses such a field in one line, before anything runs.

FIELDS restates the fields of configs/pretrain.py, finetune.py and embed.py, whose files the
wheel does not hold; job_config_test keeps it equal to them. Pure Python: no JAX, no files.
"""

import difflib

from bertjax import config_check
from bertjax import paths

# What runs each job from Python (the notebooks' calls).
JOB_FUNCTIONS = {'pretrain': 'bertjax.pretrain.train_and_evaluate',
                 'finetune': 'bertjax.finetune.job.train_and_evaluate',
                 'embed': 'bertjax.embed.run'}

_MODEL = ('attention_dropout_rate attention_impl dropout_rate dtype hidden_act hidden_size '
          'initializer_range layer_norm_eps max_position_embeddings mlp_dim nsp num_heads '
          'num_layers remat_policy scan_layers scan_unroll size type_vocab_size vocab_size')
_OPTIMIZER = ('b1 b2 bias_correction decay_from decay_power end_learning_rate eps grad_clip_norm '
              'layer_decay learning_rate name total_steps trust_ratio_everywhere warmup_steps '
              'weight_decay')
_TRAINING = ('early_stopping_patience eval_batch_size eval_every_steps global_batch_size '
             'grad_accum_steps init_from init_from_step job log_every_steps num_train_steps '
             'peak_tflops profile_start_step profile_steps seed')
_SHARED = {'model': _MODEL, 'mesh': 'data fsdp rules tensor',
           'checkpoint': 'best_metric best_mode every_steps keep keep_best'}
# Per job, section ('' = top level) -> its fields' names.
_SECTIONS = {
    'pretrain': dict(_SHARED, **{
        '': _TRAINING + ' max_eval_batches',
        'optimizer': _OPTIMIZER,
        'data': 'dupe_factor dynamic_masking eval_files masked_lm_prob masking '
                'max_instances_per_row max_predictions_per_seq max_seq_length num_lanes '
                'shuffle_window train_files vocab_file',
        'phase2': 'eval_files fraction max_predictions_per_seq max_seq_length train_files'}),
    'finetune': dict(_SHARED, **{
        '': _TRAINING + ' export_format mode model_from_init num_epochs pooling task',
        'optimizer': _OPTIMIZER + ' warmup_proportion',
        'data': 'data_dir do_lower_case doc_stride eval_file eval_fraction format label_field '
                'max_answer_length max_eval_examples max_instances_per_row '
                'max_predictions_per_seq max_query_length max_seq_length max_train_examples '
                'max_windows n_best_size null_score_diff_threshold packed_rows_multiple_of '
                'pad_to_multiple_of predict_file tag_column tag_scheme test_file text_fields '
                'token_column train_file use_tfds vocab_file'}),
    'embed': {'': 'batch_size dtype init_from init_from_step input_file job max_seq_length '
                  'sentences vocab_file'},
}
FIELDS = {job: frozenset(f'{section}.{name}'.lstrip('.') for section, names in sections.items()
                         for name in names.split())
          for job, sections in _SECTIONS.items()}
# Names other trainers give fields of ours (transformers' TrainingArguments, TF1 BERT's flags).
_OTHER_NAMES = {'lr': 'learning_rate', 'batch_size': 'global_batch_size',
                'train_batch_size': 'global_batch_size', 'epochs': 'num_epochs',
                'num_train_epochs': 'num_epochs', 'max_steps': 'num_train_steps',
                'steps': 'num_train_steps', 'warmup': 'warmup_steps',
                'max_seq_len': 'max_seq_length', 'init_checkpoint': 'init_from'}
# What the jobs record in a run's config.json beside its settings: what they read and found.
RECORDED = frozenset({'init_from_read', 'kind', 'labels', 'text_pairs', 'version_2_with_negative',
                      'data.vocab_sha256', 'data.train_sha256', 'data.eval_sha256',
                      'data.test_sha256', 'data.max_chars_per_word',
                      'data.train_features_sha256', 'data.held_out_sha256',
                      'data.held_out_texts_sha256', 'data.do_lower_case'})


def check_for(config, job: str) -> None:
  """config_check.check(), called by the function that runs `job`: a dict, another job's config
  (whose missing fields failed deep in the job with an AttributeError) or a field the job never
  reads, refused in one line first."""
  build = f"build one with configs/{job}.py's get_config(...)"
  if not hasattr(config, 'get') or not hasattr(config, 'to_dict'):
    raise TypeError(f'config is a {type(config).__name__}, not an ml_collections ConfigDict: '
                    f'{build}.')
  given = config.get('job')
  if given != job:
    where = f'pass it to {JOB_FUNCTIONS[given]}, or ' if given in JOB_FUNCTIONS else ''
    raise ValueError(f'config.job={given!r}: not a {job} config, which '
                     f'{JOB_FUNCTIONS[job]} runs; {where}{build}.')
  config_check.check(config)  # First: it names a config of another job by its job field.
  check_fields(config)


def job_start(config, workdir, job: str):
  """(config, workdir) of a training job at its start, before any data is read or anything
  compiled: the config checked as `job`'s (check_for), the job's own copy of it with its paths
  made absolute, the workdir absolute, and apart from the model config.init_from names."""
  from bertjax.interop import init_from  # pylint: disable=g-import-not-at-top  # JAX: jobs only.
  check_for(config, job)
  config = paths.absolute_config(paths.own_copy(config))
  workdir = paths.absolute_workdir(workdir)
  init_from.check_apart(config, workdir)
  return config, workdir


def check_fields(config) -> None:
  """Refuses the first field that config.job's config does not have (no part of bertjax reads
  it), naming the close fields it has."""
  job = config.get('job')
  if job not in FIELDS:
    return  # config_check names an unknown job.
  known = FIELDS[job]
  for path in field_paths(config):
    if path in known:
      continue
    if path in RECORDED:
      raise ValueError(f'config.{path} is what a {job} run records in its config.json (what it '
                       'read and found), not a setting: build the config with '
                       f"configs/{job}.py's get_config(...), not from a run's config.json.")
    name = path.rpartition('.')[2]
    name = _OTHER_NAMES.get(name, name)
    close = sorted(f for f in known if f.rpartition('.')[2] == name and f != path)
    # The same name in another section is the field meant; else the names it is close to.
    close = close or difflib.get_close_matches(path, known, n=1, cutoff=0.6)
    close = [f'config.{f}' for f in close[:3]]
    instead = (f'the {job} config has {", ".join(close)}: set '
               f'{"that" if len(close) == 1 else "the one you meant"}' if close else
               f'drop it (configs/{job}.py lists the fields, each with its meaning)')
    article = 'an' if job[0] in 'aeiou' else 'a'
    raise ValueError(f'config.{path} is not a field of {article} {job} config, and no part of '
                     'bertjax reads it (added inside config.unlocked(), it would be ignored); '
                     f'{instead}.')


def field_paths(config, prefix: str = '', *, sections: bool = False) -> list[str]:
  """The dotted paths of the config's values (with `sections`, of its sections too)."""
  paths = []
  for key, value in config.items():
    if hasattr(value, 'items'):
      paths += [prefix + key] if sections else []
      paths += field_paths(value, f'{prefix}{key}.', sections=sections)
    else:
      paths.append(prefix + key)
  return paths

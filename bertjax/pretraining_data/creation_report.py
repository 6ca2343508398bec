"""The JSON report beside a shard set: settings, vocab digest, counts, shard bytes and records.

Readers check a shard set against it (records/file_set.py) and refuse one that disagrees.
"""

import dataclasses
import json
import os
import platform

import bertjax
from bertjax import files as files_lib
from bertjax.records import example_encoding
from bertjax.records import file_set
from bertjax.text import corpus_lines


def build(job, vocab_size, outputs, report_file, results, counts, skips, staged, records,
          seconds, source=None):
  """The JSON report: settings, vocab, counts, and each shard's bytes and records (checked by
  readers, records/file_set.py: a set that disagrees is refused)."""
  names = [files_lib.name(o) for o in outputs]
  settings = job.settings
  return {
      'tool': f'bertjax {bertjax.__version__} create_pretraining_data',
      **_made_from(job, source),
      'vocab_size': vocab_size,
      'output_files': outputs,
      'output_bytes': dict(zip(names, map(os.path.getsize, staged), strict=True)),  # local temp
      'output_records': dict(zip(names, records, strict=True)),
      'report_file': report_file,
      'features': {k: f'{dtype}{list(shape)}' for k, (shape, dtype) in
                   example_encoding.feature_spec(settings.max_seq_length,
                                                 settings.max_predictions_per_seq,
                                                 settings.static_masking,
                                                 settings.nsp,
                                                 settings.max_instances_per_row).items()},
      'counts': dict(sorted(counts.items())),
      'unk_fraction': round(counts['unk_tokens'] / max(counts['document_tokens'], 1), 6),
      # Token slots of the written rows that hold no instance.
      'padding_fraction': round(
          1 - counts['instance_tokens'] / max(counts['rows'] * settings.max_seq_length, 1), 6),
      # The share of the maskable tokens ([CLS]/[SEP] never are) that were masked: round(rate x
      # tokens), at least 1, per instance, so short instances differ from masked_lm_prob.
      **({'masked_fraction': masked_fraction(counts)} if settings.static_masking else {}),
      'skipped': skips.as_dict(),
      'workers': [{k: r[k] for k in ('worker', 'seconds', 'startup_seconds', 'peak_rss_mb')}
                  | {'instances': r['counts'].get('instances', 0)} for r in results],
      'seconds': seconds,
      'host': platform.node(),
  }


def _made_from(job, source) -> dict:
  """The report's settings, vocab digest and input: what the set's bytes follow from."""
  return {
      'settings': dataclasses.asdict(job.settings) | {
          'vocab_file': job.vocab_file or None, 'spm_model_file': job.spm_model_file or None,
          'do_lower_case': job.do_lower_case, 'random_seed': job.random_seed,
          'num_workers': job.num_workers, 'input_format': job.input_format,
          'max_line_bytes': job.max_line_bytes, 'shuffle_buffer': job.shuffle_buffer,
          'tokenizer': 'fast' if job.fast_tokenizer else 'reference'},
      'vocab_sha256': files_lib.sha256(job.vocab_file or job.spm_model_file),
      # The input: text files, or the TFDS dataset (name, split, version, field) read instead.
      **({'tfds_source': source} if source else {'input_files': list(job.files)})}


def recipe(report: dict) -> dict:
  """What a report's set was made from, flat (settings, vocab digest, input), JSON's types; the
  WordPiece path ('tokenizer': same ids either way) left out."""
  made = json.loads(json.dumps(report))
  return {**{k: v for k, v in (made.get('settings') or {}).items() if k != 'tokenizer'},
          'vocab_sha256': made.get('vocab_sha256'),
          'input': made.get('tfds_source') or made.get('input_files')}


def check_replaced(report_file: str, job, source, overwrite: bool):
  """Refuses to replace a set on the same output that was made otherwise (another masking,
  length, seed, vocab or input: a command run again with other flags) unless `overwrite`: its
  shards would be lost. The same command run again remakes its set."""
  earlier = file_set.report_at(report_file)  # None: no report there, or not one of ours.
  if overwrite or earlier is None or not any(
      isinstance(p, str) and files_lib.exists(p) for p in earlier['output_files']):
    return
  then, now = recipe(earlier), recipe(_made_from(job, source))
  changed = [k for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]
  if changed:
    shown = '; '.join(f'{k} {_short(then.get(k))}, now {_short(now.get(k))}'
                      for k in changed[:3])
    raise ValueError(f'{report_file} holds a set made otherwise ({shown}): pass --overwrite to '
                     'replace it, or another --output_file.')


def _short(value) -> str:
  text = json.dumps(value) if not isinstance(value, str) else value
  return text if len(text) <= 60 else text[:57] + '...'


def masked_fraction(counts) -> float:
  """The share of the instances' maskable tokens that were masked."""
  return round(counts['masked_lm_predictions'] / max(counts['maskable_tokens'], 1), 6)


def masking_rate_warning(settings, counts, tolerance=0.2) -> str:
  """'' or a warning that the masks chose a share of the tokens far from masked_lm_prob: each
  instance masks round(rate x its maskable tokens), at least one (BERT's rule), so at a tiny
  length or rate the share realized is not the rate asked (nor what training's config says)."""
  if not settings.static_masking or not counts.get('maskable_tokens'):
    return ''
  realized, asked = masked_fraction(counts), settings.masked_lm_prob
  if abs(realized / asked - 1) <= tolerance:
    return ''
  tokens = counts['maskable_tokens'] / max(counts['instances'], 1)
  return (f'warning: the masks chose {realized:.1%} of the maskable tokens, not '
          f'masked_lm_prob={asked:g}: each instance masks round({asked:g} x its tokens), at least '
          f'one, and these instances have {tokens:.1f} maskable tokens on average; the report '
          'records the share realized (masked_fraction). For the rate asked, use a longer '
          '--max_seq_length (or a --masked_lm_prob whose share of it rounds as you want)')


def long_lines_warning(skips, max_line_bytes) -> str:
  """'' or a warning of the lines skipped for their length (a paragraph of --input_format=text
  is one line, as is a text without line breaks): counted alone among the summary's skips,
  they read as a few lines, not as the text they held."""
  said = corpus_lines.long_lines(skips, max_line_bytes, 'read them: their text is unread')
  return f'warning: {said}' if said else ''


def check_counts(counts, vocab_size, vocab_file, max_unk_fraction, num_workers):
  """Refuses, before any shard is put in place, data that the workers' counts show is wrong:
  a vocab that does not fit the text, NotNext pairs from their own document."""
  unk_fraction = counts['unk_tokens'] / max(counts['document_tokens'], 1)
  if unk_fraction > max_unk_fraction:
    raise ValueError(
        f'{unk_fraction:.1%} of the tokens are [UNK] (limit {max_unk_fraction:.0%}): the vocab '
        f'({vocab_file}, {vocab_size} entries) does not fit this text -- '
        'truncated, or the wrong casing or language? Pass the vocab the model was made with, '
        'or raise --max_unk_fraction if this is intended. No shard was written.')
  if counts['not_next_from_same_document']:
    # A worker's NotNext candidates are its own documents (every num_workers-th one).
    documents = counts['documents']
    if documents < 2:
      advice = ('the input is one document: documents are separated by a blank line, so '
                'separate them, pass more text')
    else:
      fewer = ('fewer --num_workers (at most half the documents), ' if num_workers > 1
               else '')
      advice = f'with {documents} documents, pass {fewer}more text, a larger --pool_tokens'
    raise ValueError(
        f"{counts['not_next_from_same_document']} of {counts['not_next']} NotNext pairs would "
        'take their second segment from their own document (a worker\'s pool of nearby '
        f'documents held no other one), which makes their NSP labels wrong: {advice}, or '
        '--nsp=false for MLM-only instances. No shard was written.')

"""A run begun by an older bertjax on the embedded corpus, resumed by this one: its TFRecords in
<workdir>/data are the ones it reads on, not remade by today's writer under the same names."""

import gzip
import json

import pytest

from bertjax import pretrain
from bertjax.pretraining_data import embedded
from configs import pretrain as pretrain_config

SEQ, PREDICTIONS = 32, 5


def _small_corpus(tmp_path, monkeypatch):
  """The embedded corpus's first documents as its train and eval splits (seconds, not 5 s)."""
  for split in embedded.SPLITS:
    documents = list(embedded.documents(split))[:4]
    path = tmp_path / embedded.file_name(split)
    with gzip.open(path, 'wt', encoding='utf-8') as f:
      f.write('\n\n'.join('\n'.join(d) for d in documents) + '\n')
  monkeypatch.setattr(embedded, 'corpus_path', lambda split='train': tmp_path / embedded.file_name(
      split))


def _config():
  config = pretrain_config.get_config(f'size=tiny,steps=40,batch=16,seq={SEQ}')
  with config.unlocked():
    config.data.max_predictions_per_seq = PREDICTIONS
    config.data.dupe_factor = 1
  return config


def _as_before_2026_11_24(report_path):
  """Its report as b03777a (2026-11-24, before --pack and --masking) wrote it: settings without
  max_instances_per_row and masking, the original's do_whole_word_mask instead."""
  report = json.loads(report_path.read_text())
  settings = report['settings']
  del settings['max_instances_per_row'], settings['masking']
  settings['do_whole_word_mask'] = False
  report_path.write_text(json.dumps(report))


def test_a_resumed_run_still_remakes_files_of_other_settings(tmp_path, monkeypatch):
  """Only the settings missing from an older report are read as the old writer made them: a
  whole-word masked set (do_whole_word_mask True) is not this config's wordpiece masking."""
  _small_corpus(tmp_path, monkeypatch)
  workdir = tmp_path / 'run'
  config = _config()
  pretrain.phases(config, str(workdir), finished=0)
  train_report = next((workdir / 'data').glob('*-train.json'))
  _as_before_2026_11_24(train_report)
  report = json.loads(train_report.read_text())
  report['settings']['do_whole_word_mask'] = True
  train_report.write_text(json.dumps(report))

  pretrain.phases(config, str(workdir), finished=11)
  assert json.loads(train_report.read_text())['settings']['masking'] == 'wordpiece'


def _as_before_2026_11_23(report_path):
  """Its report as 82f753f (2026-11-23, before crash-safe data creation) wrote it: b03777a's
  settings, and no shard sizes or counts (output_bytes, output_records) nor the fractions."""
  _as_before_2026_11_24(report_path)
  report = json.loads(report_path.read_text())
  for key in ('output_bytes', 'output_records', 'unk_fraction', 'masked_fraction',
              'padding_fraction'):
    del report[key]
  report_path.write_text(json.dumps(report))


@pytest.mark.parametrize('as_before, finished, new_key', [
    # b03777a's run (embedded corpus, interrupted at step 11) resumed today remade its TFRecords
    # (36227 -> 39250 instances: today's writer splits long sentences) and read on at example
    # 176 of the new ones without a word: step 12's loss 9.5118 -> 9.6236, eval on another set.
    ('2026-11-24', 11, 'masking'),
    # 82f753f's run (saved at step 20), its reports lacking output_bytes, likewise (181968 ->
    # 197629 instances): step 21's loss 8.9330 -> 9.0149, eval mlm_loss 6.6182 -> 6.6298.
    ('2026-11-23', 20, 'output_bytes')])
def test_a_resumed_run_keeps_the_files_an_older_bertjax_made(tmp_path, monkeypatch, as_before,
                                                             finished, new_key):
  """An older bertjax's files of the embedded corpus are kept on a resume (the old run's losses
  to the end, to 4 decimals); a new run remakes them with today's writer."""
  edit = {'2026-11-24': _as_before_2026_11_24, '2026-11-23': _as_before_2026_11_23}[as_before]
  _small_corpus(tmp_path, monkeypatch)
  workdir = tmp_path / 'run'
  config = _config()
  (phase,) = pretrain.phases(config, str(workdir), finished=0)
  reports = sorted((workdir / 'data').glob('*.json'))
  assert len(reports) == 2  # train and eval
  for report in reports:
    edit(report)
  written = {p.name: p.stat().st_mtime_ns for p in (workdir / 'data').iterdir()}

  (resumed,) = pretrain.phases(config, str(workdir), finished=finished)
  assert (resumed.train_files, resumed.eval_files) == (phase.train_files, phase.eval_files)
  assert {p.name: p.stat().st_mtime_ns for p in (workdir / 'data').iterdir()} == written

  pretrain.phases(config, str(workdir), finished=0)  # A new run: today's writer's files.
  remade = [json.loads(r.read_text()) for r in reports]
  assert all(new_key in {**r, **r['settings']} for r in remade)

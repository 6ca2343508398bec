"""Pre-training refuses data of another vocab, and missing eval files, before compiling."""

import dataclasses
import json
import pathlib
import re
import shutil

import finetune_runs
import log_records
import numpy as np
import pretrain_runs
import pytest
import transformers

from bertjax import config_check
from bertjax import console
from bertjax import export
from bertjax import files
from bertjax import pretrain
from bertjax.input import record_check
from bertjax.interop import sources
from bertjax.pretraining_data import embedded
from bertjax.records import file_set


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  return pretrain_runs.corpus_files(tmp_path_factory)


def config(corpus, **fields):
  return pretrain_runs.config(4, pretrain_runs.fields(corpus, **fields))


def check(cfg):
  for phase in pretrain.phases(cfg, ''):
    pretrain.check_data(cfg, phase, cfg.data.vocab_file, '')


def suffix_model(tmp_path) -> str:
  """A SentencePiece model whose pieces end words ('the\u2581': treat_whitespace_as_suffix)."""
  import sentencepiece  # pylint: disable=g-import-not-at-top
  lines = ['the king doth speak and all the lords listen to the king'] * 50 + [
      'my heart is heavy and my lord is gone to the wars'] * 50
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_prefix=str(tmp_path / 'suffix'), vocab_size=36,
      treat_whitespace_as_suffix=True, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], minloglevel=2)
  return str(tmp_path / 'suffix.model')


def test_dynamic_masking_by_words_refuses_a_model_whose_pieces_end_words(tmp_path):
  """Its pieces have no '\u2581' word starts, so dynamic whole-word masking ran words together
  into one (every piece continued the one before)."""
  model = suffix_model(tmp_path)
  cfg = pretrain_runs.config(4, {'data.dynamic_masking': True, 'data.masking': 'whole_word'})
  with pytest.raises(ValueError, match='treat_whitespace_as_suffix.*pass '
                     '--config.data.masking=wordpiece'):
    pretrain.masking_config(cfg, model)
  cfg.data.masking = 'wordpiece'
  assert pretrain.masking_config(cfg, model).strategy == 'wordpiece'


def test_dynamic_masking_masks_the_unknown_piece_of_a_model_without_a_pad_piece(tmp_path):
  """spm_train's default ids put <unk> at 0 and no pad piece: dynamic masking took id 0 for
  [PAD] and never chose an unknown token, where static masking does."""
  import sentencepiece  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from bertjax.input import masking_tf  # pylint: disable=g-import-not-at-top
  lines = ['the king doth speak and all the lords listen to the king'] * 50
  sentencepiece.SentencePieceTrainer.train(  # <unk> 0, <s> 1, </s> 2, no <pad>.
      sentence_iterator=iter(lines), model_prefix=str(tmp_path / 'default'), vocab_size=24,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], minloglevel=2)
  model = str(tmp_path / 'default.model')
  cfg = pretrain_runs.config(4, {'data.dynamic_masking': True})
  masking = pretrain.masking_config(cfg, model)
  assert masking.pad_id is None
  ids = tf.constant([[3] + [0] * 20 + [4] + [0] * 10])  # [CLS] <unk>... [SEP] padding.
  input_mask = tf.constant([[1] * 22 + [0] * 10])
  out = masking_tf.mask_batch(ids, input_mask, config=masking, max_predictions_per_seq=5,
                              seed_2=tf.constant([1, 2]))
  assert out['masked_lm_weights'].numpy().sum() == 3  # round(0.15 * 20).
  assert np.all(out['masked_lm_positions'].numpy()[0, :3] <= 20)
  # A model with a pad piece keeps it out, whatever its id.
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_prefix=str(tmp_path / 'padded'), vocab_size=24,
      unk_id=0, pad_id=3, bos_id=-1, eos_id=-1, control_symbols=['[CLS]', '[SEP]', '[MASK]'],
      minloglevel=2)
  assert pretrain.masking_config(cfg, str(tmp_path / 'padded.model')).pad_id == 3


def test_matching_vocab_passes(corpus):
  check(config(corpus))


def test_data_of_a_larger_vocab_is_refused(corpus):
  with pytest.raises(ValueError, match=r'8192-entry vocab .* vocab_size=4096: set '
                     'data.vocab_file'):
    check(config(corpus, model__vocab_size=4096, data__vocab_file=''))


def test_data_of_another_vocab_of_the_same_size_is_refused(corpus, tmp_path):
  lines = embedded.vocab_path().read_text(encoding='utf-8').splitlines()
  other = tmp_path / 'vocab.txt'
  other.write_text('\n'.join(lines[:-2] + [lines[-1], lines[-2]]) + '\n')  # Two ids swapped.
  with pytest.raises(ValueError, match='made with another vocab .* the ids would mean'):
    check(config(corpus, data__vocab_file=str(other)))


def _copy_set(pattern, folder, vocab_file):
  """The set of `pattern` copied into `folder`, its report naming `vocab_file` as its vocab."""
  folder.mkdir()
  (report_path, report), = file_set.resolve(pattern).reports.items()
  for shard in report['output_files']:
    shutil.copy(pathlib.Path(pattern).parent / pathlib.Path(shard).name, folder)
  report['settings']['vocab_file'] = str(vocab_file)
  (folder / pathlib.Path(report_path).name).write_text(json.dumps(report))
  return str(folder / pathlib.Path(pattern).name)


def test_train_files_without_a_vocab_file_take_the_vocab_their_report_names(corpus, tmp_path,
                                                                         monkeypatch):
  """Pass AE: with data.vocab_file unset nothing checked the data's vocab (a run on data of
  another vocab trained, and recorded no vocab). The report's vocab is taken, if still there."""
  cfg = config(corpus, data__vocab_file='')
  pretrain.take_data_vocab(cfg)
  assert cfg.data.vocab_file == str(embedded.vocab_path())
  check(cfg)
  vocab = tmp_path / 'vocab.txt'
  shutil.copy(embedded.vocab_path(), vocab)
  cfg = config(corpus, data__vocab_file='', data__eval_files='',
               data__train_files=_copy_set(corpus['data.train_files'], tmp_path / 'set', vocab))
  pretrain.take_data_vocab(cfg)
  assert cfg.data.vocab_file == str(vocab)
  vocab.write_text(vocab.read_text() + 'extra\n')
  cfg.data.vocab_file = ''
  with pytest.raises(ValueError, match=re.escape(
      f'was made with the vocab {vocab}, which has changed since (its sha256 differs), and '
      'data.vocab_file is unset: set data.vocab_file to the vocab the data was made with')):
    pretrain.take_data_vocab(cfg)
  vocab.unlink()  # Data made on another machine: read unchecked, as before, but said.
  said = log_records.recorded_warnings(monkeypatch, pretrain)
  pretrain.take_data_vocab(cfg)
  assert cfg.data.vocab_file == '' and any(
      f'made with the vocab {vocab}, which is gone, and data.vocab_file is unset: set '
      'data.vocab_file to the vocab the data was made with' in line and
      'the run checks the data against no vocab and records none' in line for line in said), said


def test_a_vocab_file_moved_since_the_run_began_is_named_with_the_runs_own_copy(corpus,
                                                                                 tmp_path):
  """Helper-180's pass (moved runs and data): the vocab moved after the run began, its resume
  with the same command said only 'error: /tmp/v/vocab.txt does not exist.' (no field, no fix);
  the run keeps a copy of the vocab it trained with (run_files.RUN_VOCAB), which reads."""
  gone = tmp_path / 'vocab.txt'
  cfg = config(corpus, data__vocab_file=str(gone))
  (tmp_path / 'run').mkdir()
  shutil.copy(embedded.vocab_path(), tmp_path / 'run' / 'vocab.txt')
  said = (f'config.data.vocab_file: {gone} does not exist (moved or deleted since?): pass the '
          'vocab where it is now')
  with pytest.raises(FileNotFoundError, match=re.escape(said) + '.$'):  # A new run: no copy.
    pretrain._check_and_record_vocab(cfg, '', str(gone), str(tmp_path / 'run'), 0)  # pylint: disable=protected-access
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{said}; this run keeps the vocab it trained with: '
      f'--config.data.vocab_file={tmp_path}/run/vocab.txt.')):
    pretrain._check_and_record_vocab(cfg, '', str(gone), str(tmp_path / 'run'), 6)  # pylint: disable=protected-access
  cfg.data.vocab_file = str(tmp_path / 'run' / 'vocab.txt')  # As said: reads.
  pretrain._check_and_record_vocab(cfg, '', cfg.data.vocab_file, str(tmp_path / 'run'), 6)  # pylint: disable=protected-access
  assert cfg.data.vocab_sha256 == files.sha256(str(embedded.vocab_path()))


def test_a_vocab_of_other_line_ends_reads_data_made_with_the_vocab(corpus, tmp_path):
  """Pass AE: the same tokens in CRLF lines were refused as another vocab (raw bytes' hash)."""
  crlf = tmp_path / 'vocab.txt'
  crlf.write_bytes(embedded.vocab_path().read_bytes().replace(b'\n', b'\r\n'))
  check(config(corpus, data__vocab_file=str(crlf)))
  with pytest.raises(ValueError, match='made with another vocab'):  # Without the ids compared.
    file_set.check_vocab(file_set.resolve(corpus['data.train_files']), model_vocab_size=8192,
                         vocab_file=str(crlf))


def test_eval_files_matching_nothing_fail_at_the_start(corpus, tmp_path):
  with pytest.raises(FileNotFoundError, match='^config.data.eval_files: no files match'):
    check(config(corpus, data__eval_files=str(tmp_path / 'nothing-*')))
  # Helper-180's pass: train files moved since the run began named no field ('error: no files
  # match ...: check the path and the glob').
  with pytest.raises(FileNotFoundError, match=re.escape(
      f"config.data.train_files: no files match '{tmp_path}/moved/train-*': check the path")):
    check(config(corpus, data__train_files=str(tmp_path / 'moved' / 'train-*')))


def test_eval_files_among_the_train_files_are_said(corpus, monkeypatch):
  """Pass 33, item 14: eval_files = train_files scored the text the model trains on, unsaid."""
  said = log_records.recorded_warnings(monkeypatch, pretrain)
  check(config(corpus))
  assert not any('eval_files' in line for line in said), said
  train = corpus['data.train_files']
  spelt_otherwise = str(pathlib.Path(train).parent / '.' / pathlib.Path(train).name)
  check(config(corpus, data__eval_files=spelt_otherwise))
  first = sorted(file_set.resolve(train).files)[0]
  count = len(file_set.resolve(train).files)
  assert any(line.startswith(f'{count} of the {count} data.eval_files are also data.train_files '
                             f'(e.g. {first}): the eval scores text the model trains on')
             for line in said), said


def test_batches_with_ids_past_the_vocab_are_refused():
  batch = {'input_ids': np.array([[2, 5, 30000]]), 'masked_lm_ids': np.array([[5]])}
  with pytest.raises(ValueError, match=r'token id 30000 .* vocab_size=8192'):
    record_check.check_ids(batch, 8192, 'train-*')
  record_check.check_ids(batch, 30522, 'train-*')


@pytest.fixture(scope='module')
def mlm_only_corpus(tmp_path_factory):
  """The embedded corpus as MLM-only TFRecords (create_pretraining_data --nsp=false)."""
  train, eval_ = embedded.pretraining_files(
      tmp_path_factory.getbasetemp() / 'embedded-corpus', max_seq_length=pretrain_runs.SEQ,
      max_predictions_per_seq=pretrain_runs.PREDICTIONS, dupe_factor=1, nsp=False)
  return {'data.train_files': train, 'data.eval_files': eval_,
          'data.vocab_file': str(embedded.vocab_path())}


def test_mlm_only_data_fed_to_an_nsp_model_is_refused_before_compiling(mlm_only_corpus):
  with pytest.raises(ValueError, match=r'has no next_sentence_labels: MLM-only data .* Set '
                     r'--config.model.nsp=False'):
    check(config(mlm_only_corpus))
  check(config(mlm_only_corpus, model__nsp=False))


def test_masking_rate_the_predictions_cannot_hold_is_refused_with_the_config(corpus):
  """Refused as the job built its pipeline, after the embedded corpus was made: config_check
  refuses it before anything runs, naming the phase's field."""
  cfg = config(corpus, data__dynamic_masking=True, data__masked_lm_prob=0.3)
  with pytest.raises(ValueError, match=r'^config.data.max_predictions_per_seq=10: caps the 19 '
                     r'tokens data.masked_lm_prob=0.3 masks of a full row\'s 62 at '
                     r'data.max_seq_length=64; set --config.data.max_predictions_per_seq to 19 '
                     r'or more \(BERT: 20 at 128 tokens, 80 at 512\), or a lower masked_lm_prob'):
    config_check.check(cfg)


@pytest.mark.usefixtures('one_device')  # Learning, not sharding (tests/conftest.py).
def test_mlm_only_run_beats_the_unigram_baseline(tmp_path):
  """model.nsp=False on MLM-only data, dynamic whole-word masking at 20%: no NSP head or
  metric, and an MLM accuracy above always guessing the commonest token."""
  # Empty data fields: the job makes the embedded corpus's MLM-only unmasked files itself.
  cfg = pretrain_runs.config(MLM_ONLY_STEPS, pretrain_runs.fields(
      {}, model__nsp=False, model__hidden_size=128, model__mlp_dim=512,
      data__dynamic_masking=True,
      data__masking='whole_word', data__masked_lm_prob=0.2, log_every_steps=50,
      checkpoint__every_steps=1000, max_eval_batches=8, eval_every_steps=0))
  cfg.data.max_predictions_per_seq = 13  # 20% of a 64-token row.
  metrics = pretrain.train_and_evaluate(cfg, str(tmp_path))
  assert set(metrics) == {'mlm_accuracy', 'mlm_loss', 'unigram_baseline'}
  params, _ = finetune_runs.final_params(tmp_path)
  assert not any(k.startswith('nsp/') for k in params) and any(k.startswith('mlm/') for k in params)
  assert sorted(p.name for p in (tmp_path / 'data').glob('*.json')) == [
      f'shakespeare_kjv-{pretrain_runs.SEQ}-13-dynamic-mlm-{split}.json'
      for split in ('eval', 'train')]
  # The embedded corpus's casing, recorded for the run's readers (export below reads it).
  assert json.loads((tmp_path / 'config.json').read_text())['data']['do_lower_case'] is True
  # Deterministic (seeded): 0.091 vs 0.076 on this corpus.
  assert metrics['mlm_accuracy'] > metrics['unigram_baseline'] + 0.01, metrics
  # It leaves as transformers' BertForMaskedLM (no NSP head, no pooler) and comes back as such.
  # Beside the run (an export never goes into one).
  out = export.export(tmp_path, 'hf', tmp_path.with_name(tmp_path.name + '_hf'))
  model, info = transformers.BertForMaskedLM.from_pretrained(str(out), output_loading_info=True)
  assert not any(info.values()), info
  assert model.config.architectures == ['BertForMaskedLM']
  back = sources.load(out)
  assert back.kind == 'masked_lm'
  np.testing.assert_array_equal(back.params['mlm/output_bias'], params['mlm/output_bias'])


@pytest.mark.usefixtures('one_device')  # Vocabs, not sharding (tests/conftest.py).
def test_a_pretraining_runs_vocab_is_checked_by_its_readers_and_continued_pretraining(corpus,
                                                                                    tmp_path):
  """Pass AD: a pre-training run recorded no vocab hash, so its vocab.txt replaced by another
  of the same size was read by every reader; and continued pre-training on the embedded corpus
  compared nothing with init_from's vocab: the embedded vocab's ids trained weights of
  another."""
  # The embedded corpus's files made once for the session (pretrain_runs.corpus_files), not
  # again in the workdir; the run's compiled programs are model/platform_defaults_test's.
  workdir = tmp_path / 'run'
  pretrain.train_and_evaluate(pretrain_runs.config(2, pretrain_runs.fields(
      corpus, eval_every_steps=0, checkpoint__every_steps=1000)), str(workdir))
  recorded = json.loads((workdir / 'config.json').read_text())['data']['vocab_sha256']
  assert recorded == files.sha256(str(embedded.vocab_path()))
  lines = embedded.vocab_path().read_text(encoding='utf-8').splitlines()
  swapped = '\n'.join(lines[:-2] + [lines[-1], lines[-2]]) + '\n'  # Two ids swapped.
  (workdir / 'vocab.txt').write_text(swapped, encoding='utf-8')
  with pytest.raises(ValueError, match=r'vocab.txt is not the vocab this run was trained with '
                     r'\(its sha256 differs'):
    sources.load(str(workdir))
  # A run of another vocab (no hash: made before it was recorded), continued on the embedded
  # corpus: refused before anything is written.
  run = json.loads((workdir / 'config.json').read_text())
  del run['data']['vocab_sha256']
  (workdir / 'config.json').write_text(json.dumps(run))
  continued = pretrain_runs.config(2, pretrain_runs.fields({}, init_from=str(workdir)))
  with pytest.raises(ValueError, match=r'^the vocab .*vocab.txt is not the vocab .*run was '
                     r'trained with \(.*\): the embedded corpus is tokenized with it; make data '
                     r'with the weights\' vocab'):
    pretrain.train_and_evaluate(continued, str(tmp_path / 'continued'))
  assert not (tmp_path / 'continued' / 'checkpoints').exists()


MLM_ONLY_STEPS = 300


def test_files_without_a_report_of_an_eval_set_are_counted_before_training(corpus, tmp_path):
  """Pass of 2026-12-01: a damaged file without a report (the original tool's and NVIDIA's
  shards have none) of the eval set or of phase 2 was found as the first eval or phase 2 came,
  the steps since the last save lost on every rerun; it is read whole at the start now."""
  unreported = tmp_path / 'eval'
  unreported.mkdir()
  shards = file_set.resolve(corpus['data.eval_files']).files
  for shard in shards:  # The shards alone, no report beside them.
    shutil.copy(shard, unreported / pathlib.Path(shard).name)
  cfg = config(corpus, data__eval_files=str(unreported / '*'))
  phase, = pretrain.phases(cfg, '')
  checked = pretrain.check_data(cfg, phase, cfg.data.vocab_file, '')
  assert sorted(checked.eval_files.record_counts) == sorted(map(str, unreported.iterdir()))
  damaged = sorted(unreported.iterdir())[-1]
  damaged.write_bytes(damaged.read_bytes()[:-100])
  with pytest.raises(ValueError, match=rf'^{damaged}: not a readable TFRecord file \(truncated '
                     r'record at \d+\): recreate it with create_pretraining_data'):
    pretrain.check_data(cfg, phase, cfg.data.vocab_file, '')


def test_files_the_config_does_not_match_exit_as_refused_and_unreadable_ones_do_not(corpus,
                                                                                tmp_path):
  """helper-174: data of another vocab, length or masking than the config's exited 1, which a
  scheduler restarts to read the same files again; it exits 78 (console.Refused), as the
  config's refusals do. A file TensorFlow cannot read (damaged, or still being copied) stays an
  error a restart may mend."""
  for fields in ({'model__vocab_size': 4096, 'data__vocab_file': ''},
                 {'data__masking': 'whole_word'},
                 {'data__max_predictions_per_seq': 12}):
    with pytest.raises(console.Refused):
      check(config(corpus, **fields))
  garbage = tmp_path / 'eval'
  garbage.mkdir()
  (garbage / 'a.tfrecord').write_bytes(b'not a record file' * 10)
  with pytest.raises(ValueError, match='a.tfrecord: not a readable TFRecord file') as e:
    check(config(corpus, data__eval_files=str(garbage / '*')))
  assert not isinstance(e.value, console.Refused)


def test_a_restart_reads_no_file_without_a_report_whole_again(corpus, tmp_path, monkeypatch):
  """Review of 2026-12-01: files without a report were counted at every start (minutes for a
  large set of the original tool's shards); their counts are kept in the workdir now, phase 1's
  counted at the start with the others'."""
  copies = {}
  for field in ('train_files', 'eval_files'):
    copies[field] = tmp_path / field
    copies[field].mkdir()
    for shard in file_set.resolve(corpus[f'data.{field}']).files:
      shutil.copy(shard, copies[field] / pathlib.Path(shard).name)
  cfg = config(corpus, data__train_files=str(copies['train_files'] / '*'),
               data__eval_files=str(copies['eval_files'] / '*'))
  phase, = pretrain.phases(cfg, '')
  read, original = [], record_check._read_head

  def read_head(path, count):
    if count:  # Read whole.
      read.append(path)
    return original(path, count)

  monkeypatch.setattr(record_check, '_read_head', read_head)
  workdir = tmp_path / 'run'
  first = pretrain.check_data(cfg, phase, cfg.data.vocab_file, '', str(workdir))
  every = sorted(str(p) for folder in copies.values() for p in folder.iterdir())
  assert sorted(read) == every
  read.clear()
  again = pretrain.check_data(cfg, phase, cfg.data.vocab_file, '', str(workdir))
  assert read == []
  assert again.train_files.record_counts == first.train_files.record_counts
  assert again.eval_files.record_counts == first.eval_files.record_counts
  damaged = sorted(copies['train_files'].iterdir())[-1]  # Rewritten since: counted again.
  damaged.write_bytes(damaged.read_bytes()[:-100])
  with pytest.raises(ValueError, match=rf'^{damaged}: not a readable TFRecord file'):
    pretrain.check_data(cfg, phase, cfg.data.vocab_file, '', str(workdir))
  assert read == [str(damaged)]


def test_phase_2s_files_made_otherwise_are_said_as_phase_2s(corpus):
  """Pass of 2026-12-01: phase 2's files of other masking said `set --config.data.masking=X`,
  which then refused phase 1's files; the message named no phase."""
  cfg = config(corpus, data__masking='whole_word')  # Phase 1's config, not its files'.
  phase, = pretrain.phases(config(corpus), '')
  second = dataclasses.replace(phase, first_step=2)
  with pytest.raises(ValueError, match=r'^phase2.train_files=.*: the data \(.*\) holds the masks '
                     r'it was made with \(wordpiece.*\(both phases read data.vocab_file, '
                     r"data.masking and data.masked_lm_prob: make phase 2's files as phase 1's "
                     r'were made\)$'):
    pretrain.check_data(cfg, second, cfg.data.vocab_file, '')
  with pytest.raises(ValueError, match=r'^the data \(.*\) holds the masks'):  # Phase 1: as was.
    pretrain.check_data(cfg, phase, cfg.data.vocab_file, '')


def _eval_set_made(corpus, folder, **settings):
  """The corpus's eval set copied into `folder`, its report saying it was made with `settings`
  (vocab_sha256 among them: the report's own field)."""
  pattern = _copy_set(corpus['data.eval_files'], folder, embedded.vocab_path())
  (report_path, report), = file_set.resolve(pattern).reports.items()
  if 'vocab_sha256' in settings:
    report['vocab_sha256'] = settings.pop('vocab_sha256')
  report['settings'].update(settings)
  pathlib.Path(report_path).write_text(json.dumps(report))
  return pattern


@pytest.mark.parametrize('made, said, then', [
    ({'masking': 'span'}, '--masking=span', '--masking=wordpiece'),
    ({'vocab_file': '/elsewhere/vocab.txt', 'vocab_sha256': 'ab' * 32},
     'the vocab /elsewhere/vocab.txt (sha256 abababababab...)', 'the vocab '),
    ({'static_masking': False}, 'no masks (--nostatic_masking)', 'static masks'),
    ({'nsp': False}, 'no NSP pairs (--nsp=false)', 'NSP pairs'),
    ({'do_lower_case': False}, 'cased text (--nodo_lower_case)',
     'lower-cased text (--do_lower_case)')])
def test_eval_files_made_otherwise_than_the_train_files_are_told_to_be_remade(
    corpus, tmp_path, made, said, then):
  """Eval files of another masking (or vocab, unmasked, MLM-only) were told to set
  config.data.masking (data.vocab_file, dynamic_masking, model.nsp) to theirs, which then
  refused the train files: the eval files are what to remake, and both sets are named."""
  cfg = config(corpus, data__eval_files=_eval_set_made(corpus, tmp_path / 'eval', **made))
  with pytest.raises(ValueError, match=re.escape(
      f'data.eval_files={cfg.data.eval_files} ({tmp_path}/eval/') + '.*' + re.escape(
          f'was made with {said}, but data.train_files={cfg.data.train_files} (') + '.*'
      + re.escape(f'with {then}') + '.*' + re.escape(
          ': make the eval files as the train files were made (create_pretraining_data with '
          'the same vocab and flags, from held-out text)')):
    check(cfg)


def test_a_run_records_the_casing_of_its_training_files(corpus, tmp_path):
  """helper-176: the readers of a pre-training run took lower case whatever its data was made
  with; the run records its training files' casing (config.json's data.do_lower_case), refuses
  files of both casings, and leaves a run begun before the record (its config.json without it)
  unrecorded, whose later steps would otherwise say other than its config.json."""
  cfg = config(corpus)
  plan = [pretrain.check_data(cfg, phase, cfg.data.vocab_file, '') for phase in
          pretrain.phases(cfg, '')]
  pretrain._record_casing(cfg, plan, str(tmp_path / 'new'), 0)
  assert cfg.data.do_lower_case is True
  older = tmp_path / 'older'
  (older / 'checkpoints').mkdir(parents=True)
  (older / 'config.json').write_text(json.dumps({'job': 'pretrain', 'data': {}}))
  cfg = config(corpus)
  pretrain._record_casing(cfg, plan, str(older), 8)
  assert 'do_lower_case' not in cfg.data
  cased = _eval_set_made(corpus, tmp_path / 'cased', do_lower_case=False)  # Its train files.
  cfg = config(corpus, phase2__train_files=cased)
  plan = [dataclasses.replace(plan[0], train_files=file_set.resolve(corpus['data.train_files'])),
          dataclasses.replace(plan[0], first_step=8, train_files=file_set.resolve(cased))]
  with pytest.raises(console.Refused, match=re.escape(
      f'data.train_files={corpus["data.train_files"]} (') + '.*' + re.escape(
          ') was made from lower-cased text (--do_lower_case), but '
          f'phase2.train_files={cased} (') + '.*' + re.escape(
              ') from cased text (--nodo_lower_case): make every set with the same casing')):
    pretrain._record_casing(cfg, plan, str(tmp_path / 'new'), 0)

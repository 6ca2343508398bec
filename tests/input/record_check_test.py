"""record_check's errors name the files and the setting of the phase they belong to: phase 2's
lengths (config.phase2.*), and eval files that differ from the train files (made alike)."""

import pytest
import tensorflow as tf

from bertjax.input import record_check


def _write(path, seq, pred, packed=0):
  """One static-masked row of `seq` tokens and `pred` predictions, packed with up to
  `packed` instances per row (0: one instance per row)."""
  ints = {'input_ids': [101] + [5] * (seq - 2) + [102], 'input_mask': [1] * seq,
          'segment_ids': [0] * seq, 'masked_lm_positions': [1] * pred,
          'masked_lm_ids': [5] * pred, 'next_sentence_labels': [0] * max(packed, 1)}
  floats = {'masked_lm_weights': [1.0] * pred}
  if packed:
    ints['instance_starts'] = [0] * packed
    floats['next_sentence_weights'] = [1.0] * packed
  feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in ints.items()}
  feature |= {k: tf.train.Feature(float_list=tf.train.FloatList(value=v))
              for k, v in floats.items()}
  with tf.io.TFRecordWriter(str(path)) as writer:
    writer.write(tf.train.Example(
        features=tf.train.Features(feature=feature)).SerializeToString())
  return str(path)


@pytest.fixture(scope='module')
def files(tmp_path_factory):
  folder = tmp_path_factory.mktemp('record_check')
  return {'s32': _write(folder / 's32', 32, 5), 's64': _write(folder / 's64', 64, 10),
          'p32': _write(folder / 'p32', 32, 5, packed=3)}


def test_phase_2_files_name_phase_2_settings(files):
  spec = record_check.feature_spec(64, 10)
  with pytest.raises(ValueError, match=r"s32 \(phase 2's train files, phase2.train_files\): "
                     r"feature 'input_ids' has 32 values, but phase2.max_seq_length gives 64: "
                     r'set --config.phase2.max_seq_length to what these files were made with'):
    record_check.check_first_record(files['s32'], spec, which='phase2.train_files')
  with pytest.raises(ValueError, match=r"'masked_lm_positions' has 10 values, but "
                     r'phase2.max_predictions_per_seq gives 40: set '
                     r'--config.phase2.max_predictions_per_seq'):
    record_check.check_first_record(files['s64'], record_check.feature_spec(64, 40),
                                    which='phase2.train_files')
  # Phase 1's are data.*; packing is data.max_instances_per_row in every phase.
  with pytest.raises(ValueError, match=r'\(train files, data.train_files\): .*but '
                     r'data.max_seq_length gives 64: set --config.data.max_seq_length'):
    record_check.check_first_record(files['s32'], spec, which='data.train_files')
  with pytest.raises(ValueError, match=r"\(phase 2's train files, phase2.train_files\): holds "
                     r'packed rows .*data.max_instances_per_row is 1'):
    record_check.check_first_record(files['p32'], record_check.feature_spec(32, 5),
                                    which='phase2.train_files')
  record_check.check_first_record(files['s64'], spec, which='phase2.train_files')


def test_eval_files_unlike_the_train_files_say_so(files):
  spec = record_check.feature_spec(32, 5)
  with pytest.raises(ValueError, match=r'p32 \(eval files, data.eval_files\): holds packed rows, '
                     r'unlike the train files: make train and eval files alike, packed both '
                     r'\(create_pretraining_data --pack\) or neither'):
    record_check.check_first_record(files['p32'], spec, which='data.eval_files')
  packed = record_check.feature_spec(32, 5, max_instances_per_row=3)
  with pytest.raises(ValueError, match=r"\(phase 2's eval files, phase2.eval_files\): holds one "
                     r'instance per row, unlike the train files'):
    record_check.check_first_record(files['s32'], packed, which='phase2.eval_files')
  with pytest.raises(ValueError, match=r"'input_ids' has 64 values, but the train files' "
                     r'max_seq_length gives 32: make train and eval files alike'):
    record_check.check_first_record(files['s64'], spec, which='data.eval_files')


def test_unnamed_files_keep_the_bare_setting(files):
  with pytest.raises(ValueError, match=r"s32: feature 'input_ids' has 32 values, but "
                     r'max_seq_length gives 64: set max_seq_length to what the files were made '
                     r'with'):
    record_check.check_first_record(files['s32'], record_check.feature_spec(64, 10))
  with pytest.raises(ValueError, match=r'p32: holds packed rows .*data.max_instances_per_row is 1: '
                     r'set it to that number'):
    record_check.check_first_record(files['p32'], record_check.feature_spec(32, 5))

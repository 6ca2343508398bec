"""The eval batch's rows (bertjax/input/global_batch.eval_rows), the one rule both eval paths use:
fine-tuning's in-memory batches and pre-training's tf.data eval pipeline."""

from bertjax.input import global_batch


def test_an_eval_batch_past_the_eval_set_is_cut_to_the_fewest_rows_that_hold_it():
  assert global_batch.eval_rows(100, 1_000_000, 8) == 104  # A multiple of the split.
  assert global_batch.eval_rows(100, 64, 8) == 64  # The set is larger: the batch as given.
  assert global_batch.eval_rows(3, 64, 4) == 4
  assert global_batch.eval_rows(0, 64, 8) == 0

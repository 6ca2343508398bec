"""While training: TFRecords -> tf.data batches on each host -> global jax.Arrays.

read_order computes where each example of a host's stream comes from (exact resume),
masking_tf masks unmasked instances dynamically, input_pipeline reads and batches, and
global_batch is the one host/device boundary.
"""

"""Data: corpora readers, pre-training instance creation and tf.data input pipelines."""

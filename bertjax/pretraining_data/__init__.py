"""Offline, before training: text files -> documents -> instances -> masked TFRecord shards.

text_input (files -> tokenized documents) -> instances (BERT's packing, NSP, masking.py) ->
writer (worker processes, atomic shards, a JSON report) -> example_encoding + tfrecord (bytes).
corpora and embedded supply public-domain text; tfds_builder runs the same generator on Beam.
"""

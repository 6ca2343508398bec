"""bertjax: BERT pre-training and fine-tuning in JAX/Flax, faithful to the paper, TPU-first."""

__version__ = '0.1.0'

"""Fine-tuning tasks: GLUE, SQuAD, CoNLL-2003, real-text topics; registry.py names them."""

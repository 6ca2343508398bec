"""Fine-tuning tasks: GLUE, SQuAD, CoNLL-2003, real-text topics and your own files (user_tasks.py);
registry.py names them."""

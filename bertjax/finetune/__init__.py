"""Fine-tuning: the job (job.py), the task kinds (kinds.py), metrics, and the tasks/ readers."""

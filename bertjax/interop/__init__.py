"""Weights in and out: transformers checkpoints, and what a start-from directory holds."""

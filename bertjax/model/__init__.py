"""The model: the BERT encoder (encoder.py), its kernels (kernels.py) and the heads (heads.py)."""

"""Compatibility fixes for fairseq 0.12 on modern PyTorch/NumPy. Kept as narrow as possible."""

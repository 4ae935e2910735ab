"""Readers of trained models (Cr5, Triplet, M3L), the model-directory format they share and the bag-of-words Cr5 reads."""

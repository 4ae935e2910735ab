"""backretrieval: which cross-lingual text representation works best for your domain and
language pairs, with or without parallel data.

Layers (each imports only from those before it):
``core -> data -> encoders -> search -> metrics -> analysis -> report -> cli``.
"""
__version__ = "0.1.0"

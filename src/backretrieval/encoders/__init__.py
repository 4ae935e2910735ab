"""Encoders: text and image models behind one protocol, and the embedding cache."""

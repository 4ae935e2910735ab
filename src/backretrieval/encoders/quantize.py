"""Serving forms of a vector: what a vector store holds instead of float32, and how it scores it.

A team does not serve a model's float32 vectors only: it may store fewer dimensions (Matryoshka
truncation), int8 codes or sign bits. Each form here is computed as the vector stores and
``sentence_transformers.quantization.quantize_embeddings`` compute it, from the unit vector
(:func:`unit_rows`: the canonical float64 norm, the same bits on every machine):

* **int8** -- scalar quantisation with per-dimension ranges calibrated on a corpus
  (:func:`int8_ranges`: each dimension's minimum and maximum),
  ``code = clip(floor((x - lo) / step), 0, 255) - 128`` with ``step = (hi - lo) / 255`` in float32
  (sentence-transformers' formula, bit for bit; a value outside the calibrated range, from a text
  the ranges were not fitted on, gets the nearest end; a dimension constant over the corpus has
  step 1). One byte per dimension. Scored by the **integer dot product of the codes** (an
  inner-product index over int8 codes: sentence-transformers' usearch search, ``metric="ip"``,
  ``dtype="i8"``).
* **binary** -- the sign bits (``x > 0``), eight dimensions per byte (``numpy.packbits``).
  Scored by the **Hamming distance** of the packed bits (usearch's ``metric="hamming"``, faiss'
  binary indexes); the grid holds the bits as ±1 and
  scores them by their dot product, ``d - 2 * hamming``, which ranks (and ties) the pairs
  exactly as the Hamming distance does.

The codes are returned as float32 arrays of integer values (the ±1 or int8 codes), which the
search kernels multiply exactly: every product is an integer of at most 2^14 and every sum of
at most 1,024 of them stays below 2^24, so a float32 (or float64) dot product of codes is the
exact integer whatever the summation order (wider int8 forms' scores above 2^24 are rounded the
canonical way, the same bits on every machine). :func:`form_bytes` gives the bytes per item of a
form.
"""
from __future__ import annotations

import numpy as np

from ..core.canonical import dots_kernel

FORMS = ("int8", "binary")
FLOAT32_BYTES = 4


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` divided by their canonical L2 norm: ``float32(x_k / sqrt(dot64(x, x)))`` in
    float64, the same bits on every machine (the norm adds the exact squares in index order);
    all-zero rows stay zero.

    Args:
        x: a 2-D float array.

    Returns:
        float32 unit rows, a new array.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    idx = np.arange(x.shape[0], dtype=np.int64)
    ssq = np.empty(x.shape[0], dtype=np.float64)
    dots_kernel(x, x, idx, idx, ssq)
    norm = np.sqrt(ssq)[:, None]
    out = np.divide(x.astype(np.float64), norm, out=np.zeros(x.shape, dtype=np.float64), where=norm > 0)
    return out.astype(np.float32)


def int8_ranges(x: np.ndarray) -> np.ndarray:
    """The calibration of :func:`int8_codes`: each dimension's minimum and maximum over the rows
    of ``x`` (order-free, so exact).

    Args:
        x: (n, d) float32 calibration vectors (n >= 1).

    Returns:
        float32 (2, d): row 0 the minima, row 1 the maxima (``quantize_embeddings``' ``ranges``).

    Raises:
        ValueError: ``x`` has no rows.
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"int8 calibration needs at least one vector, got shape {x.shape}")
    return np.vstack((x.min(axis=0), x.max(axis=0))).astype(np.float32)


def int8_codes(x: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """The int8 codes of ``x`` under the calibrated ``ranges`` (see the module doc).

    Args:
        x: (n, d) float32 vectors.
        ranges: (2, d) from :func:`int8_ranges`.

    Returns:
        float32 (n, d) integer values in [-128, 127], equal to
        ``quantize_embeddings(x, precision="int8", ranges=ranges)``.
    """
    x = np.asarray(x, dtype=np.float32)
    lo, hi = np.asarray(ranges, dtype=np.float32)
    steps = (hi - lo) / np.float32(255)
    steps = np.where(steps == 0, np.float32(1), steps).astype(np.float32)
    return (np.clip(np.floor((x - lo) / steps), 0, 255) - np.float32(128)).astype(np.float32)


def sign_codes(x: np.ndarray) -> np.ndarray:
    """The sign bits of ``x`` as ±1 (``+1`` where ``x > 0``, ``-1`` elsewhere, as ``x > 0`` sets a bit).

    Args:
        x: (n, d) float vectors.

    Returns:
        float32 (n, d) of ±1.
    """
    return np.where(np.asarray(x) > 0, np.float32(1), np.float32(-1)).astype(np.float32)


def packed_bits(codes: np.ndarray) -> np.ndarray:
    """The bytes a vector store holds for ±1 codes: ``numpy.packbits(codes > 0)`` per row.

    Args:
        codes: (n, d) ±1 from :func:`sign_codes`.

    Returns:
        uint8 (n, ceil(d / 8)).
    """
    return np.packbits(np.asarray(codes) > 0, axis=1)


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances between the rows of two packed bit matrices (:func:`packed_bits`).

    Args:
        a: uint8 (n, w).
        b: uint8 (m, w).

    Returns:
        int64 (n, m): the number of differing bits of each pair.
    """
    a, b = np.asarray(a, dtype=np.uint8), np.asarray(b, dtype=np.uint8)
    return np.unpackbits(a[:, None, :] ^ b[None, :, :], axis=2).sum(axis=2, dtype=np.int64)


def form_bytes(dim: int, form: str | None) -> int:
    """Bytes per item of a ``dim``-dimensional vector in ``form``.

    Args:
        dim: the dimension.
        form: ``None`` (float32), ``"int8"`` or ``"binary"``.

    Returns:
        ``4 * dim``, ``dim`` or ``ceil(dim / 8)``.

    Raises:
        ValueError: an unknown form.
    """
    if form is None:
        return FLOAT32_BYTES * int(dim)
    if form == "int8":
        return int(dim)
    if form == "binary":
        return -(-int(dim) // 8)
    raise ValueError(f"unknown serving form {form!r}: use one of {', '.join(FORMS)}")

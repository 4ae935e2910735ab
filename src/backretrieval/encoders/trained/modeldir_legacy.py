"""Readers for the legacy model-directory layouts (the one format is :mod:`.modeldir`).

Each converts a legacy directory to the same :class:`~.modeldir_base.ModelDir` as the current
format, once, here; nothing else in the package knows the older headers.

* Cr5 (``cr5.json`` + ``cr5.npz`` + ``vocab/<lang>.txt``; ``"format": "backretrieval.cr5"``):
  ``hyper_parameters`` as recorded, the rest of ``cr5.json`` is the info, the arrays come from
  ``cr5.npz``.
* Triplet / TripletXL (``model.json`` with ``"format": 1`` + ``weights.npz`` ``w0, b0, ...``): the
  hyper-parameters are ``method``, ``base``, ``final_relu``, ``tower`` (``"mlp"`` when absent)
  and the recorded ``hyper`` dict (``negatives``
  ``"batch"`` when absent).
* M3L / PATR (``config.json`` with ``"format": "backretrieval-m3l"`` + ``weights.npz`` ``W0, b0,
  ...`` + ``split.json``): the nested ``loss_params``, ``optimizer`` and ``split`` become the
  estimator's flat parameter names; PATR's eta becomes the typed pair ``eta`` (the given margin,
  or None) and ``eta_quantile`` (the quantile it was estimated at, or None when it was given).
  The oldest directories only hold the prose ``eta_rule`` ("given" or "quantile Q of squared
  distances ..."), which is translated here and nowhere else.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .modeldir_base import WEIGHTS_FILE, ModelDir, ModelDirError, load_arrays

CR5_HEADER = "cr5.json"
CR5_ARRAYS = "cr5.npz"
CR5_FORMAT = "backretrieval.cr5"
TRIPLET_HEADER = "model.json"
M3L_HEADER = "config.json"
M3L_FORMAT = "backretrieval-m3l"


def _check_header(f: Path, head: Any, fmt: Any, listed: str, readable: int = 1) -> list:
    """Check an older header's format and version; return its non-empty list ``listed``."""
    if not isinstance(head, dict):
        raise ModelDirError(f"{f} is not a model header")
    if head.get("format") != fmt:
        raise ModelDirError(f"{f} is not a model header (format {head.get('format')!r})")
    v = head.get("format_version", 1)
    if not isinstance(v, int) or v > readable:
        raise ModelDirError(f"{f}: format version {v!r} is newer than this package reads ({readable}); update backretrieval")
    items = head.get(listed)
    if not isinstance(items, list) or not items:
        raise ModelDirError(f"{f} lists no {listed}")
    return items


def _arrays(f: Path, names: list[str], with_arrays: bool) -> dict:
    """Every array of ``f``, which must hold ``names`` (without ``with_arrays``: only the check
    that ``f`` is there)."""
    if with_arrays:
        arrays = load_arrays(f)
        missing = [n for n in names if n not in arrays]
        if missing:
            raise ModelDirError(f"{f} lacks array(s) {', '.join(missing)}: the model directory is incomplete")
        return arrays
    if not f.is_file():
        raise ModelDirError(f"{f} is missing: the model directory is incomplete")
    return {}


def read_cr5(p: Path, head: Any, with_arrays: bool) -> ModelDir:
    """A Cr5 directory in the legacy layout."""
    f = p / CR5_HEADER
    langs = _check_header(f, head, CR5_FORMAT, "languages")
    names = [f"{k}__{lang}" for lang in langs for k in ("phi", "idf")]
    arrays = _arrays(p / CR5_ARRAYS, names, with_arrays)
    files = tuple(f"vocab/{lang}.txt" for lang in langs)
    info = {k: v for k, v in head.items() if k not in ("format", "format_version", "hyper_parameters")}
    hp = dict(head.get("hyper_parameters") or {})
    return ModelDir(p, "cr5", hp, info, arrays, files, header=CR5_HEADER, legacy="cr5-1")


def read_triplet(p: Path, head: dict[str, Any], with_arrays: bool) -> ModelDir:
    """A Triplet / TripletXL directory in the legacy layout (``"format": 1``)."""
    f = p / TRIPLET_HEADER
    if not head.get("method") or not head.get("base"):
        raise ModelDirError(f"{f} is not a format-1 triplet/tripletxl model file (no method or base)")
    n_layers = len(head.get("layers") or [])
    if n_layers == 0:
        raise ModelDirError(f"{f} lists no layers")
    hp = {"method": head["method"], "base": head["base"], "final_relu": bool(head.get("final_relu", True)),
          "tower": head.get("tower", "mlp"), "negatives": "batch", **dict(head.get("hyper") or {})}
    info = {k: v for k, v in head.items() if k not in ("format", "method", "base", "final_relu", "tower", "hyper", "layers")}
    arrays = _arrays(p / WEIGHTS_FILE, [f"{k}{i}" for i in range(n_layers) for k in ("w", "b")], with_arrays)
    return ModelDir(p, "triplet", hp, info, arrays, (), header=TRIPLET_HEADER, legacy="triplet-1")


def eta_from_rule(loss_params: dict[str, Any], where: Path) -> float | None:
    """The quantile a PATR model's eta was estimated at (None: given), from the typed
    ``eta_quantile`` when recorded, else from the prose ``eta_rule``."""
    if "eta_quantile" in loss_params:
        q = loss_params["eta_quantile"]
        return None if q is None else float(q)
    rule = loss_params.get("eta_rule", "given")
    if rule == "given":
        return None
    parts = str(rule).split()
    try:
        if parts[0] != "quantile":
            raise ValueError
        return float(parts[1])
    except (IndexError, ValueError):
        raise ModelDirError(f"{where}: unreadable eta_rule {rule!r} (expected 'given' or 'quantile Q ...')") from None


def read_m3l(p: Path, head: Any, with_arrays: bool) -> ModelDir:
    """An M3L / PATR directory in the legacy layout (``config.json``)."""
    f = p / M3L_HEADER
    widths = _check_header(f, head, M3L_FORMAT, "widths")
    hp: dict[str, Any] = {k: head[k] for k in ("loss", "base", "image_model", "train_langs", "val_langs") if k in head}
    hp["widths"] = list(widths[:-1])
    for k in ("dropout", "init", "standardize", "batch_size", "epochs", "patience", "select", "seed"):
        if k in head:
            hp[k] = head[k]
    lp = dict(head.get("loss_params") or {})
    if head.get("loss") == "patr":
        q = eta_from_rule(lp, f)
        hp["eta"] = None if q is not None else lp.get("eta")
        hp["eta_quantile"] = q
    else:
        hp.update({k: lp[k] for k in ("rho", "alpha1", "alpha2") if k in lp})
    hp.update({k: v for k, v in dict(head.get("optimizer") or {}).items() if k != "name"})
    split = dict(head.get("split") or {})
    hp.update({new: split[old] for old, new in (("seed", "split_seed"), ("test_frac", "test_frac"), ("val_frac", "val_frac"))
               if old in split})
    info = {k: v for k, v in head.items()
            if k not in ("format", "format_version", "loss_params", "optimizer", "split", "widths", *hp)}
    info["eta"] = lp.get("eta")
    info["split"] = {k: v for k, v in split.items() if k not in ("seed", "test_frac", "val_frac")}
    arrays = _arrays(p / WEIGHTS_FILE, [f"{k}{i}" for i in range(len(widths)) for k in ("W", "b")], with_arrays)
    files = ("split.json",) if (p / "split.json").is_file() else ()
    return ModelDir(p, "m3l", hp, info, arrays, files, header=M3L_HEADER, legacy="m3l-1")

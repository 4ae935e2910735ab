"""The stored records of the grid: the input fingerprints their keys are made of
(:class:`_Inputs`), the manifest of the last run's inputs, reading a stored record (a damaged
one is named), ``run.json`` (:func:`run_info`) and the result files (:func:`write_results`)."""
from __future__ import annotations

import dataclasses
import json
import math
import zipfile
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from ...core import atomic_save_npz, atomic_write_text, content_hash
from ...core.env import environment
from ...data import Dataset
from ...data.corpus import fingerprint
from ..models import describe_models
from .config import EvalConfig
from .features import _Features, _Samples

RecordSlot = tuple[str, str | None, str, str, int]  # (model, image model, src, tgt, seed)
MANIFEST = "manifest/inputs.json"  # in a folder of its own: .partial/*.json are the records
_DAMAGED = (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile, zlib.error)


@dataclasses.dataclass
class _Inputs:
    """The fingerprints every stored record is keyed by (see the module docstring)."""

    cfg_key: str
    models: dict[str, str]  # model spec -> fingerprint (version, + fitted-on texts)
    image_models: dict[str | None, str | None]  # image model -> version
    samples: dict[tuple[str, str, int], dict[str, str]]  # (src, tgt, seed) -> "data:LANG"/"images:LANG" -> fp

    def parts(self, slot: RecordSlot) -> dict[str, str | None]:
        spec, g, s, t, seed = slot
        sample = self.samples[(s, t, seed)]
        parts: dict[str, str | None] = {"model": self.models[spec], "image model": self.image_models[g]}
        parts.update({k: v for k, v in sample.items() if g is not None or not k.startswith("images:")})
        return parts

    def key(self, slot: RecordSlot) -> str:
        """The file name (without suffix) of the record of ``slot`` computed from these inputs."""
        spec, g, s, t, seed = slot
        return content_hash(json.dumps([self.cfg_key, spec, g, s, t, seed, self.parts(slot)], sort_keys=True), 16)

    def slot_id(self, slot: RecordSlot) -> str:
        return content_hash(json.dumps([self.cfg_key, *slot]), 16)


def _fingerprint_inputs(
    cfg: EvalConfig, samples: dict[tuple[str, str, int], _Samples], feats: _Features, encoders: dict[str, Any],
    image_models: Sequence[str | None],
) -> _Inputs:
    fit_fp = None
    models = {}
    for spec, enc in encoders.items():
        fp = str(enc.version)
        if callable(getattr(enc, "fit", None)) and getattr(enc, "fitted_on_texts", True):
            # fitted on the evaluated texts (tfidf-char, PCA variants): they are part of the model
            fit_fp = fit_fp or feats.fit_fingerprint()
            fp += f"+fit:{fit_fp}"
        models[spec] = fp
    per_sample = {}
    for (s, t, seed), sm in samples.items():
        fps = {}
        for side, lang in enumerate((s, t)):  # the sample's rows of each language: XLR part, BkR part
            parts = (None if sm.xlr is None else sm.xlr[side], None if sm.bkr is None else sm.bkr[side])
            fps[f"data:{lang}"] = feats.sample_fingerprint(lang, parts, False)
            if sm.bkr is not None:
                fps[f"images:{lang}"] = feats.sample_fingerprint(lang, (None, sm.bkr[side]), True)
        per_sample[(s, t, seed)] = fps
    versions: dict[str | None, str | None] = {g: (feats.image_versions[g] if g else None) for g in image_models}
    return _Inputs(cfg.key(), models, versions, per_sample)


def _read_manifest(partial: Path, log: Callable[[str], None]) -> dict[str, Any]:
    path = partial / MANIFEST
    if not path.exists():
        return {}
    try:
        slots = json.loads(path.read_text(encoding="utf-8"))["slots"]
        if not isinstance(slots, dict):
            raise ValueError("'slots' is not an object")
        return slots
    except (OSError, ValueError, KeyError, TypeError) as e:
        log(f"damaged manifest {path} ({type(e).__name__}: {e}): cannot say which inputs changed; rewriting it")
        return {}


def _label(part: str, slot: RecordSlot) -> str:
    kind, _, lang = part.partition(":")
    if kind == "data":
        return f"data for {lang}"
    if kind == "images":
        return f"images for {lang}"
    if kind == "model":
        return f"model {slot[0]}"
    return f"image model {slot[1]}"


class _DamagedRecord(Exception):
    def __init__(self, path: Path, error: BaseException):
        super().__init__(f"{path} ({type(error).__name__}: {error})")
        self.path = path


def _load_record(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A stored record (``path``, .json) and its ranks (.npz beside it); :class:`_DamagedRecord`
    naming the file if either cannot be read whole."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rec, dict) or "model" not in rec:
            raise ValueError("not a record")
    except _DAMAGED as e:
        raise _DamagedRecord(path, e) from None
    npz = path.with_suffix(".npz")
    try:
        with np.load(npz, allow_pickle=False) as z:
            ranks = {k: z[k] for k in z.files}
    except _DAMAGED as e:
        raise _DamagedRecord(npz, e) from None
    return rec, ranks


class RecordStore:
    """``OUT/.partial``: the finished records of earlier runs, each under the key of its inputs
    (:meth:`_Inputs.key`), and the manifest of the inputs of the last run (which input changed).

    Args:
        out_dir: the output folder; None: nothing is stored or resumed.
        inputs: the fingerprints of this run.
        log: receives damaged files and changed inputs.
    """

    def __init__(self, out_dir: str | Path | None, inputs: _Inputs, log: Callable[[str], None]):
        self.partial = Path(out_dir) / ".partial" if out_dir is not None else None
        self.inputs, self.log = inputs, log
        self.manifest = _read_manifest(self.partial, log) if self.partial is not None else {}

    def _path(self, slot: RecordSlot) -> Path:
        assert self.partial is not None
        return self.partial / f"{self.inputs.key(slot)}.json"

    def load(self, slot: RecordSlot) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        """The stored record and ranks of ``slot`` computed from these inputs; None when there is
        none (or it is damaged: logged, naming the file).

        Args:
            slot: (model, image model, src, tgt, seed).

        Returns:
            ``(record, ranks)`` as :meth:`save` stored them, or None (also when there is no
            output folder).
        """
        if self.partial is None:
            return None
        path = self._path(slot)
        if not path.exists():
            return None
        try:
            return _load_record(path)
        except _DamagedRecord as e:
            self.log(f"damaged record file {e}: recomputing the record")
            return None

    def changed(self, slot: RecordSlot) -> list[str]:
        """What changed (``"data for de"``, ``"model use-m"``, ...) since the last run computed
        ``slot``, by the manifest; empty when it has no entry for it or nothing changed.

        Args:
            slot: (model, image model, src, tgt, seed).

        Returns:
            Labels of the changed inputs, in the order of the record key's parts.
        """
        old = self.manifest.get(self.inputs.slot_id(slot))
        if not isinstance(old, dict) or old.get("record") == self.inputs.key(slot):
            return []
        before = old.get("inputs") if isinstance(old.get("inputs"), dict) else {}
        return [_label(part, slot) for part, value in self.inputs.parts(slot).items() if before.get(part) != value]

    def write_manifest(self, slots: Iterable[RecordSlot]) -> None:
        """Record the inputs of ``slots`` (this run's), keeping the other entries, for the next run.

        Written atomically to ``OUT/.partial/manifest/inputs.json``; nothing without an output folder.

        Args:
            slots: the slots of this run.
        """
        if self.partial is None:
            return
        entries = dict(self.manifest)
        for slot in slots:
            entries[self.inputs.slot_id(slot)] = {"record": self.inputs.key(slot), "inputs": self.inputs.parts(slot)}
        atomic_write_text(self.partial / MANIFEST, json.dumps({"format": 1, "slots": entries}))

    def save(self, slot: RecordSlot, rec: dict[str, Any], ranks: dict[str, np.ndarray]) -> None:
        """Store a finished record: its ranks first, as the ``.json`` marks a record finished.

        Both files are written atomically under the key of ``slot``'s inputs; nothing is stored
        without an output folder.

        Args:
            slot: (model, image model, src, tgt, seed).
            rec: the record (JSON-serialisable).
            ranks: named rank arrays (saved as ``.npz``, no pickles).
        """
        if self.partial is None:
            return
        path = self._path(slot)
        atomic_save_npz(path.with_suffix(".npz"), **ranks)
        atomic_write_text(path, json.dumps(rec))


def config_json(cfg: EvalConfig) -> dict[str, Any]:
    """``cfg`` as JSON data; Python-object models appear as ``"python:<module.Class>"`` (their
    fingerprints are in ``run.json``'s ``inputs.models``).

    Args:
        cfg: the configuration.

    Returns:
        A dict of every field of ``cfg`` that survives a JSON round trip; values JSON cannot
        hold (e.g. objects in ``dataset_options``) become their ``str``.
    """
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    d["models"] = describe_models(cfg.models)
    return json.loads(json.dumps(d, default=str))


def run_info(cfg: EvalConfig, ds: Dataset, feats: "_Features", inputs: _Inputs, executor: str) -> dict[str, Any]:
    """What produced a set of results: the configuration, fingerprints of every input (the rows the
    run used per language, their images, each model and image model) and the software environment.

    Args:
        cfg: the configuration.
        ds: the dataset.
        feats: the rows the run used and their digests.
        inputs: the fingerprints of the models and image models.
        executor: the executor's name.

    Returns:
        A JSON-serialisable dict (``OUT/run.json``).
    """
    return {
        "format": 1,
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": config_json(cfg),
        "config_key": inputs.cfg_key,
        "executor": executor,
        "inputs": {
            "dataset": ds.name,
            "rows": {lang: len(rows) for lang, rows in feats.needed.items()},
            "data": {lang: fingerprint(d) for lang, d in feats.row_digests.items()},
            "images": {lang: fingerprint(d) for lang, d in feats.image_digests.items() if d},
            "models": dict(inputs.models),
            "image_models": {g: v for g, v in inputs.image_models.items() if g is not None},
        },
        "environment": environment(),
    }


def _with_identity(rec: dict[str, Any], identity: str) -> dict[str, Any]:
    """A record as the results give it: ``model_identity`` after ``model`` (records stored before
    the field existed get it from their key, which includes it), no empty ``image_model``."""
    out = {"model": rec["model"], "model_identity": identity}
    out.update((f, v) for f, v in rec.items() if f not in out and not (f == "image_model" and v is None))
    return out



def _strict(x: Any) -> Any:
    """``x`` with every NaN or infinite float (Python or numpy) as None, lists and dicts recursively."""
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_results(records: Sequence[dict[str, Any]], out_dir: Path, run: dict[str, Any] | None = None) -> None:
    """Write ``results.jsonl``, ``results.csv`` and (given ``run``) ``run.json`` into ``out_dir``, each atomically.

    ``results.jsonl`` and ``run.json`` are strict JSON (any JSON parser reads them): a metric
    that is undefined for a record (NaN: e.g. the hubness skew of a sample whose k-occurrences
    are all equal, CORR of constant vectors) is ``null``, and so is an infinite value;
    ``results.csv`` leaves such a cell empty.

    Args:
        records: one dict per record.
        out_dir: the folder (created).
        run: what produced the records (:func:`run_info`); ``run.json`` is written first, so
            a ``results.jsonl`` never lacks it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if run is not None:
        atomic_write_text(out_dir / "run.json", json.dumps(_strict(run), indent=1, default=str, allow_nan=False) + "\n")
    atomic_write_text(out_dir / "results.jsonl", "".join(json.dumps(_strict(r), allow_nan=False) + "\n" for r in records))
    atomic_write_text(out_dir / "results.csv", pd.DataFrame(records).to_csv(index=False))

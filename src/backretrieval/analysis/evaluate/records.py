"""The stored records of the grid: the input fingerprints and versions their keys are made of
(:class:`_Inputs`), the manifest of the last run's inputs, reading a stored record (a damaged
one is named; one of other versions is stale), ``run.json`` (:func:`run_info`) and the result
files (:func:`write_results`).

Versions. Besides its inputs, a record's key holds the versions it is computed under
(:meth:`_Inputs.versions`): ``metrics`` (:data:`backretrieval.core.env.METRICS_VERSION`), with
``approx`` the installed FAISS, the index options and the self-check's sample
(:func:`~.tasks.approx_versions`), and the model's and image model's ``versions``
(:func:`backretrieval.encoders.base.encoder_versions`: the libraries that compute their vectors
and settings such as ``torch threads``), as ``"model: numpy"`` / ``"image model: pillow"``.
Each stored record keeps them (:data:`VERSIONS_FIELD`, removed when read back), so a record
of the same inputs under other versions -- found by the manifest's entry for its slot, or at the
key of a record stored without versions -- is *stale* (:meth:`RecordStore.stale`): recomputed,
and the run names what changed ("metrics version 3 -> 4", "numpy 2.1.3 -> 2.2.0 (model use-m)"),
unless ``EvalConfig.reuse_stale`` asks to reuse it (with a warning naming the same)."""
from __future__ import annotations

import dataclasses
import json
import zipfile
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from ...core import atomic_save_npz, atomic_write_text, content_hash, env, json_finite
from ...core.env import environment
from ...data import Dataset
from ...data.corpus import fingerprint
from ...encoders.base import encoder_versions
from ..models import describe_image_model, describe_models
from .config import EvalConfig
from .features import Features, Samples
from .tasks import approx_versions

RecordSlot = tuple[str, str | None, str, str, int]  # (model, image model, src, tgt, seed)
MANIFEST = "manifest/inputs.json"  # in a folder of its own: .partial/*.json are the records
VERSIONS_FIELD = "_versions"  # a stored record's versions (not part of the record itself)
NOT_RECORDED = "versions not recorded"  # what env.describe_changes says of a record without them
_DAMAGED = (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile, zlib.error)


@dataclasses.dataclass
class _Inputs:
    """The fingerprints every stored record is keyed by (see the module docstring)."""

    cfg_key: str
    models: dict[str, str]  # model spec -> fingerprint (version, + fitted-on texts)
    image_models: dict[str | None, str | None]  # image model -> version
    samples: dict[tuple[str, str, int], dict[str, str]]  # (src, tgt, seed) -> "data:LANG"/"images:LANG" -> fp
    run_versions: dict[str, str] = dataclasses.field(default_factory=dict)  # "metrics", with approx: FAISS's
    model_versions: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # spec -> its versions
    image_model_versions: dict[str | None, dict[str, str]] = dataclasses.field(default_factory=dict)

    def parts(self, slot: RecordSlot) -> dict[str, str | None]:
        spec, g, s, t, seed = slot
        sample = self.samples[(s, t, seed)]
        parts: dict[str, str | None] = {"model": self.models[spec], "image model": self.image_models[g]}
        parts.update({k: v for k, v in sample.items() if g is not None or not k.startswith("images:")})
        return parts

    def versions(self, slot: RecordSlot) -> dict[str, str]:
        """The versions the record of ``slot`` is computed under (see the module docstring)."""
        spec, g = slot[0], slot[1]
        out = dict(self.run_versions)
        out.update((f"model: {k}", v) for k, v in self.model_versions.get(spec, {}).items())
        out.update((f"image model: {k}", v) for k, v in self.image_model_versions.get(g, {}).items())
        return out

    def key(self, slot: RecordSlot) -> str:
        """The file name (without suffix) of the record of ``slot`` computed from these inputs
        under these versions."""
        spec, g, s, t, seed = slot
        return content_hash(
            json.dumps([self.cfg_key, spec, g, s, t, seed, self.parts(slot), self.versions(slot)], sort_keys=True), 16
        )

    def unversioned_key(self, slot: RecordSlot) -> str:
        """The key of a record of ``slot`` from these inputs stored without versions."""
        spec, g, s, t, seed = slot
        return content_hash(json.dumps([self.cfg_key, spec, g, s, t, seed, self.parts(slot)], sort_keys=True), 16)

    def slot_id(self, slot: RecordSlot) -> str:
        return content_hash(json.dumps([self.cfg_key, *slot]), 16)


def fingerprint_inputs(
    cfg: EvalConfig, samples: dict[tuple[str, str, int], Samples], feats: Features, encoders: dict[str, Any],
    image_models: Sequence[str | None],
) -> _Inputs:
    """The inputs that decide the records' keys: the configuration, each model's version (and the
    fingerprint of what it is fitted on), each image model's version, and each sample's rows.

    Args:
        cfg: the configuration.
        samples: (src, tgt, seed) -> its samples.
        feats: the embeddings of the needed rows.
        encoders: model name -> its text model.
        image_models: the image models of the grid (None: none).

    Returns:
        The inputs.
    """
    fit_fp = None
    models = {}
    model_versions = {spec: encoder_versions(enc) for spec, enc in encoders.items()}
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
    image_model_versions = {g: (feats.image_lib_versions[g] if g else {}) for g in image_models}
    run_versions = {"metrics": str(env.METRICS_VERSION), **(approx_versions() if cfg.approx is not None else {})}
    return _Inputs(cfg.key(), models, versions, per_sample, run_versions, model_versions, image_model_versions)


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


def _version_labels(old: dict[str, str] | None, new: dict[str, str], slot: RecordSlot) -> list[str]:
    """What differs between a stored record's versions and the current ones, for messages:
    ``"metrics version 3 -> 4"``, ``"numpy 2.1.3 -> 2.2.0 (model use-m)"``."""
    out = []
    for change in env.describe_changes(old, new):
        for prefix, owner in (("model: ", f"model {slot[0]}"), ("image model: ", f"image model {slot[1]}")):
            if change.startswith(prefix):
                change = f"{change[len(prefix):]} ({owner})"
                break
        out.append(change)
    return out


class _DamagedRecord(Exception):
    def __init__(self, path: Path, error: BaseException):
        super().__init__(f"{path} ({type(error).__name__}: {error})")
        self.path = path


def _load_record(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, str] | None]:
    """A stored record (``path``, .json), its ranks (.npz beside it) and the versions it was
    computed under (None: stored without them); :class:`_DamagedRecord` naming the file if
    either cannot be read whole."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rec, dict) or "model" not in rec:
            raise ValueError("not a record")
        versions = rec.pop(VERSIONS_FIELD, None)
        if versions is not None and not isinstance(versions, dict):
            raise ValueError(f"{VERSIONS_FIELD} is not an object")
    except _DAMAGED as e:
        raise _DamagedRecord(path, e) from None
    npz = path.with_suffix(".npz")
    try:
        with np.load(npz, allow_pickle=False) as z:
            ranks = {k: z[k] for k in z.files}
    except _DAMAGED as e:
        raise _DamagedRecord(npz, e) from None
    return rec, ranks, None if versions is None else {str(k): str(v) for k, v in versions.items()}


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
        self._damaged: set[Path] = set()  # record files found damaged (named once)

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
            rec, ranks, versions = _load_record(path)
        except _DamagedRecord as e:
            self._damaged.add(path)
            self.log(f"damaged record file {e}: recomputing the record")
            return None
        if versions != self.inputs.versions(slot):  # not what its key says: stale (see stale())
            return None
        return rec, ranks

    def stale(self, slot: RecordSlot) -> tuple[dict[str, Any], dict[str, np.ndarray], list[str]] | None:
        """A stored record of ``slot`` from these same inputs but computed under other versions
        (or stored without versions): the one the manifest names for the slot, else the one at
        :meth:`_Inputs.unversioned_key`, else one at the current key whose stored versions are
        not the current ones. Call it when :meth:`load` found nothing.

        Args:
            slot: (model, image model, src, tgt, seed).

        Returns:
            ``(record, ranks, changes)``, ``changes`` naming each version that differs
            (``"metrics version 3 -> 4"``; ``"versions not recorded"`` for a record stored
            without them); None when there is no such record (or it is damaged: logged).
        """
        if self.partial is None:
            return None
        keys = []
        old = self.manifest.get(self.inputs.slot_id(slot))
        if isinstance(old, dict) and isinstance(old.get("record"), str) and old.get("inputs") == self.inputs.parts(slot):
            keys.append(old["record"])
        keys += [self.inputs.unversioned_key(slot), self.inputs.key(slot)]
        for key in dict.fromkeys(k for k in keys if "/" not in k and "\\" not in k):
            path = self.partial / f"{key}.json"
            if path in self._damaged or not path.exists():
                continue
            try:
                rec, ranks, versions = _load_record(path)
            except _DamagedRecord as e:
                self._damaged.add(path)
                self.log(f"damaged record file {e}: recomputing the record")
                continue
            changes = _version_labels(versions, self.inputs.versions(slot), slot)
            if changes:
                return rec, ranks, changes
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
        out = [_label(part, slot) for part, value in self.inputs.parts(slot).items() if before.get(part) != value]
        versions = old.get("versions")
        if isinstance(versions, dict):  # entries written without versions say nothing of them
            out += _version_labels(versions, self.inputs.versions(slot), slot)
        return out

    def write_manifest(self, slots: Iterable[RecordSlot], keep: Iterable[RecordSlot] = ()) -> None:
        """Record the inputs and versions of ``slots`` (this run's), keeping the other entries,
        for the next run.

        Written atomically to ``OUT/.partial/manifest/inputs.json``; nothing without an output folder.

        Args:
            slots: the slots of this run.
            keep: slots whose entry stays as it is (stale records reused: the next run finds them stale again).
        """
        if self.partial is None:
            return
        entries = dict(self.manifest)
        kept = {self.inputs.slot_id(slot) for slot in keep}
        for slot in slots:
            sid = self.inputs.slot_id(slot)
            if sid in kept and sid in entries:
                continue
            entries[sid] = {"record": self.inputs.key(slot), "inputs": self.inputs.parts(slot),
                            "versions": self.inputs.versions(slot)}
        atomic_write_text(self.partial / MANIFEST, json.dumps({"format": 1, "slots": entries}))

    def save(self, slot: RecordSlot, rec: dict[str, Any], ranks: dict[str, np.ndarray]) -> None:
        """Store a finished record: its ranks first, as the ``.json`` marks a record finished.

        Both files are written atomically under the key of ``slot``'s inputs and versions (the
        versions are stored in the ``.json`` too); nothing is stored without an output folder.

        Args:
            slot: (model, image model, src, tgt, seed).
            rec: the record (JSON-serialisable).
            ranks: named rank arrays (saved as ``.npz``, no pickles).
        """
        if self.partial is None:
            return
        path = self._path(slot)
        atomic_save_npz(path.with_suffix(".npz"), **ranks)
        atomic_write_text(path, json.dumps({**rec, VERSIONS_FIELD: self.inputs.versions(slot)}))


def config_json(cfg: EvalConfig) -> dict[str, Any]:
    """``cfg`` as JSON data; Python-object models appear as ``"python:<module.Class>"`` (their
    fingerprints are in ``run.json``'s ``inputs.models``), an image model object as
    ``{name: "python:<module.Class>"}`` (its fingerprint in ``inputs.image_models``).

    Args:
        cfg: the configuration.

    Returns:
        A dict of every field of ``cfg`` that survives a JSON round trip; values JSON cannot
        hold (e.g. objects in ``dataset_options``) become their ``str``.
    """
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    d["models"] = describe_models(cfg.models)
    d["image_model"] = describe_image_model(cfg.image_model)
    d["extra_image_models"] = [describe_image_model(g) for g in cfg.extra_image_models]
    return json.loads(json.dumps(d, default=str))


def run_info(cfg: EvalConfig, ds: Dataset, feats: "Features", inputs: _Inputs, executor: str,
             nodes: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """What produced a set of results: the configuration, fingerprints of every input (the rows the
    run used per language, their images, each model and image model) and the software environment.

    Args:
        cfg: the configuration.
        ds: the dataset.
        feats: the rows the run used and their digests.
        inputs: the fingerprints of the models and image models.
        executor: the executor's name.
        nodes: with an executor that runs tasks on cluster nodes (Ray), the nodes that ran this
            run's tasks (``"tasks"``) and its text encoding (``"encoding"``), each a list of
            ``{"node_id", "ip", "hostname", "tasks" / "texts"}``; recorded as ``"nodes"``.

    Returns:
        A JSON-serialisable dict (``OUT/run.json``).
    """
    info = {
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
            "versions": {
                "run": dict(inputs.run_versions),
                "models": {m: dict(v) for m, v in inputs.model_versions.items()},
                "image_models": {g: dict(v) for g, v in inputs.image_model_versions.items() if g is not None},
            },
        },
        "environment": environment(),
    }
    if nodes is not None:
        info["nodes"] = nodes
    return info


def with_identity(rec: dict[str, Any], identity: str, spec: str | None = None) -> dict[str, Any]:
    """A record as the results give it: ``model_identity`` and ``model_spec`` after ``model``
    (records stored before the fields existed get them from the run: the identity is part of
    their key), no empty ``image_model``.

    Args:
        rec: a stored record.
        identity: the model's identity.
        spec: the model's full spec string (``python:<module.Class>`` for an object); None: the
            record's own, if any.

    Returns:
        The record with ``model_identity`` second and ``model_spec`` third.
    """
    out = {"model": rec["model"], "model_identity": identity}
    if spec is not None or "model_spec" in rec:
        out["model_spec"] = spec if spec is not None else rec["model_spec"]
    out.update((f, v) for f, v in rec.items() if f not in out and not (f == "image_model" and v is None))
    return out


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
        atomic_write_text(out_dir / "run.json", json.dumps(json_finite(run), indent=1, default=str, allow_nan=False) + "\n")
    atomic_write_text(out_dir / "results.jsonl", "".join(json.dumps(json_finite(r), allow_nan=False) + "\n" for r in records))
    atomic_write_text(out_dir / "results.csv", pd.DataFrame(records).to_csv(index=False))

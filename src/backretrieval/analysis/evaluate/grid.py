"""The grid itself: :func:`run_grid` draws the samples, resumes the finished records, encodes
what is left and runs one :class:`~.tasks.SampleTask` per sample (one phase each, around one
small state object).

For each pair and seed two samples are drawn from the dataset (Backretrieval paper, Sec. 3.1):
a *matching* sample of N aligned translation pairs for XLR (only where the dataset links
languages by concept), and a *non-matching* sample of N source and N target items with
disjoint concepts for BkR, CORR and hubness (only where items have images). Texts and images
are encoded once per language through the cache, only for the rows some sample uses.

Each finished (model, image model, pair, seed) record is written at once to ``OUT/.partial/``
(atomically), under a key made of the configuration, the model's fingerprint (its ``version``,
which hashes its files, plus for models fitted on the evaluated texts a fingerprint of those
texts), the image model's version and the fingerprints of exactly the rows the sample uses
(ids, texts, concepts, extra columns, image bytes or feature vectors). A rerun skips the records
whose key is unchanged, so an interrupted run resumes, and recomputes those whose inputs
changed; ``OUT/.partial/manifest/inputs.json`` keeps the inputs of the last run, so the log says which
input changed ("data for de changed since the records in OUT were computed: recomputing 12
records"). A damaged record file is recomputed with a warning naming it. The key also holds the
versions the record is computed under (the metrics version, the libraries that compute the
model's and the image model's vectors, with approximate search FAISS and its settings; see
:mod:`.records`): a record of other versions is recomputed and the log names the change
("metrics version 3 -> 4 since the records in OUT were computed: recomputing 12 records"), or
reused with a warning when ``EvalConfig.reuse_stale`` asks for it.

Models are spec strings or Python objects under the user's name (``models={"ours": obj,
"use-m": "use-m"}``, see :mod:`backretrieval.analysis.models`); every record carries ``model`` (the name) and
``model_identity`` (the model fingerprint its key holds). The image model may be a Python object
too (``image_model=obj``; records call it by its name, its identity keys them). A record whose
text model or image model is a run-only object (no torch weights, no version) is never resumed
from ``OUT/.partial`` nor stored there; the run says so once per kind.

``OUT/results.jsonl`` and ``OUT/results.csv`` are written at the end, atomically, with
``OUT/run.json``: the configuration, the input fingerprints, the software environment
(:func:`backretrieval.core.env.environment`) and, per model, ``encoding``
(:func:`~.pricing.price_facts`: texts needed and encoded in the run, seconds, the vector size,
the throughput recorded on this machine, tokens per item and price, and what the model reports
of itself -- a hub model's commit and prompts, an embedding API's tokens used). Before an
embedding API (a model with ``estimate``) sends anything, the log says how many texts, requests
and tokens it will send and what that costs (:func:`~.pricing.send_estimate`; ``--dry-run``:
:func:`~.pricing.estimate` alone).

What the output says is what was computed: every record's ``image_model`` is the model that
produced its image features (a model that encodes image files is refused on a dataset that has
only a feature file, and ``precomputed`` on one that has only image files, before anything is
encoded); records of data without images carry no image fields; a caller's prerequisites
(``needs``: links for XLR, images for BkR) are checked right after sampling; seeds that all draw
the same sample are said (``EvalResult.notes``). With ``EvalConfig.approx`` the per-sample task
computes XLR@K and BkR@K from self-calibrating FAISS lists instead (records say
``approximate`` and carry each search's calibration, ``approx_*``).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from ...core import BackretrievalError
from ...core.io import check_writable_dir, folder_lock
from ...data import load_dataset
from ...encoders.cache import CachedTextEncoder
from ..models import grid_image_models, grid_models, image_run_only, model_spec, run_only_note
from . import tasks as _tasks
from .config import EvalConfig
from .power import plan_samples, power_facts, power_note, sample_limits
from .features import check_needs, Features, same_sample_note, same_text_notes, Samples
from .records import NOT_RECORDED, RecordSlot, RecordStore, fingerprint_inputs, with_identity, run_info, write_results
from .result import EvalResult, slug
from .queries import MATCHING, NON_MATCHING, sample_items
from .pricing import estimate_line, model_estimate, model_identity, price_facts, send_estimate, speed_identity
from .tasks import SampleTask, check_approx

Sample = tuple[str, str, int]  # (src, tgt, seed)


def run_grid(
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    log: Callable[[str], None] = lambda msg: None,
    executor: Any = None,
    needs: Sequence[str] = (),
    purpose: str = "this evaluation",
) -> EvalResult:
    """Run the grid; return one record per (model, src, tgt, seed) and write them to ``out_dir``.

    ``executor`` (see :mod:`backretrieval.analysis.executors`; default: in this process) runs the per-sample tasks.
    ``log`` receives one line per notable event: resumed records, inputs that changed since the
    records in ``out_dir`` were computed, damaged record files, truncated texts, skipped models,
    seeds that all draw the same sample.

    Args:
        cfg: the grid.
        out_dir: where the records go (checked writable before anything is done); None: nowhere.
        progress: show progress bars.
        log: receives the notable events.
        executor: where the per-sample tasks run.
        needs: what the caller needs of every pair: ``"xlr"`` (cross-lingual links) and/or
            ``"bkr"`` (images); checked right after sampling, before any encoding.
        purpose: how the error for a missing need names the caller, e.g. ``"compare --metric xlr@10"``.

    Returns:
        The :class:`EvalResult`.

    Raises:
        BackretrievalError: bad configuration or data (named), an output folder that cannot be
            written or that another run is writing (``out_dir`` is locked for the run,
            :func:`~backretrieval.core.io.folder_lock`).
    """
    if out_dir is None:
        return _evaluate(cfg, None, progress=progress, log=log, executor=executor, needs=needs, purpose=purpose)
    check_writable_dir(out_dir, "output folder")
    with folder_lock(out_dir, "output folder"):
        return _evaluate(cfg, out_dir, progress=progress, log=log, executor=executor, needs=needs, purpose=purpose)


@dataclasses.dataclass
class _Run:
    """One run of the grid between its phases (:func:`_draw`, :func:`_resume`, :func:`_encode`,
    :func:`_run_tasks`, :func:`_results`): what was drawn and checked, what is stored, what is left
    to do and the vectors it is done with."""

    cfg: EvalConfig
    log: Callable[[str], None]
    models: dict[str, Any]  # name -> GridModel
    names: list[str]
    run_only: list[str]  # text models neither resumed nor stored
    ds: Any
    samples: dict[Sample, Samples]
    has_bkr: bool
    notes: list[str]
    image_models: list[str | None]  # [None] without images
    run_only_g: list[str]
    feats: Features
    inputs: Any
    sims: dict[str, str]  # the models scored otherwise than cfg.sim (tasks.model_similarities)
    specs: dict[str, str]  # name -> the model's full spec (the records' model_spec)
    power: dict[str, Any]  # pair -> its power facts (power.power_facts)
    store: Any = None  # the RecordStore
    found: dict[RecordSlot, tuple[dict, dict]] = dataclasses.field(default_factory=dict)
    todo: dict[Sample, list[str]] = dataclasses.field(default_factory=dict)
    text: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    encode_s: dict[str, float] = dataclasses.field(default_factory=dict)
    encoding: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def stored(self, name: str, g: str | None) -> bool:
        """Whether the record of text model ``name`` and image model ``g`` is resumed and stored
        (neither model of it is run-only)."""
        return name not in self.run_only and g not in self.run_only_g


def _evaluate(cfg: EvalConfig, out_dir: str | Path | None, *, progress: bool, log: Callable[[str], None], executor: Any,
              needs: Sequence[str], purpose: str) -> EvalResult:
    """:func:`run_grid`, with ``out_dir`` (if any) held by this process: its phases in turn."""
    from ..executors import get_executor

    run = _draw(cfg, progress=progress, log=log, needs=needs, purpose=purpose)
    _resume(run, out_dir)
    ex = get_executor(executor)
    _encode(run, ex, progress)
    _run_tasks(run, ex, progress)
    return _results(run, ex, out_dir)


def _draw(cfg: EvalConfig, *, progress: bool, log: Callable[[str], None], needs: Sequence[str], purpose: str) -> _Run:
    """Check the configuration and every model, load the dataset, draw and check the samples
    (the notes they call for said), and fingerprint the inputs."""
    if cfg.n < 1:
        raise BackretrievalError(f"n must be positive, got {cfg.n}")
    if cfg.k > cfg.n:
        raise BackretrievalError(f"K={cfg.k} is larger than N={cfg.n}")
    if cfg.approx is not None:
        check_approx(cfg)
    # build and check every model before loading anything
    models = grid_models(cfg.models)
    names = list(models)
    sims = _tasks.model_similarities(cfg, {name: m.encoder for name, m in models.items()})
    specs = {name: model_spec(m.spec if m.spec is not None else m.encoder) for name, m in models.items()}
    g_models = grid_image_models(cfg.image_model, cfg.extra_image_models)
    run_only = [name for name, m in models.items() if m.run_only]
    if run_only:
        log(run_only_note(run_only))
    langs = list(dict.fromkeys(lang for pair in cfg.pairs for lang in pair))
    ds = load_dataset(cfg.dataset, langs=langs, **cfg.dataset_options)
    for lang in langs:
        ds[lang]  # unknown language -> clear error before any work
    check_needs(cfg.dataset, {(s, t, 0): _families(ds, s, t) for s, t in cfg.pairs}, needs, purpose)
    # each metric family at N where its sample fits (an N too large for what is needed: the error names its limit)
    samples, left_out = plan_samples(ds, cfg.pairs, cfg.n, cfg.seeds, needs, purpose=purpose)
    has_bkr = any(sm.bkr is not None for sm in samples.values())
    notes: list[str] = []
    for note in left_out:
        log(note)
        notes.append(note)
    notes += same_text_notes(ds, samples, log)
    power = power_facts(ds, cfg.pairs, cfg.n, cfg.k, cfg.seeds, cfg.margin, len(cfg.models)) if has_bkr else {}
    weak = power_note(ds, cfg.pairs, cfg.n, cfg.k, cfg.seeds, cfg.margin, models=len(cfg.models), facts=power)
    if weak:  # said once every input has passed its checks
        notes.append(weak)
    if not has_bkr and not left_out:
        log(f"{ds.name} has no images: BkR and CORR need images; reporting XLR only")
    same = same_sample_note(samples, cfg)
    if same:
        log(same)
        notes.append(same)
    image_models: list[str | None] = list(g_models) if has_bkr else [None]
    run_only_g = [g for g in image_models if g is not None and image_run_only(g_models[g])]
    if run_only_g:
        log(run_only_note(run_only_g, image=True))
    feats = Features(ds, _needed_rows(samples, langs), {g: g_models[g] for g in image_models if g}, progress, log,
                     cfg.dataset, cfg.reuse_stale, notes=[weak] if weak else [])
    inputs = fingerprint_inputs(cfg, samples, feats, {name: m.encoder for name, m in models.items()}, image_models)
    return _Run(cfg, log, models, names, run_only, ds, samples, has_bkr, notes, image_models, run_only_g, feats, inputs,
                sims, specs, power)


def _resume(run: _Run, out_dir: str | Path | None) -> None:
    """Resume what earlier runs finished (``run.found``), say which inputs changed for the rest,
    and note what is left to do per sample (``run.todo``)."""
    cfg, log, samples, image_models = run.cfg, run.log, run.samples, run.image_models
    stored, found, todo = run.stored, run.found, run.todo
    store = run.store = RecordStore(out_dir, run.inputs, log)
    changed: dict[str, int] = {}
    stale: dict[str, int] = {}  # version change -> records recomputed (or reused) for it
    reused: list[RecordSlot] = []
    for name in run.names:
        for s, t, seed in samples:
            done = 0
            for g in image_models:
                slot = (name, g, s, t, seed)
                if not stored(name, g):
                    continue
                got = store.load(slot)
                if got is not None:  # finished in an earlier run
                    found[slot] = got
                    done += 1
                    continue
                old = store.stale(slot)
                if old is not None:  # the same inputs under other versions
                    for change in old[2]:
                        stale[change] = stale.get(change, 0) + 1
                    if cfg.reuse_stale:
                        found[slot] = old[:2]
                        reused.append(slot)
                        done += 1
                    continue
                for label in store.changed(slot):
                    changed[label] = changed.get(label, 0) + 1
            if done < len(image_models):
                todo.setdefault((s, t, seed), []).append(name)
    if found:
        log(f"resuming: {len(found)} finished records found in {store.partial}")
    _say_stale(stale, len(reused), out_dir, log)
    for label, count in changed.items():
        log(f"{label} changed since the records in {out_dir} were computed: recomputing {count} record{'s' * (count != 1)}")
    store.write_manifest([(name, g, s, t, seed) for name in run.names for s, t, seed in samples for g in image_models
                          if stored(name, g)], keep=reused)


def _encode(run: _Run, ex: Any, progress: bool) -> None:
    """Encode every model that has work left (through the cache): ``run.text``, its seconds, and
    every model's price facts (``run.encoding``, whether it encoded in this run or not); a model's
    pairs with a language it cannot embed leave ``run.todo``."""
    cfg, log, feats, todo, inputs = run.cfg, run.log, run.feats, run.todo, run.inputs
    text, encode_s = run.text, run.encode_s
    used: dict[str, CachedTextEncoder] = {}
    speed_ids = {name: speed_identity(m.encoder, inputs.models[name]) for name, m in run.models.items()}
    for name in dict.fromkeys(name for todo_names in todo.values() for name in todo_names):
        t0 = time.perf_counter()
        m = run.models[name]  # a Python object encodes here, with every executor (it is never pickled)
        enc = m.encoder if m.spec is None else ex.text_encoder(m.spec)
        cached = CachedTextEncoder(enc, chunk=ex.encode_chunk, progress=progress, reuse_stale=cfg.reuse_stale)
        est = send_estimate(cached, feats.corpora)
        if est is not None:  # a paid model: what it will send, before anything is sent
            log(estimate_line(name, est))
        text[name] = feats.text(cached, name)
        encode_s[name] = round(time.perf_counter() - t0, 3)
        used[name] = cached
    run.encoding = {name: price_facts(name, m.encoder, used.get(name), feats.corpora, inputs.models[name], speed_ids[name],
                                      seconds=encode_s.get(name, 0.0), measure=cfg.measure_speed, run_only=m.run_only, log=log)
                    for name, m in run.models.items()}  # every model's price, whether it encoded in this run or not
    for name, langs_missing in feats.unsupported.items():
        for lang, why in langs_missing.items():
            log(f"skipping {name} for the pairs with {lang!r}: {why}")
    todo = {key: [m for m in todo_names if key[0] in text[m] and key[1] in text[m]] for key, todo_names in todo.items()}
    run.todo = {key: todo_names for key, todo_names in todo.items() if todo_names}


def _run_tasks(run: _Run, ex: Any, progress: bool) -> None:
    """Run one task per sample with work left (:func:`_sample_tasks`) and store each record."""
    cfg, found, inputs, ds, encode_s, store = run.cfg, run.found, run.inputs, run.ds, run.encode_s, run.store
    n_runs = sum(len(todo_names) for todo_names in run.todo.values()) * len(run.image_models)
    bar = tqdm(total=n_runs, desc="metrics", unit="run", disable=not progress)
    tasks = _sample_tasks(cfg, run.samples, run.todo, run.text, run.feats, run.image_models, ex, run.sims)
    for (s, t, seed), runs in ex.imap(_tasks.run_sample_task, tasks):
        for name, g, values, ranks in runs:
            slot = (name, g, s, t, seed)
            if slot in found:
                continue
            rec: dict[str, Any] = {
                "model": name, "model_identity": inputs.models[name], "model_spec": run.specs[name], "image_model": g,
                "dataset": ds.name, "src_lang": s, "tgt_lang": t, "seed": seed,
                "n": cfg.n, "k": cfg.k, "sim": run.sims.get(name, cfg.sim), **values, "encode_seconds": encode_s[name],
            }
            if g is None:  # no images: no image fields
                del rec["image_model"]
            if run.stored(name, g):
                store.save(slot, rec, ranks)
            found[slot] = (rec, ranks)
            bar.update(1)
    bar.close()


def _results(run: _Run, ex: Any, out_dir: str | Path | None) -> EvalResult:
    """The result per image model, the records in the configuration's order, written to
    ``out_dir`` (the main image model's; the others' under ``image-models/``)."""
    cfg, ds, samples, found, inputs, image_models = run.cfg, run.ds, run.samples, run.found, run.inputs, run.image_models
    items = {(s, t, seed): sample_items(ds[s], ds[t], {NON_MATCHING: sm.bkr, MATCHING: sm.xlr})
             for (s, t, seed), sm in samples.items()}
    nodes = {"tasks": ex.nodes, "encoding": ex.encode_nodes} if hasattr(ex, "encode_nodes") else None
    info = run_info(cfg, ds, run.feats, inputs, ex.name, nodes)
    info["encoding"] = run.encoding
    order = {m: i for i, m in enumerate(run.names)}
    power = run.power
    largest = {f"{s}->{t}": power[f"{s}->{t}"]["largest_n"] if f"{s}->{t}" in power else sample_limits(ds, s, t, cfg.seeds)
               for s, t in dict.fromkeys(cfg.pairs)}
    pair_order = {pair: i for i, pair in reversed(list(enumerate(cfg.pairs)))}  # records keep the pairs' order as given
    results = {}
    for g in image_models:
        keys_g = sorted((k for k in found if k[1] == g), key=lambda k: (order[k[0]], pair_order[k[2], k[3]], k[4]))
        results[g] = EvalResult(
            cfg,
            [with_identity(found[k][0], inputs.models[k[0]], run.specs[k[0]]) for k in keys_g],
            {(k[0], k[2], k[3], k[4]): found[k][1] for k in keys_g},
            run=info,
            text_only=not run.has_bkr,
            notes=list(run.notes),
            items=items,
            largest_n=largest,
            power=power,
        )
    main, *rest = image_models
    result = results[main]
    result.others = {g: results[g] for g in rest}
    if out_dir is not None:
        write_results(result.records, Path(out_dir), info)
        for g, res in result.others.items():
            write_results(res.records, Path(out_dir) / "image-models" / slug(g), info)
    return result


def estimate(cfg: EvalConfig) -> dict[str, dict[str, Any]]:
    """What an evaluation of ``cfg`` would encode and send per model, and how long it would take on
    this machine, without encoding or sending anything (``--dry-run``): the samples are drawn and
    the cache and the price book are read.

    Args:
        cfg: the grid.

    Returns:
        model label -> :func:`~.pricing.model_estimate` (with an embedding API's
        :func:`~.pricing.send_estimate`).
    """
    models = grid_models(cfg.models)
    langs = list(dict.fromkeys(lang for pair in cfg.pairs for lang in pair))
    ds = load_dataset(cfg.dataset, langs=langs, **cfg.dataset_options)
    samples, _ = plan_samples(ds, cfg.pairs, cfg.n, cfg.seeds)  # each metric family where its sample fits
    corpora = {lang: ds[lang].subset(rows) for lang, rows in _needed_rows(samples, langs).items()}
    return {name: model_estimate(name, m.encoder, corpora, model_identity(m.encoder, corpora), run_only=m.run_only)
            for name, m in models.items()}


def _say_stale(stale: dict[str, int], n_reused: int, out_dir: str | Path | None, log: Callable[[str], None]) -> None:
    """Log the stored records computed under other versions: per version change, how many are
    recomputed; or, when they are reused (``reuse_stale``), one warning naming every change."""
    if not stale:
        return
    if n_reused:
        log(f"warning: reusing {n_reused} stored record{'s' * (n_reused != 1)} in {out_dir} computed under other "
            f"versions ({', '.join(stale)}), as asked (reuse_stale); their numbers may differ from a fresh run's")
        return
    for change, count in stale.items():
        records = f"{count} record{'s' * (count != 1)}"
        if change == NOT_RECORDED:
            was, it = ("was", "it") if count == 1 else ("were", "they")
            log(f"{records} in {out_dir} {was} stored without the versions {it} {was} computed under: "
                f"recomputing {'it' if count == 1 else 'them'}")
        else:
            log(f"{change} since the records in {out_dir} were computed: recomputing {records}")


def _families(ds: Any, src: str, tgt: str) -> Samples:
    """What a pair has for each metric family, as :func:`~.features.check_needs` reads it: a
    marker where it has links (XLR) or images (BkR), else None."""
    s, t = ds[src], ds[tgt]
    has = ((s.has_concepts and t.has_concepts), (s.has_images and t.has_images))
    return Samples(*(() if x else None for x in has))  # type: ignore[arg-type]


def _needed_rows(samples: dict[Sample, Samples], langs: Sequence[str]) -> dict[str, np.ndarray]:
    """Per language, the sorted rows some sample uses (the only ones encoded)."""
    needed: dict[str, set[int]] = {lang: set() for lang in langs}
    for (s, t, _), sm in samples.items():
        for part in (sm.xlr, sm.bkr):
            if part is not None:
                needed[s].update(part[0].tolist())
                needed[t].update(part[1].tolist())
    return {lang: np.array(sorted(rows), dtype=np.int64) for lang, rows in needed.items()}


def _sample_tasks(
    cfg: EvalConfig, samples: dict[Sample, Samples], todo: dict[Sample, list[str]], text: dict[str, dict[str, np.ndarray]],
    feats: Features, image_models: Sequence[str | None], executor: Any = None, sims: dict[str, str] | None = None,
) -> Iterator[SampleTask]:
    """One task per sample with work left: the rows of its models' embeddings and of its images
    (``sims``: the models scored otherwise than ``cfg.sim``, :func:`~.tasks.model_similarities`).
    An executor with ``rows_of(matrix, rows)`` (Ray) gets each matrix once and tasks that refer
    to it; the others get the rows as arrays."""
    rows_of = getattr(executor, "rows_of", None)

    def take(matrix: np.ndarray, idx: np.ndarray) -> Any:
        return rows_of(matrix, idx) if rows_of is not None else matrix[idx]

    for (s, t, seed), todo_names in todo.items():
        sm = samples[(s, t, seed)]

        def rows(part, model):
            return take(text[model][s], feats.rows(s, part[0])), take(text[model][t], feats.rows(t, part[1]))

        images = {}
        if sm.bkr is not None:
            si, ti = feats.rows(s, sm.bkr[0]), feats.rows(t, sm.bkr[1])
            images = {g: (take(feats.images[g][s], si), take(feats.images[g][t], ti)) for g in image_models}
        yield SampleTask(
            s, t, seed, cfg.n, cfg.k, cfg.sim, cfg.csls_k, todo_names,
            None if sm.xlr is None else {m: rows(sm.xlr, m) for m in todo_names},
            None if sm.bkr is None else {m: rows(sm.bkr, m) for m in todo_names},
            images, cfg.corr_boot, cfg.approx, cfg.approx_target, cfg.approx_cost_check,
            {m: sims[m] for m in todo_names if m in (sims or {})},
        )

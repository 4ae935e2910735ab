"""The evaluation grid: every (model, source language, target language, seed).

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
records"). A damaged record file is recomputed with a warning naming it.

Models are spec strings or Python objects under the user's name (``models={"ours": obj,
"use-m": "use-m"}``, see :mod:`backretrieval.analysis.models`); every record carries ``model`` (the name) and
``model_identity`` (the model fingerprint its key holds). A run-only object (no torch weights,
no version) is never resumed from ``OUT/.partial`` nor stored there; the run says so once.

``OUT/results.jsonl`` and ``OUT/results.csv`` are written at the end, atomically, with
``OUT/run.json``: the configuration, the input fingerprints and the software environment
(:func:`backretrieval.core.env.environment`).

What the output says is what was computed: every record's ``image_model`` is the model that
produced its image features (a model that encodes image files is refused on a dataset that has
only a feature file, and ``precomputed`` on one that has only image files, before anything is
encoded); records of data without images carry no image fields; a caller's prerequisites
(``needs``: links for XLR, images for BkR) are checked right after sampling; seeds that all draw
the same sample are said (``EvalResult.notes``). With ``EvalConfig.approx`` the per-sample task
computes XLR@K and BkR@K from self-calibrating FAISS lists instead (records say
``approximate`` and carry each search's calibration, ``approx_*``).

The package's modules: :mod:`.config` (what goes in and out),
:mod:`.features` (samples and their embeddings), :mod:`.records` (keys, manifest, stored records,
``run.json``), :mod:`.tasks` (the per-sample work, a pure function) and :mod:`.grid` (:func:`evaluate`).
"""
from .config import EvalConfig, EvalResult, RunKey, pair_labels, parse_pairs, slug, summarize
from .features import NEEDS, check_image_model
from .grid import evaluate
from .records import MANIFEST, RecordSlot, config_json, run_info, write_results
from .tasks import (
    APPROX_METHODS, APPROX_NOT_COMPUTED, Run, SampleTask, TaskResult, approx_ks, check_approx, run_sample_task,
)

__all__ = [
    "APPROX_METHODS", "APPROX_NOT_COMPUTED", "MANIFEST", "NEEDS", "EvalConfig", "EvalResult",
    "RecordSlot", "Run", "RunKey", "SampleTask", "TaskResult", "approx_ks", "check_approx", "check_image_model",
    "config_json", "evaluate", "pair_labels", "parse_pairs", "run_info", "run_sample_task", "slug", "summarize",
    "write_results",
]

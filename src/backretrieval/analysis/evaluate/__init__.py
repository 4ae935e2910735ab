"""The evaluation grid: every (model, source language, target language, seed).

What a user calls is re-exported here: :func:`run_grid` (and :func:`estimate`, the dry run's
count of texts, requests and cost), its configuration :class:`EvalConfig`, its result
:class:`EvalResult` with the record key :class:`RunKey`, and the helpers that read a result
(:func:`summarize`, :func:`pair_labels`, :func:`parse_pairs`). The parts live in their modules and
are imported from there: the configuration's limits and checks (:mod:`.config`), the result
(:mod:`.result`), samples and their embeddings (:mod:`.features`), resumable stored records
(:mod:`.records`), the pure per-sample task (:mod:`.tasks`), what each query retrieved
(:mod:`.queries`: ``EvalResult.queries``, ``queries.parquet``) and the grid itself (:mod:`.grid`,
whose docstring says how samples, records and resumption work, and which versions a record's key
names).
"""
from .config import EvalConfig, parse_pairs
from .grid import estimate, run_grid
from .result import EvalResult, RunKey, pair_labels, summarize

__all__ = ["EvalConfig", "EvalResult", "RunKey", "estimate", "pair_labels", "parse_pairs", "run_grid", "summarize"]

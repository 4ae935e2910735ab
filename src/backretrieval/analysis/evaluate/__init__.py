"""The evaluation grid: every (model, source language, target language, seed), with its
configuration (:mod:`.config`) and results (:mod:`.result`), samples and their embeddings (:mod:`.features`),
resumable stored records (:mod:`.records`), the pure per-sample task (:mod:`.tasks`), what each
query retrieved (:mod:`.queries`: ``EvalResult.queries``, ``queries.parquet``) and
:func:`evaluate` itself (:mod:`.grid`, whose docstring says how samples, records and resumption
work, and which versions a record's key names).
"""
from .config import (
    MAX_CORR_BOOT, MAX_RECORDS, MAX_SEED, MAX_SEEDS, EvalConfig, check_grid_size, check_seeds, grid_pairs, grid_seeds,
    parse_pairs,
)
from .features import NEEDS, check_image_model
from .grid import encoding_facts, estimate, estimate_line, evaluate, send_estimate
from .queries import QUERY_COLUMNS, SAMPLES, SampleItems, SideItems, query_table, sample_items, write_queries
from .records import MANIFEST, RecordSlot, config_json, run_info, write_results
from .result import EvalResult, RunKey, pair_labels, slug, summarize
from .tasks import (
    APPROX_CHECK_SAMPLE, APPROX_METHODS, APPROX_NOT_COMPUTED, Run, SampleTask, TaskResult, approx_ks, approx_versions,
    check_approx, run_sample_task,
)

__all__ = [
    "APPROX_CHECK_SAMPLE", "APPROX_METHODS", "APPROX_NOT_COMPUTED", "MANIFEST", "MAX_RECORDS", "MAX_SEED", "MAX_SEEDS", "NEEDS",
    "QUERY_COLUMNS", "SAMPLES", "EvalConfig", "EvalResult", "RecordSlot", "Run", "RunKey", "SampleItems", "SampleTask",
    "SideItems", "TaskResult", "query_table", "sample_items", "write_queries",
    "MAX_CORR_BOOT", "approx_ks", "approx_versions", "check_approx", "check_grid_size", "check_image_model", "check_seeds",
    "grid_pairs", "grid_seeds",
    "config_json", "evaluate", "pair_labels", "parse_pairs", "run_info", "run_sample_task", "slug", "summarize",
    "encoding_facts", "estimate", "estimate_line", "send_estimate",
    "write_results",
]

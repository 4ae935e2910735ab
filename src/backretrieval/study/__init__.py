"""Study layer: blinded human relevance studies (Backretrieval paper, end of Sec. 3.2).

* :mod:`.build` -- sample queries, retrieve each model's top suggestions, write the study file;
* :mod:`.from_queries` -- take the queries from an evaluation's per-query results (where models disagree);
* :mod:`.store` -- the SQLite study file: queries, suggestions, credits, raters, ratings;
* :mod:`.server` / :mod:`.page` -- the local rating web app (Flask; imported on demand);
* :mod:`.analyze` / :mod:`.agreement` -- score distributions, tests, Krippendorff's alpha, BkR;
* :mod:`.export` -- ``analysis.md`` (rendered by :mod:`backretrieval.report.study_analysis`),
  ``analysis.json`` and ``ratings.csv``.
"""
from .agreement import krippendorff_alpha
from .build import StudyConfig, create_study
from .from_queries import disagreeing_queries, query_texts, read_query_table, target_texts
from .store import SCALE, Conflict, NotFound, StudyError, add_rater, connect, list_raters, record_rating, rater_state

__all__ = [
    "SCALE",
    "Conflict",
    "NotFound",
    "StudyConfig",
    "StudyError",
    "add_rater",
    "connect",
    "create_study",
    "disagreeing_queries",
    "krippendorff_alpha",
    "list_raters",
    "query_texts",
    "rater_state",
    "read_query_table",
    "record_rating",
    "target_texts",
]

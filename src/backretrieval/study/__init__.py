"""Study layer: blinded human relevance studies (Backretrieval paper, end of Sec. 3.2).

* :mod:`.build` -- sample queries, retrieve each model's top suggestions, write the study file;
* :mod:`.store` -- the SQLite study file: queries, suggestions, credits, raters, ratings;
* :mod:`.server` / :mod:`.page` -- the local rating web app (Flask; imported on demand);
* :mod:`.analyze` / :mod:`.agreement` -- score distributions, tests, Krippendorff's alpha, BkR.
"""
from .agreement import krippendorff_alpha
from .build import StudyConfig, create_study
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
    "krippendorff_alpha",
    "list_raters",
    "rater_state",
    "record_rating",
]

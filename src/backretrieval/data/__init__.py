"""Data layer: corpora per language, dataset loaders (one file each), and sampling."""
from .corpus import Corpus, Dataset
from .registry import DatasetInfo, list_datasets, load_dataset, register
from .sampling import matching, non_matching

__all__ = [
    "Corpus",
    "Dataset",
    "DatasetInfo",
    "list_datasets",
    "load_dataset",
    "register",
    "matching",
    "non_matching",
]

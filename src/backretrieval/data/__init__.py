"""Data layer: corpora per language, dataset loaders (one file each), and sampling."""
from .corpus import Corpus, Dataset
from .registry import (
    DatasetInfo, check_dataset_options, dataset_option_names, list_datasets, load_dataset, parse_dataset_options, register,
)
from .sampling import matching, non_matching

__all__ = [
    "Corpus",
    "Dataset",
    "DatasetInfo",
    "check_dataset_options",
    "dataset_option_names",
    "list_datasets",
    "load_dataset",
    "parse_dataset_options",
    "register",
    "matching",
    "non_matching",
]

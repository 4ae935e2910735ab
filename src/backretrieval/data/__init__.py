"""Data layer: corpora per language, dataset loaders (one file each), and sampling."""
from .corpus import Corpus, Dataset
from .checks import ContractError, check_dataset_loader
from .registry import (
    DatasetExample, DatasetInfo, check_dataset_options, dataset_option_names, list_datasets, load_dataset, parse_dataset_options, register,
)
from .sampling import matching, non_matching

__all__ = [
    "ContractError",
    "Corpus",
    "Dataset",
    "DatasetExample",
    "DatasetInfo",
    "check_dataset_loader",
    "check_dataset_options",
    "dataset_option_names",
    "list_datasets",
    "load_dataset",
    "parse_dataset_options",
    "register",
    "matching",
    "non_matching",
]

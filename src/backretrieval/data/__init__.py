"""Data layer: corpora per language (:mod:`.corpus`), the dataset registry (:mod:`.registry`) and
its loaders (one file each, discovered), the loader contract (:mod:`.checks`), the papers'
matching / non-matching samples (:mod:`.sampling`), the one content-hash split (:mod:`.splits`)
and the tutorial's example catalogue (:mod:`.shop`); docs/datasets.md lists the datasets."""
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

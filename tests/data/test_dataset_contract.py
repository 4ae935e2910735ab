"""Every registered dataset loader keeps the loader contract (:mod:`backretrieval.data.checks`):
the list of loaders comes from the registry, so a new dataset is checked here without editing
this file, and one without an ``example`` hook fails."""
from __future__ import annotations

import dataclasses

import pytest

from backretrieval.data import ContractError, check_dataset_loader, list_datasets

DATASETS = list_datasets()


@pytest.mark.parametrize("info", DATASETS, ids=[i.name for i in DATASETS])
def test_dataset_loader_keeps_the_contract(info, tmp_path, shared_data):
    check_dataset_loader(info, tmp_path)


def test_the_registry_holds_the_built_in_loaders():
    assert {"emoji-cldr", "ddtp", "multi30k", "generic", "hf"} <= {i.name for i in DATASETS}


def test_a_loader_without_an_example_fails_with_a_message_saying_to_add_one(tmp_path):
    info = dataclasses.replace(next(i for i in DATASETS if i.name == "generic"), name="new-dataset", example=None)
    with pytest.raises(ContractError, match=r"dataset 'new-dataset' registers no example: give its DatasetInfo an example="):
        check_dataset_loader(info, tmp_path)


def test_a_broken_declaration_is_named(tmp_path):
    """The checks catch what they check: a loader that declares images and gives none, and one
    that gives other languages than asked for."""
    generic = next(i for i in DATASETS if i.name == "generic")

    def without_images(path, langs=None, **options):
        ds = generic.loader(path, langs, **options)
        for c in ds.corpora.values():
            c.image_paths = None
        return ds

    broken = dataclasses.replace(generic, name="no-images", loader=without_images, has_images=True)
    with pytest.raises(ContractError, match=r"'no-images' fails 'images exist where declared': declares has_images"):
        check_dataset_loader(broken, tmp_path / "a")

    def english_only(path, langs=None, **options):
        return generic.loader(path, ["en"], **options)

    broken = dataclasses.replace(generic, name="english-only", loader=english_only)
    with pytest.raises(ContractError, match=r"'english-only' fails 'languages as declared': asked for \['de', 'en'\], got \['en'\]"):
        check_dataset_loader(broken, tmp_path / "b")

"""Command line: a thin shell over the data, encoder, analysis and report layers.

Every public module of this package is imported here so that its commands register
(``warning_format`` has none: it formats Python warnings for every command).
"""
import importlib
import pkgutil

from .options import main, train

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["main", "train"]

"""The run writers: one function per command that, given a folder, does what the command does
and writes what it writes, so a command only parses its options and calls it. ``evaluate`` and
``compare`` (:mod:`.grid`: ``br.evaluate``, ``br.compare``), ``meta`` (:mod:`.meta`:
``br.meta``), ``case-study report`` (:mod:`.case_study`) and ``train cr5`` (:mod:`.cr5`)."""
from .case_study import case_study
from .cr5 import train_cr5
from .grid import compare, evaluate
from .meta import meta

__all__ = ["case_study", "compare", "evaluate", "meta", "train_cr5"]

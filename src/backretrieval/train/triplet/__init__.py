"""Triplet and TripletXL (Backretrieval paper, Sec. 3.2): a tower trained on *monolingual*
title/body pairs on top of a frozen multilingual encoder, never reading cross-lingual links. The
package holds the :class:`Triplet` estimator (:mod:`.estimator`), its data (:mod:`.data`), losses
(:mod:`.losses`), neighbour search (:mod:`.neighbours`), tower (:mod:`.tower`) and training loop
(:mod:`.loop`). The method: docs/triplet.md, its results:
docs/triplet-results.md; model, losses and neighbours in
detail: the docstring of :mod:`.estimator`.
"""
from .data import TitleBodyData, assert_no_links, embed_title_body
from .estimator import MAX_LAYERS, MAX_WIDTH, NEGATIVES, Triplet, check_layers, resume_key
from .loop import CHECKPOINT_FILE, LoopData, LoopSettings, train_tower
from .losses import cosine_distance, sample_negatives, triplet_loss, xl_loss
from .neighbours import find_neighbours
from .tower import build_tower, params_of

__all__ = [
    "CHECKPOINT_FILE", "MAX_LAYERS", "MAX_WIDTH", "NEGATIVES", "LoopData", "LoopSettings", "TitleBodyData", "Triplet", "assert_no_links",
    "build_tower", "check_layers", "cosine_distance", "embed_title_body", "find_neighbours", "params_of", "resume_key", "sample_negatives",
    "train_tower", "triplet_loss", "xl_loss",
]

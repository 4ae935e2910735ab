"""Zero-shot cross-lingual image retrieval (Aggarwal & Kale 2020): the M3L and PATR estimators
(:class:`M3L`, :mod:`.estimator`; its training loop :mod:`.loop`), which train a mapping from a
frozen multilingual text model into a frozen image model's feature space, with their network
(:mod:`.model`), losses (:mod:`.losses`), image-keyed data and splits (:mod:`.data`) and the
ranks the loop validates on (:mod:`.validation`). Evaluating saved models is
:mod:`backretrieval.analysis.trained.image_retrieval`. The method, its defaults and its results:
docs/m3l.md; the model, losses and splits in detail: the docstring of :mod:`.estimator`.
"""
from .data import SPLIT_CODE, SPLITS, ImageTextData, assign_splits, check_fracs, collect_images
from .validation import RETRIEVAL_SIMS, VAL_KS, recall_summary
from .estimator import DEFAULT_DROPOUT, DEFAULT_WIDTHS, ETA_PAIRS, INITS, LOSSES, M3L
from .loop import LoopData, LoopResult, LoopSettings, train_mapping
from .losses import hardest_negatives, m3l_loss, patr_loss, sq_dist
from .model import build_network, init_last_block, input_standardization

__all__ = [
    "DEFAULT_DROPOUT", "DEFAULT_WIDTHS", "ETA_PAIRS", "INITS", "LOSSES", "M3L", "RETRIEVAL_SIMS", "LoopData",
    "LoopResult", "LoopSettings", "SPLITS", "SPLIT_CODE", "VAL_KS", "ImageTextData", "assign_splits",
    "build_network", "check_fracs", "collect_images", "hardest_negatives", "init_last_block",
    "input_standardization", "m3l_loss", "patr_loss", "recall_summary", "sq_dist",
    "train_mapping",
]

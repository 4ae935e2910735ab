"""Zero-shot cross-lingual image retrieval: M3L and PATR text-to-image models.

Aggarwal & Kale, "Towards Zero-shot Cross-lingual Image Retrieval" (2020), Sections 3-4.
Multilingual sentence embeddings of a frozen text encoder (``use-m``, ``e5-small``, any text
model) are mapped into the feature space of a frozen image model (``efficientnet-lite0``, or a
dataset's precomputed image features) by three blocks of

    fully connected layer -> dropout -> ReLU -> L2-norm      (no L2-norm after the last block)

with widths ``[1024, 2048, image_dim]`` (the paper's ``[1024, 2048, 2048]`` with the last width
set to the image model's feature size, 1280 for EfficientNet-Lite) and dropout
``[0.2, 0.1, 0.0]``. Only the mapping is trained, on image-caption pairs of the training
languages (English only by default); at test time queries in any language the text encoder
knows are mapped and the nearest images are retrieved.

Losses, with ``d`` the squared Euclidean distance, ``te_an`` the mapped anchor caption, ``im_p``
its image, ``im_n`` the hardest negative image of the mini-batch and ``te_n`` the mapped caption
of that negative image:

* M3L (Eq. 1): ``alpha1 d(te_an, im_p)^rho / d(te_an, im_n)^rho +
  alpha2 d(te_an, im_p)^rho / d(te_an, te_n)^rho`` (rho 4, alpha1 0.5, alpha2 1);
* PATR (Eq. 2): ``d(te_an, im_p) + max(0, eta - d(te_an, im_n))``. The paper's eta = 1100 was
  tuned for 2048-d ResNet152 features; distances scale with the image model, so by default eta
  is the median squared distance between two distinct training images (``eta_quantile=0.5``; an
  explicit ``eta`` overrides it): a negative image must end up at least as far from the
  caption as a typical unrelated image is from the positive one.

Two conditioning choices the paper does not specify (both on by default, both switchable, both
measured in docs/m3l.md): the base embeddings are centred and scaled to mean squared norm 1
(:func:`input_standardization`; folded into the first layer when saving), and the last block
starts at the image features' mean and spread (:func:`init_last_block`, ``init="match"``).
Without them M3L does not move off chance on emoji-cldr and e5-small (anisotropic) trains ~5x
slower.

Hardest negatives are mined online inside each mini-batch (Aggarwal et al. 2019): for anchor
``i`` the negative is the batch item ``j`` whose image is nearest to the mapped anchor among the
items with a different image (ties: the lowest index); its caption is the negative text.

Data and splits. An image is identified by its content (``file:`` + hash of the file's bytes, or
``feat:`` + hash of its precomputed feature row), so byte-identical images are one gallery image
and the split does not depend on paths. Each image is assigned to train / val / test by a seeded
hash of its key (``split_seed``, ``test_frac``, ``val_frac``): the assignment of an image never
depends on which other images or languages are loaded, so the English-only and the multilingual
model share their held-out test images. The texts of val and test images -- in every language --
are never trained on; validation uses the validation languages (default: the training
languages) only.

Retrieval ranks every gallery image by squared Euclidean distance to the mapped query (the
training metric; ``sim="cosine"`` is available) with the blocked kernels of
:mod:`backretrieval.search`: pessimistic ranks, so ties never help.

Saved model directory (no pickled code; the one format of
:mod:`backretrieval.encoders.trained.modeldir`, kind ``m3l``): ``weights.npz`` (``W0, b0, W1, b1, W2,
b2`` float32), ``split.json`` (the image keys of each split) and ``model.json``
(``hyper_parameters``: the estimator's parameters, typed -- PATR's ``eta`` and ``eta_quantile``
included; info: base text model and image model versions, dimensions, the used eta, split
sizes, training history; written last, it marks a complete model). The inference half is
:mod:`backretrieval.encoders.trained.m3l` (text models ``m3l:DIR`` / ``patr:DIR``).

Package map: :mod:`.data` (image keys, content-hash splits, :class:`ImageTextData`),
:mod:`.model` (the network, input standardisation, last-block initialisation), :mod:`.losses`
(M3L, PATR, in-batch hardest negatives), :mod:`.fit` (the :class:`M3L` estimator, also ``M3LModel``, and its
training loop), :mod:`.evaluation` (retrieval ranks and Recall@K of saved models). The t-SNE
figure is :func:`backretrieval.report.projection.projection_figure`.
"""
from .data import SPLIT_CODE, SPLITS, ImageTextData, assign_splits, check_fracs, collect_images
from .evaluation import (
    RETRIEVAL_SIMS, VAL_KS, RetrievalResult, evaluate_retrieval, model_label, recall_summary, retrieval_ranks,
)
from .fit import DEFAULT_DROPOUT, DEFAULT_WIDTHS, ETA_PAIRS, INITS, LOSSES, M3L, M3LModel
from .losses import hardest_negatives, m3l_loss, patr_loss, sq_dist
from .model import build_network, init_last_block, input_standardization

__all__ = [
    "DEFAULT_DROPOUT", "DEFAULT_WIDTHS", "ETA_PAIRS", "INITS", "LOSSES", "M3L", "M3LModel", "RETRIEVAL_SIMS",
    "RetrievalResult", "SPLITS", "SPLIT_CODE", "VAL_KS", "ImageTextData", "assign_splits", "build_network",
    "check_fracs", "collect_images", "evaluate_retrieval", "hardest_negatives", "init_last_block",
    "input_standardization", "m3l_loss", "model_label", "patr_loss", "recall_summary", "retrieval_ranks", "sq_dist",
]

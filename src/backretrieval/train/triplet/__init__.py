"""Triplet and TripletXL (Backretrieval paper, Sec. 3.2): a better cross-lingual representation
from *monolingual* title/body pairs on top of a frozen multilingual encoder.

Model. A frozen base encoder (e.g. ``use-m``) embeds an item's title and body separately; a
siamese tower -- dense layers with ReLU (default 300 -> 300, as in the paper), the same
weights for titles and bodies -- maps them to ``x_rt`` and ``x_rb``. The representation of an
item is ``concat(x_rt, x_rb)`` (each half L2-normalised, see :mod:`backretrieval.encoders.trained.triplet`).

Losses, with ``d`` the cosine distance ``1 - cos``; a batch's loss is the mean over its items:

* Eq. 1, ``L_TRIPLET(r) = max(0, d(x_rb, x_rt) - d(x_rb, x_nt) + alpha)``; the negative title
  ``x_nt`` is a uniformly random *other* item of the same mini-batch (batches mix languages).
  Option ``negatives="language"`` (not in the paper) draws it among the batch's items of r's own
  language instead, see :func:`sample_negatives`.
* Eq. 2, ``L_XL(r) = sum_{l != l_r} | mean_{n in N_l(r)} d(x_rb, x_nt) - mean_{n in N_{l_r}(r)} d(x_rb, x_nt) |``;
  TripletXL minimises ``L_TRIPLET + beta * L_XL``.

Neighbours ``N_l(r)`` (how they are found). ``N_l(r)`` are the ``K`` training items of language
``l`` whose *title* vectors ``x_nt`` are nearest (cosine) to the *body* vector ``x_rb`` of
``r`` -- the same pairing of body and title as in the distances of Eq. 2 -- computed with the
model's own current embeddings by exact blocked search (:func:`backretrieval.search.topk`,
never an N x N matrix). Item ``r`` itself is excluded from ``N_{l_r}(r)``. The neighbour sets
are recomputed at the start of every ``refresh_every``-th epoch (default: every epoch,
including before the first one, with the untrained network) for the training *and* validation
items; the pool is always the training items only, so validation titles never receive
gradient. Between refreshes the sets are fixed, while the distances in the loss are recomputed
with the current weights at every step (gradient flows into both ``x_rb`` and the neighbours'
``x_nt``). A language with fewer than K other training items uses the items it has; a term
whose neighbour set is empty is left out. For Triplet the validation ``L_XL`` is still
computed each epoch (as a monitor, never trained on), so the two methods' curves can be compared.

No cross-lingual links. Training consumes only :class:`TitleBodyData` -- languages, titles and
bodies -- built from a corpus by :meth:`TitleBodyData.from_dataset`, which never reads the
corpus' ``concepts`` and drops ``ids`` too (for ddtp and emoji-cldr the id *is* the concept).
:func:`assert_no_links` guards every entry point of the training code path.

History: one record per epoch (train/validation loss and their Eq. 1 / Eq. 2 parts, seconds);
with a validation split, an "epoch 0" record holds the validation loss of the untrained network
for reference (it is never chosen as the best epoch).

Defaults (paper): Adam, lr 0.01, alpha 0.1, batch 128, 40 epochs, beta 0.01, K 5, a random
90/10 train/validation split. Early stopping on the validation loss is available
(``patience``); by default all epochs run and the weights of the epoch with the lowest
validation loss are kept (``restore_best``). Same seed, same numbers (CPU torch). With a
``checkpoint_dir`` every finished epoch is saved (atomically) and a rerun with the same data
and settings resumes from the last one.

Package map: :mod:`.data` (:class:`TitleBodyData`, :func:`assert_no_links`,
:func:`embed_title_body`), :mod:`.losses` (Eq. 1, Eq. 2, negatives), :mod:`.neighbours`
(:func:`find_neighbours`), :mod:`.tower` (the torch tower and its numpy weights), :mod:`.loop` (the
training loop and checkpoint), :mod:`.estimator` (:class:`Triplet`, also ``TripletModel``).
"""
from .data import TitleBodyData, assert_no_links, embed_title_body
from .estimator import NEGATIVES, Triplet, TripletModel, resume_key
from .loop import CHECKPOINT_FILE
from .losses import cosine_distance, sample_negatives, triplet_loss, xl_loss
from .neighbours import find_neighbours
from .tower import build_tower, params_of

__all__ = [
    "CHECKPOINT_FILE", "NEGATIVES", "TitleBodyData", "Triplet", "TripletModel", "assert_no_links", "build_tower",
    "cosine_distance", "embed_title_body", "find_neighbours", "params_of", "resume_key", "sample_negatives",
    "triplet_loss", "xl_loss",
]

"""Training layer: estimators that learn cross-lingual representations.

Each method is a package with an estimator on :class:`.base.Estimator` (scikit-learn's
``BaseEstimator``: ``__init__`` stores hyper-parameters, checked once before any fitting;
``fit(data, ...)`` learns and returns ``self``; ``transform(...)`` embeds; learned attributes end
in ``_``; ``save(path)`` writes the one model-directory format of
:mod:`backretrieval.encoders.trained.modeldir` and the classmethod ``load(path)`` reads it back; one
``HyperParameterError`` and one ``NotFittedError``) in ``estimator.py`` and its training loop,
which takes one frozen settings object, beside it: ``cr5`` (:class:`Cr5`, ``solver.py``),
``triplet`` (:class:`Triplet`, ``loop.py``), ``m3l`` (:class:`M3L`, ``loop.py``). The
*inference* half of every trained model -- loading a saved model directory and embedding
texts -- lives in the encoders layer (``encoders/trained/<method>.py``) so that a trained model
is an ordinary text model (``cr5:DIR``, ``tripletxl:DIR``, ...) in ``evaluate``, ``compare``
and ``meta``; evaluating trained models (a Cr5 experiment, M3L/PATR image retrieval, the Triplet
case study) is :mod:`backretrieval.analysis.trained`. This layer may import core, data,
encoders, search and metrics, never analysis, report or the CLI.
"""

"""Training layer: estimators that learn cross-lingual representations.

Each method is a module or package with an estimator on :class:`.base.Estimator` (scikit-learn's
``BaseEstimator``: ``__init__`` stores hyper-parameters, ``fit(data, **run_options)`` learns and
returns ``self``, learned attributes end in ``_``, one ``HyperParameterError`` and one
``NotFittedError``; ``save(dir)`` writes the one model-directory format of
:mod:`backretrieval.encoders.trained.modeldir`): ``cr5`` (:class:`Cr5`), ``triplet`` (:class:`Triplet`,
also ``TripletModel``), ``m3l`` (:class:`M3L`, also ``M3LModel``). The *inference* half of every trained model -- loading a saved model directory and
embedding texts -- lives in the encoders layer (``encoders/<method>.py``) so that a trained model
is an ordinary text encoder (``cr5:DIR``, ``tripletxl:DIR``, ...) in ``evaluate``, ``compare``
and ``meta``. This layer may import core, data, encoders, search and metrics, never analysis,
report or the CLI.
"""

"""Training layer: estimators that learn cross-lingual representations.

Each method is one module with a scikit-learn style estimator (``__init__`` stores
hyper-parameters, ``fit`` learns, learned attributes end in ``_``, ``save(dir)`` writes a model
directory). The *inference* half of every trained model -- loading a saved model directory and
embedding texts -- lives in the encoders layer (``encoders/<method>.py``) so that a trained model
is an ordinary text encoder (``cr5:DIR``, ``tripletxl:DIR``, ...) in ``evaluate``, ``compare``
and ``meta``. This layer may import core, data, encoders, search and metrics, never analysis,
report or the CLI.
"""

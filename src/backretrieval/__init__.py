"""backretrieval: which cross-lingual text representation works best for your domain and
language pairs, with or without parallel data.

Layers, one package each; a layer imports only from those before it
(``core -> data -> encoders -> search -> metrics -> train -> analysis -> report -> study -> cli``,
checked by tests/test_layers.py; ARCHITECTURE.md has the full map):

core      errors, atomic writes, content hashes and fingerprints, the environment, JSON, row normalisation
data      Corpus / Dataset, one loader module per dataset, sampling, the one content-hash split
encoders  text and image encoders (registry, one module per model), the cache, trained models' inference
search    canonical scores and the blocked exact kernels (top-k, ranks, CSLS), FAISS backend
metrics   xlr, bkr, corr, hubness, csls: pure functions, numpy in, numbers out
train     estimators that learn representations: Cr5, Triplet / TripletXL, M3L / PATR
analysis  the evaluation grid and its executors, statistics, compare, meta-evaluation, case study
report    Markdown tables, figures and the self-contained HTML reports
study     the blinded human study: build, store, web app, analysis, agreement
cli       click commands, one module per topic: thin shells over the layers above
"""
__version__ = "0.1.0"

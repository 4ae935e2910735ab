"""Evaluating trained models, results as objects: one Cr5 experiment, split, train and test
(:mod:`.cr5`: :class:`~.cr5.Cr5Run`), text-to-image retrieval of saved M3L/PATR models
(:mod:`.image_retrieval`: :class:`~.image_retrieval.RetrievalResult`,
:class:`~.image_retrieval.ImageRetrievalRun`) and the Triplet / TripletXL case study
(:mod:`.case_study`). What the commands write of them is :mod:`backretrieval.report.runs`."""

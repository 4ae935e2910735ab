"""The run writer of ``backretrieval case-study report``: :func:`case_study` evaluates a base
model and trained Triplet / TripletXL models on every directed pair
(:func:`backretrieval.analysis.trained.case_study.evaluate_case_study`), computes the case
study's tables (:func:`~backretrieval.analysis.trained.case_study.case_study_summary`) and writes
``case_study.md``, ``case_study.json`` and the boxplot (:mod:`backretrieval.report.case_study`)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ...analysis.trained.case_study import case_study_summary, directed_pairs, evaluate_case_study, spec_label
from ...core import atomic_write_text
from ..case_study import case_study_figure, case_study_json, case_study_markdown


def case_study(
    langs: Sequence[str],
    models: Sequence[str],
    out_dir: str | Path,
    *,
    labels: Sequence[str] | None = None,
    bkr_dataset: str = "emoji-cldr",
    xlr_dataset: str | None = None,
    bkr_n: int = 1500,
    xlr_n: int = 250,
    seeds: Sequence[int] = (0, 1, 2),
    k: int = 10,
    truth_k: int = 1,
    image_model: str = "efficientnet-lite0",
    n_boot: int = 1000,
    figure: str | Path | None = None,
    progress: bool = True,
    log: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """Run the case study (Backretrieval paper, Sec. 3.2, Table 2 / Fig. 3) and write what
    ``backretrieval case-study report`` writes.

    Args:
        langs: the languages; every directed pair is evaluated.
        models: text-model specs, the base model first, then the trained models.
        out_dir: the folder: ``case_study.md``, ``case_study.json``, the figure, and the
            evaluation records under ``bkr/`` and ``xlr/`` (resumable).
        labels: a short name per model (None: :func:`~backretrieval.analysis.trained.case_study.spec_label`
            of each spec); models with the same label are training seeds of one model.
        bkr_dataset: data with images for BkR (and XLR where it has links).
        xlr_dataset: held-out linked data for the ground-truth check (None: none).
        bkr_n: sample size per side of the BkR grid.
        xlr_n: sample size per side of the held-out XLR grid.
        seeds: evaluation (sampling) seeds.
        k: K of BkR@K.
        truth_k: K of the ground-truth XLR@K.
        image_model: the image model g of BkR.
        n_boot: bootstrap resamples.
        figure: where to write the boxplot PNG (None: ``OUT/case_study.png``).
        progress: show progress bars.
        log: receives the notable events of the evaluations.

    Returns:
        The tables of :func:`~backretrieval.analysis.trained.case_study.case_study_summary`.

    Raises:
        BackretrievalError: what the evaluation grid refuses (unknown dataset, model or
            language, a sample larger than the data, ...).
        ValueError: the base model's label is shared by another model.
    """
    specs, seed_list = list(models), list(seeds)
    names = list(labels) if labels else [spec_label(m) for m in specs]
    out, lab, t0 = Path(out_dir), dict(zip(specs, names)), time.perf_counter()
    results = evaluate_case_study(langs, specs, out, bkr_dataset=bkr_dataset, xlr_dataset=xlr_dataset, bkr_n=bkr_n, xlr_n=xlr_n,
                                  seeds=seed_list, k=k, image_model=image_model, progress=progress, log=log)
    ds_names = {"bkr": Path(bkr_dataset).stem, "xlr": Path(xlr_dataset).stem if xlr_dataset else ""}
    pairs = directed_pairs(langs)
    summary = case_study_summary(results, specs, lab, pairs, k, truth_k, n_boot, ds_names)
    header = (f"# Case study: {', '.join(dict.fromkeys(names))} on {len(pairs)} directed pairs of {', '.join(langs)}\n\n"
              f"BkR@{k} on {ds_names['bkr']} (N={bkr_n} per side, image model {image_model}); ground-truth XLR@{truth_k} on {ds_names['bkr']}"
              + (f" (where it has links) and on {ds_names['xlr']} (N={xlr_n})" if xlr_dataset else " (where it has links)")
              + f"; seeds {','.join(map(str, seed_list))}. Models: " + ", ".join(f"`{lab[m]}` = `{m}`" for m in specs) + ".")
    atomic_write_text(out / "case_study.md", case_study_markdown(summary, header))
    js = {**case_study_json(summary), "seconds": round(time.perf_counter() - t0, 1)}
    atomic_write_text(out / "case_study.json", json.dumps(js, indent=1, default=float))
    case_study_figure(summary, Path(figure) if figure else out / "case_study.png")
    return summary

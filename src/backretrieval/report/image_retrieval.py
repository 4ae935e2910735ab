"""Tables and files of ``image-retrieval`` (XTD10 Table 2/3 layout): Recall@K per language and
configuration, the best-vs-runner-up comparison, per-query ranks and the t-SNE projection."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..analysis.trained.image_retrieval import ImageRetrievalRun
from ..core import BackretrievalError, atomic_save_npz, atomic_write_text
from .projection import projection_figure


def recall_cell(vals: Sequence[float]) -> str:
    """One value with 3 decimals, or ``mean ± sd`` (sample sd) over several seeds."""
    if len(vals) == 1:
        return f"{vals[0]:.3f}"
    return f"{np.mean(vals):.3f} ± {np.std(vals, ddof=1):.3f}"


def image_retrieval_markdown(run: ImageRetrievalRun) -> str:
    """The Markdown report: one Recall@K table per K (largest first) and, for several
    configurations on the same queries, the best configuration per language."""
    langs = run.langs
    lines = [
        f"# Text->image retrieval on {run.dataset} ({run.split} split, {run.results[0].n_images} images, ranking: {run.sim})",
        "",
        "Queries are the captions of the gallery images in each language; cells are Recall@K"
        + (", mean ± sd over training seeds" if any(len(g.results) > 1 for g in run.groups) else "")
        + ". Ties never help (pessimistic ranks).",
    ]
    for k in sorted(run.ks, reverse=True):
        lines += ["", f"## Recall@{k}", "", "| model | train langs | seeds | " + " | ".join(langs) + " |",
                  "|---|---|---|" + "---|" * len(langs)]
        for g in run.groups:
            lines.append(f"| {g.label} | {g.train_langs} | {len(g.results)} | "
                         + " | ".join(recall_cell(g.recalls(x, k)) for x in langs) + " |")
    if run.comparisons:
        k = run.k_compare
        lines += ["", f"## Best configuration per language (Recall@{k})", "",
                  "Gap = best minus runner-up; p = two-sided paired sign-flip permutation test over the same queries "
                  "(per-query hit averaged over seeds).", "",
                  "| lang | best | R@%d | runner-up | R@%d | gap | p |" % (k, k), "|---|---|---|---|---|---|---|"]
        for x, c in run.comparisons.items():
            lines.append(f"| {x} | {c['best']} | {c['best_recall']:.3f} | {c['runner_up']} | {c['runner_up_recall']:.3f} | "
                         f"{c['gap']:+.3f} | {c['p']:.3g} |")
    return "\n".join(lines) + "\n"


def image_retrieval_json(run: ImageRetrievalRun, dataset_options: Mapping[str, Any]) -> dict[str, Any]:
    """``results.json``: settings, per-model results, per-configuration mean recalls, comparisons."""
    return {
        "dataset": run.dataset,
        "dataset_options": dict(dataset_options),
        "split": run.split,
        "sim": run.sim,
        "ks": run.ks,
        "langs": run.langs,
        "models": [r.to_json() for r in run.results],
        "groups": [
            {"label": g.label, "base": g.key[0], "loss": g.key[1], "train_langs": g.key[2], "image_model": g.key[3],
             "settings": json.loads(g.key[4]), "n_models": len(g.results),
             "per_lang": {x: {f"t2i@{k}": float(np.mean(g.recalls(x, k))) for k in run.ks} for x in run.langs}}
            for g in run.groups
        ],
        "comparisons": run.comparisons,
    }


def write_image_retrieval(
    run: ImageRetrievalRun,
    out: str | Path,
    *,
    dataset_options: Mapping[str, Any],
    plot_langs: Sequence[str] = (),
    plot_images: int = 40,
    warn: Callable[[str], None] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Write ``results.json``, ``table.md``, ``ranks.npz`` and (with ``plot_langs``) ``projection.png``.

    Args:
        run: the evaluated models.
        out: output directory (created).
        dataset_options: the loader options, recorded in results.json.
        plot_langs: languages of the t-SNE projection (empty: no plot); one panel per
            configuration sharing the first model's image model.
        plot_images: images in the projection.
        warn: receives a line when the projection cannot be drawn.

    Returns:
        ``(markdown, results.json payload)``.
    """
    from ..encoders.trained.m3l import M3LTextEncoder

    md = image_retrieval_markdown(run)
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    payload = image_retrieval_json(run, dataset_options)
    if plot_langs:
        first = run.results[0]
        panels = []
        for g in run.groups:
            r = g.results[0]
            if r.model.hyper_parameters["image_model"] != first.model.hyper_parameters["image_model"]:
                continue  # one image space per figure
            panels.append((f"{g.label} (trained on {g.train_langs}, seed {r.model.hyper_parameters['seed']})",
                           M3LTextEncoder(r.model_dir, base_encoder=run.bases[r.model.hyper_parameters["base"]])))
        try:
            fig = projection_figure(panels, run.data_of(first), list(plot_langs), outp / "projection.png",
                                    n_images=plot_images, split=run.split)
            payload["projection"] = str(fig)
            md += "\n![t-SNE projection](projection.png)\n"
        except BackretrievalError as e:
            if warn is not None:
                warn(f"no projection plot: {e}")
    arrays = {}
    for i, r in enumerate(run.results):
        for x in run.langs:
            arrays[f"m{i}/{x}/ranks"] = np.asarray(r.ranks[x], dtype=np.int64)
            arrays[f"m{i}/{x}/ids"] = np.asarray(r.query_ids[x], dtype=str)
    atomic_save_npz(outp / "ranks.npz", **arrays)
    atomic_write_text(outp / "results.json", json.dumps(payload, indent=1))
    atomic_write_text(outp / "table.md", md)
    return md, payload

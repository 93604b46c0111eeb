"""docs/report.md and its plots, from figures measured by a report run or recorded in the conditions file.

Every path the report names goes through the runner's PathDisplay: relative to the repository, or by a named root.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pyserini_ext.index.aligner import DEFAULT_REDUCTION
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.repro.conditions import DEV_SETS, Conditions
from pyserini_ext.repro.runner import PathDisplay, atomic_write_text

if TYPE_CHECKING:
    from pyserini_ext.repro.pipeline import Reproduction

CONDITIONS_NAME = "pyserini_ext/repro/conditions.yaml"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return f"{value:.4f}" if isinstance(value, float) else ("–" if value is None else str(value))

    align = ["---", *["---:"] * (len(header) - 1)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def dataset_table(conditions: Conditions, results: Mapping[str, Mapping[str, float]]) -> str:
    """rows = methods (in the conditions' order), columns nDCG@10, R@100, index MB (fusions: the fused indexes)."""
    rows = []
    for method, m in conditions.methods.items():
        if method in results:
            r = results[method]
            rows.append((m.label, r["ndcg_cut_10"], r["recall_100"],
                         f"{r['index_mb']:.1f}" if r.get("index_mb") is not None else None))
    return markdown_table(("method", "nDCG@10", "R@100", "index MB"), rows)


def summary_table(conditions: Conditions, results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """rows = methods, columns = nDCG@10 per dataset and their mean over the datasets where it ran."""
    datasets = list(results)
    rows = []
    for method, m in conditions.methods.items():
        values = [results[d].get(method, {}).get("ndcg_cut_10") for d in datasets]
        if any(v is not None for v in values):
            present = [v for v in values if v is not None]
            mean = sum(present) / len(present) if len(present) == len(values) else None
            rows.append((m.label, *values, mean))
    return markdown_table(("nDCG@10", *datasets, "mean"), rows)


def pruning_table(points: Mapping[float, Mapping[str, float]]) -> str:
    return markdown_table(("beta_d", "nDCG@10", "R@100", "index MB"),
                          [(f"{b:g}", r["ndcg_cut_10"], r["recall_100"],
                            f"{r['index_mb']:.1f}" if r.get("index_mb") is not None else None)
                           for b, r in points.items()])


# ---------------------------------------------------------------------------------------------------------
# plots

def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: Path) -> Path:
    plt = _pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_effectiveness(conditions: Conditions, results: Mapping[str, Mapping[str, Mapping[str, float]]],
                       path: Path) -> Path:
    """One panel per dataset, a labelled horizontal bar per method (20+ methods: a legend of colours would not
    be readable), coloured by family, with its nDCG@10 written at the bar's end."""
    plt = _pyplot()
    datasets = list(results)
    methods = [m for m in conditions.methods if any(m in results[d] for d in datasets)]
    fusion_names = [name for name, _ in conditions.fusions.values()]
    colours = {"baseline": "0.6", "ours": "tab:blue", **dict(zip(fusion_names, ("tab:orange", "tab:green")))}
    fig, axes = plt.subplots(1, len(datasets), sharey=True, squeeze=False,
                             figsize=(3 + 2.6 * len(datasets), 1.5 + 0.26 * len(methods)))
    rows = range(len(methods))[::-1]  # the first method at the top
    for ax, dataset in zip(axes[0], datasets):
        values = [results[dataset].get(m, {}).get("ndcg_cut_10") for m in methods]
        ax.barh(rows, [v or 0.0 for v in values], color=[colours[conditions.family(m)] for m in methods])
        top = max((v for v in values if v is not None), default=1.0)
        for row, value in zip(rows, values):
            ax.text((value or 0.0) + 0.01 * top, row, "–" if value is None else f"{value:.3f}", va="center",
                    fontsize=6)
        ax.set_xlim(0, 1.18 * top)
        ax.set_title(dataset)
        ax.set_xlabel("nDCG@10")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(list(rows), [conditions.methods[m].label for m in methods], fontsize=7)
    return _save(fig, path)


def plot_pruning(pruning: Mapping[str, Mapping[float, Mapping[str, float]]], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for dataset, points in pruning.items():
        betas = sorted(points)
        ax.plot([100 * b for b in betas], [points[b]["ndcg_cut_10"] for b in betas], "o-", label=dataset)
    ax.set_xscale("log")
    ticks = sorted({100 * b for points in pruning.values() for b in points})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlabel(f"document vectors kept at index time ({DEFAULT_REDUCTION}), --beta-d (%)")
    ax.set_ylabel("nDCG@10")
    ax.set_title(f"AligneR index-time token reduction ({DEFAULT_REDUCTION})")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_size(conditions: Conditions, results: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = "osD^v<>"
    base = set(conditions.base_method_names())
    for i, (dataset, rows) in enumerate(results.items()):
        points = [(m, r) for m, r in rows.items() if m in base and r.get("index_mb")]
        ax.scatter([r["index_mb"] for _, r in points], [r["ndcg_cut_10"] for _, r in points],
                   marker=markers[i % len(markers)], label=dataset)
        for method, r in points:
            ax.annotate(method, (r["index_mb"], r["ndcg_cut_10"]), fontsize=6, xytext=(3, 2),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("index size (MB, log scale)")
    ax.set_ylabel("nDCG@10")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def write_plots(conditions: Conditions, results: Mapping, pruning: Mapping, folder: Path, suffix: str = ""
                ) -> dict[str, Path]:
    """The report's PNG plots in `folder`: {title: path}."""
    plots = {"nDCG@10 per dataset": plot_effectiveness(conditions, results,
                                                       folder / f"report-effectiveness{suffix}.png"),
             "nDCG@10 vs index size": plot_size(conditions, results, folder / f"report-index-size{suffix}.png")}
    if any(pruning.values()):
        plots["AligneR pruning"] = plot_pruning({k: v for k, v in pruning.items() if v},
                                                folder / f"report-aligner-pruning{suffix}.png")
    return plots


# ---------------------------------------------------------------------------------------------------------
# docs/report.md

def training_section(model_dirs: Mapping[str, Path], display: PathDisplay) -> str:
    parts = ["## How the shipped models were trained\n"]
    for method, folder in model_dirs.items():
        parts.append(f"### {method}: `{display.text(str(folder))}`\n")
        if not folder.is_dir():
            parts.append("Not evaluated (folder missing).\n")
            continue
        log = folder / "training_log.json"
        if log.is_file():
            data = json.loads(log.read_text())
            summary = {k: v for k, v in data.items() if not isinstance(v, list)} if isinstance(data, dict) else {}
            losses = data.get("losses") if isinstance(data, dict) else None
            if isinstance(losses, list) and losses and all(isinstance(x, (int, float)) for x in losses):
                summary["losses"] = f"{len(losses)} steps, first {losses[0]:.4f}, last {losses[-1]:.4f}"
            parts.append("training_log.json (lists summarised):\n\n```json\n"
                         + json.dumps(summary, indent=1, default=str) + "\n```\n")
        else:
            parts.append("No training_log.json (untrained or hand-made model).\n")
        card = folder / "README.md"
        if card.is_file():
            parts.append("Model card (README.md):\n\n" + "\n".join("> " + line if line else ">"
                                                                   for line in card.read_text().splitlines()) + "\n")
        else:
            parts.append("No model card (README.md).\n")
    return "\n".join(parts)


def development_section(conditions: Conditions, deepct: Mapping | None, triples: str) -> list[str]:
    out = ["## Settings chosen on development queries\n",
           "Nothing is tuned on test queries. Development queries: SciFact's train split (809 queries, scored on "
           "the SciFact corpus) and an MS MARCO dev set built from the 100 training triples in "
           f"`{triples}` (corpus = the DL19 subset's passages + the 200 triple passages `triples-p{{i}}` / "
           "`triples-n{i}`, qrels = each query's positive). BM25 uses Pyserini's defaults (k1 0.9, b 0.4) "
           "and every other model its defaults: the settings chosen are DeepCT's BM25 k1/b and its QL-JM "
           "lambda, once for all datasets, each by the best mean nDCG@10 over the two development sets (grid "
           "runs: Pyserini's LuceneSearcher, 100 hits, scored with ir_measures). RRF's k and the lexical "
           "run's weight in min-max fusion were chosen on the same two sets once, offline (`rrf_k`, "
           f"`norm_lexical_weight` in {CONDITIONS_NAME}; the figures are below).\n"]
    if deepct:
        out.append(f"DeepCT: BM25 k1 = {deepct['k1']:g}, b = {deepct['b']:g}; QL-JM lambda = {deepct['lambda']:g} "
                   f"({deepct['source']}).\n")
        if deepct.get("grid"):
            names = [n for n in DEV_SETS if n in deepct["grid"][0]]
            rows = [(f"{r['k1']:g}", f"{r['b']:g}", *(r[n]["ndcg_cut_10"] for n in names), r["mean_ndcg_cut_10"])
                    for r in deepct["grid"]]
            ref = deepct["bm25_reference"]
            rows.append(("BM25 0.9", "0.4 (plain index)", *(ref[n]["ndcg_cut_10"] for n in names),
                         sum(ref[n]["ndcg_cut_10"] for n in names) / len(names)))
            out.append(markdown_table(("k1", "b", *(f"{n} nDCG@10" for n in names), "mean"), rows))
        if deepct.get("qljm_grid"):
            names = [n for n in DEV_SETS if n in deepct["qljm_grid"][0]]
            out.append(markdown_table(("QL-JM lambda", *(f"{n} nDCG@10" for n in names), "mean"), [
                (f"{r['lambda']:g}", *(r[n]["ndcg_cut_10"] for n in names), r["mean_ndcg_cut_10"])
                for r in deepct["qljm_grid"]]))
        if deepct.get("query_dev"):
            dev = deepct["query_dev"]
            names = [n for n in DEV_SETS if n in dev]
            out.append("DeepCT-Query (the query's words weighted by the DeepCT model, `pyserini-ext deepct search "
                       "--query-model`) on the development queries, with the BM25 settings above and nothing "
                       "further tuned:\n")
            out.append(markdown_table(("method", *(f"{n} nDCG@10" for n in names), "mean"), [
                (conditions.methods[m].label, *(dev[n][m]["ndcg_cut_10"] for n in names),
                 sum(dev[n][m]["ndcg_cut_10"] for n in names) / len(names)) for m in dev[names[0]]]))
    for table in conditions.evidence:
        out.append(f"{table['title']}:\n\n" + markdown_table(table["header"], table["rows"]))
    return out


def write_report(path: Path, repro: Reproduction, figures: Mapping, plots: Mapping[str, Path], generated_by: str,
                 elapsed: float | None) -> Path:
    """docs/report.md from `figures` ({"results", "pruning", "deepct"}); `elapsed` None: the figures are the
    conditions file's (nothing was run)."""
    conditions, options, runner = repro.conditions, repro.options, repro.runner
    display = runner.display
    results, pruning = figures["results"], figures["pruning"]
    work = display.text(str(repro.root))
    out = ["# pyserini-ext evaluation report\n"]
    if elapsed is None:
        out.append(f"Rendered by `{generated_by}` from the expected scores in {CONDITIONS_NAME} (the figures of the "
                   "last full `make report`); nothing was rerun. `make report` reruns every condition (hours of "
                   "CPU) and `pyserini-ext repro --check --datasets DATASET` those of one dataset. Commands: as "
                   f"they run in the work folder `{work}`.\n")
    else:
        out.append(f"Generated by `{generated_by}` in {elapsed / 60:.0f} min (threads {options.threads}; "
                   f"{runner.steps['run']} steps run, {runner.steps['cached']} reused from earlier runs, whose "
                   f"times are in the table of step times); work folder `{work}`.\n")
    if options.subset:
        out.append(f"**Development run on corpus subsets** (first {options.subset} documents plus every judged "
                   f"one): figures are not comparable with published ones.\n")
    settings = repro.settings
    out.append("All runs are produced by the unchanged Pyserini commands (`pyserini-ext` only for the DeepCT "
               "index build, QL-JM and DeepCT-Query search, which Pyserini's commands cannot express, AligneR "
               "index/search and weighted min-max fusion), scored by `python -m pyserini.eval.trec_eval`: nDCG@10 on "
               "the graded judgements, R@100 (DL19: relevant = grade >= 2, `-l 2`). Index MB = bytes on disk "
               "(Lucene indexes store the raw documents, as the DeepCT index build does; Faiss and AligneR "
               "indexes hold vectors only); for fusions the sum of the fused indexes. "
               f"{settings['hits']} hits per query; RRF with k {settings['rrf_k']} (Pyserini's default 60; 10 was "
               f"chosen on the development queries, `rrf_k` in {CONDITIONS_NAME}) and Pyserini's depth 1000. "
               "min-max = each run's scores min-max normalised per query and summed, the lexical run (BM25, or "
               f"DeepCT-Query) weighted {float(settings['norm_lexical_weight']):g} and the other runs sharing the "
               "rest (`pyserini-ext fusion normalize --weights`; the weight was chosen on the development queries, "
               f"`norm_lexical_weight` in {CONDITIONS_NAME}).\n")
    out.append("Models: " + ", ".join(f"{m} `{display.text(str(folder))}`" for m, folder in repro.model_dirs.items())
               + f"; baselines: splade-tiny `{display.text(str(backbone_path('splade-tiny')))}`, all-MiniLM-L6-v2 "
               f"`{display.text(str(repro.minilm))}` (mean pooling, L2-normalised).\n"
               f"splade-tiny is given to Pyserini as `{display.text(str(repro.splade))}`, a link with \"splade\" in "
               "its name: `--impact --encoder` picks its query encoder by that substring.\n")
    if results:
        out.append("## Summary (nDCG@10)\n\n" + summary_table(conditions, results))
    for key, rows in results.items():
        out.append(f"## {conditions.datasets[key].title}\n\n" + dataset_table(conditions, rows))
        if pruning.get(key):
            out.append(f"AligneR token reduction (`--beta-d` at index time, {DEFAULT_REDUCTION}):\n\n"
                       + pruning_table(pruning[key]))
    for name, plot in plots.items():
        out.append(f"![{name}]({os.path.relpath(plot, path.parent)})\n")
    for table in conditions.ablations:
        out.append(f"## {table['title']}\n\n{table['note']}\n\n```bash\n{table['command']}\n```\n\n"
                   + markdown_table(table["header"], table["rows"]))
    out += development_section(conditions, figures.get("deepct"), display.text(options.triples))
    if runner.timings and elapsed is not None:
        out.append("## Wall time per step (this machine, seconds)\n\n" + markdown_table(
            ("step", "s"), [(k, f"{v:.0f}") for k, v in runner.timings.items()]))
    out.append("## Commands\n\nEvery command as run (`python` = the project's venv interpreter; paths relative to "
               "the repository, `$SITE_PACKAGES` = the environment's site-packages, `$PYSERINI_EXT_DATA` = the "
               "datasets folder, `$WORK` = a work folder outside the repository), per corpus:\n")
    for group, commands in runner.commands.items():
        unique = list(dict.fromkeys(commands))
        out.append(f"### {group}\n\n```bash\n" + "\n".join(unique) + "\n```\n")
    out.append(training_section(repro.model_dirs, display))
    return atomic_write_text(path, display.text("\n".join(out)))

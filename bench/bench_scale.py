"""Scaling curves of the three models' index builds and searches, N = 30k ... 1M passages, and what they imply for
MS MARCO passage (8.8M): writes docs/scale-results.md (table, extrapolation) and docs/scale.png (generated; the
hand-written docs/scale.md explains them).

Each model's rows come from its own script (bench/scale_aligner.py, scale_aggretriever.py, scale_deepct.py), every
build and search in a process of its own (peak RSS from wait4). The rows are kept per model beside the page
(docs/scale-results.json, committed), so `--models deepct` remeasures one model and keeps the others' rows, also in
a fresh clone; each script caches its own steps under WORK.

    python -m bench.bench_scale                               # every model, 30k,100k,300k,1M (hours on 2 cores)
    python -m bench.bench_scale --sizes 30000,100000 --models aligner,deepct
    python -m bench.bench_scale --models ""                   # render the kept rows only
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"aligner": "bench.scale_aligner", "aggretriever": "bench.scale_aggretriever", "deepct": "bench.scale_deepct"}
MSMARCO = 8_841_823
# columns shown when a model's rows have them, in this order
COLUMNS = ("model", "variant", "N", "source", "codec", "candidates", "nlist", "nprobe", "index_type", "build_s",
           "build_cpu_s", "build_rss_mb", "ray_build_s", "ray_driver_rss_mb", "ray_same", "index_mb", "bytes_per_token",
           "bytes_per_passage", "ram_mb", "ram_bytes_per_passage", "search_rss_mb", "search_rss_anon_mb", "p50_ms",
           "p95_ms", "p50_cpu_ms", "p95_cpu_ms", "p50_cold_ms", "touched_pct",
           "recall_at_10_vs_exact", "recall_at_10_vs_exact_dl20", "ndcg_at_10", "ndcg_at_10_exact")


def table(rows: list[dict]) -> str:
    columns = [c for c in COLUMNS if any(c in r for r in rows)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def slope_at(rows: list[dict], key: str, n: int, power: bool = False) -> float | None:
    """`key` at N = n from the two largest measured sizes: linear in N, or a power law (log-log) when `power`. Of
    two rows at one N (DeepCT's text and synthetic rows), the later one counts, as it does at the larger sizes."""
    points = sorted({r["N"]: r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] > 0}.items())
    if len(points) < 2:
        return None
    (n1, y1), (n2, y2) = points[-2], points[-1]
    if power:
        # no slower than flat: a timing that fell between two sizes is noise of a shared machine
        exponent = max(0.0, math.log(y2 / y1) / math.log(n2 / n1))
        return y2 * (n / n2) ** exponent
    linear = y2 + (y2 - y1) / (n2 - n1) * (n - n2)
    # a falling slope (a smaller size measured on a busier machine) says nothing: scale the largest size instead
    return linear if linear >= y2 else y2 * n / n2


def extrapolation(rows: list[dict]) -> str:
    lines = ["| model / variant | index GB | of it in RAM GB | build peak RSS GB | index-stage build hours (2 cores) "
             "| query p50 ms |", "|---|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['model']} {r.get('variant', '')}".strip(), []).append(r)
    for name, group in groups.items():
        # CPU time where a script measured it: on a loaded machine, wall time mostly measures the neighbours
        cpu = any("build_cpu_s" in r for r in group)
        index_mb = slope_at(group, "index_mb", MSMARCO)
        # what search holds in RAM where a row says (memory-mapped refine vectors are not), else the whole index
        ram_mb = slope_at(group, "ram_mb", MSMARCO) if any("ram_mb" in r for r in group) else index_mb
        rss = max((r["build_rss_mb"] for r in group if "build_rss_mb" in r), default=None)
        hours = slope_at(group, "build_cpu_s" if cpu else "build_s", MSMARCO)
        p50 = slope_at(group, "p50_cpu_ms" if cpu else "p50_ms", MSMARCO, power=True)
        lines.append(f"| {name} | {index_mb / 1024:.1f} | {ram_mb / 1024:.1f} | {rss / 1024:.2f} | {hours / 3600:.1f} "
                     f"| {p50:.0f} |" if None not in (index_mb, ram_mb, rss, hours, p50)
                     else f"| {name} | (needs two sizes) | | | | |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("build_rss_mb", "build peak RSS (MB)"), ("index_mb", "index (MB)"), ("p50_ms", "query p50 (ms)"))
    figure, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['model']} {r.get('variant', '')}".strip(), []).append(r)
    for ax, (key, label) in zip(axes, panels):
        for name, group in groups.items():
            points = sorted((r["N"], r[key]) for r in group if key in r)
            if points:
                ax.plot(*zip(*points), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("passages (N)")
        ax.set_title(label)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def read_kept(path: Path) -> dict[str, list[dict]]:
    return json.loads(path.read_text()) if path.is_file() else {}


def keep(path: Path, kept: dict[str, list[dict]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(kept, indent=1) + "\n")
    os.replace(tmp, path)  # never half a file, should two runs write at once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30000,100000,300000,1000000")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--work", default=str(ROOT / "runs" / "scale"))
    parser.add_argument("--output", default=str(ROOT / "docs" / "scale-results.md"),
                        help="the page; its rows are kept beside it (same name, .json) and its plot as scale.png")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray builds")
    args = parser.parse_args()
    work, output = Path(args.work).resolve(), Path(args.output)
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [name.strip() for name in args.models.split(",") if name.strip()]  # --models "": render the kept rows
    if unknown := [name for name in names if name not in MODELS]:
        parser.error(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(MODELS)})")
    kept_file = output.with_suffix(".json")
    for name in names:
        try:
            script = importlib.import_module(MODELS[name])
        except ModuleNotFoundError as missing:
            if missing.name != MODELS[name]:
                raise
            print(f"bench_scale: no rows for {name}: {MODELS[name].replace('.', '/')}.py is not in this checkout",
                  file=sys.stderr)
            continue
        work.mkdir(parents=True, exist_ok=True)
        found = script.rows(sizes, work, ray=False) if args.no_ray else script.rows(sizes, work)
        # read again just before writing: a run for another model may have written its rows meanwhile
        keep(kept_file, {**read_kept(kept_file), name: found})  # after each model: a later failure keeps it
    kept = read_kept(kept_file)
    rows = [r for name in MODELS for r in kept.get(name, [])]
    plot(rows, output.with_name("scale.png"))
    output.write_text(
        "# Scaling curves (generated by `python -m bench.bench_scale`; do not edit, see docs/scale.md)\n\n"
        + table(rows) + "\n\n![scaling curves](scale.png)\n\n## MS MARCO passage (8,841,823 passages), "
        "extrapolated from the two largest sizes\n\nIndex bytes and build time linear in N, query p50 as a power "
        "law, build RSS the largest measured (bounded builds). Where a model's rows have CPU times (build_cpu_s, "
        "p50_cpu_ms: the build process's and the search thread's own), those are extrapolated: wall times on a "
        "shared machine mostly measure the neighbours.\n\n" + extrapolation(rows) + "\n")
    print(table(rows))
    print(extrapolation(rows))


if __name__ == "__main__":
    main()

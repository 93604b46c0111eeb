"""`make bench`: runs every benchmark of bench/ once (each prints ours beside its baseline, with ratios), then writes
docs/bench-results.md with a plot (docs/bench.png), and the scaling curves (docs/scale-results.md, by
bench/bench_scale.py). Only those generated files are rewritten: docs/bench.md is hand-written and links to them.

    python -m bench.make_report [--corpus-encodings runs/report/full]   # the figures (hours at the scale sizes)
    python -m bench.make_report --quick                                 # every script at tiny sizes: a smoke run

`--quick` writes to runs/bench-quick/ unless `--output-dir` says otherwise, never to docs/; its figures only show
that every script runs and measures. `--corpus-encodings` adds AligneR search over the whole SciFact and
DL19-subset corpora, from the default model's encodings that `make report` caches there
(`<dataset>/aligner.<model>-<hash>.encoded.npz`).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.common import ROOT, child_env, module_command

DOCS = ROOT / "docs"


def repository_relative(text: str) -> str:
    """`text` with this checkout's and this user's paths written relative (`.venv/...`, `~/...`): a committed
    file names no path of the machine that wrote it."""
    return text.replace(f"{ROOT}{os.sep}", "").replace(str(ROOT), ".").replace(str(Path.home()), "~")


def corpus_encoding(folder: Path, dataset: str) -> Path:
    """The cached encoding of `dataset` by the default AligneR model (the one `make report` made)."""
    from pyserini_ext.models.folder import resolve_model
    from pyserini_ext.repro.runner import model_tag

    path = folder / dataset / f"aligner.{model_tag(Path(resolve_model('aligner', 'aligner')))}.encoded.npz"
    if not path.is_file():
        raise SystemExit(f"{path}: no encoding of {dataset} by the default AligneR model; run `make report` first")
    return path


def plan(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(label, module, arguments) of every benchmark, in the order they run. `--quick` runs each script at tiny
    sizes with one of our sides beside its baseline (tests/test_bench.py runs it in the default suite)."""
    quick = args.quick
    docs = "60" if quick else "800"
    queries = ["--queries", "20"] if quick else []
    ours = ["--sides", "ours torch fp32"] if quick else []
    small = "resources/models/aggretriever-splade-tiny"  # quick: the smallest shipped Aggretriever (hidden 128)
    lengths = ("128",) if quick else ("256", "512")
    steps = [(f"aggretriever-{length}", "bench_aggretriever",
              ["--passages", "16" if quick else "1000", "--max-length", length, "--rounds", "1" if quick else "3",
               *ours]) for length in lengths]
    steps += [
        ("query-latency", "bench_query_latency", ["--queries", "20" if quick else "300", *ours]),
        ("precision", "bench_precision_quality", ["--docs", docs, *queries, *(
            ["--models", "Aggretriever", "--settings", "onnx int8", "--aggretriever", small] if quick else [])]),
        ("aligner-search", "bench_aligner_search", ["--docs", docs, *queries, "--compressed", "pq16x8,nprobe4",
                                                    *([] if quick else ["pq32x6,nprobe4"])]),
    ]
    if args.corpus_encodings:
        for dataset, split, folder in (("scifact", "test", "scifact"), ("msmarco-dl19-subset", "dl19", "dl19")):
            steps.append((f"aligner-search-{folder}", "bench_aligner_search", [
                "--dataset", dataset, "--split", split, "--docs", "10000000", "--encoded",
                str(corpus_encoding(args.corpus_encodings.resolve(), folder)), "--compressed", "pq16x8,nprobe4",
                "pq32x6,nprobe4"]))
    steps += [
        ("train-step", "bench_aggretriever_train_step", ["--steps", "1", "--precision", "fp32", "--model", small]
         if quick else ["--steps", "5"]),
        ("ray", "bench_scale_ray", ["--docs", "32" if quick else "600"]),
        ("deepct-index", "bench_deepct_index", ["--docs", docs]),
        ("server", "bench_server", ["--requests", "20", "--concurrency", "2", "--passages", "50"] if quick else
         ["--requests", "500", "--concurrency", "8"]),
        ("startup", "bench_startup", ["--runs", "1", "--commands", "pyserini.encode --help"] if quick else
         ["--runs", "5"]),
    ]
    return [step for step in steps if not args.only or step[1] in args.only]


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's finished children: what a step cost, whatever the load."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(label: str, module: str, arguments: list[str], out: Path) -> tuple[str, dict, dict]:
    """One benchmark in a process of its own: what it printed (for the page), its figures, its wall and CPU
    seconds."""
    started, cpu = time.perf_counter(), children_cpu_seconds()
    done = subprocess.run([*module_command(module), *arguments, "--json", str(out)], capture_output=True, text=True,
                          cwd=ROOT, env=child_env())
    seconds = {"wall": round(time.perf_counter() - started, 1), "cpu": round(children_cpu_seconds() - cpu, 1)}
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"bench/{module}.py ({label}) failed with exit code {done.returncode} (its error above)")
    shown = [os.path.relpath(a, ROOT) if os.path.isabs(a) else a for a in arguments]  # as typed from the repository
    command = f"$ python -m bench.{module} {shlex.join(shown)}"
    print(f"{command}   [{seconds['wall']:.0f} s, {seconds['cpu']:.0f} CPU s]\n{done.stdout}", flush=True)
    return f"{command}\n{done.stdout}", json.loads(out.read_text()), seconds


def scale(args: argparse.Namespace, output_dir: Path) -> dict:
    """bench/bench_scale.py: its own page (scale-results.md + .json + scale.png in `output_dir`)."""
    started, cpu = time.perf_counter(), children_cpu_seconds()
    if args.quick:  # DeepCT's text build only (its synthetic rows start at 30,000), no Ray
        arguments = ["--sizes", "1000", "--models", "deepct", "--no-ray", "--work", str(output_dir / "scale-work")]
    else:
        arguments = ["--sizes", args.scale_sizes]
    subprocess.run([*module_command("bench_scale"), *arguments, "--output", str(output_dir / "scale-results.md")],
                   check=True, cwd=ROOT, env=child_env())
    return {"wall": round(time.perf_counter() - started, 1), "cpu": round(children_cpu_seconds() - cpu, 1)}


def plot(figures: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encodings = [data for label, data in figures.items() if label.startswith("aggretriever-")]
    if not encodings:
        return
    figure, axes = plt.subplots(1, len(encodings), figsize=(5.5 * len(encodings), 4), squeeze=False)
    for data, axis in zip(encodings, axes[0]):
        sides = list(data["sides"])
        axis.bar(range(len(sides)), [data["sides"][s]["speedup"] for s in sides])
        axis.set_xticks(range(len(sides)), sides, rotation=30, ha="right")
        axis.set_ylabel("passages/s relative to Pyserini")
        axis.set_title(f"Aggretriever documents, max length {data['max_length']}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, not for the figures)")
    parser.add_argument("--corpus-encodings", type=Path, help="make report's work folder: whole-corpus AligneR runs")
    parser.add_argument("--scale-sizes", default="30000,100000,300000,1000000",
                        help="corpus sizes of bench_scale.py (docs/scale-results.md; hours at 1M on 2 cores)")
    parser.add_argument("--output-dir", type=Path,
                        help="where the pages go (default: docs/; with --quick: runs/bench-quick/)")
    parser.add_argument("--only", nargs="+", metavar="MODULE", help="only these benchmarks (e.g. bench_startup)")
    parser.add_argument("--no-scale", action="store_true", help="skip bench_scale.py (the scaling curves)")
    parser.add_argument("--json", type=Path, help="also write every benchmark's figures to this file")
    args = parser.parse_args()
    output_dir = args.output_dir or (ROOT / "runs" / "bench-quick" if args.quick else DOCS)
    output_dir.mkdir(parents=True, exist_ok=True)
    started, cpu = time.perf_counter(), children_cpu_seconds()
    pages, figures, seconds = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, module, arguments in plan(args):
            page, figures[label], seconds[label] = run(label, module, arguments, Path(tmp) / f"{label}.json")
            pages.append(page)
    if not args.no_scale and not args.only:
        seconds["scale"] = scale(args, output_dir)
    plot(figures, output_dir / "bench.png")
    (output_dir / "bench-results.md").write_text(
        "# Benchmark results (`make bench`)\n\n"
        "<!-- Generated by bench/make_report.py: `make bench` rewrites this whole file. Notes go in bench.md. -->\n\n"
        f"Written by `python -m bench.make_report{' --quick' if args.quick else ''}` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; every figure below is what one run of each script printed "
        "(baseline and ours in the same run, each side in its own process where the script says so). How to read "
        "them, and the runs on other machines: [bench.md](bench.md). The scaling curves: "
        "[scale-results.md](scale-results.md). The GPU checks (CUDA only) are in [gpu.md](gpu.md).\n\n"
        "![Aggretriever encoding speed-ups](bench.png)\n\n```\n" + repository_relative("\n".join(pages)) + "```\n")
    seconds["all"] = {"wall": round(time.perf_counter() - started, 1), "cpu": round(children_cpu_seconds() - cpu, 1)}
    if args.json:
        args.json.write_text(json.dumps({"quick": args.quick, "figures": figures, "seconds": seconds}, indent=1))
    # wall time on a shared machine mostly measures the neighbours; the CPU seconds are this run's own
    print(f"wrote {output_dir / 'bench-results.md'}: {seconds['all']['wall']:.0f} s, {seconds['all']['cpu']:.0f} CPU s "
          "(" + ", ".join(f"{label} {s['wall']:.0f} / {s['cpu']:.0f}" for label, s in seconds.items()
                          if label != "all") + ")")


if __name__ == "__main__":
    main()

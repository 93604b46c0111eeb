"""`make bench`: runs every benchmark once (each prints its own ratios), then writes docs/bench-results.md with a
plot (docs/bench.png). Only that generated file is rewritten: docs/bench.md is hand-written and links to it.

    .venv/bin/python bench/make_report.py [--quick] [--corpus-encodings runs/report/full]

`--corpus-encodings` adds AligneR search over the whole SciFact and DL19-subset corpora, from the default model's
encodings that `make report` caches there (`<dataset>/aligner.<model>-<hash>.encoded.npz`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOCS = ROOT / "docs"
RESULTS = DOCS / "bench-results.md"


def repository_relative(text: str) -> str:
    """`text` with this checkout's and this user's paths written relative (`.venv/...`, `~/...`): a committed
    file names no path of the machine that wrote it."""
    return text.replace(f"{ROOT}{os.sep}", "").replace(str(ROOT), ".").replace(str(Path.home()), "~")


def run(script: str, args: list[str], out: Path) -> tuple[str, dict]:
    command = [sys.executable, str(HERE / script), *args, "--json", str(out)]
    printed = subprocess.run(command, check=True, capture_output=True, text=True, cwd=HERE).stdout
    print(printed, flush=True)
    shown = [os.path.relpath(a, ROOT) if os.path.isabs(a) else a for a in args]  # as typed from the repository
    return f"$ python bench/{script} {' '.join(shown)}\n{printed}", json.loads(out.read_text())


def corpus_encoding(folder: Path, dataset: str) -> Path:
    """The cached encoding of `dataset` by the default AligneR model (the one `make report` made)."""
    from pyserini_ext.models.folder import resolve_model
    from pyserini_ext.repro.runner import model_tag

    path = folder / dataset / f"aligner.{model_tag(Path(resolve_model('aligner', 'aligner')))}.encoded.npz"
    if not path.is_file():
        raise SystemExit(f"{path}: no encoding of {dataset} by the default AligneR model; run `make report` first")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not for the figures)")
    parser.add_argument("--corpus-encodings", type=Path, help="make report's work folder: whole-corpus AligneR runs")
    parser.add_argument("--scale-sizes", default="30000,100000,300000,1000000",
                        help="corpus sizes of bench_scale.py (docs/scale-results.md; hours at 1M on 2 cores)")
    args = parser.parse_args()
    passages, docs = ("64", "200") if args.quick else ("1000", "800")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs = [run("bench_aggretriever.py", ["--passages", passages, "--max-length", length, "--rounds",
                                              "1" if args.quick else "3"], tmp / f"agg{length}.json")
                for length in ("256", "512")]
        runs.append(run("bench_query_latency.py", ["--queries", "300"], tmp / "query.json"))
        runs.append(run("bench_decoder_product.py", ["--threads", "2"], tmp / "decoder.json"))
        runs.append(run("bench_vocabulary_kernel.py", ["--threads", "2"], tmp / "kernel.json"))
        runs.append(run("bench_precision_quality.py", ["--docs", docs], tmp / "precision.json"))
        runs.append(run("bench_aligner_search.py", ["--docs", docs, "--compressed", "pq16x8,nprobe4", "pq32x6,nprobe4"],
                        tmp / "aligner.json"))
        if args.corpus_encodings:
            for dataset, split, folder in (("scifact", "test", "scifact"), ("msmarco-dl19-subset", "dl19", "dl19")):
                runs.append(run("bench_aligner_search.py", [
                    "--dataset", dataset, "--split", split, "--docs", "10000000", "--encoded",
                    str(corpus_encoding(args.corpus_encodings.resolve(), folder)), "--compressed", "pq16x8,nprobe4",
                    "pq32x6,nprobe4"], tmp / f"aligner-{folder}.json"))
        runs.append(run("bench_aggretriever_train_step.py", ["--steps", "2" if args.quick else "5"],
                        tmp / "train_step.json"))
        runs.append(run("bench_scale_ray.py", ["--docs", "64" if args.quick else "600"], tmp / "ray.json"))
        deepct = subprocess.run([sys.executable, str(HERE / "bench_deepct_index.py"), "--docs", docs],
                                check=True, capture_output=True, text=True, cwd=HERE).stdout
        print(deepct)
        startup = subprocess.run([sys.executable, str(HERE / "bench_startup.py"), "--runs", "3" if args.quick else "5"],
                                 check=True, capture_output=True, text=True, cwd=HERE).stdout
        print(startup)
        # its own generated page: docs/scale-results.md + docs/scale.png
        subprocess.run([sys.executable, str(HERE / "bench_scale.py"), "--sizes",
                        "30000" if args.quick else args.scale_sizes], check=True, cwd=HERE)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (_, data), axis in zip(runs[:2], axes):
        sides = list(data["sides"])
        axis.bar(range(len(sides)), [data["sides"][s]["speedup"] for s in sides])
        axis.set_xticks(range(len(sides)), sides, rotation=30, ha="right")
        axis.set_ylabel("passages/s relative to Pyserini")
        axis.set_title(f"Aggretriever documents, max length {data['max_length']}")
    figure.tight_layout()
    figure.savefig(DOCS / "bench.png", dpi=100)
    printed = "\n".join(text for text, _ in runs) + "\n$ python bench/bench_deepct_index.py --docs " + docs + \
        "\n" + deepct + "\n$ python bench/bench_startup.py\n" + startup
    RESULTS.write_text(
        "# Benchmark results (`make bench`)\n\n"
        "<!-- Generated by bench/make_report.py: `make bench` rewrites this whole file. Notes go in bench.md. -->\n\n"
        f"Written by `bench/make_report.py` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; every figure "
        "below is what one run of each script printed (baseline and ours in the same run, each side in its own "
        "process where the script says so). How to read them, and the runs on other machines: [bench.md](bench.md). "
        "The GPU checks (CUDA only) are in [gpu.md](gpu.md).\n\n"
        "![Aggretriever encoding speed-ups](bench.png)\n\n```\n"
        + repository_relative(printed) + "```\n")


if __name__ == "__main__":
    main()

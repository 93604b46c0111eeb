"""Query encoding latency at batch 1 (what `pyserini.search.faiss` pays per query): Pyserini's Aggretriever
query encoder vs ours on every backend and precision, same weights, same SciFact queries, one run.

Each side runs in its own subprocess; every query is encoded once untimed (warm-up), then once timed.

    python -m bench.bench_query_latency --queries 300
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import SIDES, chosen_sides, demo_model, pyserini_encoder, run_side, side_arguments, write_json


def worker(side: str, model_dir: str, queries: int, threads: int, out: str) -> None:
    import torch

    from pyserini_ext.data import load_dataset
    from pyserini_ext.encode.aggretriever import AggretrieverQueryEncoder

    texts = list(load_dataset("scifact").queries.values())[:queries]
    options = SIDES[side]
    if options is None:
        encoder = pyserini_encoder(model_dir, "query")
    else:
        encoder = AggretrieverQueryEncoder(model_dir, device="cpu", threads=threads, **options)
    with torch.no_grad():
        for text in texts:
            encoder.encode(text, max_length=32)
        latencies = []
        for text in texts:
            start = time.perf_counter()
            encoder.encode(text, max_length=32)
            latencies.append(time.perf_counter() - start)
    Path(out + ".json").write_text(json.dumps({"latencies": latencies}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    side_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        worker(args.worker, args.model, args.queries, args.threads, args.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or demo_model(Path(tmp) / "model")
        latencies = {}
        for i, side in enumerate(chosen_sides(args.sides)):
            out = str(Path(tmp) / f"side{i}")
            run_side("bench_query_latency", side, args.threads, ["--model", model_dir, "--out", out,
                                                    "--queries", str(args.queries)])
            latencies[side] = np.array(json.loads(Path(out + ".json").read_text())["latencies"]) * 1000
    base = np.percentile(latencies["pyserini"], 50)
    print(f"Aggretriever query encoding at batch 1, {len(latencies['pyserini'])} SciFact queries, max length 32, "
          f"{args.threads} thread(s)")
    print(f"{'':16} {'p50 ms':>8} {'p99 ms':>8} {'p50 / Pyserini p50':>19}")
    rows = {}
    for side, ms in latencies.items():
        rows[side] = {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}
        rows[side]["p50_ratio"] = rows[side]["p50_ms"] / base
        print(f"{side:16} {rows[side]['p50_ms']:8.2f} {rows[side]['p99_ms']:8.2f} {rows[side]['p50_ratio']:18.2f}x")
    write_json(args.json, {"queries": args.queries, "threads": args.threads, "sides": rows})


if __name__ == "__main__":
    main()

"""Aggretriever document encoding: Pyserini's own encoder vs ours on every backend and precision, same weights,
same passages, one run.

Each side runs in its own fresh subprocess (one after the other, same thread count) so peak memory is that
side's alone. Prints passages/s, peak RSS and the growth of RSS during encoding, the speed-up over Pyserini, and
the max abs difference of the vectors from Pyserini's.

    python -m bench.bench_aggretriever --passages 1000 --max-length 256 --batch-size 32
"""
from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import (
    SIDES,
    chosen_sides,
    demo_model,
    memory_mb,
    pyserini_encoder,
    run_side,
    side_arguments,
    write_json,
)


def worker(side: str, model_dir: str, passages: int, max_length: int, batch_size: int, threads: int,
           out: str, position_chunk: int | None = None) -> None:
    import torch

    from pyserini_ext.data import load_dataset
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder

    docs = list(load_dataset("scifact").corpus.values())[:passages]
    options = SIDES[side]
    if options is None:
        encoder = pyserini_encoder(model_dir)
    else:
        encoder = AggretrieverDocumentEncoder(model_dir, device="cpu", threads=threads, position_chunk=position_chunk,
                                              **options)
    # outside the timing: an ONNX export, and torch.compile's build of the vocabulary kernel (on a full block of
    # positions, as every long passage has)
    warm_up = time.perf_counter()
    if options is not None:
        encoder.encode([" ".join(["warm-up"] * max_length)], max_length=max_length)
    warm_up = time.perf_counter() - warm_up
    rss_before = memory_mb("VmRSS")
    vectors = []
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(docs), batch_size):
            batch = docs[i:i + batch_size]
            vectors.append(encoder.encode([d["text"] for d in batch], titles=[d["title"] for d in batch],
                                          max_length=max_length))
    seconds = time.perf_counter() - start
    np.save(out + ".npy", np.concatenate(vectors))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out + ".json").write_text(json.dumps({"seconds": seconds, "passages": len(docs), "peak_rss_mb": peak,
                                               "encode_growth_mb": peak - rss_before, "warm_up_s": warm_up}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every side this many times, one round of all sides after another, and report each "
                             "side's median time: on a shared machine the speed of both sides drifts over minutes")
    parser.add_argument("--position-chunk", type=int,
                        help="our encoders' positions per MLM-head block (default: the runtime's choice per precision)")
    side_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        worker(args.worker, args.model, args.passages, args.max_length, args.batch_size, args.threads, args.out,
               args.position_chunk)
        return

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or demo_model(Path(tmp) / "model")
        results = {}
        sides = chosen_sides(args.sides)
        for round_ in range(args.rounds):
            for i, side in enumerate(sides):
                out = str(Path(tmp) / f"side{i}")
                chunk = ["--position-chunk", str(args.position_chunk)] if args.position_chunk else []
                run_side("bench_aggretriever", side, args.threads, [
                    *chunk, "--model", model_dir, "--out", out, "--passages", str(args.passages), "--max-length",
                    str(args.max_length), "--batch-size", str(args.batch_size)])
                run = json.loads(Path(out + ".json").read_text())
                if round_ == 0:
                    results[side] = run | {"vectors": np.load(out + ".npy"), "all_seconds": []}
                results[side]["all_seconds"].append(run["seconds"])
        for r in results.values():
            r["seconds"] = float(np.median(r["all_seconds"]))
    p = results["pyserini"]
    print(f"Aggretriever documents: {Path(model_dir).name if args.model else 'splade-tiny lexical-only demo'} "
          f"model, {p['passages']} SciFact passages, max length {args.max_length}, batch {args.batch_size}, "
          f"{args.threads} threads, median of {args.rounds} round(s)"
          + (f", {args.position_chunk} positions per MLM-head block" if args.position_chunk else ""))
    print(f"{'':16} {'passages/s':>11} {'peak RSS MB':>12} {'RSS growth MB':>14} {'speed-up':>9} "
          f"{'peak RSS ratio':>15} {'max abs diff':>13}")
    rows = {}
    for side, r in results.items():
        rows[side] = {"passages_per_s": r["passages"] / r["seconds"], "speedup": p["seconds"] / r["seconds"],
                      "peak_rss_mb": r["peak_rss_mb"], "rss_ratio": r["peak_rss_mb"] / p["peak_rss_mb"],
                      "max_abs_diff": float(np.abs(r["vectors"] - p["vectors"]).max()),
                      "passages_per_s_each_round": [r["passages"] / t for t in r["all_seconds"]],
                      "warm_up_s": r["warm_up_s"]}
        row = rows[side]
        print(f"{side:16} {row['passages_per_s']:11.2f} {r['peak_rss_mb']:12.0f} {r['encode_growth_mb']:14.0f} "
              f"{row['speedup']:8.2f}x {row['rss_ratio']:15.3f} {row['max_abs_diff']:13.2e}")
    write_json(args.json, {"max_length": args.max_length, "passages": args.passages, "threads": args.threads,
                           "rounds": args.rounds, "sides": rows})


if __name__ == "__main__":
    main()

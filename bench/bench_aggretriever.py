"""Aggretriever document encoding: Pyserini's own encoder vs ours (torch and ONNX Runtime backends), same
weights, same passages, one run.

Each side runs in its own fresh subprocess (one after the other, same thread count) so peak memory is that
side's alone. Prints passages/s, peak RSS and the growth of RSS during encoding, their ratios, and the max
abs difference between the two sets of vectors.

    .venv/bin/python bench/bench_aggretriever.py --passages 1000 --max-length 256 --batch-size 32
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIDES = ("pyserini", "ours", "ours-onnx")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _pyserini_encoder(model_dir: str):
    """Pyserini's AggretrieverDocumentEncoder with our checkpoint's weights (its own loader fails on
    transformers 5, so the model is built from the config and given the state dict)."""
    from pyserini.encode import _aggretriever as agg
    from transformers import AutoConfig, AutoTokenizer

    from pyserini_ext.models.aggretriever import _read_state_dict

    config = AutoConfig.from_pretrained(model_dir, output_hidden_states=True)
    model = agg.BertAggretrieverEncoder(config)
    model.load_state_dict(_read_state_dict(Path(model_dir)))
    encoder = agg.AggretrieverDocumentEncoder.__new__(agg.AggretrieverDocumentEncoder)
    encoder.model, encoder.device = model.eval(), "cpu"
    encoder.tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return encoder


def worker(side: str, model_dir: str, passages: int, max_length: int, batch_size: int, out: str) -> None:
    import torch

    from pyserini_ext.data import load_dataset
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
    from pyserini_ext.encode.aggretriever_onnx import AggretrieverOnnxDocumentEncoder

    docs = list(load_dataset("scifact").corpus.values())[:passages]
    if side == "pyserini":
        encoder = _pyserini_encoder(model_dir)
    elif side == "ours-onnx":
        encoder = AggretrieverOnnxDocumentEncoder(model_dir, threads=torch.get_num_threads())
        encoder.encode(["warm-up"], max_length=8)  # the ONNX export happens here, outside the timing
    else:
        encoder = AggretrieverDocumentEncoder(model_dir, device="cpu")
    rss_before = _rss_mb()
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
                                               "encode_growth_mb": peak - rss_before}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        worker(args.worker, args.model_dir, args.passages, args.max_length, args.batch_size, args.out)
        return

    from transformers import AutoTokenizer

    from pyserini_ext.models.aggretriever import from_masked_lm
    from pyserini_ext.models.backbones import backbone_path

    with tempfile.TemporaryDirectory() as tmp:
        backbone = backbone_path("splade-tiny")
        model_dir = str(from_masked_lm(backbone, constant_term_weight=1.0, zero_cls=True)
                        .save_pretrained(Path(tmp) / "model", AutoTokenizer.from_pretrained(backbone)))
        results = {}
        for side in SIDES:
            out = str(Path(tmp) / side)
            subprocess.run([sys.executable, __file__, "--worker", side, "--model-dir", model_dir, "--out", out,
                            "--passages", str(args.passages), "--max-length", str(args.max_length),
                            "--batch-size", str(args.batch_size), "--threads", str(args.threads)],
                           check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
            results[side] = json.loads(Path(out + ".json").read_text())
            results[side]["vectors"] = np.load(out + ".npy")
    p = results["pyserini"]
    print(f"splade-tiny backbone, {p['passages']} SciFact passages, max length {args.max_length}, "
          f"batch {args.batch_size}, {args.threads} threads")
    print(f"{'':10} {'passages/s':>11} {'peak RSS MB':>12} {'RSS growth MB':>14} {'speed-up':>9} "
          f"{'peak RSS ratio':>15} {'max abs diff':>13}")
    for side in SIDES:
        r = results[side]
        print(f"{side:10} {r['passages'] / r['seconds']:11.2f} {r['peak_rss_mb']:12.0f} {r['encode_growth_mb']:14.0f} "
              f"{p['seconds'] / r['seconds']:8.2f}x {r['peak_rss_mb'] / p['peak_rss_mb']:15.3f} "
              f"{np.abs(r['vectors'] - p['vectors']).max():13.2e}")


if __name__ == "__main__":
    main()

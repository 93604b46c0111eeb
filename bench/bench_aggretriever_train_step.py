"""Aggretriever training step: autograd through v (the reference) vs the sparse backward (`weighted_softmax_slice_max`).

One step of the shipped recipe's shape: 8 queries (32 tokens) and 24 passages (128 tokens) of SciFact, forward
and backward of a loss on the concatenated vectors, the two paths alternated in one process on the same model
and inputs; prints the median seconds per step of each and the ratio, and the largest gradient difference.

    python -m bench.bench_aggretriever_train_step [--model FOLDER] [--steps 5] [--precision fp32 bf16]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from transformers import AutoTokenizer

from bench.common import model_folder, write_json
from pyserini_ext.data import document_text, load_dataset
from pyserini_ext.models.aggretriever import Aggretriever, fold_slices, slice_max, slice_width
from pyserini_ext.train.aggretriever import PASSAGE_MAX_LENGTH, QUERY_MAX_LENGTH


def reference_forward(model: Aggretriever, input_ids, mask):
    """What training computed before: v from [N, vocab] products, then the slice max, all through autograd."""
    hidden = model.mlm_head.hidden_states(input_ids, mask)
    full = model.config.pooling != "agg+"
    agg = fold_slices(slice_max(model.lexical(input_ids, mask, hidden), slice_width(model.config.agg_dim, full)),
                      full)
    return torch.cat((model.dense(mask, hidden), agg), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="Aggretriever folder (default: the shipped one)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps of each path (after one warm-up each)")
    parser.add_argument("--precision", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", help="also write the figures to this file (for `make bench`)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder = model_folder("aggretriever", args.model, "aggretriever_config.json")
    model = Aggretriever.from_pretrained(folder).train()
    for module in model.modules():  # the same network on both paths
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    tokenizer = AutoTokenizer.from_pretrained(folder)
    scifact = load_dataset("scifact")
    queries = [scifact.queries[q] for q in sorted(scifact.queries)[:8]]
    passages = [document_text(scifact.corpus[d]) for d in sorted(scifact.corpus)[:24]]
    batches = [tokenizer(texts, max_length=length, truncation=True, padding="longest", return_tensors="pt")
               for texts, length in ((queries, QUERY_MAX_LENGTH), (passages, PASSAGE_MAX_LENGTH))]
    generator = torch.Generator().manual_seed(0)
    probes = [torch.randn(len(b["input_ids"]), model.config.cls_dim + model.config.agg_dim, generator=generator)
              for b in batches]
    print(f"Aggretriever training step, {folder}: {len(queries)} queries x {QUERY_MAX_LENGTH} + {len(passages)} "
          f"passages x {PASSAGE_MAX_LENGTH} tokens, {args.threads} threads, median of {args.steps} steps")
    print(f"{'precision':10} {'reference s':>12} {'sparse s':>9} {'speed-up':>9} {'max grad diff':>14}")
    report = {}
    for precision in args.precision:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

        def step(forward, autocast=autocast) -> tuple[float, dict]:
            model.zero_grad()
            start = time.perf_counter()
            with autocast:
                loss = sum((forward(model, b["input_ids"], b["attention_mask"]) * p).sum()
                           for b, p in zip(batches, probes))
            loss.backward()
            seconds = time.perf_counter() - start
            return seconds, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

        times = {"reference": [], "sparse": []}
        grads = {}
        for repeat in range(args.steps + 1):  # alternated; the first of each is a warm-up
            for name, forward in (("reference", reference_forward), ("sparse", Aggretriever.__call__)):
                seconds, grads[name] = step(forward)
                if repeat:
                    times[name].append(seconds)
        diff = max((grads["sparse"][n] - g).abs().max().item() for n, g in grads["reference"].items())
        reference, sparse = np.median(times["reference"]), np.median(times["sparse"])
        print(f"{precision:10} {reference:12.3f} {sparse:9.3f} {reference / sparse:8.2f}x {diff:14.2e}", flush=True)
        report[precision] = {"reference_s": float(reference), "sparse_s": float(sparse),
                             "speedup": float(reference / sparse), "max_grad_diff": diff}
    write_json(args.json, report)


if __name__ == "__main__":
    main()

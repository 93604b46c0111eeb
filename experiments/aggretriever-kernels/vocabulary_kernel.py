"""What the Aggretriever does with one block of logits, before and after the log-space kernel, in one run.

Per block of [64 positions, 30,522] logits (random, both term-weight signs), milliseconds for:
  * `v then slices` (baseline, the encoder until commit 948fde8): softmax in place, weighting, max over the
    positions into v, then agg*'s slice max;
  * `log space, eager`: `position_slice_maxima` (slice extrema of the logits, logsumexp), plain torch;
  * `log space, compiled`: the same through `torch.compile`, as the encoder runs full blocks on CPU.
The outputs are checked against each other; ratios are baseline / ours.

    .venv/bin/python experiments/aggretriever-kernels/vocabulary_kernel.py --threads 2
"""
from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch

from pyserini_ext import hardware
from pyserini_ext.models.aggretriever import block_slice_maxima, position_slice_maxima, slice_max

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder's decoder_product.py
from decoder_product import milliseconds  # noqa: E402

VOCAB, WIDTH = 30522, 1280  # BERT's vocabulary, agg*'s 2 x 640 slices (with the released rule's padding)


def baseline(logits: torch.Tensor, weights: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """[1, WIDTH]: max over the block's positions of slice_max(softmax * w), through v, as before."""
    block.copy_(logits)
    torch.ops.aten._softmax.out(block, -1, False, out=block)
    block.mul_(weights[:, None])
    return slice_max(block.amax(0, keepdim=True), WIDTH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    dtypes = [torch.float32] + ([torch.bfloat16] if hardware.native_bfloat16("cpu") else [])
    print(f"one block of [{args.rows}, {VOCAB}] logits -> agg* slice maxima, {args.threads} thread(s), "
          f"mean of {args.repeats}")
    print(f"{'logits':9} {'v then slices':>14} {'log space, eager':>17} {'log space, compiled':>20} "
          f"{'eager x':>8} {'compiled x':>11}")
    rows = {}
    for dtype in dtypes:
        logits = (torch.randn(args.rows, VOCAB, generator=generator) * 4).to(dtype)
        weights = torch.randn(args.rows, generator=generator)
        block = torch.empty(args.rows, VOCAB, dtype=dtype)
        expected = baseline(logits, weights, block).float()
        for ours in (position_slice_maxima(logits, weights, WIDTH),
                     block_slice_maxima(logits, weights, WIDTH, full_block=True)):
            # bfloat16's baseline rounds the probabilities to bfloat16; ours works in float32 from the logits on
            tolerance = 1e-5 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(ours.amax(0, keepdim=True), expected, rtol=tolerance, atol=1e-7)
        times = {"baseline_ms": milliseconds(partial(baseline, logits, weights, block), args.repeats),
                 "eager_ms": milliseconds(partial(position_slice_maxima, logits, weights, WIDTH), args.repeats),
                 "compiled_ms": milliseconds(partial(block_slice_maxima, logits, weights, WIDTH, full_block=True),
                                             args.repeats)}
        name = str(dtype).removeprefix("torch.")
        rows[name] = times
        print(f"{name:9} {times['baseline_ms']:11.3f} ms {times['eager_ms']:14.3f} ms {times['compiled_ms']:17.3f} ms "
              f"{times['baseline_ms'] / times['eager_ms']:7.2f}x {times['baseline_ms'] / times['compiled_ms']:10.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": args.rows, "threads": args.threads, "dtypes": rows}, indent=1))


if __name__ == "__main__":
    main()

"""Which library computes the MLM head's vocabulary product fastest on this CPU, in one run.

The product [positions, hidden + 1] x [hidden + 1, vocab] (splade-tiny: 129 x 30,522, 64 positions per block) is
most of an Aggretriever encoding's time. torch computes it with MKL, whose code paths on non-Intel CPUs can be
slow; ONNX Runtime's own kernels (MLAS) run the ONNX backend. This prints both, and torch's float32 alternatives,
as milliseconds per block and as a ratio to torch's matrix product, so a user can tell whether the ONNX backend
(`aggretriever-onnx`, `--backend onnx`) pays off on their machine.

    .venv/bin/python experiments/aggretriever-kernels/decoder_product.py --threads 2
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

from pyserini_ext import hardware


def milliseconds(run, repeats: int) -> float:
    for _ in range(3):
        run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--positions", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=129)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    weight = torch.randn(args.vocab, args.hidden) * 0.05
    rows = torch.randn(args.positions, args.hidden)
    # the decoder as the Aggretriever holds it: contiguous [hidden (+ 1 for the bias), vocab] columns; and one inner
    # row fewer, the layout without the folded bias
    columns, fewer = weight.T.contiguous(), weight[:, :-1].T.contiguous()
    rows_fewer = rows[:, :-1].contiguous()
    results = {"torch matmul (float32)": milliseconds(lambda: torch.mm(rows, columns), args.repeats),
               f"torch matmul (float32, {args.hidden - 1} inner)": milliseconds(lambda: torch.mm(rows_fewer, fewer),
                                                                             args.repeats)}
    if hardware.native_bfloat16("cpu"):
        columns16, rows16, fewer16, rows_fewer16 = (t.bfloat16() for t in (columns, rows, fewer, rows_fewer))
        results["torch matmul (bfloat16)"] = milliseconds(lambda: torch.mm(rows16, columns16), args.repeats)
        results[f"torch matmul (bfloat16, {args.hidden - 1} inner)"] = milliseconds(
            lambda: torch.mm(rows_fewer16, fewer16), args.repeats)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["rows", "weight"], ["logits"])], "decoder",
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [None, args.hidden])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, args.vocab])],
        [numpy_helper.from_array(weight.T.contiguous().numpy(), "weight")])
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                   .SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {"rows": rows.numpy()}
    results["ONNX Runtime MatMul (float32)"] = milliseconds(lambda: session.run(None, feed), args.repeats)
    flops = 2 * args.positions * args.hidden * args.vocab
    base = results["torch matmul (float32)"]
    print(f"[{args.positions}, {args.hidden}] x [{args.hidden}, {args.vocab}], {args.threads} threads, "
          f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"bfloat16 kernels {'yes' if hardware.native_bfloat16('cpu') else 'no'}")
    print(f"{'':36} {'ms':>7} {'GFLOP/s':>8} {'speed-up vs torch fp32':>23}")
    for name, ms in results.items():
        print(f"{name:36} {ms:7.2f} {flops / ms / 1e6:8.1f} {base / ms:22.2f}x")
    np.testing.assert_allclose(session.run(None, feed)[0], (rows @ weight.T).numpy(), rtol=1e-4, atol=1e-4)
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "positions": args.positions,
                                               "milliseconds": results}, indent=1))


if __name__ == "__main__":
    main()

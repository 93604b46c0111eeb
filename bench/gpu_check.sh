#!/usr/bin/env bash
# GPU check (one GPU, < 5 minutes): torch fp16/bf16 and ONNX Runtime CUDA encodings of 10k SciFact passages for
# the three models, parity against CPU fp32 on the first 256, throughput. Needs CUDA torch; the ONNX lines need
# onnxruntime-gpu (they report the missing provider otherwise). Never run in this project so far: no GPU was lent.
#   bash bench/gpu_check.sh [N_PASSAGES]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
N=${1:-10000}
.venv/bin/python - "$N" <<'PY'
import sys, time, glob
import numpy as np, torch
from pyserini_ext.data import load_dataset
from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
from pyserini_ext.encode.aligner import AlignerDocumentEncoder
from pyserini_ext.encode.deepct import RuntimeDeepCTModel
from pyserini_ext.encode.runtime import EncoderRuntime
assert torch.cuda.is_available(), "no CUDA device"
n = int(sys.argv[1])
docs = list(load_dataset("scifact").corpus.values())[:n]
texts = [f"{d['title']} {d['text']}" for d in docs]
models = {k: sorted(glob.glob(f"resources/models/{k}*"))[0] for k in ("aggretriever", "deepct", "aligner")}
def agg(options):
    e = AggretrieverDocumentEncoder(models["aggretriever"], **options)
    return lambda t: np.concatenate([e.encode(t[i:i + 64], max_length=256) for i in range(0, len(t), 64)])
def deepct(options):
    m = RuntimeDeepCTModel(models["deepct"], EncoderRuntime(**options))
    return lambda t: np.array([w for doc in m.word_weights(t, batch_size=128) for _, w in doc])
def aligner(options):
    e = AlignerDocumentEncoder(models["aligner"], **options)
    return lambda t: np.concatenate([e.encode(t[i:i + 64]) for i in range(0, len(t), 64)])
for name, make in (("aggretriever", agg), ("deepct", deepct), ("aligner", aligner)):
    reference = make({"device": "cpu"})(texts[:256])
    for label, options in (("torch fp16", {"device": "cuda", "precision": "float16"}),
                           ("torch bf16", {"device": "cuda", "precision": "bfloat16"}),
                           ("onnx fp32 CUDA", {"device": "cuda", "backend": "onnx"})):
        try:
            run = make(options)
        except Exception as e:  # e.g. onnxruntime-gpu missing
            print(f"{name:13} {label:15} skipped: {e}"); continue
        diff = np.abs(run(texts[:256]) - reference).max()
        torch.cuda.synchronize(); start = time.perf_counter(); run(texts); torch.cuda.synchronize()
        print(f"{name:13} {label:15} {len(texts) / (time.perf_counter() - start):9.1f} passages/s  "
              f"max abs diff vs CPU fp32 {diff:.2e}", flush=True)
PY

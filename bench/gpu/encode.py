"""GPU encoding check (one GPU, < 5 minutes): torch fp32/fp16/bf16 and ONNX Runtime CUDA encodings of N passages
for the three shipped models; parity against CPU fp32 on the first 256 passages, and throughput.

    bash bench/gpu/check.sh encode [--passages 10000] [--corpus corpus.jsonl[.gz]] [--models-dir resources/models]

The corpus defaults to SciFact through the project's loader (5,183 passages: fewer than 10k, so the throughput
runs cycle through it to reach --passages). The device machine has no Pyserini (its package needs a JVM and is
over the transfer limit), and needs none: our encoders (encode/) know nothing of it; everything measured is our code
on torch / ONNX Runtime.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]


def _texts(corpus: str | None, count: int) -> list[str]:
    from pyserini_ext.data import load_dataset, read_corpus

    docs = read_corpus(corpus) if corpus else load_dataset("scifact").corpus
    texts = [f"{d['title']} {d['text']}".strip() for d in docs.values()]
    return list(itertools.islice(itertools.cycle(texts), count))


def encoders(models_dir: Path, batch: int):
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
    from pyserini_ext.encode.aligner import AlignerDocumentEncoder
    from pyserini_ext.encode.deepct import RuntimeDeepCTModel
    from pyserini_ext.encode.runtime import EncoderRuntime

    defaults = json.loads((models_dir / "defaults.json").read_text())

    def batched(encode):
        return lambda texts: np.concatenate([encode(texts[i:i + batch]) for i in range(0, len(texts), batch)])

    def aggretriever(options):
        encoder = AggretrieverDocumentEncoder(str(models_dir / defaults["aggretriever"]), **options)
        return batched(lambda t: encoder.encode(t, max_length=256))

    first_words: dict[int, list[str]] = {}  # DeepCT: the words of the first (CPU) run, by number of texts

    def deepct(options):
        model = RuntimeDeepCTModel(models_dir / defaults["deepct"], EncoderRuntime(**options))

        def weights(texts):  # the words must agree across runtimes; their weights are what is compared
            per_doc = model.word_weights(texts, batch_size=batch)
            words = [word for doc in per_doc for word, _ in doc]
            if words != first_words.setdefault(len(texts), words):
                raise ValueError("DeepCT kept other words than on the CPU")
            return np.array([weight for doc in per_doc for _, weight in doc])
        return weights

    def aligner(options):
        encoder = AlignerDocumentEncoder(models_dir / defaults["aligner"], **options)
        return batched(lambda t: encoder.encode(t, max_length=256))

    return {"aggretriever": aggretriever, "deepct": deepct, "aligner": aligner}, defaults


RUNS = (("torch fp32", {"precision": "float32"}),
        ("torch fp16", {"precision": "float16"}),
        ("torch bf16", {"precision": "bfloat16"}),
        ("onnx fp32", {"backend": "onnx"}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=10_000)
    parser.add_argument("--corpus", help="a BEIR corpus.jsonl[.gz] (default: SciFact through the dataset loader)")
    parser.add_argument("--models-dir", type=Path, default=ROOT / "resources" / "models")
    parser.add_argument("--only", nargs="+", choices=("aggretriever", "deepct", "aligner"))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default="cuda", help="cpu only to dry-run this script")
    args = parser.parse_args()

    if args.device.startswith("cuda"):
        assert torch.cuda.is_available(), "no CUDA device"
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    texts = _texts(args.corpus, args.passages)
    makers, defaults = encoders(args.models_dir, args.batch)
    for kind in args.only or makers:
        make = makers[kind]
        reference = make({"device": "cpu"})(texts[:256])
        for label, options in RUNS:
            try:
                run = make({"device": args.device, **options})
                diff = np.abs(run(texts[:256]) - reference).max()  # also the warm-up
            except Exception as error:  # e.g. onnxruntime without CUDAExecutionProvider
                print(f"{kind:13} {label:11} skipped: {error}", flush=True)
                continue
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            run(texts)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            rate = len(texts) / (time.perf_counter() - start)
            print(f"{kind:13} {label:11} {defaults[kind]:22} {rate:9.1f} passages/s  "
                  f"max abs diff vs CPU fp32 {diff:.2e}", flush=True)


if __name__ == "__main__":
    main()

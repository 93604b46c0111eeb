"""GPU training check: the three trainers on CUDA (fp32 and bf16 autocast) beside the same steps on the CPU.

    bash bench/gpu/check.sh train prepare BUNDLE  # here: a small distillation set (BM25 needs the JVM) + backbone
    bash bench/gpu/check.sh train run BUNDLE [--steps 40] [--only deepct ...] [--backbone FOLDER] [--profile]

`prepare` builds a distillation set of SciFact passages (the positives of 100 train queries plus random others;
those queries labelled, one pseudo-query per passage) with the real teachers, and copies splade-tiny's folder,
so that the device machine, which has neither Pyserini nor a JVM nor our backbone packages, can train from it.
`run` trains each model for --steps steps from the same seed on the CPU (fp32) and on CUDA (fp32, bf16) and
prints the steady seconds per step and the loss (mean of the first and last 10 steps). Dropout masks come from each
device's own generator, so the curves agree in trend, not digit for digit. Then each CUDA-trained model is
saved, and the saved folder is loaded by our encoders on the CPU and on CUDA: their outputs must agree.
`--profile` adds each model's top operators by device time over 4 fp32 and 4 bf16 steps (why bf16 was slower
than fp32 on an H200 in the 2026-12-04 run, docs/gpu.md).
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

KINDS = ("deepct", "aggretriever", "aligner")
QUERIES = 100
PASSAGES = 400


def prepare(bundle: Path) -> None:
    from pyserini_ext.data import load_dataset
    from pyserini_ext.models.backbones import backbone_path
    from pyserini_ext.train.distill import DistillDataConfig, TrainingQuery, build_distillation_set

    scifact = load_dataset("scifact")
    qrels = scifact.qrels("train")
    labelled, docids = [], []
    for qid in sorted(qrels, key=int)[:QUERIES]:
        positives = sorted(d for d, rel in qrels[qid].items() if rel > 0)
        labelled.append(TrainingQuery(qid, scifact.queries[qid], "labelled", tuple(positives)))
        docids += [d for d in positives if d not in docids]
    others = [d for d in scifact.corpus if d not in docids]
    docids += list(np.random.default_rng(0).choice(others, PASSAGES - len(docids), replace=False))
    corpus = {d: scifact.corpus[d] for d in docids}
    config = DistillDataConfig(datasets={}, triples=None, depth=8, passage_max_length=128)
    data = build_distillation_set(config, bundle / "cache", corpus_and_queries=(corpus, labelled, sorted(corpus)))
    data.save(bundle / "distillation")
    (bundle / "corpus.json").write_text(json.dumps(corpus))
    shutil.rmtree(bundle / "cache")
    shutil.copytree(backbone_path("splade-tiny"), bundle / "splade-tiny", dirs_exist_ok=True)
    print(f"{bundle}: {len(data.queries)} training queries over {len(corpus)} passages")


def _trainer(kind: str, backbone: str):
    from pyserini_ext.models.aggretriever import AggretrieverConfig
    from pyserini_ext.models.aligner import AlignerConfig
    from pyserini_ext.train.aggretriever import AggretrieverModelConfig, train_aggretriever
    from pyserini_ext.train.aligner import AlignerModelConfig, train_aligner
    from pyserini_ext.train.deepct import DeepCTModelConfig, train_deepct

    # the shipped recipes' model settings (recipes.py); AligneR at this set's 128-piece passages
    if kind == "deepct":
        return train_deepct, DeepCTModelConfig(backbone), {"batch_size": 16}
    if kind == "aggretriever":
        if (Path(backbone) / "aggretriever_config.json").is_file():  # an Aggretriever folder trains on as it is
            model = AggretrieverModelConfig(backbone)
        else:
            model = AggretrieverModelConfig(backbone, architecture=AggretrieverConfig(pooling="agg+"), heads="lexical")
        return train_aggretriever, model, {"batch_size": 8, "group_size": 3}
    model = AlignerModelConfig(backbone, AlignerConfig(doc_max_length=128), unpruned_loss_weight=1.0)
    return train_aligner, model, {"batch_size": 16, "group_size": 4}


def _profiled(train, model, data, config, out: Path, rows: int = 12) -> str:
    """The operators that took the most device time (CPU time on a CPU) over a short training run."""
    from torch.profiler import ProfilerActivity, profile

    on_cuda = torch.device(config.device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as profiler:
        train(model, data, config, out / "profile")
        if on_cuda:
            torch.cuda.synchronize()
    return profiler.key_averages().table(sort_by="self_device_time_total" if on_cuda else "self_cpu_time_total",
                                         row_limit=rows)


def run(bundle: Path, steps: int, kinds: list[str], backbone: Path, out: Path, device: str,
        profile: bool = False) -> None:
    from bench.gpu.encode import encoders
    from pyserini_ext.train.distill import DistillationSet
    from pyserini_ext.train.loop import TrainConfig

    if device.startswith("cuda"):
        assert torch.cuda.is_available(), "no CUDA device"
        print(f"{torch.cuda.get_device_name()}", flush=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads",
          flush=True)
    corpus = json.loads((bundle / "corpus.json").read_text())
    data = DistillationSet.load(bundle / "distillation", corpus)
    texts = [f"{d['title']} {d['text']}".strip() for d in corpus.values()][:256]
    defaults = {}
    for kind in kinds:
        train, model, shape = _trainer(kind, str(backbone))
        for where, precision in (("cpu", "fp32"), (device, "fp32"), (device, "bf16")):
            config = TrainConfig(learning_rate=5e-5, head_learning_rate=1e-3, max_steps=steps, warmup_ratio=0.1,
                                 seed=3, device=where, precision=precision, log_every=1000, **shape)
            folder = out / f"{kind}-{where}-{precision}"
            # a 2-step run first: (T(steps) - T(2)) / (steps - 2) is the steady cost of a step, free of what is
            # paid once (loading, kernel set-up on a new device or dtype, saving)
            start = time.perf_counter()
            train(model, data, replace(config, max_steps=2), out / "warm-up")
            once = time.perf_counter() - start
            start = time.perf_counter()
            _, losses = train(model, data, config, folder)
            total = time.perf_counter() - start
            steady = (total - once) / (steps - 2)
            first, last = np.mean(losses[:10]), np.mean(losses[-10:])
            print(f"{kind:13} train {where:4} {precision}  {steady:6.3f} s/step steady, {total:5.1f} s in all  "
                  f"loss {first:.4f} -> {last:.4f}  {'falls' if last < first else 'DOES NOT FALL'}", flush=True)
            if losses and not np.isfinite(losses).all():
                print(f"{kind:13} train {where:4} {precision}  NON-FINITE LOSS", flush=True)
        defaults[kind] = f"{kind}-{device}-bf16"
        if profile:
            for precision in ("fp32", "bf16"):
                config = TrainConfig(max_steps=4, seed=3, device=device, precision=precision, log_every=1000, **shape)
                print(f"{kind:13} profile {device} {precision}, 4 steps:\n{_profiled(train, model, data, config, out)}",
                      flush=True)
    # the CUDA-trained folders, loaded back by our encoders on both devices
    (out / "defaults.json").write_text(json.dumps(defaults))
    makers, _ = encoders(out, batch=64)
    for kind in kinds:
        cpu = makers[kind]({"device": "cpu"})(texts)
        cuda = makers[kind]({"device": device})(texts)
        print(f"{kind:13} saved after {device} training: CPU vs {device} fp32 encodings max abs diff "
              f"{np.abs(cpu - cuda).max():.2e} (scale {np.abs(cpu).max():.2f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("prepare", "run"))
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--steps", type=int, default=40, help="at least 12 (the loss is compared over 10 steps)")
    parser.add_argument("--only", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--backbone", type=Path, help="default: the bundle's splade-tiny folder")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gpu-train-check")
    parser.add_argument("--device", default="cuda", help="cpu only to dry-run this script")
    parser.add_argument("--profile", action="store_true",
                        help="also print the operators that take the time in 4 fp32 and 4 bf16 steps of each model")
    args = parser.parse_args()
    if args.steps < 12:
        parser.error("--steps must be at least 12")
    if args.action == "prepare":
        prepare(args.bundle)
    else:
        run(args.bundle, args.steps, args.only, args.backbone or args.bundle / "splade-tiny", args.out, args.device,
            args.profile)


if __name__ == "__main__":
    main()

"""Train one full-width Aggretriever candidate on the shipped distillation set (`make models`' data), resumable.

    python experiments/aggretriever-full-width/train_candidate.py NAME [--semantic-scale 3] [--steps 976] ...

The model: all-MiniLM-L6-v2's body, semantic part = its mean-pooled, L2-normalised state at full width (384) times
--semantic-scale (a frozen identity projection), lexical part agg+ 640 from the tied MLM head. With --freeze-body
(the default) only the head's transform and bias and the term weights learn. --from continues an Aggretriever
folder (stage 2: the body at a low learning rate). Output: runs/exp-afw/NAME/model (folder, model card, training
log); checkpoints in runs/exp-afw/NAME/aggretriever-checkpoints.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from pyserini_ext.models.aggretriever import AggretrieverConfig
from pyserini_ext.train.aggretriever import AggretrieverModelConfig
from pyserini_ext.train.distill import DistillDataConfig, build_distillation_set
from pyserini_ext.train.loop import TrainConfig
from pyserini_ext.train.recipes import Recipe, train_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name")
    parser.add_argument("--from", dest="start", help="an Aggretriever folder to train on (no new heads)")
    parser.add_argument("--semantic-scale", type=float, default=3.0)
    parser.add_argument("--saved-semantic-scale", type=float)
    parser.add_argument("--train-body", action="store_true", help="train the body too (at --lr)")
    parser.add_argument("--untie-decoder", action="store_true", help="the MLM decoder learns its own copy")
    parser.add_argument("--pooling", default="agg+")
    parser.add_argument("--lexical-teacher", metavar="TEACHER=W,...",
                        help="the lexical part's loss distils this weighting of the teachers, e.g. splade=0.7,bm25=0.3")
    parser.add_argument("--query-length", type=int, default=32, help="training queries' tokens")
    parser.add_argument("--steps", type=int, default=976, help="optimiser steps (976: one epoch)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3, help="parameters under encoder.: the body, the MLM head")
    parser.add_argument("--head-lr", type=float, default=1e-3)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path("runs/exp-afw") / args.name
    data = build_distillation_set(DistillDataConfig(), args.cache)
    lexical = {k: float(v) for k, v in (p.split("=") for p in args.lexical_teacher.split(","))} \
        if args.lexical_teacher else None
    architecture = None if args.start else AggretrieverConfig(
        cls_dim=384, pooling=args.pooling, dense_pooling="mean", dense_normalize=True, query_max_length=512)
    model = AggretrieverModelConfig(args.start or "all-minilm-l6-v2", architecture=architecture, heads="lexical",
                                    store_dtype="float16", freeze_body=not args.train_body,
                                    semantic_scale=args.semantic_scale, saved_semantic_scale=args.saved_semantic_scale,
                                    untie_decoder=args.untie_decoder, lexical_teacher_weights=lexical,
                                    query_max_length=args.query_length)
    train = TrainConfig(learning_rate=args.lr, head_learning_rate=args.head_lr, max_steps=args.steps,
                        warmup_ratio=0.05, epochs=args.epochs, batch_size=8, group_size=3,
                        precision=args.precision, checkpoint_every=50)
    print(f"training into {train_model('aggretriever', data, work / 'model', work, Recipe(model, train))}", flush=True)


if __name__ == "__main__":
    main()

"""`pyserini-ext aggretriever init|convert|train`: make Pyserini-format Aggretriever folders."""
from __future__ import annotations

import argparse

from pyserini_ext.models.aggretriever import (
    POOLINGS,
    AggretrieverConfig,
    convert_training_checkpoint,
    from_masked_lm,
    resolve_model_folder,
)
from pyserini_ext.models.backbones import BACKBONES, backbone_path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pyserini-ext aggretriever")
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="new Aggretriever heads on a masked-LM backbone")
    init.add_argument("--backbone", required=True,
                      help=f"folder, hub name, or a packaged backbone: {', '.join(BACKBONES)}")
    init.add_argument("--output", required=True)
    init.add_argument("--agg-dim", type=int, default=640)
    init.add_argument("--cls-dim", type=int, default=128)
    init.add_argument("--pooling", choices=POOLINGS, default="agg*")
    init.add_argument("--lexical-only", action="store_true",
                      help="term weight fixed to 1 and [CLS] projection zeroed: pure MLM lexical matching")
    convert = commands.add_parser("convert", help="castorini/dhr training-repo checkpoint -> Pyserini format")
    convert.add_argument("--input", required=True)
    convert.add_argument("--output", required=True)
    train = commands.add_parser("train", help="train on a BEIR dataset's qrels (in-batch + random negatives)")
    train.add_argument("--model", required=True,
                       help=f"masked-LM backbone (folder, hub name, or {', '.join(BACKBONES)}) for new heads, "
                            "or an Aggretriever folder to train further")
    train.add_argument("--dataset", required=True, help="BEIR dataset name or folder")
    train.add_argument("--split", default="train")
    train.add_argument("--output", required=True)
    train.add_argument("--batch-size", type=int, default=8)
    train.add_argument("--no-hard-negatives", action="store_true", help="in-batch negatives only")
    train.add_argument("--query-max-length", type=int, default=32)
    train.add_argument("--passage-max-length", type=int, default=128)
    train.add_argument("--learning-rate", type=float, default=5e-5)
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--max-steps", type=int)
    train.add_argument("--seed", type=int, default=42)
    train.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    if args.command == "init":
        from transformers import AutoTokenizer

        folder = backbone_path(args.backbone) if args.backbone in BACKBONES else resolve_model_folder(args.backbone)
        config = AggretrieverConfig(agg_dim=args.agg_dim, cls_dim=args.cls_dim, pooling=args.pooling)
        model = from_masked_lm(folder, config, constant_term_weight=1.0 if args.lexical_only else None,
                               zero_cls=args.lexical_only)
        out = model.save_pretrained(args.output, AutoTokenizer.from_pretrained(folder))
    elif args.command == "convert":
        out = convert_training_checkpoint(args.input, args.output)
    else:
        from pyserini_ext.train.aggretriever import train_aggretriever
        from pyserini_ext.train.loop import TrainConfig

        config = TrainConfig(learning_rate=args.learning_rate, epochs=args.epochs, max_steps=args.max_steps,
                             seed=args.seed, device=args.device)
        _, losses = train_aggretriever(args.model, args.dataset, args.output, config, split=args.split,
                                       batch_size=args.batch_size, hard_negatives=not args.no_hard_negatives,
                                       query_max_length=args.query_max_length,
                                       passage_max_length=args.passage_max_length)
        print(f"loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f} ({len(losses)} steps)")
        out = args.output
    print(f"wrote {out}")
    return 0

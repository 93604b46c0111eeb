"""`pyserini-ext aggretriever init|convert`: make Pyserini-format Aggretriever folders."""
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
    args = parser.parse_args(argv)

    if args.command == "init":
        from transformers import AutoTokenizer

        folder = backbone_path(args.backbone) if args.backbone in BACKBONES else resolve_model_folder(args.backbone)
        config = AggretrieverConfig(agg_dim=args.agg_dim, cls_dim=args.cls_dim, pooling=args.pooling)
        model = from_masked_lm(folder, config, constant_term_weight=1.0 if args.lexical_only else None,
                               zero_cls=args.lexical_only)
        out = model.save_pretrained(args.output, AutoTokenizer.from_pretrained(folder))
    else:
        out = convert_training_checkpoint(args.input, args.output)
    print(f"wrote {out}")
    return 0

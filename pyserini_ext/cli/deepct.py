"""`pyserini-ext deepct ...`: train, index, search, query.

    pyserini-ext deepct train  --dataset scifact --split train --backbone splade-tiny --output M --epochs 8
    pyserini-ext deepct index  --model M --dataset scifact --output I [--mode sqrt] [--stemmer none]
    pyserini-ext deepct search --index I --topics T.tsv --output run.txt --qljm --lambda 0.1
    pyserini-ext deepct search --index PLAIN --topics T.tsv --output run.txt --query-model M   (DeepCT-Query)
    pyserini-ext deepct query  --model M "what is insulin resistance"
The DeepCT index is an ordinary Lucene index: `python -m pyserini.search.lucene --index I --bm25 ...` works too.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pyserini_ext.cli.lucene import add_search_arguments, make_searcher, read_topics, write_run
from pyserini_ext.index.deepct import STEMMERS, TF_MODES, AnalyzerSettings
from pyserini_ext.registry import resolve_model


def _train(args: argparse.Namespace) -> None:
    from pyserini_ext.data import load_dataset
    from pyserini_ext.models.backbones import BACKBONES, backbone_path
    from pyserini_ext.train.deepct import train_deepct
    from pyserini_ext.train.loop import TrainConfig

    dataset = load_dataset(args.dataset)
    model_path = backbone_path(args.backbone) if args.backbone in BACKBONES else args.backbone
    config = TrainConfig(learning_rate=args.lr, epochs=args.epochs, max_steps=args.max_steps, seed=args.seed,
                         device=args.device)
    _, losses = train_deepct(model_path, dataset.corpus, dataset.queries, dataset.qrels(args.split), args.output,
                             config, batch_size=args.batch_size, max_length=args.max_length,
                             dataset=args.dataset, split=args.split, backbone=args.backbone)
    print(f"trained {len(losses)} steps: loss first {losses[0]:.4f}, last {losses[-1]:.4f}; saved {args.output}")


def _index(args: argparse.Namespace) -> None:
    from pyserini_ext.data import load_dataset
    from pyserini_ext.index.deepct import build_deepct_index
    from pyserini_ext.models.deepct import DeepCTModel

    if args.dataset:
        corpus = load_dataset(args.dataset).corpus
    else:
        with open(args.corpus, encoding="utf-8") as f:
            corpus = {}
            for line in f:
                if line.strip():
                    doc = json.loads(line)
                    corpus[str(doc.get("_id", doc.get("id")))] = doc
    model = DeepCTModel.from_pretrained(resolve_model(args.model, "deepct"), max_length=args.max_length).to(args.device)
    report = build_deepct_index(model, corpus, args.output, scale=args.scale, mode=args.mode,
                                analyzer=AnalyzerSettings(args.stemmer, args.keep_stopwords),
                                batch_size=args.batch_size, overwrite=args.overwrite, model_name=str(args.model))
    print(f"indexed {report.documents} documents ({report.empty_documents} empty), total tf {report.total_tf}, "
          f"in {report.seconds:.0f}s -> {args.output}")


def _search(args: argparse.Namespace) -> None:
    searcher = make_searcher(args)
    query_weights, tag = None, searcher.model
    if args.query_model:
        from pyserini_ext.encode.deepct import DeepCTQueryWeigher

        query_weights, tag = DeepCTQueryWeigher(resolve_model(args.query_model, "deepct")), f"deepct-query {tag}"
    run = searcher.search_topics(read_topics(args.topics), k=args.hits, threads=args.threads,
                                 query_weights=query_weights)
    write_run(run, args.output, tag)


def _query(args: argparse.Namespace) -> None:
    from pyserini_ext.encode.deepct import DeepCTQueryWeigher

    weights = DeepCTQueryWeigher(resolve_model(args.model, "deepct"))(args.text)
    print(json.dumps({w: round(v, 4) for w, v in sorted(weights.items(), key=lambda x: -x[1])}, ensure_ascii=False))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="pyserini-ext deepct", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train DeepCT (query term recall, masked MSE)")
    train.add_argument("--dataset", required=True, help="BEIR-layout dataset name (pyserini_ext.data)")
    train.add_argument("--split", default="train")
    train.add_argument("--backbone", default="splade-tiny", help="packaged backbone name or model folder")
    train.add_argument("--output", required=True, type=Path)
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--lr", type=float, default=1e-4)
    train.add_argument("--max-length", type=int, default=128, help="passages cut at this many pieces")
    train.add_argument("--seed", type=int, default=42)
    train.add_argument("--device", default="cpu")
    train.set_defaults(run=_train)

    index = sub.add_parser("index", help="weigh a corpus and write a DeepCT Lucene index")
    index.add_argument("--model", required=True)
    source = index.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="BEIR-layout dataset name")
    source.add_argument("--corpus", help="corpus.jsonl with _id (or id), title, text")
    index.add_argument("--output", required=True, type=Path)
    index.add_argument("--scale", type=float, default=100.0)
    index.add_argument("--mode", choices=TF_MODES, default="linear")
    index.add_argument("--stemmer", choices=STEMMERS, default="porter")
    index.add_argument("--keep-stopwords", action="store_true")
    index.add_argument("--max-length", type=int, default=None, help="window size in pieces (default: model's)")
    index.add_argument("--batch-size", type=int, default=64)
    index.add_argument("--device", default="cpu")
    index.add_argument("--overwrite", action="store_true")
    index.set_defaults(run=_index)

    search = sub.add_parser("search", help="BM25 / QL-JM / DeepCT-Query over a (DeepCT or plain) index")
    add_search_arguments(search)
    search.add_argument("--query-model", help="DeepCT model: weight query words (DeepCT-Query)")
    search.set_defaults(run=_search)

    query = sub.add_parser("query", help="print DeepCT word weights of a query")
    query.add_argument("--model", required=True)
    query.add_argument("text")
    query.set_defaults(run=_query)

    args = parser.parse_args(argv)
    args.run(args)
    return 0

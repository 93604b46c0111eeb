"""`pyserini-ext data export`: a BEIR dataset as Pyserini inputs (JsonCollection, TSV topics, TREC qrels)."""
from __future__ import annotations

import argparse
from pathlib import Path

from pyserini_ext.data import load_dataset, write_json_collection, write_topics, write_trec_qrels


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pyserini-ext data")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write collection/docs.jsonl, topics.<split>.tsv, qrels.<split>.txt")
    export.add_argument("dataset", help="name in $PYSERINI_EXT_DATA, or a BEIR folder")
    export.add_argument("--output", required=True)
    export.add_argument("--split", action="append", help="qrels split(s) to export (default: all)")
    export.add_argument("--no-download", action="store_true")
    args = parser.parse_args(argv)

    dataset = load_dataset(args.dataset, download=not args.no_download)
    out = Path(args.output)
    # read (and check) everything before writing anything: a bad line leaves no partial export
    corpus = dataset.corpus
    splits = {split: (dataset.split_queries(split), dataset.qrels(split)) for split in args.split or dataset.splits()}
    print(write_json_collection(corpus, out / "collection"))
    for split, (queries, qrels) in splits.items():
        print(write_topics(queries, out / f"topics.{split}.tsv"))
        print(write_trec_qrels(qrels, out / f"qrels.{split}.txt"))
    return 0

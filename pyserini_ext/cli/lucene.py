"""`pyserini-ext lucene search`: BM25, QL-Dirichlet or QL-Jelinek-Mercer over any Lucene index -> TREC run.

    pyserini-ext lucene search --index I --topics T.tsv --output run.txt --qljm --lambda 0.1
    pyserini-ext lucene search --index I --topics T.tsv --output run.txt --bm25 --k1 10 --b 0.9
"""
from __future__ import annotations

import argparse
import os

from pyserini_ext.models.deepct_terms import STEMMERS, AnalyzerSettings


def read_topics(path: str | os.PathLike) -> dict[str, str]:
    """Pyserini TSV topics (`qid \\t text`)."""
    topics = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            qid, sep, text = line.rstrip("\n").partition("\t")
            if not sep:
                raise ValueError(f"{path}:{line_no}: expected `qid<TAB>text`, got {line!r}")
            topics[qid] = text
    if not topics:
        raise ValueError(f"{path}: no topics")
    return topics


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, help="Lucene index folder (plain or DeepCT)")
    parser.add_argument("--topics", required=True, help="TSV topics: qid<TAB>query")
    parser.add_argument("--output", required=True, help="TREC run file to write")
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--bm25", action="store_true", help="BM25 (default)")
    model.add_argument("--qld", action="store_true", help="query likelihood, Dirichlet smoothing")
    model.add_argument("--qljm", action="store_true", help="query likelihood, Jelinek-Mercer smoothing")
    parser.add_argument("--k1", type=float, default=0.9)
    parser.add_argument("--b", type=float, default=0.4)
    parser.add_argument("--mu", type=float, default=1000.0)
    parser.add_argument("--lambda", dest="lambda_", type=float, default=0.1, help="Jelinek-Mercer λ (weight of P(t|C))")
    parser.add_argument("--stemmer", choices=STEMMERS, default=None,
                        help="query analyzer (default: the index's DeepCT metadata, else porter)")
    parser.add_argument("--keep-stopwords", action="store_true", default=None)


def make_searcher(args: argparse.Namespace):
    from pyserini_ext.search.lucene import ClassicLuceneSearcher

    analyzer = None
    if args.stemmer is not None or args.keep_stopwords:
        analyzer = AnalyzerSettings(args.stemmer or "porter", bool(args.keep_stopwords))
    searcher = ClassicLuceneSearcher(args.index, analyzer)
    if args.qljm:
        searcher.set_qljm(args.lambda_)
    elif args.qld:
        searcher.set_qld(args.mu)
    else:
        searcher.set_bm25(args.k1, args.b)
    return searcher


def write_run(run, output: str, tag: str) -> None:
    from pyserini_ext.evaluation import write_trec_run

    write_trec_run(run, output, tag=tag.replace(" ", "_"))
    print(f"wrote {sum(len(h) for h in run.values())} hits for {len(run)} queries to {output}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pyserini-ext lucene", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    add_search_arguments(sub.add_parser("search", help="search TSV topics, write a TREC run"))
    args = parser.parse_args(argv)
    searcher = make_searcher(args)
    run = searcher.search_topics(read_topics(args.topics), k=args.hits, threads=args.threads)
    write_run(run, args.output, searcher.model)
    return 0

"""`pyserini-ext lucene search`: BM25, QL-Dirichlet or QL-Jelinek-Mercer over any Lucene index -> TREC run.

    pyserini-ext lucene search --index I --topics T.tsv --output run.txt --qljm --lambda 0.1
    pyserini-ext lucene search --index I --topics T.tsv --output run.txt --bm25 --k1 10 --b 0.9
"""
from __future__ import annotations

from dataclasses import dataclass

from pyserini_ext.cli.options import Command, SearchOptions, command_group, option
from pyserini_ext.data import check_output, read_topics
from pyserini_ext.models.deepct_terms import STEMMERS, AnalyzerSettings


@dataclass(kw_only=True)
class LuceneSearchOptions(SearchOptions):
    topics: str = option(help="TSV topics: qid<TAB>query")
    output: str = option(help="TREC run file to write")
    overwrite: bool = option(False, help="replace an existing run file")
    bm25: bool = option(False, help="BM25 (the default model)")
    qld: bool = option(False, help="query likelihood, Dirichlet smoothing")
    qljm: bool = option(False, help="query likelihood, Jelinek-Mercer smoothing")
    k1: float = option(0.9, help="BM25 k1", min=0.0)
    b: float = option(0.4, help="BM25 b", min=0.0, max=1.0)
    mu: float = option(1000.0, help="Dirichlet mu", min=0.0)
    lambda_: float = option(0.1, flag="--lambda", help="Jelinek-Mercer λ (weight of P(t|C)), in (0, 1]", max=1.0)
    stemmer: str | None = option(None, choices=STEMMERS,
                                 help="query analyzer (default: the index's DeepCT metadata, else porter)")
    keep_stopwords: bool = option(False, help="keep stopwords in queries (with --stemmer)")

    def __post_init__(self):
        if self.bm25 + self.qld + self.qljm > 1:
            raise ValueError("give at most one of --bm25, --qld, --qljm")
        if not self.lambda_ > 0:
            raise ValueError(f"--lambda must be in (0, 1], got {self.lambda_}")


def make_searcher(options: LuceneSearchOptions):
    from pyserini_ext.search.lucene import ClassicLuceneSearcher

    analyzer = None
    if options.stemmer is not None or options.keep_stopwords:
        analyzer = AnalyzerSettings(options.stemmer or "porter", options.keep_stopwords)
    searcher = ClassicLuceneSearcher(options.index, analyzer)
    if options.qljm:
        searcher.set_qljm(options.lambda_)
    elif options.qld:
        searcher.set_qld(options.mu)
    else:
        searcher.set_bm25(options.k1, options.b)
    return searcher


def write_run(run, output: str, tag: str) -> None:
    from pyserini_ext.evaluation import write_trec_run

    write_trec_run(run, output, tag=tag.replace(" ", "_"))
    print(f"wrote {sum(len(h) for h in run.values())} hits for {len(run)} queries to {output}")


def search(options: LuceneSearchOptions) -> None:
    check_output(options.output, options.overwrite)  # before the search work
    searcher = make_searcher(options)
    run = searcher.search_topics(read_topics(options.topics), k=options.hits, threads=options.threads)
    write_run(run, options.output, searcher.model)


main = command_group("pyserini-ext lucene", __doc__, {
    "search": Command("search TSV topics, write a TREC run", LuceneSearchOptions, search),
})

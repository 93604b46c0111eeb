"""`pyserini-ext deepct ...`: train, index, search, query.

    pyserini-ext deepct train  --dataset scifact --split train --model splade-tiny --output M --epochs 8
    pyserini-ext deepct index  --model M --dataset scifact --output I [--mode sqrt] [--merge sum] [--stemmer none]
    pyserini-ext deepct search --index I --topics T.tsv --output run.txt --qljm --lambda 0.1
    pyserini-ext deepct search --index PLAIN --topics T.tsv --output run.txt --query-model M   (DeepCT-Query)
    pyserini-ext deepct query  --model M "what is insulin resistance"
The DeepCT index is an ordinary Lucene index: `python -m pyserini.search.lucene --index I --bm25 ...` works too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from pyserini_ext.cli.lucene import LuceneSearchOptions, make_searcher, write_run
from pyserini_ext.cli.options import (
    Command,
    IndexingOptions,
    TrainingOptions,
    command_group,
    option,
)
from pyserini_ext.data import check_output, read_topics
from pyserini_ext.models.deepct_terms import STEMMERS, TF_MERGES, TF_MODES, AnalyzerSettings
from pyserini_ext.models.folder import resolve_model


@dataclass
class DeepCTTrainOptions(TrainingOptions):
    model: str = option("splade-tiny", help="packaged backbone name or model folder", aliases=["--backbone"])
    batch_size: int = option(16, help="passages per step", min=1)
    learning_rate: float = option(1e-4, help="peak AdamW learning rate", min=0.0, aliases=["--lr"])
    max_length: int = option(128, help="passages cut at this many pieces", min=3)


@dataclass(kw_only=True)
class DeepCTIndexOptions(IndexingOptions):
    corpus: str | None = option(None, help="corpus.jsonl with _id (or id), title, text")
    scale: float | None = option(None, help="tf = round(scale * weight) (default: the model's index_tf, else 100)",
                                 min=0.0)
    mode: str | None = option(None, choices=TF_MODES, help="weight -> tf (default: the model's, else linear)")
    merge: str | None = option(None, choices=TF_MERGES, help="a repeated word: max = its largest weight's tf, "
                               "sum = every occurrence's tf added (default: the model's, else max)")
    stemmer: str = option("porter", choices=STEMMERS, help="index analyzer's stemmer")
    keep_stopwords: bool = option(False, help="index stopwords too")
    max_length: int | None = option(None, help="window size in pieces (default: the model's)", min=3)
    batch_size: int = option(64, help="windows per forward pass", min=1)


@dataclass(kw_only=True)
class DeepCTSearchOptions(LuceneSearchOptions):
    query_model: str | None = option(None, help="DeepCT model: weight query words (DeepCT-Query)")


@dataclass
class DeepCTQueryOptions:
    text: str = option(help="the query", positional=True)
    model: str = option(help="DeepCT model folder")


def train(options: DeepCTTrainOptions) -> None:
    from pyserini_ext.train.deepct import DeepCTModelConfig, train_deepct

    _, losses = train_deepct(DeepCTModelConfig(options.model, options.max_length), options.training_data(),
                             options.train_config(), options.output, checkpoint_dir=options.checkpoints)
    print(f"trained {len(losses)} steps: loss first {losses[0]:.4f}, last {losses[-1]:.4f}; saved {options.output}")


def index(options: DeepCTIndexOptions) -> None:
    """The streaming build (index/deepct.py's DeepCTIndexBuilder): in this process, or with `--workers N` /
    `--ray-address` on Ray actors; the same index either way."""
    from pyserini_ext.data.output import interrupts_as_exceptions
    from pyserini_ext.index.deepct import DeepCTIndexBuilder, DeepCTIndexSettings, index_report
    from pyserini_ext.index.streaming import build, build_on_ray

    settings = DeepCTIndexSettings(options.scale, options.mode, options.merge,
                                   AnalyzerSettings(options.stemmer, options.keep_stopwords), options.max_length,
                                   options.batch_size)
    runtime = {"backend": options.backend, "device": options.device, "precision": options.precision}
    builder = DeepCTIndexBuilder(resolve_model(options.model, "deepct"), settings, runtime,
                                 model_name=str(options.model))
    documents, total = options.documents()
    where = dict(chunk_docs=options.chunk_docs, total=total, overwrite=options.overwrite, resume=not options.restart)
    if not options.on_ray():
        builder.start_jvm()  # before the handlers below: no JVM ever runs in a Ray driver (DeepCTIndexBuilder)
    with interrupts_as_exceptions():  # Ctrl-C / SIGTERM while the JVM runs: a clean stop, the parts kept to resume
        if options.on_ray():
            build_on_ray(builder, documents, options.output, options.workers, options.ray_address, **where)
        else:
            build(builder, documents, options.output, **where)
    report = index_report(options.output)
    on = f" on {options.workers} Ray workers" if options.on_ray() else ""
    print(f"indexed {report.documents} documents ({report.empty_documents} empty){on}, total tf {report.total_tf}, "
          f"in {report.seconds:.0f}s of weighing and writing -> {options.output}")


def search(options: DeepCTSearchOptions) -> None:
    check_output(options.output, options.overwrite)  # before the search work
    searcher = make_searcher(options)
    query_weights, tag = None, searcher.model
    if options.query_model:
        from pyserini_ext.encode.deepct import DeepCTQueryWeigher

        query_weights, tag = DeepCTQueryWeigher(resolve_model(options.query_model, "deepct")), f"deepct-query {tag}"
    run = searcher.search_topics(read_topics(options.topics), k=options.hits, threads=options.threads,
                                 query_weights=query_weights)
    write_run(run, options.output, tag)


def query(options: DeepCTQueryOptions) -> None:
    from pyserini_ext.encode.deepct import DeepCTQueryWeigher

    weights = DeepCTQueryWeigher(resolve_model(options.model, "deepct"))(options.text)
    print(json.dumps({w: round(v, 4) for w, v in sorted(weights.items(), key=lambda x: -x[1])}, ensure_ascii=False))


main = command_group("pyserini-ext deepct", __doc__, {
    "train": Command("train DeepCT (query term recall, masked MSE)", DeepCTTrainOptions, train),
    "index": Command("weigh a corpus and write a DeepCT Lucene index", DeepCTIndexOptions, index),
    "search": Command("BM25 / QL-JM / DeepCT-Query over a (DeepCT or plain) index", DeepCTSearchOptions, search),
    "query": Command("print DeepCT word weights of a query", DeepCTQueryOptions, query),
})

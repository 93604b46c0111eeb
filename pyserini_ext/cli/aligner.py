"""`pyserini-ext aligner {train,index,search,adapt}`: thin option parsing over the AligneR modules.

Index and search settings left out take the defaults of `build_index` and `AlignerSearcher` (one default each;
docs/aligner.md lists them).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyserini_ext.cli.options import (
    Command,
    IndexingOptions,
    SearchOptions,
    TrainingOptions,
    command_group,
    option,
)
from pyserini_ext.data import check_output, load_dataset, read_corpus, read_topics
from pyserini_ext.models.aligner import AlignerConfig
from pyserini_ext.models.folder import resolve_model
from pyserini_ext.train.aligner import AlignerModelConfig

DEFAULT_THREADS = 1  # torch's OpenMP pool thrashes on small, busy machines; 1 thread was ~50x faster here
_MODEL, _TRAIN_MODEL = AlignerConfig(), AlignerModelConfig("splade-tiny")


@dataclass
class AlignerTrainOptions(TrainingOptions):
    model: str = option("splade-tiny", help="packaged backbone name or Hugging Face folder", aliases=["--backbone"])
    epochs: int = option(6, help="passes over the training pairs", min=1)
    batch_size: int = option(16, help="queries per step", min=2)
    negatives: str = option("bm25", choices=("random", "bm25", "none"),
                            help="each query's hard negative with judged pairs: random unjudged, BM25, or none")
    temperature: float = option(_TRAIN_MODEL.temperature, help="softmax temperature of the contrastive loss", min=1e-6)
    alpha_q: float = option(_MODEL.alpha_q, help="training sparsity: fraction of query tokens kept", min=0.0,
                            max=1.0)
    alpha_d: float = option(_MODEL.alpha_d, help="training sparsity: fraction of document tokens kept", min=0.0,
                            max=1.0)
    eps: float = option(_MODEL.eps, help="entropy regularisation of the top-k", min=0.0)
    query_max_length: int = option(_MODEL.query_max_length, help="query tokens", min=1)
    passage_max_length: int = option(_MODEL.doc_max_length, help="document tokens", min=1,
                                     aliases=["--doc-max-length"])
    threads: int = option(DEFAULT_THREADS, help="torch CPU threads", min=1)


@dataclass(kw_only=True)
class AlignerIndexOptions(IndexingOptions):
    corpus: str | None = option(None, help="Pyserini JsonCollection folder or file")
    encoded: str | None = option(None, help="cache of the unpruned encoding (.npz): reused if present, else written")
    beta_d: float | None = option(None, help="fraction of each document's tokens kept", min=0.0, max=1.0)
    reduction: str | None = option(None, choices=("pool", "prune"), help="how beta_d < 1 keeps vectors: merge "
                                   "similar tokens (pool) or keep the most salient (prune); default: pool")
    duplicate_cosine: float | None = option(None, help="when pruning, tokens this similar (cosine) to a more salient "
                                            "token of their document go last (default: the index's)", min=0.0,
                                            max=1.0)
    codec: str | None = option(None, choices=("float16", "residual-pq"),
                               help="token store (default: residual-pq from 2,048 documents up, else float16; "
                                    "float16 with --candidates flat: the exact path)")
    candidates: str | None = option(None, choices=("flat", "ivfpq", "hnsw", "centroid"),
                                    help="candidate generator (default: centroid with residual-pq, else flat)")
    nlist: int | None = option(None, help="IVF lists (default: from the token count, ~4 sqrt(tokens) up to 2^20 "
                                          "tokens, at most 1024; PLAID's rule above)", min=1)
    pq_m: int | None = option(None, help="PQ sub-quantizers of the residual code", min=1)
    pq_bits: int | None = option(None, help="bits per PQ code (residual-pq: 6, i.e. 24 bytes; ivfpq: 8)", min=1,
                                 max=16)
    max_length: int | None = option(None, help="document tokens (default: the model's)", min=1)
    threads: int = option(DEFAULT_THREADS, help="torch and Faiss CPU threads", min=1)

    def has_cached_encoding(self) -> bool:
        return bool(self.encoded) and Path(self.encoded).is_file()

    def __post_init__(self):
        super().__post_init__()
        if self.encoded and self.on_ray():
            raise ValueError("--encoded caches a one-process encoding; leave it out with --workers/--ray-address")


@dataclass(kw_only=True)
class AlignerSearchOptions(SearchOptions):
    model: str | None = option(None, help="model folder (default: the one recorded in the index)")
    beta_q: float | None = option(None, help="fraction of query tokens kept by salience", min=0.0, max=1.0)
    alignment: str | None = option(None, help="k=<int> or p=<fraction|percent%%>")
    neighbours: int | None = option(None, help="nearest document tokens per query token (token indexes: 256), or "
                                    "documents kept by the centroid stage (1024)", min=1)
    nprobe: int | None = option(None, help="IVF lists (ivfpq) or centroids per query token (centroid) probed",
                                min=1)
    exact_documents: int | None = option(None, help="of the centroid stage's documents, those scored on decoded "
                                         "codes, the best by centroid interaction (128; 0: all)", min=0)
    device: str = option("cpu", help="torch device")

    def searcher_settings(self) -> dict:
        """The search settings given on the command line; the others keep AlignerSearcher's defaults."""
        names = ("beta_q", "alignment", "neighbours", "nprobe", "exact_documents")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


@dataclass(kw_only=True)
class AlignerRunOptions(AlignerSearchOptions):
    output: str = option(help="TREC run file to write")
    overwrite: bool = option(False, help="replace an existing run file")
    topics: str | None = option(None, help="Pyserini TSV topics (qid<TAB>query)")
    dataset: str | None = option(None, help="BEIR dataset name or folder (queries of --split)")
    split: str = option("test", help="qrels split whose queries are searched")

    def __post_init__(self):
        if (self.topics is None) == (self.dataset is None):
            raise ValueError("give exactly one of --topics (Pyserini TSV) or --dataset (with --split)")


@dataclass(kw_only=True)
class AlignerAdaptOptions(AlignerSearchOptions):
    dataset: str = option(help="BEIR dataset name or folder")
    split: str = option("test", help="qrels split: labelled queries and the evaluation on the rest")
    labelled: int = option(8, help="labelled queries used to choose (at most 8)", min=1, max=8)
    seed: int = option(42, help="seed of the labelled sample")
    recall_level: int | None = option(None, help="trec_eval -l for recall (2 for DL19)", min=1,
                                      aliases=["--relevance-level"])
    output_dir: str | None = option(None, help="where to keep the two runs (default: discarded)")


def _threads(count: int) -> None:
    import faiss
    import torch
    torch.set_num_threads(count)
    faiss.omp_set_num_threads(count)


def train(options: AlignerTrainOptions) -> int:
    from pyserini_ext.models.aligner import AlignerConfig
    from pyserini_ext.train.aligner import train_aligner
    _threads(options.threads)
    architecture = AlignerConfig(alpha_q=options.alpha_q, alpha_d=options.alpha_d, eps=options.eps,
                                 query_max_length=options.query_max_length,
                                 doc_max_length=options.passage_max_length, backbone=options.model)
    model = AlignerModelConfig(options.model, architecture, options.temperature)
    _, losses = train_aligner(model, options.training_data(), options.train_config(), options.output,
                              checkpoint_dir=options.checkpoints)
    print(json.dumps({"model": options.output, "steps": len(losses), "first_loss": losses[0],
                      "last10_mean_loss": sum(losses[-10:]) / len(losses[-10:])}))
    return 0


def index(options: AlignerIndexOptions) -> int:
    from pyserini_ext.cli.options import cap_max_length
    from pyserini_ext.encode.aligner import AlignerDocumentEncoder
    from pyserini_ext.index.aligner import (
        AlignerIndexSettings,
        EncodedCorpus,
        build_aligner_index,
        build_index,
        encode_corpus,
        is_index,
    )
    _threads(options.threads)
    check_output(options.output, options.overwrite, is_index)  # before the encoding work
    model_path = str(Path(resolve_model(options.model, "aligner")).resolve())
    settings = {name: getattr(options, name)
                for name in ("beta_d", "reduction", "duplicate_cosine", "codec", "candidates", "nlist", "pq_m",
                             "pq_bits")
                if getattr(options, name) is not None}
    runtime = options.runtime()
    if options.encoded:  # a whole-corpus encoding cache (several pruning ratios from one encoding): small corpora
        encoder = AlignerDocumentEncoder(model_path, device=options.device, backend=runtime.backend,
                                         precision=runtime.precision)
        max_length = cap_max_length(options.max_length, encoder.model.encoder.config.max_position_embeddings)
        corpus = None
        if options.corpus or options.dataset:
            corpus = read_corpus(options.corpus) if options.corpus else load_dataset(options.dataset).corpus
        if options.has_cached_encoding():
            encoded = EncodedCorpus.load(options.encoded)
            encoded.check_matches(options.encoded, encoder.model, corpus, max_length)
        else:
            encoded = encode_corpus(encoder, corpus, batch_size=options.batch_size, max_length=max_length,
                                    model_path=model_path)
            encoded.save(options.encoded)
        folder = build_index(encoded, options.output, overwrite=options.overwrite, chunk_docs=options.chunk_docs,
                             **settings)
    else:
        documents, total = options.documents()
        folder = build_aligner_index(
            model_path, documents, options.output,
            AlignerIndexSettings(**settings, max_length=options.max_length, batch_size=options.batch_size),
            runtime={"device": options.device, "backend": runtime.backend, "precision": runtime.precision},
            total=total, chunk_docs=options.chunk_docs, overwrite=options.overwrite, resume=not options.restart,
            workers=options.workers, ray_address=options.ray_address)
    metadata = json.loads((folder / "metadata.json").read_text())
    print(json.dumps({"index": str(folder), "counts": metadata["counts"], "codec": metadata["codec"],
                      "candidates": metadata["candidates"], "bytes_per_token": round(metadata["bytes_per_token"], 2)}))
    return 0


def _searcher(options: AlignerSearchOptions):
    from pyserini_ext.search.aligner import open_searcher
    index, model = options.index, resolve_model(options.model, "aligner") if options.model else None
    if not Path(index).is_dir():  # a prebuilt index name: fetched like Pyserini's, searched with its model
        from pyserini_ext.index import prebuilt

        index = prebuilt.download_prebuilt(options.index)
        model = model or prebuilt.shipped_model(options.index)
        prebuilt.check_model(options.index, model)
    return open_searcher(index, model, **options.searcher_settings())


def search(options: AlignerRunOptions) -> int:
    import time

    from pyserini_ext.evaluation import write_trec_run
    check_output(options.output, options.overwrite)  # before the search work
    _threads(options.threads)
    if options.topics:
        queries = read_topics(options.topics)
    else:
        queries = load_dataset(options.dataset).split_queries(options.split)
    searcher = _searcher(options)
    started = time.time()
    hits = searcher.batch_search(list(queries.values()), list(queries), k=options.hits, progress=True)
    elapsed = time.time() - started
    write_trec_run({qid: [(h.docid, h.score) for h in qhits] for qid, qhits in hits.items()}, options.output,
                   tag=f"aligner-{searcher.alignment}")
    print(json.dumps({"run": options.output, "queries": len(queries),
                      "ms_per_query": round(1000 * elapsed / max(1, len(queries)), 1)}))
    return 0


def adapt(options: AlignerAdaptOptions) -> int:
    from pyserini_ext.train.adaptation import evaluate_adaptation
    _threads(options.threads)
    dataset = load_dataset(options.dataset)
    report = evaluate_adaptation(_searcher(options), dataset.split_queries(options.split),
                                 dataset.qrels(options.split), options.labelled, options.seed, options.hits,
                                 options.recall_level, options.output_dir)
    print(json.dumps(report, indent=1))
    return 0


main = command_group("pyserini-ext aligner", __doc__, {
    "train": Command("train an AligneR model on a BEIR dataset's qrels split", AlignerTrainOptions, train),
    "index": Command("encode a corpus and write a token index", AlignerIndexOptions, index),
    "search": Command("search an index; writes a TREC run", AlignerRunOptions, search),
    "adapt": Command("few-shot alignment adaptation on a BEIR dataset", AlignerAdaptOptions, adapt),
})

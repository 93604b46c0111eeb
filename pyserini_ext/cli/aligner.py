"""`pyserini-ext aligner {train,index,search,adapt}`: thin argument parsing over the AligneR modules."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

DEFAULT_THREADS = 1  # torch's OpenMP pool thrashes on small, busy machines; 1 thread was ~50x faster here


def _dataset_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", help="BEIR dataset name or folder (pyserini_ext.data.load_dataset)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")


def _train(args: argparse.Namespace) -> int:
    from pyserini_ext.data import load_dataset
    from pyserini_ext.models.aligner import AlignerConfig
    from pyserini_ext.models.backbones import BACKBONES, backbone_path
    from pyserini_ext.train.aligner import AlignerLossConfig, train_aligner
    from pyserini_ext.train.loop import TrainConfig
    dataset = load_dataset(args.dataset)
    backbone = backbone_path(args.backbone) if args.backbone in BACKBONES else args.backbone
    model_config = AlignerConfig(alpha_q=args.alpha_q, alpha_d=args.alpha_d, eps=args.eps,
                                 query_max_length=args.query_max_length, doc_max_length=args.doc_max_length,
                                 backbone=args.backbone)
    train_config = TrainConfig(learning_rate=args.learning_rate, epochs=args.epochs, max_steps=args.max_steps,
                               seed=args.seed, device=args.device)
    _, losses = train_aligner(backbone, dataset.corpus, dataset.queries, dataset.qrels(args.split), args.output,
                              model_config, train_config, AlignerLossConfig(args.temperature, args.batch_size),
                              negatives=args.negatives)
    print(json.dumps({"model": args.output, "steps": len(losses), "first_loss": losses[0],
                      "last10_mean_loss": sum(losses[-10:]) / len(losses[-10:])}))
    return 0


def read_json_collection(path: str | os.PathLike) -> dict[str, dict[str, str]]:
    """A Pyserini JsonCollection (folder of .json/.jsonl files, or one file): id + contents, or id + title/text."""
    from pyserini_ext.data.beir import iter_jsonl
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"{path}: no .json/.jsonl files (expected a Pyserini JsonCollection)")
    corpus: dict[str, dict[str, str]] = {}
    for file in files:
        for line_no, record in enumerate(iter_jsonl(file), start=1):
            docid = record.get("id", record.get("_id"))
            if docid is None:
                raise ValueError(f"{file}:{line_no}: record without 'id'")
            if "text" in record or "title" in record:
                corpus[str(docid)] = {"title": record.get("title") or "", "text": record.get("text") or ""}
            else:
                corpus[str(docid)] = {"title": "", "text": record.get("contents") or ""}
    return corpus


def _read_topics(path: str | os.PathLike) -> dict[str, str]:
    """Pyserini TSV topics: qid <tab> query per line."""
    topics = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                qid, sep, text = line.rstrip("\n").partition("\t")
                if not sep:
                    raise ValueError(f"{path}:{line_no}: expected 'qid<TAB>query'")
                topics[qid] = text
    return topics


def _index(args: argparse.Namespace) -> int:
    from pyserini_ext.index.aligner import EncodedCorpus, build_index, encode_corpus
    from pyserini_ext.models.aligner import AlignerModel
    encoded = None
    if args.encoded and Path(args.encoded).is_file():
        encoded = EncodedCorpus.load(args.encoded)
    if encoded is None:
        if bool(args.corpus) == bool(args.dataset):
            print("pyserini-ext aligner index: give exactly one of --corpus (JsonCollection) or --dataset",
                  file=sys.stderr)
            return 2
        if args.corpus:
            corpus = read_json_collection(args.corpus)
        else:
            from pyserini_ext.data import load_dataset
            corpus = load_dataset(args.dataset).corpus
        model = AlignerModel.load(args.model, device=args.device)
        encoded = encode_corpus(model, corpus, batch_size=args.batch_size, max_length=args.max_length,
                                fp16=args.fp16, model_path=str(Path(args.model).resolve()))
        if args.encoded:
            encoded.save(args.encoded)
    folder = build_index(encoded, args.output, beta_d=args.beta_d, codec=args.codec, candidates=args.candidates,
                         nlist=args.nlist, pq_m=args.pq_m, overwrite=args.overwrite)
    metadata = json.loads((folder / "metadata.json").read_text())
    print(json.dumps({"index": str(folder), "counts": metadata["counts"],
                      "bytes_per_token": round(metadata["bytes_per_token"], 2)}))
    return 0


def _queries(args: argparse.Namespace) -> dict[str, str]:
    if bool(args.topics) == bool(args.dataset):
        raise SystemExit("give exactly one of --topics (Pyserini TSV) or --dataset (with --split)")
    if args.topics:
        return _read_topics(args.topics)
    from pyserini_ext.data import load_dataset
    return load_dataset(args.dataset).split_queries(args.split)


def _searcher(args: argparse.Namespace, **overrides):
    from pyserini_ext.search.aligner import open_searcher
    options = dict(beta_q=args.beta_q, alignment=args.alignment, neighbours=args.neighbours)
    return open_searcher(args.index, args.model, nprobe=args.nprobe, **{**options, **overrides})


def _search(args: argparse.Namespace) -> int:
    import time

    from pyserini_ext.evaluation import write_trec_run
    queries = _queries(args)
    searcher = _searcher(args)
    started = time.time()
    hits = searcher.batch_search(list(queries.values()), list(queries), k=args.hits)
    elapsed = time.time() - started
    write_trec_run({qid: [(h.docid, h.score) for h in qhits] for qid, qhits in hits.items()}, args.output,
                   tag=f"aligner-{searcher.alignment}")
    print(json.dumps({"run": args.output, "queries": len(queries),
                      "ms_per_query": round(1000 * elapsed / max(1, len(queries)), 1)}))
    return 0


def _adapt(args: argparse.Namespace) -> int:
    from pyserini_ext.data import load_dataset, write_trec_qrels
    from pyserini_ext.evaluation import trec_eval, write_trec_run
    from pyserini_ext.models.alignment import Alignment
    from pyserini_ext.search.adaptation import adapt_alignment, split_labelled
    dataset = load_dataset(args.dataset)
    qrels = dataset.qrels(args.split)
    labelled, remaining = split_labelled(dataset.split_queries(args.split), qrels, args.labelled, args.seed)
    searcher = _searcher(args)
    result = adapt_alignment(searcher, labelled, qrels)
    report = {"labelled_qids": list(labelled), **result.as_dict(), "remaining_queries": len(remaining)}
    with tempfile.TemporaryDirectory() as tmp:
        qrels_path = write_trec_qrels({q: qrels[q] for q in remaining}, Path(tmp) / "qrels.txt")
        for name, alignment in (("default_k=1", Alignment(k=1)), ("chosen", result.chosen)):
            hits = searcher.batch_search(list(remaining.values()), list(remaining), k=args.hits, alignment=alignment)
            run = write_trec_run({q: [(h.docid, h.score) for h in qh] for q, qh in hits.items()},
                                 Path(args.output_dir or tmp) / f"run.aligner-adapt.{alignment}.txt")
            report[f"remaining_{name}"] = trec_eval(qrels_path, run, relevance_level=args.relevance_level)
    print(json.dumps(report, indent=1))
    return 0


def _search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True)
    parser.add_argument("--model", help="model folder (default: the one recorded in the index)")
    parser.add_argument("--beta-q", type=float, default=0.5, help="fraction of query tokens kept by salience")
    parser.add_argument("--alignment", default="k=1", help="k=<int> or p=<fraction|percent%%>")
    parser.add_argument("--neighbours", type=int, default=256, help="nearest document tokens per query token")
    parser.add_argument("--nprobe", type=int, default=32,
                        help="IVF lists (ivfpq) or centroids per query token (centroid) probed")
    parser.add_argument("--hits", type=int, default=1000)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyserini-ext aligner", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train an AligneR model on a BEIR dataset's qrels split")
    _dataset_arguments(train)
    train.add_argument("--split", default="train")
    train.add_argument("--backbone", default="splade-tiny", help="packaged backbone name or Hugging Face folder")
    train.add_argument("--output", required=True, help="model folder to write")
    train.add_argument("--negatives", choices=("bm25", "random"), default="bm25")
    train.add_argument("--epochs", type=int, default=6)
    train.add_argument("--max-steps", type=int)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--learning-rate", type=float, default=5e-5)
    train.add_argument("--temperature", type=float, default=0.05)
    train.add_argument("--alpha-q", type=float, default=0.5)
    train.add_argument("--alpha-d", type=float, default=0.4)
    train.add_argument("--eps", type=float, default=0.002)
    train.add_argument("--query-max-length", type=int, default=32)
    train.add_argument("--doc-max-length", type=int, default=256)
    train.add_argument("--seed", type=int, default=42)
    train.set_defaults(handler=_train)

    index = commands.add_parser("index", help="encode a corpus and write a token index")
    _dataset_arguments(index)
    index.add_argument("--corpus", help="Pyserini JsonCollection folder or file")
    index.add_argument("--model", required=True, help="AligneR model folder")
    index.add_argument("--output", required=True, help="index folder to write")
    index.add_argument("--encoded", help="cache of the unpruned encoding (.npz): reused if present, else written")
    index.add_argument("--beta-d", type=float, default=1.0, help="fraction of each document's tokens kept")
    index.add_argument("--codec", choices=("float16", "residual-pq"), default="float16")
    index.add_argument("--candidates", choices=("flat", "ivfpq", "hnsw", "centroid"), default="flat")
    index.add_argument("--nlist", type=int, help="IVF lists (default ~4 sqrt(tokens), at most 1024)")
    index.add_argument("--pq-m", type=int, default=32, help="PQ sub-quantizers (bytes per token code)")
    index.add_argument("--batch-size", type=int, default=32)
    index.add_argument("--max-length", type=int, help="document tokens (default: the model's doc_max_length)")
    index.add_argument("--fp16", action="store_true", help="fp16 autocast (CUDA only)")
    index.add_argument("--overwrite", action="store_true")
    index.set_defaults(handler=_index)

    search = commands.add_parser("search", help="search an index; writes a TREC run")
    _dataset_arguments(search)
    _search_arguments(search)
    search.add_argument("--topics", help="Pyserini TSV topics (qid<TAB>query)")
    search.add_argument("--split", default="test")
    search.add_argument("--output", required=True, help="TREC run file to write")
    search.set_defaults(handler=_search)

    adapt = commands.add_parser("adapt", help="few-shot alignment adaptation on a BEIR dataset")
    _dataset_arguments(adapt)
    _search_arguments(adapt)
    adapt.add_argument("--split", default="test")
    adapt.add_argument("--labelled", type=int, default=8, help="labelled queries used to choose (at most 8)")
    adapt.add_argument("--seed", type=int, default=42)
    adapt.add_argument("--relevance-level", type=int, help="trec_eval -l (2 for DL19 recall)")
    adapt.add_argument("--output-dir", help="where to keep the two runs (default: discarded)")
    adapt.set_defaults(handler=_adapt)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("train", "adapt") and not args.dataset:
        print(f"pyserini-ext aligner {args.command}: --dataset is required", file=sys.stderr)
        return 2
    import faiss
    import torch
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    return args.handler(args)

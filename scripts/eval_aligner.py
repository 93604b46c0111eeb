"""AligneR evaluation: exact vs compressed index, pruning curve (beta_d), few-shot alignment adaptation.

    .venv/bin/python scripts/eval_aligner.py --model MODEL --dataset scifact --workdir runs/aligner-eval/scifact
    .venv/bin/python scripts/eval_aligner.py --model MODEL --dataset msmarco-dl19-subset --recall-level 2 ...

The corpus is encoded once (cached as encoded.npz in the work folder); every pruning point is an index built from
that encoding. Runs are TREC files scored by pyserini_ext.evaluation (trec_eval's values: nDCG@10 on graded
qrels; R@100 with `-l recall-level` when given, as for DL19). Latency = wall time of batch_search per query
(query encoding, candidate generation, exact scoring) on the torch/Faiss threads given by --threads. Writes
results.json and results.md in the work folder, and the pruning-curve PNG where --plot says.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import faiss
import torch

from pyserini_ext.data import load_dataset, write_trec_qrels
from pyserini_ext.evaluation import DEFAULT_METRICS, evaluate, write_trec_run
from pyserini_ext.index.aligner import AlignerIndex, EncodedCorpus, build_index, encode_corpus
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.search.aligner import AlignerSearcher
from pyserini_ext.train.adaptation import evaluate_adaptation


def evaluate_run(hits: dict, qrels_path: Path, run_path: Path, recall_level: int | None) -> dict[str, float]:
    run = write_trec_run({q: [(h.docid, h.score) for h in qh] for q, qh in hits.items()}, run_path)
    return evaluate(qrels_path, run, DEFAULT_METRICS, recall_level)


def run_point(name: str, index_folder: Path, model: AlignerModel, queries: dict[str, str], qrels_path: Path,
              workdir: Path, recall_level: int | None, **searcher_options) -> dict:
    index = AlignerIndex.open(index_folder, nprobe=searcher_options.pop("nprobe", 32))
    searcher = AlignerSearcher(index, model, **searcher_options)
    started = time.time()
    hits = searcher.batch_search(list(queries.values()), list(queries), k=100)
    ms_per_query = 1000 * (time.time() - started) / len(queries)
    scores = evaluate_run(hits, qrels_path, workdir / f"run.{name}.txt", recall_level)
    meta = index.metadata
    row = {"name": name, "beta_d": meta["beta_d"], "codec": meta["codec"], "candidates": meta["candidates"],
           "ndcg_cut_10": scores["ndcg_cut_10"], "recall_100": scores["recall_100"],
           "bytes_per_token": round(meta["bytes_per_token"], 1), "tokens": meta["counts"]["tokens"],
           "index_mb": round(sum(meta["bytes"].values()) / 2 ** 20, 1), "ms_per_query": round(ms_per_query, 1)}
    print(json.dumps(row), flush=True)
    return row


def plot_curve(rows: list[dict], title: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    exact = sorted((r for r in rows if r["codec"] == "float16"), key=lambda r: r["beta_d"])
    betas = [100 * r["beta_d"] for r in exact]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(betas, [r["ndcg_cut_10"] for r in exact], "o-", label="nDCG@10")
    ax.plot(betas, [r["recall_100"] for r in exact], "s-", label="R@100")
    for r, beta in zip(exact, betas):
        ax.annotate(f"{r['ms_per_query']:.0f} ms\n{r['tokens'] / 1e6:.2f}M tok", (beta, r["ndcg_cut_10"]),
                    textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    ax.set_xlabel("document tokens kept, beta_d (%)")
    ax.set_xscale("log")
    ax.set_xticks(betas, [f"{b:g}" for b in betas])
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--betas", default="1.0,0.4,0.2,0.1")
    parser.add_argument("--compressed-betas", default="1.0,0.4", help="pruning points also built compressed")
    parser.add_argument("--recall-level", type=int, help="trec_eval -l for R@100 (2 for DL19)")
    parser.add_argument("--max-length", type=int, help="document tokens (default: the model's)")
    parser.add_argument("--neighbours", type=int, default=256)
    parser.add_argument("--beta-q", type=float, default=DEFAULT_BETA_Q)
    parser.add_argument("--labelled", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--plot", help="PNG path of the pruning curve")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset(args.dataset)
    qrels = dataset.qrels(args.split)
    queries = dataset.split_queries(args.split)
    qrels_path = write_trec_qrels(qrels, workdir / "qrels.txt")
    model = AlignerModel.from_pretrained(args.model)
    cache = workdir / "encoded.npz"
    if cache.is_file() and EncodedCorpus.load(cache).model_info.get("fingerprint") == model.fingerprint():
        encoded = EncodedCorpus.load(cache)
    else:
        started = time.time()
        encoded = encode_corpus(model, dataset.corpus, max_length=args.max_length,
                                model_path=str(Path(args.model).resolve()))
        encoded.save(cache)
        print(f"encoded {len(encoded.docids)} documents, {len(encoded.vectors)} tokens in "
              f"{time.time() - started:.0f}s", flush=True)
    options = dict(beta_q=args.beta_q, neighbours=args.neighbours)
    rows = []
    for beta in [float(b) for b in args.betas.split(",")]:
        folder = build_index(encoded, workdir / f"index-exact-{beta:g}", beta_d=beta, overwrite=True)
        rows.append(run_point(f"exact-{beta:g}", folder, model, queries, qrels_path, workdir, args.recall_level,
                              **options))
    for beta in [float(b) for b in args.compressed_betas.split(",") if b]:
        folder = build_index(encoded, workdir / f"index-pq-{beta:g}", beta_d=beta, codec="residual-pq",
                             candidates="ivfpq", overwrite=True)
        rows.append(run_point(f"compressed-{beta:g}", folder, model, queries, qrels_path, workdir,
                              args.recall_level, nprobe=32, **options))

    # few-shot adaptation on the full exact index
    searcher = AlignerSearcher(workdir / "index-exact-1", model, **options)
    adapt_report = evaluate_adaptation(searcher, queries, qrels, args.labelled, hits=100,
                                       recall_level=args.recall_level, run_dir=workdir)
    print(json.dumps(adapt_report), flush=True)

    table = rows
    results = {"dataset": args.dataset, "model": args.model, "queries": len(queries), "documents": len(encoded.docids),
               "tokens_before_pruning": int(len(encoded.vectors)), "truncated": encoded.truncated,
               "beta_q": args.beta_q, "neighbours": args.neighbours, "threads": args.threads,
               "rows": table, "adaptation": adapt_report}
    (workdir / "results.json").write_text(json.dumps(results, indent=1))
    header = ("| index | beta_d | nDCG@10 | R@100 | bytes/token | tokens | index MB | ms/query |\n"
              "|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {r['codec']}+{r['candidates']} | {100 * r['beta_d']:g}% | {r['ndcg_cut_10']:.4f} | "
             f"{r['recall_100']:.4f} | {r['bytes_per_token']} | {r['tokens']} | {r['index_mb']} | "
             f"{r['ms_per_query']} |" for r in table]
    (workdir / "results.md").write_text(header + "\n".join(lines) + "\n")
    print(header + "\n".join(lines))
    if args.plot:
        plot_curve(table, f"AligneR pruning curve, {args.dataset} ({len(queries)} queries)", Path(args.plot))


if __name__ == "__main__":
    main()

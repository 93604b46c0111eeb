"""DeepCT evaluation table (docs/deepct.md): SciFact test and the DL19 MS MARCO subset.

    python scripts/eval_deepct.py --model resources/models/deepct-splade-tiny --work runs/deepct/eval

Rows: BM25 on the plain index; DeepCT-Index + BM25; DeepCT-Index + QL-JM; DeepCT-Query (weighted BoW) on the
plain index and on the DeepCT index; an untrained DeepCT-Index + BM25 for reference (SciFact only).
Tuning (nDCG@10, on SciFact train queries): k1/b for each BM25 row, λ for QL-JM. DL19 has no train split:
BM25 uses Anserini's MS MARCO passage values (k1=0.82, b=0.68), DeepCT + BM25 the DeepCT authors'
recommendation (k1=10, b=0.9), QL-JM the λ tuned on SciFact. BM25 test runs go through the unchanged
`python -m pyserini.search.lucene` command; the others through `pyserini_ext.search.lucene`.
DL19 recall counts relevance >= 2 as relevant (nDCG uses the graded judgements).
"""
from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path

import torch

from pyserini_ext.data import load_dataset, write_json_collection, write_topics, write_trec_qrels
from pyserini_ext.encode.deepct import DeepCTQueryWeigher
from pyserini_ext.evaluation import DEFAULT_METRICS, evaluate, write_trec_run
from pyserini_ext.index.deepct import build_deepct_index
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.search.lucene import ClassicLuceneSearcher

BM25_GRID = list(itertools.product([0.6, 0.9, 1.2, 2.0], [0.4, 0.6, 0.75, 0.9]))
DEEPCT_BM25_GRID = list(itertools.product([0.9, 2.0, 5.0, 10.0, 15.0], [0.4, 0.6, 0.75, 0.9]))
LAMBDAS = [0.1, 0.3, 0.5, 0.7]
DL19_BM25 = (0.82, 0.68)
DL19_DEEPCT_BM25 = (10.0, 0.9)


def tune(index: Path, topics: dict[str, str], qrels: Path, work: Path, settings: list, configure) -> tuple:
    """The setting with the best nDCG@10 on the tuning queries (ties: first in grid order)."""
    best, best_score = None, -1.0
    for setting in settings:
        searcher = ClassicLuceneSearcher(index)
        configure(searcher, setting)
        run = write_trec_run(searcher.search_topics(topics, k=100, threads=2), work / "tune.run")
        score = evaluate(qrels, run, ("ndcg_cut_10",))["ndcg_cut_10"]
        print(f"  tune {index.name} {setting}: nDCG@10 {score:.4f}", flush=True)
        if score > best_score:
            best, best_score = setting, score
    return best


def pyserini_bm25_run(index: Path, topics_file: Path, run: Path, k1: float, b: float) -> Path:
    """The unchanged Pyserini command (proves the DeepCT index works with it)."""
    cmd = [sys.executable, "-m", "pyserini.search.lucene", "--index", str(index), "--topics", str(topics_file),
           "--output", str(run), "--bm25", "--k1", str(k1), "--b", str(b), "--hits", "1000", "--threads", "2"]
    print("  $", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, capture_output=True)
    return run


def run_rows(name: str, model: DeepCTModel, untrained: DeepCTModel | None, work: Path, tuning: dict | None):
    dataset = load_dataset(name)
    work = work / name
    split = "test"
    topics = dataset.split_queries(split)
    qrels = write_trec_qrels(dataset.qrels(split), work / f"qrels.{split}.txt")
    topics_file = write_topics(topics, work / f"topics.{split}.tsv")
    recall_level = 2 if name.startswith("msmarco") else None
    plain = work / "index.plain"
    if not plain.exists():
        write_json_collection(dataset.corpus, work / "collection")
        build_lucene_index(work / "collection", plain, threads=2)
    deepct = work / "index.deepct"
    if not deepct.exists():
        build_deepct_index(model, dataset.corpus, deepct, model_name="trained")
    indexes = {"plain": plain, "deepct": deepct}
    if untrained is not None and not (work / "index.untrained").exists():
        build_deepct_index(untrained, dataset.corpus, work / "index.untrained", model_name="untrained")
    if untrained is not None:
        indexes["untrained"] = work / "index.untrained"

    if tuning is None:  # tune on this dataset's train split
        train_topics = dataset.split_queries("train")
        train_qrels = write_trec_qrels(dataset.qrels("train"), work / "qrels.train.txt")

        def set_bm25(searcher, setting):
            searcher.set_bm25(*setting)

        tuning = {
            "bm25": tune(plain, train_topics, train_qrels, work, BM25_GRID, set_bm25),
            "deepct_bm25": tune(deepct, train_topics, train_qrels, work, DEEPCT_BM25_GRID, set_bm25),
            "qljm": tune(deepct, train_topics, train_qrels, work, LAMBDAS, lambda s, lam: s.set_qljm(lam)),
            "source": f"tuned on {name} train",
        }
    rows = []
    k1, b = tuning["bm25"]
    rows.append(("BM25", f"k1={k1} b={b}", pyserini_bm25_run(plain, topics_file, work / "bm25.run", k1, b)))
    k1, b = tuning["deepct_bm25"]
    rows.append(("DeepCT-Index + BM25", f"k1={k1} b={b}",
                 pyserini_bm25_run(deepct, topics_file, work / "deepct-bm25.run", k1, b)))
    if "untrained" in indexes:
        rows.append(("untrained DeepCT-Index + BM25", f"k1={k1} b={b}",
                     pyserini_bm25_run(indexes["untrained"], topics_file, work / "untrained-bm25.run", k1, b)))
    searcher = ClassicLuceneSearcher(deepct)
    searcher.set_qljm(tuning["qljm"])
    rows.append(("DeepCT-Index + QL-JM", f"λ={tuning['qljm']}",
                 write_trec_run(searcher.search_topics(topics, k=1000, threads=2), work / "deepct-qljm.run")))
    weigher = DeepCTQueryWeigher(model)
    for index_name, (k1, b) in (("plain", tuning["bm25"]), ("deepct", tuning["deepct_bm25"])):
        searcher = ClassicLuceneSearcher(indexes[index_name])
        searcher.set_bm25(k1, b)
        run = searcher.search_topics(topics, k=1000, query_weights=weigher)
        rows.append((f"DeepCT-Query on {index_name} index (BM25)", f"k1={k1} b={b}",
                     write_trec_run(run, work / f"deepct-query-{index_name}.run")))
    results = []
    for system, params, run in rows:
        scores = evaluate(qrels, run, DEFAULT_METRICS, recall_level)
        print(f"  {name} {system} ({params}): {scores}", flush=True)
        results.append({"dataset": name, "system": system, "params": params, **scores})
    return results, tuning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--work", default=Path("runs/deepct/eval"), type=Path)
    parser.add_argument("--seed", type=int, default=42, help="seed of the untrained reference head")
    args = parser.parse_args()
    model = DeepCTModel.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    untrained = DeepCTModel.from_backbone(backbone_path("splade-tiny"))
    scifact, tuning = run_rows("scifact", model, untrained, args.work, None)
    dl19_tuning = {"bm25": DL19_BM25, "deepct_bm25": DL19_DEEPCT_BM25, "qljm": tuning["qljm"]}
    dl19, _ = run_rows("msmarco-dl19-subset", model, None, args.work, dl19_tuning)
    lines = ["| dataset | system | parameters | nDCG@10 | R@100 |", "|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['system']} | {r['params']} | {r['ndcg_cut_10']:.4f} | {r['recall_100']:.4f} |"
              for r in scifact + dl19]
    (args.work / "results.md").write_text("\n".join(lines) + "\n")
    (args.work / "results.json").write_text(json.dumps({"rows": scifact + dl19, "scifact_tuning": tuning}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""DeepCT-Query on long queries: the long-query development set (experiments/aggretriever-lexical/query_sets.py:
one half of a SciFact / Cranfield passage retrieves the other half; no test query read) searched with the README's
commands: BM25 (Pyserini's defaults) over a plain Lucene index, and `pyserini-ext deepct search --query-model`
(query words weighted by DeepCT) over the same index.

    python experiments/deepct-query-long/check.py [--model deepct] [--work runs/exp-dcq] [--sets long short]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from pyserini_ext.evaluation import evaluate, read_trec_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aggretriever-lexical"))
from query_sets import long_sets, short_sets  # noqa: E402


def run(*command: str) -> None:
    subprocess.run([sys.executable, "-m", *command], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="deepct")
    parser.add_argument("--work", type=Path, default=Path("runs/exp-dcq"))
    parser.add_argument("--sets", nargs="+", default=["long"], choices=["long", "short"])
    parser.add_argument("--extra", nargs="*", default=[], help="more `deepct search` flag sets, 'label=--flag v ...'")
    args = parser.parse_args()
    sets = (long_sets() if "long" in args.sets else {}) | (short_sets() if "short" in args.sets else {})
    rows: dict[str, list[float]] = {}
    for name, (texts, queries) in sets.items():
        work = args.work / name
        (work / "collection").mkdir(parents=True, exist_ok=True)
        with open(work / "collection" / "docs.jsonl", "w") as f:
            for d, t in texts.items():
                f.write(json.dumps({"id": d, "contents": t}) + "\n")
        with open(work / "topics.tsv", "w") as f:
            for q, (t, _) in queries.items():
                f.write(f"{q}\t{' '.join(t.split())}\n")
        qrels = {q: {d: 1} for q, (_, d) in queries.items()}
        if not (work / "index").is_dir():
            run("pyserini.index.lucene", "--collection", "JsonCollection", "--input", str(work / "collection"),
                "--index", str(work / "index"), "--generator", "DefaultLuceneDocumentGenerator", "--threads", "2")
        runs = {"BM25": ["pyserini.search.lucene", "--bm25"],
                f"DeepCT-Query ({args.model})": ["pyserini_ext.cli", "deepct", "search", "--bm25", "--query-model",
                                                  args.model]}
        for extra in args.extra:
            label, flags = extra.split("=", 1)
            runs[label] = ["pyserini_ext.cli", "deepct", "search", "--query-model", args.model, *flags.split()]
        for label, command in runs.items():
            out = work / f"run.{label.split()[0]}.{abs(hash(' '.join(command))) % 10**8}.txt"
            if not out.is_file():
                run(*command, "--index", str(work / "index"), "--topics", str(work / "topics.tsv"), "--output",
                    str(out), "--hits", "100", "--threads", "2")
            scored = evaluate(qrels, read_trec_run(out), metrics=("ndcg_cut_10",))
            rows.setdefault(label, []).append(scored["ndcg_cut_10"])
    print(f"{'':<32}" + "  ".join(f"{n:>16}" for n in sets) + "      mean")
    for label, row in rows.items():
        print(f"{label:<32}" + "  ".join(f"{v:>16.4f}" for v in row) + f"  {np.mean(row):.4f}", flush=True)


if __name__ == "__main__":
    main()

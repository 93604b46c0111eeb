"""TREC runs and their evaluation with Pyserini's own trec_eval (`python -m pyserini.eval.trec_eval`)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyserini_ext.data import atomic_output

# trec_eval flags for the metrics we report; "-l 2" style relevance levels can be prepended by callers
METRIC_FLAGS = {
    "ndcg_cut_10": ["-m", "ndcg_cut.10"],
    "recall_100": ["-m", "recall.100"],
    "recall_1000": ["-m", "recall.1000"],
    "map": ["-m", "map"],
    "recip_rank": ["-m", "recip_rank"],
}


def write_trec_run(results: Mapping[str, Sequence[tuple[str, float]]], path: str | os.PathLike,
                   tag: str = "pyserini-ext") -> Path:
    """`qid Q0 docid rank score tag` lines; hits are sorted by score (ties: docid) before ranking."""
    path = Path(path)
    with atomic_output(path, overwrite=True) as tmp, open(tmp, "w", encoding="utf-8") as f:  # runs: replaced
        for qid, hits in results.items():
            ranked = sorted(hits, key=lambda h: (-h[1], h[0]))
            for rank, (docid, score) in enumerate(ranked, start=1):
                f.write(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")
    return path


def read_trec_run(path: str | os.PathLike) -> dict[str, list[tuple[str, float]]]:
    run: dict[str, list[tuple[str, float]]] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{line_no}: not a TREC run line: {line!r}")
            run.setdefault(parts[0], []).append((parts[2], float(parts[4])))
    return run


def trec_eval(qrels: str | os.PathLike, run: str | os.PathLike,
              metrics: Sequence[str] = ("ndcg_cut_10", "recall_100"), relevance_level: int | None = None,
              per_query: bool = False) -> dict[str, float] | dict[str, dict[str, float]]:
    """Run Pyserini's trec_eval (real Java trec_eval) and return {metric: value} (or per query)."""
    args = [sys.executable, "-m", "pyserini.eval.trec_eval", "-c"]
    if relevance_level is not None:
        args += ["-l", str(relevance_level)]
    if per_query:
        args += ["-q"]
    for metric in metrics:
        args += METRIC_FLAGS.get(metric, ["-m", metric])
    proc = subprocess.run(args + [str(qrels), str(run)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"trec_eval failed ({proc.returncode}): {proc.stderr[-2000:]}")
    scores: dict[str, dict[str, float]] = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"^(\S+)\s+(\S+)\s+([-\d.eE]+)$", line.strip())
        if match:
            scores.setdefault(match.group(2), {})[match.group(1)] = float(match.group(3))
    if per_query:
        return {q: m for q, m in scores.items() if q != "all"}
    if "all" not in scores:
        raise RuntimeError(f"trec_eval printed no summary:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return scores["all"]

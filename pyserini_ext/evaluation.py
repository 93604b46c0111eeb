"""TREC runs and their evaluation: the one place for run files and metrics.

Runs are written as Pyserini's `TrecWriter` writes them after its `tie_breaker` (score descending, then docid
ascending; `qid Q0 docid rank score:.6f tag`); the tests compare the bytes with Pyserini's own writer, which is
not called here because importing it starts the JVM.

Metrics come from `ir_measures` (trec_eval's own C code through pytrec_eval), in memory, with the values of
`python -m pyserini.eval.trec_eval -c` (a judged query without hits counts as 0; tested against Pyserini's
trec_eval). ONE relevance policy: nDCG uses the graded judgements as they are; `recall_level` (trec_eval's
`-l`, 2 for the TREC DL tracks) applies to the binary measures only (recall, MAP, reciprocal rank).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import ir_measures
from ir_measures import AP, RR, R, nDCG

from pyserini_ext.data import atomic_output

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[tuple[str, float]]]

GRADED_MEASURES = {"ndcg_cut_10": nDCG@10}
BINARY_MEASURES = {"recall_100": R@100, "recall_1000": R@1000, "map": AP, "recip_rank": RR}
METRICS = (*GRADED_MEASURES, *BINARY_MEASURES)
DEFAULT_METRICS = ("ndcg_cut_10", "recall_100")


def ranked(hits: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Pyserini's `tie_breaker`: score descending, ties by docid ascending."""
    return sorted(hits, key=lambda h: (-h[1], h[0]))


def write_trec_run(results: Run, path: str | os.PathLike, tag: str = "pyserini-ext") -> Path:
    """`qid Q0 docid rank score tag` lines, hits ranked as Pyserini ranks them; written atomically."""
    path = Path(path)
    with atomic_output(path, overwrite=True) as tmp, open(tmp, "w", encoding="utf-8") as f:  # runs: replaced
        for qid, hits in results.items():
            for rank, (docid, score) in enumerate(ranked(hits), start=1):
                f.write(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")
    return path


def _trec_lines(path: str | os.PathLike, width: int, what: str):
    """The whitespace-split lines of a TREC file, each checked to have `width` fields."""
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            parts = line.split()
            if parts and len(parts) != width:
                raise ValueError(f"{path}:{line_no}: not a TREC {what} line: {line!r}")
            if parts:
                yield parts


def read_trec_run(path: str | os.PathLike) -> dict[str, list[tuple[str, float]]]:
    """`qid Q0 docid rank score tag` lines -> {qid: [(docid, score)]} in file order."""
    run: dict[str, list[tuple[str, float]]] = {}
    for qid, _, docid, _, score, _ in _trec_lines(path, 6, "run"):
        run.setdefault(qid, []).append((docid, float(score)))
    return run


def read_trec_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """`qid iteration docid relevance` lines -> {qid: {docid: relevance}}."""
    qrels: dict[str, dict[str, int]] = {}
    for qid, _, docid, relevance in _trec_lines(path, 4, "qrels"):
        qrels.setdefault(qid, {})[docid] = int(relevance)
    return qrels


def measures(metrics: Sequence[str], recall_level: int | None = None) -> dict[str, object]:
    """Our metric names -> ir_measures measures under the one relevance policy (see the module doc)."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    if recall_level is not None and recall_level < 1:
        raise ValueError(f"recall_level must be >= 1, got {recall_level}")
    chosen = {}
    for name in metrics:
        if name in GRADED_MEASURES:
            chosen[name] = GRADED_MEASURES[name]
        else:
            measure = BINARY_MEASURES[name]
            chosen[name] = measure(rel=recall_level) if recall_level is not None else measure
    return chosen


def evaluate(qrels: Qrels | str | os.PathLike, run: Run | str | os.PathLike,
             metrics: Sequence[str] = DEFAULT_METRICS, recall_level: int | None = None,
             per_query: bool = False) -> dict[str, float] | dict[str, dict[str, float]]:
    """{metric: value} averaged over every judged query (trec_eval -c), or {qid: {metric: value}}.

    `qrels` and `run` are mappings or TREC files. Queries of the run without judgements are ignored.
    """
    qrels = read_trec_qrels(qrels) if isinstance(qrels, (str, os.PathLike)) else qrels
    run = read_trec_run(run) if isinstance(run, (str, os.PathLike)) else run
    if not qrels:
        raise ValueError("no judgements to evaluate against")
    chosen = measures(metrics, recall_level)
    names = {measure: name for name, measure in chosen.items()}
    run_dict = {qid: dict(hits) for qid, hits in run.items()}
    if per_query:
        scores: dict[str, dict[str, float]] = {}
        for metric in ir_measures.iter_calc(list(chosen.values()), qrels, run_dict):
            scores.setdefault(metric.query_id, {})[names[metric.measure]] = metric.value
        return scores
    aggregate = ir_measures.calc_aggregate(list(chosen.values()), qrels, run_dict)
    return {names[measure]: value for measure, value in aggregate.items()}

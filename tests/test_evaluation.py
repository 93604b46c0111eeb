"""Run files and metrics: the bytes of Pyserini's TrecWriter, the values of Pyserini's trec_eval, one policy."""
from __future__ import annotations

import subprocess
import sys
from collections import namedtuple

import pytest

from pyserini_ext.data import write_trec_qrels
from pyserini_ext.evaluation import evaluate, read_trec_qrels, read_trec_run, write_trec_run

QRELS = {"q1": {"d1": 2, "d2": 1, "d9": 0}, "q2": {"d3": 1}, "q3": {"d4": 0}, "q4": {"d5": 1, "d6": 2}}
RUN = {"q1": [("d1", 2.0), ("d7", 1.0), ("d2", 3.0)], "q2": [("d8", 5.0), ("d3", 5.0)], "q3": [("d4", 1.0)],
       "q5": [("d4", 1.0)]}  # q2's tie, q4 judged but not retrieved, q5 retrieved but not judged


def pyserini_trec_eval(*args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "pyserini.eval.trec_eval", "-c", *args], capture_output=True,
                         text=True, check=True).stdout
    return {parts[0]: float(parts[2]) for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3 and parts[1] == "all"}


def test_run_file_is_pyserinis_trec_writer_output(tmp_path):
    from pyserini.output_writer import OutputFormat, get_output_writer, tie_breaker

    ours = write_trec_run(RUN, tmp_path / "ours.txt", tag="t")
    hit = namedtuple("Hit", "docid score")
    with get_output_writer(str(tmp_path / "pyserini.txt"), OutputFormat.TREC, "w", max_hits=1000, tag="t") as out:
        for qid, hits in RUN.items():
            out.write(qid, tie_breaker([hit(d, s) for d, s in hits]))
    assert ours.read_bytes() == (tmp_path / "pyserini.txt").read_bytes()
    assert read_trec_run(ours)["q2"] == [("d3", 5.0), ("d8", 5.0)]  # ties: docid ascending


def test_metrics_equal_pyserinis_trec_eval_with_one_recall_policy(tmp_path):
    qrels = write_trec_qrels(QRELS, tmp_path / "qrels.txt")
    run = write_trec_run(RUN, tmp_path / "run.txt")
    assert read_trec_qrels(qrels) == QRELS
    metrics = ("ndcg_cut_10", "recall_100", "map", "recip_rank")
    official = pyserini_trec_eval("-m", "ndcg_cut.10", "-m", "recall.100", "-m", "map", "-m", "recip_rank",
                                  str(qrels), str(run))
    ours = evaluate(qrels, run, metrics)
    assert ours == pytest.approx(official, abs=1e-4)
    assert ours["ndcg_cut_10"] == pytest.approx(0.3727, abs=1e-4)  # hand-checked: judged q4 counts as 0 (-c)
    assert evaluate(QRELS, RUN, metrics) == ours  # mappings or files, same values
    # the recall level applies to recall (trec_eval -l 2) and never to nDCG
    level2 = evaluate(qrels, run, ("ndcg_cut_10", "recall_100"), recall_level=2)
    assert level2["recall_100"] == pytest.approx(pyserini_trec_eval("-l", "2", "-m", "recall.100", str(qrels),
                                                                    str(run))["recall_100"], abs=1e-4)
    assert level2["recall_100"] == pytest.approx(0.25) and level2["ndcg_cut_10"] == ours["ndcg_cut_10"]
    per_query = evaluate(QRELS, RUN, ("recip_rank",), per_query=True)
    assert {q: m["recip_rank"] for q, m in per_query.items()} == {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 0.0}


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="unknown metric.*ndcg@10"):
        evaluate(QRELS, RUN, ("ndcg@10",))
    with pytest.raises(ValueError, match="recall_level must be >= 1"):
        evaluate(QRELS, RUN, recall_level=0)
    (tmp_path / "bad.txt").write_text("q1 Q0 d1 1\n")
    with pytest.raises(ValueError, match="bad.txt:1: not a TREC run line"):
        read_trec_run(tmp_path / "bad.txt")

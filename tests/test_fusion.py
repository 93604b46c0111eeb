"""`pyserini-ext fusion normalize`: min-max fusion with a weight per run, against Pyserini's own `normalize`."""
from __future__ import annotations

import random

import pytest
from pyserini.fusion import normalize
from pyserini.trectools import TrecRun

from pyserini_ext.cli.__main__ import main as cli
from pyserini_ext.search.fusion import weighted_normalize


def write_run(path, scores: dict[str, dict[str, float]]):
    lines = []
    for qid, hits in scores.items():
        ranked = sorted(hits.items(), key=lambda kv: -kv[1])
        lines += [f"{qid} Q0 {doc} {rank} {score} t" for rank, (doc, score) in enumerate(ranked, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_scores(path) -> dict[tuple[str, str], float]:
    return {(line.split()[0], line.split()[2]): float(line.split()[4]) for line in path.read_text().splitlines()}


@pytest.fixture
def two_runs(tmp_path):
    """20 queries; a BM25-like run (scores 5-40) and a dense-like one (0-1) over overlapping documents."""
    rng = random.Random(7)
    lexical = {str(q): {f"d{rng.randrange(60)}": rng.uniform(5, 40) for _ in range(30)} for q in range(20)}
    dense = {str(q): {f"d{rng.randrange(60)}": rng.uniform(0, 1) for _ in range(30)} for q in range(20)}
    return write_run(tmp_path / "lexical.txt", lexical), write_run(tmp_path / "dense.txt", dense)


def test_equal_weights_rank_as_pyserini_normalize(two_runs, tmp_path):
    ours = weighted_normalize([TrecRun(str(p)) for p in two_runs], depth=1000, k=1000).run_data
    theirs = normalize([TrecRun(str(p)) for p in two_runs], depth=1000, k=1000).run_data
    assert len(ours) == len(theirs) > 20 * 30
    merged = ours.merge(theirs, on=["topic", "docid"], suffixes=("_ours", "_theirs"))
    assert len(merged) == len(ours)
    assert (merged["score_ours"] * 2).to_numpy() == pytest.approx(merged["score_theirs"].to_numpy(), abs=1e-9)
    assert (merged["rank_ours"] == merged["rank_theirs"]).all()


def test_weights_through_the_command(two_runs, tmp_path, capsys):
    lexical, dense = two_runs
    output = tmp_path / "fused.txt"
    assert cli(["fusion", "normalize", "--runs", str(lexical), str(dense), "--weights", "3", "7",
                "--output", str(output), "--k", "5"]) == 0
    assert "wrote 100 hits for 20 queries" in capsys.readouterr().out
    fused = read_scores(output)

    def minmax(path):
        scores = read_scores(path)
        out = {}
        for qid in {q for q, _ in scores}:
            mine = {d: s for (q, d), s in scores.items() if q == qid}
            low, high = min(mine.values()), max(mine.values())
            out.update({(qid, d): (s - low) / (high - low) for d, s in mine.items()})
        return out

    a, b = minmax(lexical), minmax(dense)
    expected = {key: 0.3 * a.get(key, 0.0) + 0.7 * b.get(key, 0.0) for key in a.keys() | b.keys()}
    for qid in map(str, range(20)):  # the 5 best of each query, with their weighted scores
        best = sorted((s for (q, _), s in expected.items() if q == qid), reverse=True)[:5]
        assert sorted((s for (q, _), s in fused.items() if q == qid), reverse=True) == pytest.approx(best, abs=1e-9)
    assert all(fused[key] == pytest.approx(expected[key], abs=1e-9) for key in fused)


@pytest.mark.parametrize("extra, message", [
    (["--weights", "1"], "1 weights for 2 runs"),
    (["--weights", "1", "-1"], "weights must be finite and >= 0"),
    (["--weights", "0", "0"], "the weights are all 0"),
    (["--weights", "1", "nan"], "weights must be finite"),
])
def test_bad_weights_are_usage_errors(two_runs, tmp_path, extra, message, capsys):
    with pytest.raises(SystemExit) as error:
        cli(["fusion", "normalize", "--runs", *map(str, two_runs), "--output", str(tmp_path / "o.txt"), *extra])
    assert error.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o.txt").exists()


def test_bad_runs_are_named(two_runs, tmp_path, capsys):
    empty, garbage = tmp_path / "empty.txt", tmp_path / "garbage.txt"
    empty.write_text("")
    garbage.write_text("q Q0 d 1 not-a-number t\n")
    existing = tmp_path / "exists.txt"
    existing.write_text("keep me\n")
    for runs, output, message in [
        ([str(two_runs[0]), str(tmp_path / "missing.txt")], tmp_path / "o.txt", "missing.txt not found"),
        ([str(two_runs[0]), str(empty)], tmp_path / "o.txt", "empty.txt: empty run"),
        ([str(two_runs[0]), str(garbage)], tmp_path / "o.txt", "garbage.txt: not a TREC run"),
        ([str(p) for p in two_runs], existing, "exists; pass --overwrite"),
    ]:
        assert cli(["fusion", "normalize", "--runs", *runs, "--output", str(output)]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o.txt").exists() and existing.read_text() == "keep me\n"
    with pytest.raises(SystemExit):
        cli(["fusion", "normalize", "--runs", str(two_runs[0]), "--output", str(tmp_path / "o.txt")])
    assert "fusion needs at least 2 runs" in capsys.readouterr().err

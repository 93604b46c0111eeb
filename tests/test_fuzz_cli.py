"""Fuzz suite: seeded generated corpora, topics and options through the real `pyserini-ext` CLI (its `main`,
in this process, with the real JVM/Lucene, Faiss and models). Every case must end in
  GOOD:  exit code 0 with the right counts (documents exported/indexed, run lines well-formed and complete), or
  ERROR: exit code 2 with one line `pyserini-ext: error: ...` naming what the generator broke (file:line),
         no traceback, and no output (not even a hidden temporary) left behind;
anything else is a crash. Each category prints its counts; `-m slow` runs a larger sweep of the same generators.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from fuzz_cases import ERROR_LINE, Case, aligner_options, corpus_case, lucene_options, run_cli, topics_case, write_lines

from pyserini_ext.cli.__main__ import main as cli
from pyserini_ext.data.text import sanitize

REPO = Path(__file__).resolve().parents[1]
DEEPCT_MODEL = REPO / "resources" / "models" / "deepct-splade-tiny"
ALIGNER_MODEL = REPO / "resources" / "models" / "aligner-splade-tiny"
SEED = 20261130


class Outcomes:
    """Counts per category; collects failures with enough context to replay them."""

    def __init__(self, category: str):
        self.category, self.counts, self.failures = category, Counter(), []

    def check(self, case_no: int, code: int, err: str, expected_error: str, error_file: str | None = None,
              error_line: int | None = None, output: Path | None = None, good=None) -> None:
        problems = []
        if "Traceback" in err or code not in (0, 2):
            problems.append(f"crash (exit {code})")
        elif expected_error:
            lines = [line for line in err.splitlines() if ERROR_LINE.match(line)]
            if code != 2 or len(lines) != 1:
                problems.append(f"expected one error line with exit 2, got exit {code}")
            else:
                where = f"{error_file}:{error_line}:" if error_line else error_file or ""
                if expected_error not in lines[0] or where not in lines[0]:
                    problems.append(f"error should name {where!r} and {expected_error!r}")
            if output is not None and (output.exists() or any(
                    p.name.startswith(f".{output.name}.") for p in output.parent.iterdir())):
                problems.append("output left behind after an error")
        elif code != 0:
            problems.append(f"expected success, got exit {code}")
        elif good is not None:
            problems.extend(good())
        if problems:
            self.counts["crash" if "crash" in problems[0] else "wrong"] += 1
            self.failures.append(f"case {case_no}: {'; '.join(problems)}; stderr tail: {err[-600:]!r}")
        else:
            self.counts["error" if expected_error else "good"] += 1

    def report(self) -> None:
        tried = sum(self.counts.values())
        print(f"\nfuzz {self.category}: {tried} cases, {self.counts['good']} GOOD, {self.counts['error']} clear "
              f"errors, {self.counts['crash']} crashes, {self.counts['wrong']} wrong")
        assert not self.failures, "\n".join(self.failures[:5])


def sizes(default: int, slow: int) -> list[pytest.param]:
    return [pytest.param(default, id=f"{default}-cases"),
            pytest.param(slow, id=f"{slow}-cases", marks=pytest.mark.slow)]


# ---- corpora and queries through `data export` ----------------------------------------------------------------
@pytest.mark.parametrize("cases", sizes(150, 2000))
def test_fuzz_corpus_and_queries_through_data_export(cases, tmp_path, capsys):
    rng, outcomes = random.Random(SEED), Outcomes("data export (corpus.jsonl, queries.jsonl)")
    for n in range(cases):
        root = tmp_path / f"beir{n}"
        root.mkdir()
        corpus = corpus_case(rng, defect_rate=0.4)
        queries = corpus_case(rng, max_docs=5, defect_rate=0.2) if not corpus.error_text else corpus_case(
            rng, max_docs=3, defect_rate=0)
        write_lines(root / "corpus.jsonl", corpus.lines, rng)
        write_lines(root / "queries.jsonl", queries.lines, rng)
        (root / "qrels").mkdir()
        judged = queries.ids[:2] or ["nobody"]
        (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{(corpus.ids or ['x'])[0]}\t1\n" for q in judged if "\t" not in q))
        out = tmp_path / f"export{n}"
        code, err = run_cli(["data", "export", str(root), "--output", str(out), "--no-download"], capsys)
        first_bad: Case | None = corpus if corpus.error_text else queries if queries.error_text else None
        expected = first_bad.error_text if first_bad else ""
        bad_file = ("corpus.jsonl" if first_bad is corpus else "queries.jsonl") if first_bad else None
        if expected and "duplicate" in expected and first_bad is queries:
            expected = expected.replace("document", "query")

        def good(corpus=corpus, out=out):
            exported = [json.loads(line) for line in (out / "collection" / "docs.jsonl").read_text().splitlines()]
            problems = []
            if [d["id"] for d in exported] != corpus.ids:
                problems.append("exported ids differ from the corpus ids")
            if any(sanitize(d["contents"])[1] for d in exported):
                problems.append("unsanitised text exported")
            return problems

        outcomes.check(n, code, err, expected, bad_file, first_bad.error_line if first_bad else None, out, good)
    outcomes.report()


# ---- corpora through `deepct index` (model, Lucene writer) -------------------------------------------------
@pytest.mark.parametrize("cases", sizes(4, 60))
def test_fuzz_corpus_through_deepct_index(cases, tmp_path, capsys):
    rng, outcomes = random.Random(SEED + 1), Outcomes("deepct index --corpus")
    for n in range(cases):
        corpus = corpus_case(rng, max_docs=8, defect_rate=0.5, id_key=rng.choice(["_id", "id"]))
        path = write_lines(tmp_path / f"corpus{n}.jsonl", corpus.lines, rng)
        out = tmp_path / f"index{n}"
        code, err = run_cli(["deepct", "index", "--model", str(DEEPCT_MODEL), "--corpus", str(path), "--output",
                         str(out)], capsys)

        def good(corpus=corpus, out=out):
            from pyserini_ext.index.deepct import read_index_metadata
            from pyserini_ext.search.lucene import ClassicLuceneSearcher
            documents = read_index_metadata(out)["documents"]
            searcher = ClassicLuceneSearcher(out)
            stored = [searcher.doc(i).docid() for i in range(searcher.num_docs)]
            searcher.close()
            return [] if documents == len(corpus.ids) and stored == corpus.ids else [
                f"index holds {stored} ({documents} in metadata), expected {corpus.ids}"]

        outcomes.check(n, code, err, corpus.error_text, path.name, corpus.error_line, out, good)
    outcomes.report()


# ---- topics and options through `lucene search` -----------------------------------------------------------
@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz_index")
    docs = [{"_id": f"d{i}", "title": t, "text": x} for i, (t, x) in enumerate([
        ("Insulin", "insulin resistance in mice"), ("Bone", "vitamin D and bone density"),
        ("", "protein folding in the cell"), ("Genes", "gene expression of the liver"),
        ("Café", "naïve über tumour growth 中文"), ("", "covid-19 and p53 in T-cells")])]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert cli(["deepct", "index", "--model", str(DEEPCT_MODEL), "--corpus", str(folder / "corpus.jsonl"),
                "--output", str(folder / "index")]) == 0
    return folder / "index"


def check_run(run_file: Path, topics: Case, hits: int) -> list[str]:
    """Six columns, known qids, ranks 1..n per query, at most `hits` per query, scores not increasing."""
    per_query: dict[str, list[tuple[int, float]]] = {}
    for line in run_file.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) != 6 or parts[1] != "Q0":
            return [f"malformed run line {line!r}"]
        per_query.setdefault(parts[0], []).append((int(parts[3]), float(parts[4])))
    problems = [f"unknown qid {q!r}" for q in per_query if q not in topics.ids]
    for qid, ranked in per_query.items():
        if [r for r, _ in ranked] != list(range(1, len(ranked) + 1)) or len(ranked) > hits:
            problems.append(f"{qid}: ranks {[r for r, _ in ranked][:12]} for --hits {hits}")
        if any(a < b for (_, a), (_, b) in zip(ranked, ranked[1:])):
            problems.append(f"{qid}: scores increase")
    return problems


@pytest.mark.parametrize("cases", sizes(25, 400))
def test_fuzz_topics_and_options_through_lucene_search(cases, tmp_path, capsys, small_index):
    rng, outcomes = random.Random(SEED + 2), Outcomes("lucene search (topics, options)")
    for n in range(cases):
        topics = topics_case(rng)
        options = lucene_options(rng, invalid_rate=rng.choice([0.0, 0.3]))
        path = write_lines(tmp_path / f"topics{n}.tsv", topics.lines, rng)
        out = tmp_path / f"run{n}.txt"
        code, err = run_cli(["lucene", "search", "--index", str(small_index), "--topics", str(path), "--output",
                         str(out), *options.argv], capsys)
        # checked in this order: the scoring options (opening the searcher), the topics, the number of hits
        expected = options.error_text or topics.error_text
        names_topics = not options.error_text and topics.error_text
        hits = int(options.argv[1])
        outcomes.check(n, code, err, expected, path.name if names_topics else None,
                       topics.error_line if names_topics else None, out,
                       lambda topics=topics, out=out, hits=hits: check_run(out, topics, hits))
    outcomes.report()


# ---- corpora, topics and options through `aligner index` + `aligner search` ------------------------------
@pytest.mark.parametrize("cases", sizes(3, 40))
def test_fuzz_aligner_index_and_search(cases, tmp_path, capsys, one_thread):
    rng, outcomes = random.Random(SEED + 3), Outcomes("aligner index + search")
    for n in range(cases):
        corpus = corpus_case(rng, max_docs=6, defect_rate=0.3)
        path = write_lines(tmp_path / f"corpus{n}.jsonl", corpus.lines, rng)
        index = tmp_path / f"index{n}"
        code, err = run_cli(["aligner", "index", "--model", str(ALIGNER_MODEL), "--corpus", str(path), "--output",
                         str(index)], capsys)
        if not corpus.error_text:
            texts = [line for line in corpus.lines if line]
            if all(not (json.loads(t).get("title") or "").strip() and not (json.loads(t).get("text") or "").strip()
                   for t in texts):
                corpus.error_text = "every document is empty"
        outcomes.check(n, code, err, corpus.error_text, path.name if corpus.error_line else None, corpus.error_line,
                       index)
        if code != 0:
            continue
        topics = topics_case(rng, max_topics=4)
        options = aligner_options(rng)
        topics_path = write_lines(tmp_path / f"topics{n}.tsv", topics.lines, rng)
        out = tmp_path / f"run{n}.txt"
        code, err = run_cli(["aligner", "search", "--index", str(index), "--topics", str(topics_path), "--output",
                         str(out), *options.argv], capsys)
        expected = options.error_text if options.at_parse else topics.error_text or options.error_text
        if not expected and any(not line.partition("\t")[2].strip() for line in topics.lines if line):
            expected = "empty query"
        hits = int(options.argv[-1])
        topics_named = bool(topics.error_text) and not options.at_parse
        outcomes.check(n, code, err, expected, topics_path.name if topics_named else None,
                       topics.error_line if topics_named else None, out,
                       lambda topics=topics, out=out, hits=hits: check_run(out, topics, hits))
    outcomes.report()

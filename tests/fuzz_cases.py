"""Seeded generators for the fuzz suite (test_fuzz_cli.py): corpora, topics and options, each case with the outcome
a correct program must give (`expect_error` and where the error must point), so every case is checked, not
just run."""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

# the one error line of a refused input: ours (`pyserini-ext: error:`) or argparse's (`pyserini-ext GROUP CMD: error:`)
ERROR_LINE = re.compile(r"^pyserini-ext( [\w-]+)*: error:")

WORDS = ("insulin resistance mice bone density vitamin protein folding gene expression liver cell tumour "
         "growth the of and in a to is über café naïve 中文 ☃ 🙂 covid-19 p53 T-cells 2.5mg").split()
# id defects: (how the id is written in JSON, the text the error must contain)
BAD_IDS = [("", "empty"), (" ", "contains ' '"), ("a b", "contains ' '"), ("a\tb", "contains '\\t'"),
           ("a\nb", "contains '\\n'"), ("a\u2028b", "contains '\\u2028'"), ("a\x00b", "contains '\\x00'"),
           ("a\x85b", "contains '\\x85'"), ("\ud800", "contains '\\ud800'"), (None, "is not a string"),
           (True, "is not a string"), ([1], "is not a string")]
GOOD_IDS = ["doc-{n}", "{n}", "D{n}_x", "é{n}", "中{n}", "{n}.0", "a/b#{n}", "MED-{n}"]


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """`pyserini-ext ARGV` in this process: (exit code, standard error)."""
    from pyserini_ext.cli.__main__ import main as cli

    try:
        code = cli(argv)
    except SystemExit as usage_error:  # an option refused while parsing: argparse's usage error, exit 2
        code = usage_error.code
    return code, capsys.readouterr().err


@dataclass
class Case:
    """One generated input file (lines as written) and what reading it must give."""
    lines: list[str]
    ids: list[str] = field(default_factory=list)  # valid ids in order, when no error is expected
    error_line: int | None = None  # 1-based line the error must name
    error_text: str = ""


def words(rng: random.Random, low: int, high: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))
    if rng.random() < 0.1:
        text += " \ud800"  # a lone surrogate: sanitised, never fatal
    return text


def json_line(record) -> str:
    """JSON as files hold it: non-ASCII raw or escaped; lone surrogates always escaped (raw, they are no UTF-8)."""
    text = json.dumps(record, ensure_ascii=_ascii.random() < 0.5)
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


_ascii = random.Random(0)


def end_with_defect(case: Case, lines: list[str], line: str) -> bool:
    """A defect was written into `line`: append it as the case's last line (the one the error must name)."""
    if case.error_text:
        lines.append(line)
        case.error_line = len(lines)
    return bool(case.error_text)


def corpus_case(rng: random.Random, max_docs: int = 12, defect_rate: float = 0.5, id_key: str = "_id") -> Case:
    """JSONL records (`id_key`, title, text) with at most one defect; blank and CRLF lines mixed in."""
    n_docs = rng.randint(1, max_docs)
    defect_at = rng.randrange(n_docs) if rng.random() < defect_rate else None
    lines, ids, case = [], [], Case([])
    for i in range(n_docs):
        if rng.random() < 0.1:
            lines.append("")  # blank lines are skipped but counted in line numbers
        docid = rng.choice(GOOD_IDS).format(n=i)
        record = {id_key: docid, "title": words(rng, 0, 3), "text": words(rng, 0, 30)}
        if rng.random() < 0.2:
            record.pop("title")
        if rng.random() < 0.1:
            record[id_key] = i  # a number is a fine id
            docid = str(i)
        line = json_line(record)
        if i == defect_at:
            kind = rng.choice(["id", "id", "id", "duplicate", "missing", "json", "object", "field"])
            if kind == "id":
                bad, text = rng.choice(BAD_IDS)
                record[id_key] = bad
                line, case.error_text = json_line(record), text
            elif kind == "duplicate" and ids:
                record[id_key] = ids[0]
                line, case.error_text = json_line(record), f"duplicate document id {ids[0]!r}"
            elif kind == "missing":
                record.pop(id_key)
                line, case.error_text = json_line(record), "has no '_id'"
            elif kind == "json":
                line, case.error_text = line[: max(1, len(line) // 2)], "malformed JSON"
            elif kind == "object":
                line, case.error_text = json.dumps([docid, "text"]), "expected a JSON object"
            else:
                record["text"] = {"nested": "x"}
                line, case.error_text = json_line(record), "field 'text' is a dict"
            if end_with_defect(case, lines, line):
                break
        lines.append(line)
        ids.append(docid)
    case.lines, case.ids = lines, ids
    return case


def topics_case(rng: random.Random, max_topics: int = 6, defect_rate: float = 0.3) -> Case:
    """Pyserini TSV topics with at most one defect; long, empty and odd queries are valid input."""
    n = rng.randint(1, max_topics)
    defect_at = rng.randrange(n) if rng.random() < defect_rate else None
    lines, ids, case = [], [], Case([])
    for i in range(n):
        qid = rng.choice(["q{n}", "{n}", "Q-{n}", "é{n}"]).format(n=i)
        shape = rng.random()
        text = ("" if shape < 0.1 else "the of and" if shape < 0.2 else words(rng, 1500, 3000) if shape < 0.25
                else words(rng, 1, 8)).replace("\ud800", "")  # raw in a TSV file it would be no UTF-8
        line = f"{qid}\t{text}"
        if i == defect_at:
            kind = rng.choice(["no_tab", "duplicate", "space", "empty_id", "control", "utf8"])
            if kind == "no_tab":
                line, case.error_text = f"{qid} {text}", "expected `qid<TAB>text`"
            elif kind == "duplicate" and ids:
                line, case.error_text = f"{ids[0]}\t{text}", f"duplicate query id {ids[0]!r}"
            elif kind == "space":
                line, case.error_text = f"q {i}\t{text}", "contains ' '"
            elif kind == "empty_id":
                line, case.error_text = f"\t{text or 'x'}", "empty query id"  # "\t" alone is a blank line
            elif kind == "control":
                line, case.error_text = f"q\x07{i}\t{text}", "contains '\\x07'"
            elif kind == "utf8":  # a lone surrogate written raw: invalid UTF-8 bytes; the reader names no line
                lines.append(f"{qid}\t{text} \udcff")
                case.error_text = "not UTF-8 text"
                break
            if end_with_defect(case, lines, line):
                break
        lines.append(line)
        ids.append(qid)
    case.lines, case.ids = lines, ids
    return case


def write_lines(path: Path, lines: list[str], rng: random.Random) -> Path:
    newline = "\r\n" if rng.random() < 0.2 else "\n"
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8", "surrogatepass"))
    return path


@dataclass
class Options:
    argv: list[str]
    error_text: str = ""  # non-empty: the options are invalid and the error must say this
    at_parse: bool = False  # the error comes from argument parsing, before any input file is read


def lucene_options(rng: random.Random, invalid_rate: float = 0.3) -> Options:
    """Scoring model and its parameters, and the number of hits; each out of range with `invalid_rate`."""
    def pick(valid: list, invalid: list):
        return rng.choice(invalid) if rng.random() < invalid_rate else rng.choice(valid)

    # range checks made while parsing (pyserini_ext.cli.options) come first, in command-line order; the
    # checks of the searcher and the topics come after
    parse_errors = []
    hits = pick([1, 2, 5, 10, 1000], [0, -1])
    options = Options(["--hits", str(hits)])
    if hits < 1:
        parse_errors.append("argument --hits: must be >= 1")
    model = rng.choice(["bm25", "qld", "qljm"])
    if model == "bm25":
        k1, b = pick([0.0, 0.9, 10.0], [-1.0]), pick([0.0, 0.4, 1.0], [1.5, -0.1])
        options.argv += ["--bm25", "--k1", str(k1), "--b", str(b)]
        if k1 < 0:
            parse_errors.append("argument --k1: must be >= 0.0")
        if not 0 <= b <= 1:
            parse_errors.append("argument --b: must be")
    elif model == "qld":
        mu = pick([1.0, 1000.0, 2500.0], [0.0, -5.0])
        options.argv += ["--qld", "--mu", str(mu)]
        if mu < 0:
            parse_errors.append("argument --mu: must be >= 0.0")
        elif mu == 0:
            options.error_text = "Dirichlet mu must be > 0"
    else:
        lam = pick([0.1, 0.7, 1.0], [0.0, 1.5, -0.2])
        options.argv += ["--qljm", "--lambda", str(lam)]
        if lam > 1:
            parse_errors.append("argument --lambda: must be <= 1.0")
        elif lam <= 0:
            parse_errors.append("--lambda must be in (0, 1]")
    if parse_errors:
        options.error_text = parse_errors[0]
    return options


def aligner_options(rng: random.Random) -> Options:
    alignment = rng.choice(["k=1", "k=4", "p=0.5", "p=10%", "k=0", "p=2", "x"])
    beta_q = rng.choice([0.5, 1.0, 0.25, 0.0, 1.5])
    hits = rng.choice([1, 3, 10])
    argv = ["--alignment", alignment, "--beta-q", str(beta_q), "--hits", str(hits)]
    error = ""
    if beta_q > 1:  # the option's own bound, at parse time
        return Options(argv, "argument --beta-q: must be <= 1.0", at_parse=True)
    if beta_q <= 0:  # the searcher's check, before the alignment's
        error = "beta_q must be in (0, 1]"
    elif alignment in ("k=0", "p=2", "x"):
        error = "alignment" if alignment != "x" else "cannot parse alignment"
    return Options(argv, error)

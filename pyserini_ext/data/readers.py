"""The one reader of each input kind: corpora (BEIR JSONL or Pyserini JsonCollection), topics (Pyserini TSV or
BEIR JSONL) and qrels (BEIR TSV or TREC). Every command reads its inputs here.

Ids are checked as they are read, because a bad id only shows up later as a wrong result: a missing or empty id,
a duplicate (both lines named), or one containing whitespace, a control or a line-separator character (TREC runs
and docid lists are whitespace- and line-separated) is an `InputError` naming the file and line. Texts are
sanitised (data/text.py) with one counted warning per file.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from pyserini_ext.data.text import sanitize, sanitize_texts
from pyserini_ext.errors import InputError

ID_KEYS = ("_id", "id", "docid")  # BEIR, Pyserini JsonCollection, MS MARCO style
JSON_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
_BAD_ID_CHARACTER = re.compile(r"[\s\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def open_text(path: Path) -> io.TextIOBase:
    """A UTF-8 text file, gzip-compressed when it ends in .gz; LF and CRLF line ends both read as LF."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a JSONL file; blank lines skipped; a bad line is an InputError naming it."""
    path = Path(path)
    try:
        with open_text(path) as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{line_no}: malformed JSON ({e.msg})") from None
                if not isinstance(record, dict):
                    raise InputError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
                yield line_no, record
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: truncated or corrupt gzip file ({e})") from None


def check_id(value: object, where: str, kind: str = "document") -> str:
    """`value` as an id string, or an InputError at `where` ("file:line") saying what is wrong with it."""
    if value is None or isinstance(value, (bool, list, dict)):
        raise InputError(f"{where}: {kind} id {value!r} is not a string or number")
    text = str(value)
    if not text:
        raise InputError(f"{where}: empty {kind} id")
    bad = _BAD_ID_CHARACTER.search(text)
    if bad:
        raise InputError(f"{where}: {kind} id {text!r} contains {bad.group()!r}; ids may not contain "
                         "whitespace, control or line-separator characters (TREC runs and docid files split on "
                         "them)")
    return text


class _UniqueIds:
    """Remembers where each id was first seen; a second occurrence names both places."""

    def __init__(self, kind: str):
        self.kind, self.first_seen = kind, {}

    def add(self, value: object, path: Path, line_no: int) -> str:
        where = f"{path}:{line_no}"
        docid = check_id(value, where, self.kind)
        if docid in self.first_seen:
            raise InputError(f"{where}: duplicate {self.kind} id {docid!r} (first at {self.first_seen[docid]})")
        self.first_seen[docid] = where
        return docid


def _record_id(record: dict, path: Path, line_no: int) -> object:
    for key in ID_KEYS:
        if key in record:
            return record[key]
    raise InputError(f"{path}:{line_no}: record has no '_id' (or 'id') field")


def _field(record: dict, key: str, path: Path, line_no: int) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise InputError(f"{path}:{line_no}: field {key!r} is a {type(value).__name__}, expected text")
    return str(value)


def corpus_files(path: str | os.PathLike) -> list[Path]:
    """A corpus file as is; a folder as its JSON/JSONL files in name order (Pyserini's JsonCollection)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(JSON_SUFFIXES))
        if not files:
            raise InputError(f"{path}: no .json/.jsonl files (expected a Pyserini JsonCollection folder)")
        return files
    if not path.is_file():
        raise InputError(f"{path}: no such corpus file or folder")
    return [path]


def read_corpus(path: str | os.PathLike) -> dict[str, dict[str, str]]:
    """docid -> {"title", "text"}, in file order, from a BEIR corpus.jsonl[.gz] or a JsonCollection file/folder.

    Records carry `_id`/`id`/`docid` and either `title` + `text` or Pyserini's `contents` (read as the text).
    """
    ids = _UniqueIds("document")
    corpus: dict[str, dict[str, str]] = {}
    for file in corpus_files(path):
        for line_no, record in iter_jsonl(file):
            docid = ids.add(_record_id(record, file, line_no), file, line_no)
            if "title" in record or "text" in record:
                title, text = _field(record, "title", file, line_no), _field(record, "text", file, line_no)
            else:
                title, text = "", _field(record, "contents", file, line_no)
            corpus[docid] = {"title": title, "text": text}
    return _sanitized(corpus, str(path))


def iter_corpus(path: str | os.PathLike) -> Iterator[tuple[str, dict[str, str]]]:
    """`read_corpus`'s (docid, {"title", "text"}) one record at a time, for builds that never hold the corpus: ids
    and texts are checked as there, except duplicates, which the index build finds (streaming.py)."""
    for file in corpus_files(path):
        for line_no, record in iter_jsonl(file):
            docid = check_id(_record_id(record, file, line_no), f"{file}:{line_no}")
            if "title" in record or "text" in record:
                title, text = _field(record, "title", file, line_no), _field(record, "text", file, line_no)
            else:
                title, text = "", _field(record, "contents", file, line_no)
            yield docid, {"title": sanitize(title)[0], "text": sanitize(text)[0]}


def _sanitized(corpus: dict[str, dict[str, str]], where: str) -> dict[str, dict[str, str]]:
    docids = list(corpus)
    titles = sanitize_texts((corpus[d]["title"] for d in docids), f"{where} (titles)")
    texts = sanitize_texts((corpus[d]["text"] for d in docids), f"{where} (texts)")
    return {d: {"title": title, "text": text} for d, title, text in zip(docids, titles, texts)}


def read_topics(path: str | os.PathLike) -> dict[str, str]:
    """qid -> query text from Pyserini TSV topics (`qid<TAB>text`) or BEIR queries.jsonl[.gz] (`_id`, `text`)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such topics file")
    ids = _UniqueIds("query")
    topics: dict[str, str] = {}
    if path.name.endswith(JSON_SUFFIXES):
        for line_no, record in iter_jsonl(path):
            topics[ids.add(_record_id(record, path, line_no), path, line_no)] = _field(record, "text", path, line_no)
    else:
        try:
            with open_text(path) as f:
                for line_no, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    qid, sep, text = line.rstrip("\n").partition("\t")
                    if not sep:
                        raise InputError(f"{path}:{line_no}: expected `qid<TAB>text`, got {line.rstrip()!r}")
                    topics[ids.add(qid, path, line_no)] = text
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not topics:
        raise InputError(f"{path}: no topics")
    return dict(zip(topics, sanitize_texts(topics.values(), str(path))))


def read_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """qid -> {docid: relevance} from BEIR TSV (`query-id corpus-id score`, header optional) or TREC qrels
    (`qid iteration docid relevance`)."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    with open_text(path) as f:
        for line_no, line in enumerate(f, start=1):
            parts = line.strip().split("\t") if "\t" in line else line.split()
            if not parts or (line_no == 1 and parts[0] == "query-id"):
                continue
            if len(parts) == 4:  # TREC: qid iteration docid relevance
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise InputError(f"{path}:{line_no}: expected 'query-id corpus-id score', got {line!r}")
            try:
                score = int(float(parts[2]))
            except ValueError:
                raise InputError(f"{path}:{line_no}: score {parts[2]!r} is not a number") from None
            where = f"{path}:{line_no}"
            qrels.setdefault(check_id(parts[0], where, "query"), {})[check_id(parts[1], where)] = score
    return qrels


def read_triples(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """MS MARCO training triples `query \\t positive \\t negative` (tsv or tsv.gz; a folder: its triples*.tsv*)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("triples*.tsv*"))
        if not found:
            raise FileNotFoundError(f"{path}: no triples*.tsv[.gz] file")
        path = found[0]
    opener = gzip.open if path.suffix == ".gz" else open
    triples = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise InputError(f"{path}:{line_no}: expected 'query<TAB>positive<TAB>negative', "
                                 f"got {len(parts)} fields")
            triples.append((parts[0], parts[1], parts[2]))
    if not triples:
        raise InputError(f"{path}: no triples")
    return triples

"""Loader for BEIR-layout folders with a local cache.

A dataset folder holds `corpus.jsonl[.gz]` (`_id`, `title`, `text`), `queries.jsonl[.gz]` (`_id`, `text`)
and `qrels/<split>.tsv` (header `query-id corpus-id score`, LF or CRLF). Datasets are looked up by path, or
by name under the cache folder `$PYSERINI_EXT_DATA` (default `~/.cache/pyserini_ext/datasets`). A missing
named dataset is downloaded from the official BEIR mirror when the network allows; otherwise the error says
exactly where to put the files.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
DOWNLOAD_TIMEOUT_S = 30


class DatasetError(RuntimeError):
    """A dataset is missing or malformed; the message names the file (and line)."""


def data_home() -> Path:
    return Path(os.environ.get("PYSERINI_EXT_DATA", Path.home() / ".cache" / "pyserini_ext" / "datasets"))


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def iter_jsonl(path: Path) -> Iterator[dict]:
    """Records of a JSONL file; a bad line raises DatasetError naming the file and the line number."""
    with _open_text(path) as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}:{line_no}: malformed JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DatasetError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
            yield record


def _record_id(record: dict, path: Path, line_no: int) -> str:
    for key in ("_id", "id", "docid"):
        if key in record:
            return str(record[key])
    raise DatasetError(f"{path}:{line_no}: record has no '_id' field")


@dataclass
class BeirDataset:
    """A BEIR-layout dataset folder; corpus and queries are read lazily and kept."""

    root: Path
    name: str

    @cached_property
    def corpus(self) -> dict[str, dict[str, str]]:
        """docid -> {"title", "text"}, in file order."""
        path = self._require("corpus.jsonl")
        corpus: dict[str, dict[str, str]] = {}
        for line_no, record in enumerate(iter_jsonl(path), start=1):
            docid = _record_id(record, path, line_no)
            corpus[docid] = {"title": str(record.get("title") or ""), "text": str(record.get("text") or "")}
        return corpus

    @cached_property
    def queries(self) -> dict[str, str]:
        """qid -> query text (all queries in the file; filter by a qrels split)."""
        path = self._require("queries.jsonl")
        return {_record_id(r, path, i): str(r.get("text") or "") for i, r in enumerate(iter_jsonl(path), 1)}

    def splits(self) -> list[str]:
        return sorted(p.name.split(".")[0] for p in (self.root / "qrels").glob("*.tsv*"))

    def qrels(self, split: str = "test") -> dict[str, dict[str, int]]:
        """qid -> {docid: relevance} for one split."""
        path = _find(self.root / "qrels", f"{split}.tsv")
        if path is None:
            raise DatasetError(f"{self.root / 'qrels'}: no qrels for split {split!r}; "
                               f"available: {', '.join(self.splits()) or 'none'}")
        qrels: dict[str, dict[str, int]] = {}
        with _open_text(path) as f:
            for line_no, line in enumerate(f, start=1):
                parts = line.strip().split("\t") if "\t" in line else line.split()
                if not parts or (line_no == 1 and parts[0] == "query-id"):
                    continue
                if len(parts) != 3:
                    raise DatasetError(f"{path}:{line_no}: expected 'query-id corpus-id score', got {line!r}")
                try:
                    score = int(float(parts[2]))
                except ValueError:
                    raise DatasetError(f"{path}:{line_no}: score {parts[2]!r} is not a number") from None
                qrels.setdefault(parts[0], {})[parts[1]] = score
        return qrels

    def split_queries(self, split: str = "test") -> dict[str, str]:
        """The queries judged in one qrels split, in query-file order."""
        judged = self.qrels(split)
        return {qid: text for qid, text in self.queries.items() if qid in judged}

    def _require(self, stem: str) -> Path:
        path = _find(self.root, stem)
        if path is None:
            raise DatasetError(f"{self.root}: missing {stem} (or {stem}.gz)")
        return path


def _download_beir(name: str, target: Path) -> None:
    url = BEIR_URL.format(name=name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        archive = Path(tmp) / f"{name}.zip"
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(archive, "wb") as out:
            shutil.copyfileobj(response, out)
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        os.replace(Path(tmp) / name, target)  # atomic: never a half-unpacked dataset in the cache


def load_dataset(name_or_path: str | os.PathLike, download: bool = True) -> BeirDataset:
    """A dataset by folder path, or by name from the cache (downloaded from BEIR if allowed)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        root = path
    else:
        root = data_home() / str(name_or_path)
        if not root.is_dir():
            reason = "downloads disabled"
            if download:
                try:
                    _download_beir(str(name_or_path), root)
                except Exception as e:  # no network, unknown name, bad archive
                    reason = f"download from {BEIR_URL.format(name=name_or_path)} failed: {e}"
            if not root.is_dir():
                raise DatasetError(
                    f"dataset {str(name_or_path)!r} not found ({reason}). Put its BEIR files at {root}/ "
                    f"(corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv) or set PYSERINI_EXT_DATA.")
    if _find(root, "corpus.jsonl") is None and _find(root, "queries.jsonl") is None:
        raise DatasetError(f"{root}: not a BEIR folder (no corpus.jsonl[.gz] or queries.jsonl[.gz])")
    return BeirDataset(root=root, name=root.name)

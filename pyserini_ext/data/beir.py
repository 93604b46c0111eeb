"""Loader for BEIR-layout folders with a local cache.

A dataset folder holds `corpus.jsonl[.gz]` (`_id`, `title`, `text`), `queries.jsonl[.gz]` (`_id`, `text`)
and `qrels/<split>.tsv` (header `query-id corpus-id score`, LF or CRLF). Datasets are looked up by path, or
by name under the cache folder `$PYSERINI_EXT_DATA` (default `~/.cache/pyserini_ext/datasets`). A missing
named dataset is downloaded from the official BEIR mirror when the network allows; otherwise the error says
exactly where to put the files.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pyserini_ext.data.readers import read_corpus, read_qrels, read_topics
from pyserini_ext.errors import InputError

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
DOWNLOAD_TIMEOUT_S = 30


DatasetError = InputError  # a dataset file is missing or malformed; the message names the file (and line)


def data_home() -> Path:
    return Path(os.environ.get("PYSERINI_EXT_DATA", Path.home() / ".cache" / "pyserini_ext" / "datasets"))


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


@dataclass
class BeirDataset:
    """A BEIR-layout dataset folder; corpus and queries are read lazily and kept."""

    root: Path
    name: str

    @cached_property
    def corpus(self) -> dict[str, dict[str, str]]:
        """docid -> {"title", "text"}, in file order (ids checked, text sanitised: data/readers.py)."""
        return read_corpus(self._require("corpus.jsonl"))

    @property
    def corpus_file(self) -> Path:
        """The corpus file, for reading it as a stream (`iter_corpus`) rather than whole."""
        return self._require("corpus.jsonl")

    @cached_property
    def queries(self) -> dict[str, str]:
        """qid -> query text (all queries in the file; filter by a qrels split)."""
        return read_topics(self._require("queries.jsonl"))

    def splits(self) -> list[str]:
        return sorted(p.name.split(".")[0] for p in (self.root / "qrels").glob("*.tsv*"))

    def qrels(self, split: str = "test") -> dict[str, dict[str, int]]:
        """qid -> {docid: relevance} for one split."""
        path = _find(self.root / "qrels", f"{split}.tsv")
        if path is None:
            raise DatasetError(f"{self.root / 'qrels'}: no qrels for split {split!r}; "
                               f"available: {', '.join(self.splits()) or 'none'}")
        return read_qrels(path)

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

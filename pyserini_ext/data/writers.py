"""Writers for Pyserini's inputs: JsonCollection folders, TSV topics and TREC qrels."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path


def _atomic_write_lines(path: Path, lines: Iterable[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line)
    os.replace(tmp, path)
    return path


def write_json_collection(corpus: Mapping[str, Mapping[str, str]], out_dir: str | os.PathLike,
                          title_separator: str = " ") -> Path:
    """Pyserini JsonCollection: `{"id", "contents", "title", "text"}` per line in `out_dir/docs.jsonl`.

    `contents` (title + separator + text) is what Lucene indexes; `title`/`text` stay separate for
    `python -m pyserini.encode input --fields title text`.
    """
    def lines():
        for docid, doc in corpus.items():
            title, text = doc.get("title", "") or "", doc.get("text", "") or ""
            contents = f"{title}{title_separator}{text}" if title else text
            yield json.dumps({"id": docid, "contents": contents, "title": title, "text": text},
                             ensure_ascii=False) + "\n"

    return _atomic_write_lines(Path(out_dir) / "docs.jsonl", lines())


def _one_line(text: str) -> str:
    return " ".join(text.split())  # tabs/newlines would break the TSV format


def write_topics(queries: Mapping[str, str], path: str | os.PathLike) -> Path:
    """Pyserini TSV topics: `qid \\t text` per line."""
    return _atomic_write_lines(Path(path), (f"{qid}\t{_one_line(text)}\n" for qid, text in queries.items()))


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | os.PathLike) -> Path:
    """TREC qrels: `qid 0 docid relevance` per line."""
    return _atomic_write_lines(
        Path(path), (f"{qid} 0 {docid} {rel}\n" for qid, docs in qrels.items() for docid, rel in docs.items()))

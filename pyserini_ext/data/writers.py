"""Writers for Pyserini's inputs: JsonCollection folders, TSV topics and TREC qrels (each written atomically)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyserini_ext.data.output import atomic_output
from pyserini_ext.data.text import document_text


def _write_lines(path: Path, lines: Iterable[str]) -> Path:
    """These are derived inputs, rewritten on every export: an existing file is replaced (atomically)."""
    with atomic_output(path, overwrite=True) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def write_json_collection(corpus: Mapping[str, Mapping[str, str]], out_dir: str | os.PathLike) -> Path:
    """Pyserini JsonCollection: `{"id", "contents", "title", "text"}` per line in `out_dir/docs.jsonl`.

    `contents` (the one text rule, data/text.py) is what Lucene indexes; `title`/`text` stay separate for
    `python -m pyserini.encode input --fields title text`.
    """
    def lines():
        for docid, doc in corpus.items():
            title, text = doc.get("title", "") or "", doc.get("text", "") or ""
            yield json.dumps({"id": docid, "contents": document_text(doc), "title": title, "text": text},
                             ensure_ascii=False) + "\n"

    return _write_lines(Path(out_dir) / "docs.jsonl", lines())


def _one_line(text: str) -> str:
    return " ".join(text.split())  # tabs/newlines would break the TSV format


def write_topics(queries: Mapping[str, str], path: str | os.PathLike) -> Path:
    """Pyserini TSV topics: `qid \\t text` per line."""
    return _write_lines(Path(path), (f"{qid}\t{_one_line(text)}\n" for qid, text in queries.items()))


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | os.PathLike) -> Path:
    """TREC qrels: `qid 0 docid relevance` per line."""
    return _write_lines(
        Path(path), (f"{qid} 0 {docid} {rel}\n" for qid, docs in qrels.items() for docid, rel in docs.items()))

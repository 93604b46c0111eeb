"""The one way we build a plain Lucene index: Pyserini's own indexer on a JsonCollection, in a subprocess.

Used for BM25 baselines and the BM25 negatives of AligneR training, the DeepCT pseudo-document check, the demo
(which prints the command) and the tests. Pyserini's default analyzer, `DefaultLuceneDocumentGenerator`, and the
raw documents stored (what `LuceneSearcher.doc(docid).raw()` returns).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path


def lucene_index_command(collection_dir: str | os.PathLike, index_dir: str | os.PathLike, threads: int = 1,
                         store_positions: bool = False, store_docvectors: bool = False,
                         extra_args: Iterable[str] = ()) -> list[str]:
    """`python -m pyserini.index.lucene ...` for a JsonCollection folder, as an argument list."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return [sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
            "--input", str(collection_dir), "--index", str(index_dir),
            "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(threads), "--storeRaw",
            *(["--storePositions"] if store_positions else []), *(["--storeDocvectors"] if store_docvectors else []),
            *extra_args]


def build_lucene_index(collection_dir: str | os.PathLike, index_dir: str | os.PathLike, threads: int = 1,
                       store_positions: bool = False, store_docvectors: bool = False,
                       extra_args: Iterable[str] = ()) -> Path:
    """Index a JsonCollection folder (pyserini_ext.data.write_json_collection) with Pyserini's indexer."""
    if not Path(collection_dir).is_dir():
        raise FileNotFoundError(f"{collection_dir}: no such JsonCollection folder")
    command = lucene_index_command(collection_dir, index_dir, threads, store_positions, store_docvectors, extra_args)
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0 or not Path(index_dir).is_dir():
        raise RuntimeError(f"pyserini.index.lucene failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return Path(index_dir)

"""Checks run on our encoders when a Pyserini command builds one (`encode.LazyEncoderClass`), before Pyserini's
writer or searcher starts, for what Pyserini would only discover later: `python -m pyserini.encode ... --to-faiss`
writes a Faiss index even when encoding fails half-way, and a dimension mismatch surfaces as a bare AssertionError
deep in Faiss.
"""
from __future__ import annotations

import struct
from pathlib import Path

from pyserini_ext.errors import OptionError
from pyserini_ext.integration import arguments

FAISS_INDEX_FILE = "index"  # Pyserini's FaissRepresentationWriter / FaissSearcher layout


def faiss_index_dimension(index: str | Path) -> int | None:
    """The vector dimension in a Faiss index file's header (`<fourcc> <int32 d>`), without loading it; None
    when `index` is no local Pyserini Faiss index (e.g. a prebuilt index name)."""
    path = Path(index)
    path = path / FAISS_INDEX_FILE if path.is_dir() else path
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        header = f.read(8)
    return struct.unpack("<i", header[4:8])[0] if len(header) == 8 else None


def check_dimension(dim: int, encoder: str) -> None:
    """The encoder's output dimension against the running Pyserini command's `--dimension` (with `--to-faiss`)
    and `--index`; an OptionError naming both numbers and the fix. Without `--dimension` (Pyserini's default,
    768) the Faiss index Pyserini writes gets the encoder's width."""
    dimension = arguments.cli_option("dimension")
    if arguments.cli_option("to_faiss") and dimension is not None and dimension != dim:
        if not arguments.dimension_given():
            arguments.set_faiss_dimension(dim)
            return
        raise OptionError(f"--dimension {dimension} does not fit the {encoder} model, whose vectors have {dim} "
                          f"dimensions; pass --dimension {dim}")
    index = arguments.cli_option("index")
    index_dim = faiss_index_dimension(index) if index else None
    if index_dim is not None and index_dim != dim:
        raise OptionError(f"{index}: the Faiss index holds {index_dim}-dimensional vectors, but the {encoder} "
                          f"query encoder gives {dim}; use the model the index was built with")

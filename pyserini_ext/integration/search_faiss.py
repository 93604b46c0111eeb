"""`pyserini.search.faiss._searcher`: our prebuilt Faiss indexes searched only with the model that built them, and
our ivfpq-refine indexes read memory-mapped (FaissSearcher's plain faiss.read_index would load the refine index's
full vectors, 2-4 KB a passage, into RAM).

`read_faiss_index` is also what bench/scale_aggretriever.py reads with. No torch here: Pyserini's searcher
imports it anyway, the bench's search process should not.
"""
from __future__ import annotations

import json
import math
import os

from pyserini_ext.integration import patch
from pyserini_ext.integration.prebuilt import check_prebuilt_model

# pyserini_ext.index.aggretriever's names, repeated: importing it imports torch
METADATA_FILE, REFINE_TYPE, INDEX_FILE = "pyserini_ext_index.json", "ivfpq-refine", "index"


def install(searcher_module) -> None:
    check_prebuilt_model(searcher_module.FaissSearcher)
    patch.install(searcher_module.FaissSearcher, "load_index", _mapped_refine_index)


def _mapped_refine_index(original):
    """`FaissSearcher.load_index(index_dir)`: an ivfpq-refine folder through read_faiss_index, every other index
    exactly as before."""

    def load_index(self, index_dir: str):
        if getattr(self, "faiss_device", "cpu") != "cpu" or refine_settings(index_dir) is None:
            return original(self, index_dir)  # a GPU copy needs the vectors in memory anyway
        return read_faiss_index(index_dir), self.load_docids(os.path.join(index_dir, "docid"))

    load_index.__doc__ = original.__doc__
    return load_index


def refine_settings(index_dir: str | os.PathLike) -> dict | None:
    """The build settings of an Aggretriever ivfpq-refine folder (its pyserini_ext_index.json), else None."""
    try:
        with open(os.path.join(index_dir, METADATA_FILE), encoding="utf-8") as f:
            metadata = json.load(f)
    except (OSError, ValueError):
        return None
    if metadata.get("index") != "aggretriever" or metadata.get("index_type") != REFINE_TYPE:
        return None
    return metadata.get("settings", {})


def read_faiss_index(index_dir: str | os.PathLike):
    """The folder's Faiss index as FaissSearcher reads it (faiss.read_index), except ivfpq-refine: read with
    faiss.IO_FLAG_MMAP_IFC, which maps the file instead of reading it (the refine vectors stay on disk or in the
    page cache; a query touches the pages of the candidates it re-scores), and searched with at least the
    folder's `min_candidates` candidates."""
    import faiss

    path = os.path.join(index_dir, INDEX_FILE)
    settings = refine_settings(index_dir)
    if settings is None:
        return faiss.read_index(path)
    index = faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC)
    if settings.get("min_candidates"):
        _search_at_least(index, settings["min_candidates"])
    return index


def _search_at_least(index, candidates: int) -> None:
    """index.search(x, k) re-scores max(k * k_factor, `candidates`): below that it asks Faiss for more hits and
    keeps the first k. Faiss's IndexRefine re-scores k * k_factor, too few for FaissSearcher.search's default
    k = 10 at the k_factor that suits `pyserini.search.faiss`'s default 1,000 hits. Set on the instance, which is
    what FaissSearcher calls."""
    import numpy as np

    search = type(index).search

    def search_at_least(x, k, *, params=None, D=None, I=None):  # noqa: E741 (Faiss's names)
        wanted = max(k, math.ceil(candidates / index.k_factor))
        if wanted == k or D is not None or I is not None:
            return search(index, x, k, params=params, D=D, I=I)
        distances, labels = search(index, x, wanted, params=params)
        return np.ascontiguousarray(distances[:, :k]), np.ascontiguousarray(labels[:, :k])

    index.search = search_at_least

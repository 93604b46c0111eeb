"""`pyserini.server.models`: AligneR, a multi-vector index, is an index type of the servers' own (`aligner`).

Pyserini's servers list and open indexes by type (`INDEX_TYPE`: tf, lucene_flat, lucene_hnsw, impact, faiss, each
one of Pyserini's prebuilt-index dicts). Our Faiss and DeepCT indexes are already in those dicts (prebuilt.py);
`install` adds the type `aligner`, whose dict holds our catalogues' AligneR records (the shipped catalogue and
`$PYSERINI_EXT_CATALOGUE`, read again by `refresh_aligner_indexes`). The controller (server_controller.py) opens
them with our AligneR searcher.
"""
from __future__ import annotations

from pyserini_ext.index.prebuilt import load_catalogue
from pyserini_ext.integration import patch
from pyserini_ext.integration.prebuilt import pyserini_record

ALIGNER_TYPE = "aligner"
ALIGNER_INDEX_INFO: dict[str, dict] = {}  # name -> record in the shape of Pyserini's prebuilt-index dicts


def refresh_aligner_indexes() -> dict[str, dict]:
    """`ALIGNER_INDEX_INFO` filled from the catalogues as they are now (a user's catalogue may be set later)."""
    records = {name: pyserini_record(record) for name, record in load_catalogue().items()
               if record.get("kind") == ALIGNER_TYPE}
    ALIGNER_INDEX_INFO.clear()
    ALIGNER_INDEX_INFO.update(records)
    return ALIGNER_INDEX_INFO


def install(models_module) -> None:
    refresh_aligner_indexes()
    patch.set_entry(models_module.INDEX_TYPE, ALIGNER_TYPE, ALIGNER_INDEX_INFO, f"{models_module.__name__}.INDEX_TYPE")

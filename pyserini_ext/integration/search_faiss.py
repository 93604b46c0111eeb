"""`pyserini.search.faiss._searcher`: our prebuilt Faiss indexes searched only with the model that built them."""
from __future__ import annotations

from pyserini_ext.integration.prebuilt import check_prebuilt_model


def install(searcher_module) -> None:
    check_prebuilt_model(searcher_module.FaissSearcher)

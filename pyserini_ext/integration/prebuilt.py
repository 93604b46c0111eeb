"""`pyserini.util`: our prebuilt indexes known to Pyserini's own loaders by name, fetched by index/prebuilt.py.

`install` (run right after `pyserini.util` is imported) puts the records of our catalogues (the shipped one and
`$PYSERINI_EXT_CATALOGUE`) into Pyserini's `TF_INDEX_INFO` / `IMPACT_INDEX_INFO` / `FAISS_INDEX_INFO` (the dicts of
`pyserini.prebuilt_index_info`, which `pyserini.util` holds), and routes `download_prebuilt_index` for our names
through `index.prebuilt.download_prebuilt`; with `$PYSERINI_EXT_MIRROR` set, Pyserini's own indexes and encoded
queries are fetched from the mirrors first. `check_prebuilt_model` wraps a searcher class's `from_prebuilt_index`
with `index.prebuilt.check_model` (search_lucene.py, search_faiss.py).
What is fetched, checked and unpacked, and how, stays in index/prebuilt.py; this module only plugs it in.
"""
from __future__ import annotations

from pyserini_ext.index.prebuilt import (
    PYSERINI_INFO,
    PrebuiltIndexError,
    check_model,
    download_prebuilt,
    fetch_and_unpack,
    load_catalogue,
    mirror_urls,
)
from pyserini_ext.integration import patch
from pyserini_ext.integration.encode import encoder_model

# Pyserini's dicts of prebuilt indexes, in the order its `download_prebuilt_index` looks a name up
PYSERINI_INDEX_DICTS = ("TF_INDEX_INFO", "IMPACT_INDEX_INFO", "LUCENE_HNSW_INDEX_INFO", "LUCENE_FLAT_INDEX_INFO",
                        "FAISS_INDEX_INFO")


def pyserini_record(record: dict) -> dict:
    """A catalogue record in the shape of Pyserini's `prebuilt_index_info` entries."""
    return {"description": record.get("description", ""), "filename": record.get("filename"),
            "urls": list(record["urls"]), "md5": record["md5"],
            "size compressed (bytes)": record.get("size_bytes"), "downloaded": False,
            "texts": record.get("texts"), **record.get("stats", {}), "pyserini_ext": True}


def _as_pyserini_would(fetch, *args, **kwargs) -> str:
    """Pyserini's own names fail as Pyserini's downloader does (ValueError), which its loaders expect: e.g. a
    Faiss index whose passage index cannot be fetched still searches."""
    try:
        return str(fetch(*args, **kwargs))
    except PrebuiltIndexError as e:
        raise ValueError(str(e)) from e


def _pyserini_entry(util_module, name: str) -> dict | None:
    for dict_name in PYSERINI_INDEX_DICTS:
        record = getattr(util_module, dict_name, {}).get(name)
        if record is not None:
            return record
    return None


def install(util_module) -> None:
    """Put our catalogues' indexes into Pyserini's dicts and route their downloads (and mirrors) through ours."""
    for name, record in load_catalogue().items():  # read again on every call: a new $PYSERINI_EXT_CATALOGUE counts
        for dict_name in PYSERINI_INFO.get(record.get("kind", "lucene"), ()):
            patch.set_entry(getattr(util_module, dict_name), name, pyserini_record(record),
                            f"{util_module.__name__}.{dict_name}")

    def index_downloads(original):
        def download_prebuilt_index(index_name, force=False, verbose=True, mirror=None):
            if index_name in load_catalogue():
                return str(download_prebuilt(index_name, force=force))
            record = _pyserini_entry(util_module, index_name)
            if record is not None and mirror_urls("x"):
                filename = record.get("filename") or record["urls"][0].rsplit("/", 1)[-1]
                return _as_pyserini_would(fetch_and_unpack, index_name,
                                          mirror_urls(filename) + list(record["urls"]), record["md5"],
                                          record.get("size compressed (bytes)"), filename, force=force)
            return original(index_name, force, verbose, mirror)

        return download_prebuilt_index

    def query_downloads(original):
        def download_encoded_queries(query_name, force=False, verbose=True, mirror=None):
            record = util_module.QUERY_INFO.get(query_name)
            if record is not None and mirror_urls("x"):
                filename = record["urls"][0].rsplit("/", 1)[-1]
                return _as_pyserini_would(fetch_and_unpack, query_name,
                                          mirror_urls(filename) + list(record["urls"]), record["md5"],
                                          record.get("size (bytes)"), filename, subdir="queries", force=force)
            return original(query_name, force, verbose, mirror)

        return download_encoded_queries

    patch.install(util_module, "download_prebuilt_index", index_downloads)
    patch.install(util_module, "download_encoded_queries", query_downloads)


def check_prebuilt_model(searcher_class: type) -> None:
    """Wrap `searcher_class.from_prebuilt_index(name, query_encoder, ...)` with `index.prebuilt.check_model`: our
    prebuilt index searched with another model than the one that built it is an error."""

    def make(original):
        def from_prebuilt_index(cls, prebuilt_index_name, query_encoder, *args, **kwargs):
            check_model(prebuilt_index_name, encoder_model(query_encoder))
            return original(cls, prebuilt_index_name, query_encoder, *args, **kwargs)

        from_prebuilt_index.__doc__ = original.__doc__
        return from_prebuilt_index

    patch.install(searcher_class, "from_prebuilt_index", make, descriptor=classmethod)

"""`pyserini.server.search_controller`: the controller behind Pyserini's REST and MCP servers opens our indexes.

`install` replaces methods of its `SearchController` (the one instance both servers share keeps working):

- `_add_index`: our prebuilt names are opened with the model their catalogue record names (no encoder argument
  needed; an explicit `encoder`, a bare name such as `aggretriever` or a model folder, wins): `*.aggretriever`
  as type `faiss` (Pyserini's FaissSearcher with our query encoder), `*.aligner` as type `aligner` (our AligneR
  searcher), `*.deepct*` as Pyserini opens a `tf` index (BM25, Pyserini's k1 0.9 / b 0.4). A local index folder
  (a path, e.g. through MCP) is opened by what it holds: Lucene (tf), Faiss (needs `encoder`), AligneR (its
  recorded model unless `encoder`). Pyserini's own Faiss indexes get our encoder when `encoder` names ours.
- `search`: checked input (non-empty query, 1 <= hits <= MAX_HITS, known index) and the searcher's failure as
  `SearchFailed`; passages are read from the index's texts index (the catalogue's `texts`), opened once. The
  search itself (query encoding, the searcher, the passages) runs on the controller's own search threads
  (`SearchThreads`: $PYSERINI_EXT_SEARCH_THREADS, default 1), whatever thread the request came on.
- `get_document`: reads the texts index without replacing the index's own searcher (Pyserini's replaced a dense
  index's searcher by its BM25 texts index, so the next search was BM25).
- `get_indexes`, `get_status`, `get_settings`, `update_settings`: unknown names and types are `RequestError`s.

Errors: `RequestError` (status 400, `NotFound` 404) for bad input, `SearchFailed` (500) when the searcher fails;
each message one line. The REST routes (server_routes.py) answer with their status; MCP tools with their message.
Pyserini's multimodal (M-BEIR) and sharded MS MARCO searches go through its own code.
"""
from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyserini_ext.index import prebuilt
from pyserini_ext.integration import patch
from pyserini_ext.integration.server import MissingOptionalPackage
from pyserini_ext.integration.server_models import ALIGNER_TYPE, refresh_aligner_indexes
from pyserini_ext.models.folder import model_family, resolve_model
from pyserini_ext.search.aligner import open_searcher

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_HITS = 1000  # Pyserini's own CLI default; more is refused rather than risking a huge allocation
_LOCK = threading.RLock()  # one index is opened once, also when its first requests arrive together
SEARCH_THREADS_ENV = "PYSERINI_EXT_SEARCH_THREADS"
COMPILE_ENV = "PYSERINI_EXT_COMPILE"  # models/aggretriever/kernel.py: torch.compile of the vocabulary kernel
MMAP_THRESHOLD = 1 << 20  # bytes: glibc malloc serves blocks this large or larger by mmap (see fixed_mmap_threshold)
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


class RequestError(ValueError):
    """Bad input: answered with `status` (REST) and this one-line message."""
    status = 400


class NotFound(RequestError):
    status = 404


class SearchFailed(RuntimeError):
    """The searcher failed on a valid request: a 500 with this one-line message; the server stays up."""
    status = 500


def one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines) if lines else type(error).__name__


def fixed_mmap_threshold() -> bool:
    """glibc's malloc gives blocks of MMAP_THRESHOLD bytes or more their own mmap, returned to the system when
    freed, instead of its default threshold, which rises to the size of each large block freed (up to 32 MB): the
    query encoder's [positions, vocabulary] logits (2-10 MB a query) then stayed in the heap, fragmented, and the
    search thread's arena grew with the longest queries seen (bench_server, one search thread: +64 MB over 1,000
    requests, +42 MB with this). Not done where $MALLOC_MMAP_THRESHOLD_ sets it already, or without glibc;
    returns whether it was set."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    except (OSError, AttributeError):
        return False


class SearchThreads:
    """The threads that run searches: $PYSERINI_EXT_SEARCH_THREADS of them (default 1), started at the first search.

    FastAPI runs each request on one of its 40 pool threads; searching there let every pool thread run the query
    encoder, Faiss and Lucene: each thread grew its own glibc malloc arena and MKL buffers to the high-water mark
    of the queries it happened to see, and the server's RSS grew with the number of threads (bench_server,
    1,000 requests 8 at a time: +364 MB on 8 request threads, +64 MB when one thread ran every search; see
    docs/serving.md, "Load test"). On a few cores, searches that run together only share the cores: one at a time,
    each with torch's intra-op threads, answers as many per second. Requests still arrive, wait and are answered
    concurrently; they queue here for a search thread. A search already on a search thread runs in place.

    Starting them also fixes glibc's mmap threshold (`fixed_mmap_threshold`) and turns off (unless
    $PYSERINI_EXT_COMPILE is set) the torch.compile of the Aggretriever's vocabulary kernel, which pays for
    documents, not queries: a query reaches a full 64-position block only past 64 tokens (one SciFact query in
    1,109), and compiling then ran inside that request, importing inductor and growing the server by ~50-70 MB in
    the middle of a run (one search thread, 1,000 requests: +110 and +134 MB with it, +64 MB without). The values
    are the same either way.
    """

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    @staticmethod
    def count() -> int:
        value = os.environ.get(SEARCH_THREADS_ENV, "").strip() or "1"
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"${SEARCH_THREADS_ENV} must be an integer >= 1, got {value!r}")
        return threads

    def _mark(self) -> None:
        self._local.inside = True

    def run(self, call: Callable[[], Any]) -> Any:
        """`call()` on a search thread; its result or its exception."""
        if getattr(self._local, "inside", False):
            return call()
        with self._lock:
            if self._pool is None:
                os.environ.setdefault(COMPILE_ENV, "0")
                fixed_mmap_threshold()
                self._pool = ThreadPoolExecutor(self.count(), thread_name_prefix="pyserini-ext-search",
                                                initializer=self._mark)
        return self._pool.submit(call).result()


SEARCHES = SearchThreads()


def our_query_encoder(model: str | os.PathLike):
    """Our query encoder for a model of ours (bare name, shipped folder name or model folder), else None; built
    through Pyserini's own query-encoder class map, which our names joined (integration/encode.py)."""
    family = model_family(model)
    if family is None:
        return None
    from pyserini.encode import query_encoder_class_map

    name = str(model) if str(model) in query_encoder_class_map else family
    return query_encoder_class_map[name](encoder_dir=str(model))


def _known_to_pyserini(controller_module, name: str) -> bool:
    return any(name in info for info in controller_module.INDEX_TYPE.values()) or \
        name in controller_module.FAISS_INDEX_INFO_M_BEIR


def _open_ours(config, record: dict):
    """Searcher of our prebuilt Faiss or AligneR index `config.name`, with its record's model unless `encoder`."""
    from pyserini.search.faiss import FaissSearcher

    name, kind = config.name, record["kind"]
    model = config.encoder or prebuilt.shipped_model(name)
    if model is None:
        built_by = record.get("model", {}).get("name", "an unrecorded model")
        raise RequestError(f"index {name} was built by {built_by}, which this installation does not ship: "
                           "pass encoder (its model folder)")
    if kind == ALIGNER_TYPE:
        model = resolve_model(model, ALIGNER_TYPE)
        prebuilt.check_model(name, model)
        config.searcher = open_searcher(prebuilt.download_prebuilt(name), model)
    else:
        encoder = our_query_encoder(model)
        if encoder is None:
            raise RequestError(f"encoder {model!r} is not one of our models; index {name} needs "
                               f"{record.get('model', {}).get('name', 'the model that built it')}")
        config.searcher = FaissSearcher.from_prebuilt_index(name, encoder)  # checks the model (search_faiss.py)
    config.index_type = "aligner" if kind == ALIGNER_TYPE else "faiss"
    config.base_index = record.get("texts")
    config.encoder = str(config.encoder or Path(model).name)


def _open_folder(config, controller_module):
    """Searcher of a local index folder, by what it holds."""
    folder = Path(config.name)
    kind = prebuilt.detect_kind(folder)
    if kind == ALIGNER_TYPE:
        config.searcher = open_searcher(folder, resolve_model(config.encoder, ALIGNER_TYPE) if config.encoder else None)
    elif kind == "faiss":
        encoder = our_query_encoder(config.encoder) if config.encoder else None
        if encoder is None:
            encoder = controller_module.AutoQueryEncoder(encoder_dir=config.encoder) if config.encoder else None
        if encoder is None:
            raise RequestError(f"{folder} is a Faiss index: pass encoder (the model that encoded it)")
        config.searcher = controller_module.FaissSearcher(str(folder), encoder)
    else:
        config.searcher = controller_module.LuceneSearcher(str(folder))
    config.index_type = {"faiss": "faiss", ALIGNER_TYPE: ALIGNER_TYPE}.get(kind, "tf")
    config.base_index = None


def _make_add_index(controller_module):
    def make(original):
        def _add_index(self, config):
            name = config.name
            with _LOCK:
                opened = self.indexes.get(name)  # by a request that held the lock first
                if opened is not None and opened.searcher is not None and config.encoder in (None, "",
                                                                                             opened.encoder):
                    return opened
                try:
                    record = prebuilt.load_catalogue().get(name)
                    if record is not None and record.get("kind") in ("faiss", ALIGNER_TYPE):
                        _open_ours(config, record)
                    elif Path(name).is_dir():
                        _open_folder(config, controller_module)
                    elif not _known_to_pyserini(controller_module, name):
                        raise NotFound(f"unknown index {name!r}: list the indexes with GET /v1/indexes/?index_type="
                                       f"{'|'.join(controller_module.INDEX_TYPE)}")
                    else:
                        ours = our_query_encoder(config.encoder) if config.encoder else None
                        if ours is not None and name in controller_module.FAISS_INDEX_INFO:
                            config.searcher = controller_module.FaissSearcher.from_prebuilt_index(name, ours)
                            config.base_index = controller_module.FAISS_INDEX_INFO[name].get("texts")
                            config.index_type = "faiss"
                        else:
                            config = original(self, config)
                except (RequestError, SearchFailed):
                    raise
                except MissingOptionalPackage as e:
                    raise RequestError(one_line(e)) from e
                except Exception as e:  # a download or a searcher that fails to open: the server stays up
                    raise SearchFailed(f"could not open index {name}: {type(e).__name__}: {one_line(e)}") from e
                if config.searcher is None:  # Pyserini's loaders answer None when a download fails
                    raise SearchFailed(f"could not open index {name}: its download failed")
                self.indexes[name] = config
                return config

        return _add_index

    return make


def _open(self, controller_module, name: str, encoder: str | None = None, **settings):
    """The index's config, opened now if needed (or again, with another explicit encoder)."""
    config = self.indexes.get(name)
    if config is None or config.searcher is None or (encoder and encoder != config.encoder):
        previous = config.encoder if config is not None else None
        settings = {key: value for key, value in settings.items() if value is not None}  # else Pyserini's defaults
        config = self._add_index(controller_module.IndexConfig(name=name, encoder=encoder or previous or None,
                                                               **settings))
    return config


def _text_searcher(self, controller_module, config):
    """The Lucene searcher that holds the passages of `config`'s index, or None."""
    if config.index_type == "tf":
        return config.searcher
    if not config.base_index:
        return None
    return _open(self, controller_module, config.base_index).searcher


def _passage(raw: str | None) -> dict:
    """A stored passage as Pyserini's JSON collections hold it ({"id", "contents"}); {} when none is stored."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"contents": raw}


def _make_search(controller_module):
    def make(original):
        def search(self, query: str | dict[str, Any], index_name: str, k: int = 10, qid: str = "",
                   ef_search: int | None = None, encoder: str | None = None, query_generator: str | None = None,
                   instruction_config: str | None = None) -> dict[str, Any]:
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_HITS:
                raise RequestError(f"hits must be an integer from 1 to {MAX_HITS}, got {k!r}")
            if not isinstance(index_name, str) or not index_name.strip():
                raise RequestError("no index name given")
            multimodal = isinstance(query, dict) and query.get("query_img_path")
            if "m-beir" in index_name or multimodal or ("shard" in index_name and "msmarco" in index_name):
                try:  # Pyserini's own multimodal and sharded paths
                    return original(self, query, index_name, k, qid, ef_search, encoder, query_generator,
                                    instruction_config)
                except MissingOptionalPackage as e:
                    raise RequestError(one_line(e)) from e
            text = query.get("query_txt") if isinstance(query, dict) else query
            if not isinstance(text, str) or not text.strip():
                raise RequestError("empty query: give the query text (query, or query_txt for MCP)")
            settings = {"ef_search": ef_search, "query_generator": query_generator}
            config = _open(self, controller_module, index_name, encoder, **settings)  # on the request's thread
            return SEARCHES.run(lambda: _search_opened(self, controller_module, config, text, k, qid,
                                                       query_generator, index_name))

        return search

    return make


def _search_opened(self, controller_module, config, text: str, k: int, qid: str, query_generator: str | None,
                   index_name: str) -> dict[str, Any]:
    """The hits of an opened index with their passages (run on a search thread)."""
    try:
        if config.index_type == "tf" and isinstance(config.searcher, controller_module.LuceneSearcher):
            generator = self._resolve_query_generator(query_generator or config.query_generator,
                                                      config.searcher)
            hits = config.searcher.search(text, k, query_generator=generator)
        else:
            hits = config.searcher.search(text, k)
        texts = _text_searcher(self, controller_module, config)
        candidates = []
        for hit in hits:
            if config.index_type == "tf" and getattr(hit, "lucene_document", None) is not None:
                document = _passage(hit.lucene_document.get("raw"))
            else:
                stored = texts.doc(hit.docid) if texts is not None else None
                document = _passage(stored.raw() if stored is not None else None)
            candidates.append({"docid": hit.docid, "score": float(hit.score),
                               "document_txt": document.get("contents") or document.get("text")
                               or document.get("segment") or "",
                               "document_img_path": None, "encoded_img": None})
    except (RequestError, SearchFailed):
        raise
    except Exception as e:
        raise SearchFailed(f"search in {index_name} failed: {type(e).__name__}: {one_line(e)}") from e
    return {"query": {"qid": qid, "query_txt": text}, "candidates": candidates}


def _make_get_document(controller_module):
    def make(original):
        def get_document(self, docid: str, index_name: str) -> dict[str, str]:
            config = _open(self, controller_module, index_name)
            texts = _text_searcher(self, controller_module, config)
            if texts is None:
                raise NotFound(f"index {index_name} holds no document texts (its catalogue record names no "
                               "'texts' index)")
            document = texts.doc(docid)
            if document is None:
                raise NotFound(f"document {docid!r} not found in index {index_name}")
            return _passage(document.raw()) or {"id": docid}

        return get_document

    return make


def install(controller_module) -> None:
    controller_class = controller_module.SearchController
    index_types = controller_module.INDEX_TYPE

    def get_indexes(original):
        def get_indexes(self, index_type: str) -> list[str]:
            if index_type == ALIGNER_TYPE:
                refresh_aligner_indexes()
            if index_type not in index_types:
                raise RequestError(f"unknown index type {index_type!r}; one of {', '.join(index_types)}")
            return original(self, index_type)

        return get_indexes

    def get_status(original):
        def get_status(self, index_name: str) -> dict[str, Any]:
            record = prebuilt.load_catalogue().get(index_name)
            if record is not None:
                filename = record.get("filename") or f"{index_name}.tar.gz"
                cached = prebuilt.cache_home() / "indexes" / f"{filename.removesuffix('.tar.gz')}.{record['md5']}"
                return {"downloaded": cached.is_dir(), "size_bytes": str(record.get("size_bytes")),
                        "kind": record.get("kind"), "model": record.get("model", {}).get("name")}
            if not any(index_name in info for info in index_types.values()):
                raise NotFound(f"unknown index {index_name!r}")
            status = original(self, index_name)
            status.setdefault("size_bytes", str(status.get("size compressed (bytes)")))
            return status

        return get_status

    def settings_of_a_known_index(original):
        def method(self, index_name: str, *args, **kwargs):
            if index_name not in self.indexes:
                raise NotFound(f"index {index_name!r} has not been opened: search it first")
            return original(self, index_name, *args, **kwargs)

        return method

    patch.install(controller_class, "_add_index", _make_add_index(controller_module))
    patch.install(controller_class, "search", _make_search(controller_module))
    patch.install(controller_class, "get_document", _make_get_document(controller_module))
    patch.install(controller_class, "get_indexes", get_indexes)
    patch.install(controller_class, "get_status", get_status)
    patch.install(controller_class, "get_settings", settings_of_a_known_index)
    patch.install(controller_class, "update_settings", settings_of_a_known_index)

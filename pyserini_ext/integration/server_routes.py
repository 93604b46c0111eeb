"""`pyserini.server.rest.routes.indexes`: the REST routes answer bad requests with 4xx and a one-line detail.

Pyserini's routes turn every ValueError into a 404 and anything else into a 500 (an empty query is "not found",
hits <= 0 fails inside Lucene, the status route fails its own response model). `install` replaces the module's
`router` (before `pyserini.server.rest.app` includes it) by one with the same paths, parameters and response
models whose handlers answer the controller's errors (server_controller.py) with their status: 400 bad input,
404 unknown index or document, 500 a searcher failure, each with a one-line `detail`; the server stays up.
Handlers are plain functions, so FastAPI runs them in its thread pool: a slow search does not block the others.
"""
# no `from __future__ import annotations`: FastAPI reads the handlers' annotations, which name Pyserini's models
import logging
from collections.abc import Callable
from typing import Annotated, Any

from pyserini_ext.integration import patch
from pyserini_ext.integration.server_controller import RequestError, SearchFailed, one_line

LOG = logging.getLogger("pyserini_ext.server")


def answer(call: Callable[[], Any]):
    """`call()`, its errors as HTTP errors with a one-line detail."""
    from fastapi import HTTPException

    try:
        return call()
    except (RequestError, SearchFailed) as e:
        if e.status >= 500:
            LOG.error("%s", one_line(e))
        raise HTTPException(status_code=e.status, detail=one_line(e)) from None
    except HTTPException:
        raise
    except Exception as e:  # a bug: still one line for the client, the traceback in the server's log
        LOG.exception("request failed")
        raise HTTPException(status_code=500, detail=f"{type(e).__name__}: {one_line(e)}") from None


def build_router(routes_module):
    """Pyserini's index routes (same paths, parameters and response models) with our error answers."""
    from fastapi import APIRouter, Body, Path, Query

    models = routes_module
    get_controller = routes_module.get_controller
    router = APIRouter(prefix="/indexes", tags=["indexes"])

    @router.post("/{index}/search", response_model=models.Hits)
    def search_index(params: Annotated[models.SearchParams, Body()],
                     index: str = Path(..., description="Index name")):
        return answer(lambda: get_controller().search(
            params.query, index, params.hits, params.qid, params.ef_search, params.encoder,
            params.query_generator, params.instruction_config))

    @router.get("/{index}/documents/{docid}", response_model=dict[str, Any])
    def get_document(docid: str = Path(..., description="Document ID"),
                     index: str = Path(..., description="Index name")):
        return answer(lambda: get_controller().get_document(docid, index))

    @router.get("/{index}/status", response_model=models.IndexStatus)
    def get_index_status(index: str = Path(..., description="Index name")):
        return answer(lambda: get_controller().get_status(index))

    @router.get("/", response_model=list[str])
    def list_indexes(index_type: str = Query(..., description=f"Type of index out of {list(models.INDEX_TYPE)}")):
        return answer(lambda: get_controller().get_indexes(index_type))

    @router.post("/{index}/settings", response_model=dict[str, str])
    def update_index_settings(params: Annotated[models.IndexSetting, Body()],
                              index: str = Path(..., description="Index name")):
        def update():
            get_controller().update_settings(index, params.ef_search, params.encoder, params.query_generator)
            return {"status": "success"}

        return answer(update)

    @router.get("/{index}/settings", response_model=models.IndexSetting)
    def get_index_settings(index: str = Path(..., description="Index name")):
        return answer(lambda: get_controller().get_settings(index))

    return router


def install(routes_module) -> None:
    patch.install(routes_module, "router", lambda original: build_router(routes_module))

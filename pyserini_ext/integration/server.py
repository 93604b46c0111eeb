"""`pyserini.server`: its controller imports without the optional UniIR package and without downloading MS MARCO.

Pyserini 1.6's `pyserini.server.search_controller` (imported by both the REST and the MCP server) does two things
at import that stop it from starting here: `from pyserini.encode.optional._uniir import UniIRQueryEncoder`, which
needs the optional `uniir_for_pyserini` package (and its dependencies), and `initialize_default_index()`, which
downloads the 2.2 GB `msmarco-v1-passage` index before the first request. `install` (run when the package
`pyserini.server` has executed, so before the controller's body) defers both to where they are used:

- a stand-in `pyserini.encode.optional._uniir` whose encoder classes load the real module when constructed, or
  raise `MissingOptionalPackage` naming the package (the controller's M-BEIR branch is the only user);
- the controller's default index is registered but opened at its first search (Pyserini's controller reopens an
  index whose searcher is None), as when its download fails offline.
"""
from __future__ import annotations

import importlib.util
import sys
import types

from pyserini_ext.integration import patch

UNIIR_MODULE = "pyserini.encode.optional._uniir"
CONTROLLER_MODULE = "pyserini.server.search_controller"
UNIIR_HINT = "pip install 'pyserini[optional]' (the uniir-for-pyserini package) and CLIP"


class MissingOptionalPackage(ImportError):
    """An optional package that a requested index needs is not installed."""


def _load_uniir(attribute: str):
    """The real `attribute` of Pyserini's UniIR module, loaded now in place of the stand-in."""
    origin = getattr(sys.modules.get(UNIIR_MODULE), "_real_origin", None)
    try:
        if origin is None:
            raise ImportError(f"this Pyserini has no {UNIIR_MODULE}")
        spec = importlib.util.spec_from_file_location(UNIIR_MODULE, origin)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as e:
        raise MissingOptionalPackage(f"M-BEIR indexes need the optional UniIR encoders, which do not import here "
                                     f"({e}); {UNIIR_HINT}") from None
    sys.modules[UNIIR_MODULE] = module
    return getattr(module, attribute)


def _deferred(attribute: str) -> type:
    class Deferred:
        """Stand-in for Pyserini's optional UniIR encoder: the real one is imported when this is constructed."""

        def __new__(cls, *args, **kwargs):
            return _load_uniir(attribute)(*args, **kwargs)

    Deferred.__name__ = Deferred.__qualname__ = attribute
    return Deferred


def defer_uniir() -> None:
    """Put the stand-in in place of Pyserini's UniIR module, unless the real one is imported already."""
    if UNIIR_MODULE in sys.modules:
        return
    import pyserini.encode  # noqa: F401  (first: it tries the real import and keeps None where it fails)

    if UNIIR_MODULE in sys.modules:  # the real module imported
        return
    spec = importlib.util.find_spec(UNIIR_MODULE)
    module = types.ModuleType(UNIIR_MODULE, "pyserini-ext stand-in: the UniIR encoders, imported when used")
    module._real_origin = spec.origin if spec is not None else None
    module.UniIRQueryEncoder = _deferred("UniIRQueryEncoder")
    module.UniIRCorpusEncoder = _deferred("UniIRCorpusEncoder")
    setattr(module, patch.MARK, True)
    sys.modules[UNIIR_MODULE] = module
    patch.INSTALLED[UNIIR_MODULE] = "deferred"  # the module itself: a stand-in in sys.modules


def _controller_initialising() -> bool:
    """Whether the controller module's body is running: it defines `get_controller` after the default index."""
    module = sys.modules.get(CONTROLLER_MODULE)
    return module is not None and not hasattr(module, "get_controller")


def defer_default_index() -> None:
    """`LuceneSearcher.from_prebuilt_index` answers None (Pyserini's "could not download") while the controller's
    body runs, so its default index is opened at its first search instead of at import."""
    from pyserini.search.lucene import LuceneSearcher

    def make(original):
        def from_prebuilt_index(cls, prebuilt_index_name: str, *args, **kwargs):
            if _controller_initialising():
                return None
            return original(cls, prebuilt_index_name, *args, **kwargs)

        from_prebuilt_index.__doc__ = original.__doc__
        return from_prebuilt_index

    patch.install(LuceneSearcher, "from_prebuilt_index", make, descriptor=classmethod)


def install(server_package) -> None:
    defer_uniir()
    defer_default_index()

"""Run at every interpreter start by `pyserini_ext.pth` (installed into site-packages with the package).

It must stay cheap: standard library only, no torch/Pyserini/JVM import. It
  1. points JAVA_HOME/PATH at a Java 21+ runtime (see java_bridge),
  2. sets a placeholder OPENAI_API_KEY, because `pyserini.encode` builds an OpenAI client at import time
     and openai 3.x raises without a key (no request is ever sent with it),
  3. installs post-import hooks: when Pyserini's own modules load, the JVM options are fixed
     (`pyserini.setup`), our encoder names are registered (`pyserini.encode` and Pyserini's impact searcher,
     see registry.py), and our prebuilt indexes are registered with Pyserini's prebuilt loaders
     (`pyserini.util`, see index/prebuilt.py).
Set PYSERINI_EXT_DISABLE=1 to switch all of it off.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

OPENAI_PLACEHOLDER = "pyserini-ext-placeholder-no-requests-are-made"


def _patch_setup(module) -> None:
    import java_bridge

    java_bridge.patch_pyserini_setup(module)


def _register_encoders(module) -> None:
    from pyserini_ext import registry

    registry.register_with_pyserini(module)


def _register_impact_encoders(module) -> None:
    from pyserini_ext import registry
    from pyserini_ext.index import prebuilt

    registry.register_impact_encoders(module)
    prebuilt.check_searchers(module.LuceneImpactSearcher)


def _register_prebuilt_indexes(module) -> None:
    from pyserini_ext.index import prebuilt

    prebuilt.register_with_pyserini(module)


def _check_faiss_prebuilt_models(module) -> None:
    from pyserini_ext.index import prebuilt

    prebuilt.check_searchers(module.FaissSearcher)


# module name -> what to run right after that module has executed
POST_IMPORT_HOOKS = {
    "pyserini.setup": _patch_setup,
    "pyserini.encode": _register_encoders,
    "pyserini.search.lucene._impact_searcher": _register_impact_encoders,
    "pyserini.util": _register_prebuilt_indexes,
    "pyserini.search.faiss._searcher": _check_faiss_prebuilt_models,
}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of a hooked module so the hook runs after it."""

    def find_spec(self, fullname, path=None, target=None):
        hook = POST_IMPORT_HOOKS.get(fullname)
        if hook is None:
            return None
        sys.meta_path.remove(self)  # let the regular finders resolve the module
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            hook(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if os.environ.get("PYSERINI_EXT_DISABLE"):
        return
    import java_bridge

    java_bridge.configure_environment()
    os.environ.setdefault("OPENAI_API_KEY", OPENAI_PLACEHOLDER)
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())
    for name, hook in POST_IMPORT_HOOKS.items():  # imported before we were installed
        if name in sys.modules:
            hook(sys.modules[name])


install()

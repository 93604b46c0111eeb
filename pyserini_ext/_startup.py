"""Run at every interpreter start by `pyserini_ext.pth` (installed into site-packages with the package).

It must stay cheap: standard library only, no torch/Pyserini/JVM import. It
  1. points JAVA_HOME/PATH at a Java 21+ runtime (see java_bridge), and once Pyserini is imported, puts this
     interpreter first on PATH as `python` for the commands Pyserini runs through the shell,
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


PYTHON_SHIM = """#!/bin/sh
# pyserini-ext: `python` for commands that Pyserini runs through the shell (`python -m pyserini...`)
exec {executable} "$@"
"""


def _this_python_first_on_path(module=None) -> None:
    """Make the running interpreter the `python` that Pyserini's shell commands find.

    Pyserini re-runs itself through the shell (`os.system('python -m pyserini.search.lucene ...')` in
    `python -m pyserini.search`, trec_eval and fusion calls in its 2cr scripts); from an unactivated venv that
    `python` is another interpreter, without Pyserini. Only processes that import Pyserini are touched, and only
    the name `python`: a folder holding one `python` script that execs this interpreter goes first on PATH.
    """
    executable = sys.executable
    if not executable or os.name != "posix":
        return
    path = os.environ.get("PATH", "").split(os.pathsep)
    for folder in path:  # the `python` children would find now
        candidate = os.path.join(folder, "python")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            if os.path.abspath(candidate) == os.path.abspath(executable):
                return
            break
    import hashlib

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    shim_dir = os.path.join(cache, "pyserini_ext", "python", hashlib.md5(executable.encode()).hexdigest()[:16])
    shim = os.path.join(shim_dir, "python")
    script = PYTHON_SHIM.format(executable=_shell_quote(executable))
    try:
        if not os.path.isfile(shim) or open(shim).read() != script:
            os.makedirs(shim_dir, exist_ok=True)
            partial = f"{shim}.{os.getpid()}"
            with open(partial, "w") as f:
                f.write(script)
            os.chmod(partial, 0o755)
            os.replace(partial, shim)
    except OSError:  # read-only home: the interpreter's own folder is the next best thing
        shim_dir = os.path.dirname(executable)
    if shim_dir not in path:
        os.environ["PATH"] = os.pathsep.join([shim_dir, *path])


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# module name -> what to run right after that module has executed
POST_IMPORT_HOOKS = {
    "pyserini": _this_python_first_on_path,
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

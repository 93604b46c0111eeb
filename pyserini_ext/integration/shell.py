"""`pyserini`: the `python` that Pyserini's shell commands run is this interpreter.

Pyserini re-runs itself through the shell (`os.system('python -m pyserini.search.lucene ...')` in
`python -m pyserini.search`, trec_eval and fusion calls in its 2cr scripts); from an unactivated venv that
`python` is another interpreter, without Pyserini. Only processes that import Pyserini are touched, and only the
name `python`: a folder holding one `python` script that execs this interpreter goes first on PATH.
Standard library only (it runs when `pyserini` is imported, before anything heavy).
"""
from __future__ import annotations

import os
import sys

PYTHON_SHIM = """#!/bin/sh
# pyserini-ext: `python` for commands that Pyserini runs through the shell (`python -m pyserini...`)
exec {executable} "$@"
"""


def install(module=None) -> None:
    """Put this interpreter first on PATH as `python`, unless it already is the `python` found there."""
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

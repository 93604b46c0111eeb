"""Run at every interpreter start by `pyserini_ext.pth` (installed into site-packages with the package).

It must stay cheap: standard library only, no torch/Pyserini/JVM import. It
  1. points JAVA_HOME/PATH at a Java 21+ runtime (see java_bridge),
  2. sets a placeholder OPENAI_API_KEY, because `pyserini.encode` builds an OpenAI client at import time
     and openai 3.x raises without a key (no request is ever sent with it),
  3. installs the post-import hooks of pyserini_ext/integration/: when one of Pyserini's own modules has loaded,
     our module that patches it runs (JVM options, encoder names, prebuilt indexes, `python` on PATH for
     Pyserini's shell commands; the list is `integration.PATCHED_MODULES`).
Set PYSERINI_EXT_DISABLE=1 to switch all of it off.
"""
from __future__ import annotations

import os

OPENAI_PLACEHOLDER = "pyserini-ext-placeholder-no-requests-are-made"


def install() -> None:
    if os.environ.get("PYSERINI_EXT_DISABLE"):
        return
    import java_bridge
    from pyserini_ext.integration import PATCHED_MODULES, patch

    java_bridge.configure_environment()
    os.environ.setdefault("OPENAI_API_KEY", OPENAI_PLACEHOLDER)
    for module_name, ours in PATCHED_MODULES.items():  # run at once for a module imported before we were installed
        patch.on_import(module_name, ours)


install()

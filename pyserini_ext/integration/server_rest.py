"""`pyserini.server.rest.app`: `python -m pyserini.server.rest --host H --port N`, bound to 127.0.0.1 by default.

Pyserini's `main` binds 0.0.0.0 with no way to choose: every interface would serve an unauthenticated API. `install`
replaces `main` by one that takes `--host` (default 127.0.0.1; 0.0.0.0 to serve other machines, behind a proxy)
and `--port` (Pyserini's default 8081) and runs the same `app` with uvicorn.
"""
from __future__ import annotations

import argparse

from pyserini_ext.integration import patch

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyserini.server.rest",
                                     description="Run the Pyserini REST API server (with pyserini-ext's models).")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to bind (default: {DEFAULT_HOST}, this machine only; 0.0.0.0 for every "
                             "interface: there is no authentication, put it behind a proxy)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    return parser


def install(app_module) -> None:
    def make(original):
        def main(argv: list[str] | None = None) -> None:
            """Run the FastAPI server on --host (default 127.0.0.1) and --port."""
            import uvicorn

            args = parser().parse_args(argv)
            if not 0 < args.port < 65536:
                parser().error(f"--port must be from 1 to 65535, got {args.port}")
            uvicorn.run(app_module.app, host=args.host, port=args.port)

        return main

    patch.install(app_module, "main", make)

"""`pyserini-ext <group> ...`: what Pyserini's own commands cannot express.

Each group lives in its own module (`pyserini_ext/cli/<group>.py`) exposing `main(argv)`; it is imported only
when used, so `pyserini-ext --help` stays fast.

Errors caused by the input (our `PyseriniExtError`s and the built-in OSError/ValueError/KeyError, whose messages
name the problem) print as one line `pyserini-ext: error: ...` with exit code 2; anything else is a bug and
prints one line with exit code 1. `--debug` (anywhere on the command line) or `PYSERINI_EXT_DEBUG=1` shows the
traceback instead.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from pyserini_ext.errors import PyseriniExtError

GROUPS = {
    "aggretriever": "Aggretriever: train, convert training-repo checkpoints, build the demo model",
    "deepct": "DeepCT: train, index (term weights -> Lucene tf), search (BM25, QL-JM, DeepCT-Query)",
    "aligner": "AligneR: train, index token vectors, search, few-shot alignment adaptation",
    "fusion": "Fusion of TREC runs Pyserini's fusion cannot express (min-max with a weight per run)",
    "lucene": "Lucene helpers for any index (e.g. query likelihood with Jelinek-Mercer smoothing)",
    "data": "Datasets: export a BEIR dataset to Pyserini JsonCollection/topics/qrels",
    "prebuilt": "Prebuilt indexes: pack an index with its catalogue record, download and verify one",
    "repro": "Reproduction: rerun the conditions of the report and check their scores (as Pyserini's 2CR)",
}
DEBUG_FLAG = "--debug"
USER_ERRORS = (PyseriniExtError, OSError, ValueError, KeyError)
EXIT_USER_ERROR, EXIT_BUG, EXIT_INTERRUPTED = 2, 1, 130


def _one_line(error: BaseException) -> str:
    message = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(message.split()) or type(error).__name__


def run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: pyserini-ext [--debug] <group> [args...]\n\ngroups:")
        for name, help_text in GROUPS.items():
            print(f"  {name:<13} {help_text}")
        return 0
    group = argv[0]
    if group not in GROUPS:
        print(f"pyserini-ext: unknown group {group!r}; known: {', '.join(GROUPS)}", file=sys.stderr)
        return EXIT_USER_ERROR
    module = importlib.import_module(f"pyserini_ext.cli.{group}")
    return module.main(argv[1:]) or 0


def one_line_errors(call: Callable[[], int], debug: bool = False) -> int:
    """`call()`'s exit status, its errors as one line each on stderr (the traceback only when `debug`): used by
    `pyserini-ext` and `python -m pyserini_ext.demo`."""
    debug = debug or os.environ.get("PYSERINI_EXT_DEBUG", "") not in ("", "0")
    if debug:
        return call()
    try:
        return call()
    except USER_ERRORS as e:
        print(f"pyserini-ext: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("pyserini-ext: interrupted; no partial output was left behind", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: still one line, the traceback on request
        print(f"pyserini-ext: internal error ({type(e).__name__}: {_one_line(e)}); rerun with {DEBUG_FLAG} "
              "or PYSERINI_EXT_DEBUG=1 for the traceback and report it", file=sys.stderr)
        return EXIT_BUG


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in argv
    argv = [a for a in argv if a != DEBUG_FLAG]
    return one_line_errors(lambda: run(argv), debug)


if __name__ == "__main__":
    sys.exit(main())

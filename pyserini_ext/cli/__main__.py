"""`pyserini-ext <group> ...`: what Pyserini's own commands cannot express.

Each group lives in its own module (`pyserini_ext/cli/<group>.py`) exposing `main(argv)`; it is imported only
when used, so `pyserini-ext --help` stays fast.
"""
from __future__ import annotations

import importlib
import sys

GROUPS = {
    "aggretriever": "Aggretriever: train, convert training-repo checkpoints, build the demo model",
    "deepct": "DeepCT: train, index (term weights -> Lucene tf), search (BM25, QL-JM, DeepCT-Query)",
    "aligner": "AligneR: train, index token vectors, search, few-shot alignment adaptation",
    "lucene": "Lucene helpers for any index (e.g. query likelihood with Jelinek-Mercer smoothing)",
    "data": "Datasets: export a BEIR dataset to Pyserini JsonCollection/topics/qrels",
    "prebuilt": "Prebuilt indexes: pack an index with its catalogue record, download and verify one",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: pyserini-ext <group> [args...]\n\ngroups:")
        for name, help_text in GROUPS.items():
            print(f"  {name:<13} {help_text}")
        return 0
    group = argv[0]
    if group not in GROUPS:
        print(f"pyserini-ext: unknown group {group!r}; known: {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"pyserini_ext.cli.{group}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())

"""Builds the indexes and query caches the other scripts read, in runs/exp57: `<dataset>.default` (the default
options: residual-pq codes, centroid candidates) and `<dataset>.exact` (float16, flat) of the dataset's `make report`
encoding, every document token (beta_d 1), and the encoded queries of each split given. Prints each index's build
time.

The figures in the README were taken with `default` built before the nlist cap (SciFact: 16,384 lists); with the
cap in the code, SciFact's `default` now gets 8,192 lists, the same as build8192.py's.

Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/build.py scifact train test
    PYTHONPATH=. python experiments/aligner-default-path/build.py vaswani
"""
from __future__ import annotations

import sys

from harness import index, queries, setup


def main() -> None:
    setup(2)
    ds = sys.argv[1]
    index(ds, "default")
    index(ds, "exact", codec="float16", candidates="flat")
    for split in sys.argv[2:]:
        queries(ds, split)


if __name__ == "__main__":
    main()

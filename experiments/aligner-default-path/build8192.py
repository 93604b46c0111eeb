"""Builds `scifact.nlist8192` in runs/exp57: SciFact's default index (every document token) with 8,192 coarse
lists instead of the 16,384 the rule gave before the cap (nlist <= tokens / 128). Prints its build time.

Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/build8192.py
"""
from __future__ import annotations

from harness import index, setup


def main() -> None:
    setup(2)
    index("scifact", "nlist8192", nlist=8192)


if __name__ == "__main__":
    main()

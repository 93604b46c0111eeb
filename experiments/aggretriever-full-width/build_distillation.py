"""Build (or load) the shipped recipe's distillation set and the MS MARCO triples development set under --cache,
as `make models` and scripts/dev_rerank.py use them (runs/models/distillation by default)."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from pyserini_ext.train.distill import DistillDataConfig, build_distillation_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/devsets.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO)
    data = build_distillation_set(DistillDataConfig(), args.cache)
    print(f"distillation set: {len(data.queries)} queries over {len(data.corpus)} passages", flush=True)
    from devsets import triples_development_set
    dev = triples_development_set(args.cache / "triples-dev")
    print(f"triples dev: {len(dev.queries)} queries", flush=True)


if __name__ == "__main__":
    main()

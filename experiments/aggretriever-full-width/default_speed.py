"""The default Aggretriever against the previous one: document encoding speed of the two model folders on the same
backend and precision, same passages, one run (issue 46's bound: the new default within 1.25x of the old).

    .venv/bin/python experiments/aggretriever-full-width/default_speed.py --passages 500 --rounds 3

Each (model, side) runs in its own fresh subprocess through bench/bench_aggretriever.py's worker (ours only; the rounds
alternate the two models so that drift on a shared machine hits both alike); the median time per side is reported
with passages/s, peak RSS, the vector width and index bytes per passage (float32 Faiss flat), and the ratio of the
previous default's speed to the new one's (above 1: the new default is slower).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench/ (this is no benchmark of it)
from bench.common import SIDES, run_side, runnable  # noqa: E402

MODELS = {"previous default": "aggretriever-minilm", "default": "aggretriever"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=500)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", nargs="+", default=["ours onnx fp32", "ours torch fp32"],
                        choices=[s for s in SIDES if s != "pyserini"])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    from pyserini_ext.models.aggretriever import Aggretriever
    from pyserini_ext.models.folder import resolve_model

    folders = {name: str(resolve_model(model)) for name, model in MODELS.items()}
    dims = {name: Aggretriever.from_pretrained(folder).dim for name, folder in folders.items()}
    sides = runnable({s: SIDES[s] for s in args.sides})
    seconds: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for side in sides:
                for name, folder in folders.items():
                    out = str(Path(tmp) / f"{len(seconds)}-{len(peaks)}")
                    run_side("bench_aggretriever", side, args.threads, [
                        "--model", folder, "--out", out, "--passages", str(args.passages), "--max-length",
                        str(args.max_length), "--batch-size", str(args.batch_size)])
                    run = json.loads(Path(out + ".json").read_text())
                    seconds.setdefault((name, side), []).append(run["seconds"])
                    peaks[name, side] = max(peaks.get((name, side), 0.0), run["peak_rss_mb"])
    print(f"Aggretriever documents: {args.passages} SciFact passages, max length {args.max_length}, batch "
          f"{args.batch_size}, {args.threads} threads, median of {args.rounds} rounds")
    print(f"{'model':<18}{'folder':<32}{'dims':>5} {'bytes/passage':>14} {'side':<17}{'passages/s':>11} "
          f"{'peak RSS MB':>12} {'previous / this':>16}")
    rows = []
    for side in sides:
        base = float(np.median(seconds["previous default", side]))
        for name, folder in folders.items():
            median = float(np.median(seconds[name, side]))
            rows.append({"model": name, "folder": Path(folder).name, "dims": dims[name], "side": side,
                         "passages_per_s": args.passages / median, "peak_rss_mb": peaks[name, side],
                         "slowdown_vs_previous": median / base})
            print(f"{name:<18}{Path(folder).name:<32}{dims[name]:>5} {4 * dims[name]:>14} {side:<17}"
                  f"{args.passages / median:>11.2f} {peaks[name, side]:>12.0f} {median / base:>15.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"passages": args.passages, "max_length": args.max_length,
                                               "threads": args.threads, "rounds": args.rounds, "rows": rows},
                                              indent=1))


if __name__ == "__main__":
    main()

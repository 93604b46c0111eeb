"""`make report`: every condition of conditions.yaml (the shipped models, the baselines and their fusions with BM25,
RRF and weighted min-max) through the unchanged Pyserini commands on SciFact (test), the DL19 subset, Cranfield and
Vaswani, then docs/report.md and its plots.

    python -m pyserini_ext.repro                                    # everything (hours of CPU on 2 cores)
    python -m pyserini_ext.repro --datasets cranfield --methods bm25 deepct rrf-deepct --threads 2
    python -m pyserini_ext.repro --datasets cranfield --subset 500  # development: first 500 + all judged documents
    python -m pyserini_ext.repro --from-conditions                  # docs/report.md from the expected scores

Every step is a subprocess, printed with its wall time and logged with its output to `<workdir>/commands.log`; a
step whose output exists is reused. With the conditions' settings the figures are compared with the expected
scores at the end (`pyserini-ext repro --check` fails on a difference; this only lists them).
Writes docs/report.md and the PNG plots beside it (with `--subset`: report-subset<N>.md and -subset<N> plots).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from pyserini_ext.errors import PyseriniExtError
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.repro.conditions import compare, load_conditions
from pyserini_ext.repro.pipeline import Options, Reproduction
from pyserini_ext.repro.render import write_plots, write_report
from pyserini_ext.repro.runner import atomic_write_text


def weight_in_unit_interval(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def build_parser(datasets: list[str], methods: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyserini_ext.repro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=datasets, default=datasets)
    parser.add_argument("--methods", nargs="+", choices=methods, default=methods)
    parser.add_argument("--from-conditions", action="store_true",
                        help="run nothing: the report from the expected scores of the conditions file")
    parser.add_argument("--models-dir", help="folder of the models (default: the shipped models)")
    parser.add_argument("--aggretriever-model", help="folder name under --models-dir (or a path); default: the "
                                                     "shipped default")
    parser.add_argument("--deepct-model")
    parser.add_argument("--aligner-model")
    parser.add_argument("--aggretriever-document-encoder", choices=("aggretriever-onnx", "aggretriever"),
                        default="aggretriever-onnx", help="corpus encoder class (same vectors; ONNX is faster)")
    parser.add_argument("--aligner-beta-d", type=float, help="AligneR index pruning in the main table")
    parser.add_argument("--aligner-beta-q", type=float, default=DEFAULT_BETA_Q,
                        help="AligneR query tokens kept (the searcher's default)")
    parser.add_argument("--deepct-k1-b", type=float, nargs=2, metavar=("K1", "B"),
                        help="DeepCT's BM25 k1 b instead of the development-set choice (the report says so)")
    parser.add_argument("--deepct-lambda", type=float,
                        help="DeepCT's QL-JM lambda instead of the development-set choice (the report says so)")
    parser.add_argument("--rrf-k", type=int, help="RRF's k (default: the conditions' development-set choice)")
    parser.add_argument("--norm-lexical-weight", type=weight_in_unit_interval,
                        help="the lexical run's (BM25's, DeepCT-Query's) weight in min-max fusion, in [0, 1] "
                             "(default: the conditions' development-set choice)")
    parser.add_argument("--triples", default=Options().triples)
    parser.add_argument("--max-length", type=int, help="passage tokens for pyserini.encode")
    parser.add_argument("--batch-size", type=int, help="pyserini.encode batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--subset", type=int, default=0,
                        help="development only: first N documents of each corpus plus every judged one")
    parser.add_argument("--skip", nargs="+", default=[], metavar="DATASET:METHOD",
                        help="leave these out (e.g. dl19:minilm when its 30k-passage encoding is not affordable); "
                             "they are left out of that dataset's table")
    parser.add_argument("--workdir", default="runs/report")
    parser.add_argument("--output", default="docs/report.md")
    return parser


def uses_conditions_settings(options: Options) -> bool:
    """Whether a run's figures are comparable with the expected scores (no option changed a condition)."""
    defaults = Options()
    changed = [f.name for f in dataclasses.fields(Options)
               if f.name not in ("workdir", "threads", "triples", "skip", "dry_run")
               and getattr(options, f.name) != getattr(defaults, f.name)]
    return not changed


def main(argv: list[str] | None = None) -> int:
    conditions = load_conditions()
    args = build_parser(list(conditions.datasets), list(conditions.methods)).parse_args(argv)
    options = Options(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Options) if hasattr(args, f.name)},
                      dry_run=args.from_conditions)
    started = time.perf_counter()
    repro = Reproduction(conditions, options)
    if not options.dry_run:
        print(f"work folder {repro.runner.display.text(str(repro.root))}; each step's own progress bars: "
              f"tail -f {repro.runner.display.text(str(repro.runner.log))}", flush=True)
    figures = repro.run(args.datasets, args.methods)
    output = Path(args.output)
    suffix = f"-subset{args.subset}" if args.subset else ""
    output = output.with_name(f"{output.stem}{suffix}{output.suffix}")
    output.parent.mkdir(parents=True, exist_ok=True)
    plots = write_plots(conditions, figures["results"], figures["pruning"], output.parent, suffix)
    if not options.dry_run:
        atomic_write_text(repro.root / "results.json", json.dumps(
            {**figures, "pruning": {k: {str(b): r for b, r in v.items()} for k, v in figures["pruning"].items()}},
            indent=1))
    command = repro.runner.display.command(["python", "-m", "pyserini_ext.repro", *(argv or sys.argv[1:])])
    write_report(output, repro, figures, plots, command,
                 None if options.dry_run else time.perf_counter() - started)
    print(f"wrote {output} and {', '.join(str(p) for p in plots.values())} in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    if not options.dry_run and uses_conditions_settings(options):
        checked, failures = compare(conditions, figures["results"], figures["pruning"])
        for failure in failures:
            print(failure.line(), flush=True)
        print(f"{checked} figures compared with the expected scores: {len(failures)} outside the tolerance "
              f"{conditions.tolerance:g} (deliberate changes: edit the scores in the conditions file)", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (PyseriniExtError, OSError, ValueError) as error:  # bad input or a failed step: one line
        sys.exit(f"python -m pyserini_ext.repro: error: {error}")

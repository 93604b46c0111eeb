"""`pyserini-ext fusion normalize`: min-max fusion of TREC runs with a weight per run.

    pyserini-ext fusion normalize --runs run.bm25.txt run.aligner.txt --weights 0.3 0.7 --output run.fused.txt

Pyserini's `python -m pyserini.fusion --method normalize` is the same with equal weights; its `interpolation`
weighs raw scores. The options follow Pyserini's (`--depth`, `--k`, `--runtag`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyserini_ext.cli.options import Command, command_group, option
from pyserini_ext.data import atomic_output, check_output


@dataclass(kw_only=True)
class NormalizeFusionOptions:
    runs: list[str] = option(help="TREC run files (two or more)")
    output: str = option(help="TREC run file to write")
    weights: list[float] | None = option(None, help="one weight per run, in --runs order (normalised to sum 1; "
                                                    "default: equal, what pyserini.fusion --method normalize does)")
    depth: int = option(1000, help="hits of each run per query that take part", min=1)
    k: int = option(1000, help="hits per query written", min=1)
    runtag: str = option("pyserini-ext.fusion", help="run tag of the output")
    overwrite: bool = option(False, help="replace an existing run file")

    def __post_init__(self):
        from pyserini_ext.search.fusion import check_weights

        if len(self.runs) < 2:
            raise ValueError(f"--runs: fusion needs at least 2 runs, got {len(self.runs)}")
        if self.weights is not None:
            check_weights(self.weights, len(self.runs))


def read_run(path: str):
    from pyserini.trectools import TrecRun

    if not Path(path).is_file():
        raise FileNotFoundError(f"run file {path} not found")
    try:
        run = TrecRun(path)
    except Exception as error:  # pandas' parse errors do not name the file
        raise ValueError(f"{path}: not a TREC run (qid Q0 docid rank score tag): {error}") from None
    if run.run_data.empty:
        raise ValueError(f"{path}: empty run")
    if run.run_data["score"].isna().any():
        raise ValueError(f"{path}: not a TREC run (a score is missing or not a number)")
    return run


def normalize(options: NormalizeFusionOptions) -> None:
    from pyserini_ext.search.fusion import weighted_normalize

    check_output(options.output, options.overwrite)
    runs = [read_run(path) for path in options.runs]
    fused = weighted_normalize(runs, options.weights, depth=options.depth, k=options.k)
    with atomic_output(options.output, overwrite=options.overwrite) as tmp:
        fused.save_to_txt(str(tmp), tag=options.runtag)
    print(f"wrote {len(fused.run_data)} hits for {fused.run_data['topic'].nunique()} queries to {options.output}")


main = command_group("pyserini-ext fusion", __doc__, {
    "normalize": Command("min-max fusion of TREC runs with a weight per run", NormalizeFusionOptions, normalize),
})

"""`pyserini-ext repro`: the reproduction conditions (pyserini_ext/repro/conditions.yaml), as Pyserini's 2CR.

    pyserini-ext repro --check --datasets scifact                  # rerun SciFact's conditions, compare the scores
    pyserini-ext repro --check --datasets scifact --methods bm25 deepct rrf-deepct
    pyserini-ext repro --list --datasets scifact                   # the conditions and their expected scores

`--check` and `--list` are the commands `check` and `list`. A check exits 1 and prints one line per figure outside
the tolerance (method, dataset, metric, expected, got, tolerance). Steps whose output is in the work folder are
reused, as `make report` reuses them: give a new --workdir to rerun everything.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from pyserini_ext.cli.options import Command, command_group, option

EXIT_FAILED = 1


@dataclass
class ListOptions:
    datasets: list[str] | None = option(None, help="datasets (default: all of the conditions file)")
    methods: list[str] | None = option(None, help="conditions (default: all)")
    conditions: str | None = option(None, help="conditions file (default: the shipped one)")

    def load(self):
        """The conditions file, with the datasets and methods asked for checked against it."""
        from pyserini_ext.repro.conditions import CONDITIONS_FILE, load_conditions

        conditions = load_conditions(self.conditions or CONDITIONS_FILE)
        for name, asked, known in (("--datasets", self.datasets, conditions.datasets),
                                   ("--methods", self.methods, conditions.methods)):
            unknown = [a for a in asked or () if a not in known]
            if unknown:
                raise ValueError(f"{name}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
        return conditions, self.datasets or list(conditions.datasets), self.methods or list(conditions.methods)


@dataclass
class CheckOptions(ListOptions):
    workdir: str = option("runs/repro", help="work folder (corpora, indexes, runs); existing outputs are reused")
    threads: int = option(2, help="threads of each step", min=1)
    tolerance: float | None = option(None, help="|got - expected| allowed (default: the conditions file's)", min=0.0)


def list_conditions(options: ListOptions) -> None:
    conditions, datasets, methods = options.load()
    for method in methods:
        m = conditions.methods[method]
        print(f"{method}: {m.label}" + (f" ({conditions.fusions[m.fuse][0]} of {', '.join(m.runs)})" if m.fuse else ""))
        for dataset in datasets:
            for variant, scores in ((m.scores.get(dataset) or {}).items() if m.beta_d else
                                    [("", m.scores.get(dataset))]):
                if scores:
                    shown = ", ".join(f"{k} {v}" for k, v in scores.items())
                    print(f"  {dataset}{f' beta_d {variant}' if variant != '' else ''}: {shown}")


def check(options: CheckOptions) -> int:
    from pyserini_ext.repro.pipeline import Options, check

    conditions, datasets, methods = options.load()
    checked, failures = check(conditions, datasets, methods, Options(workdir=options.workdir, threads=options.threads),
                              options.tolerance)
    for failure in failures:
        print(failure.line(), flush=True)
    tolerance = conditions.tolerance if options.tolerance is None else options.tolerance
    print(f"repro check: {checked} figures of {len(methods)} conditions on {', '.join(datasets)}; "
          f"{len(failures)} outside the tolerance {tolerance:g}", flush=True)
    return EXIT_FAILED if failures else 0


_group = command_group("pyserini-ext repro", __doc__, {
    "check": Command("rerun the conditions of --datasets and compare every figure with the expected scores",
                     CheckOptions, check),
    "list": Command("the conditions and their expected scores", ListOptions, list_conditions),
})


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for flag in ("--check", "--list"):  # 2CR's spelling of the two commands
        if flag in argv and not (argv and argv[0] in ("check", "list")):
            argv.remove(flag)
            argv.insert(0, flag.removeprefix("--"))
    return _group(argv)


main.build_parser = _group.build_parser

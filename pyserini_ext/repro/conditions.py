"""The conditions file (conditions.yaml): loading and checking it, expanding its command templates, and comparing
measured figures with its expected scores.

Template variables (besides the outputs of a method's earlier steps, by step key):
  python               the interpreter running the report (shown as `python`)
  folder, collection, docs, dataset
                       the corpus' folder in the work folder, its JsonCollection folder and docs.jsonl, and the
                       dataset name or BEIR folder for `pyserini-ext ... --dataset`
  split, topics, qrels the split scored and its topics / qrels files
  output               the step's output
  threads, hits, max_length, batch_size, bm25_k1, bm25_b, rrf_k, norm_lexical_weight, aligner_beta_d,
  aligner_beta_q       settings (conditions.yaml, or the report's command line)
  <model>_model, <model>_tag
                       a shipped model folder (aggretriever, deepct, aligner) and its fingerprint tag
  aggretriever_dim, aggretriever_document_encoder, minilm, minilm_dim, splade, aligner_rule,
  aligner_path
  deepct_k1, deepct_b, deepct_lambda
                       DeepCT's settings chosen on the development queries
  runs, weights, label fusion steps: the fused runs, min-max weights, the fused runs' names
"""
from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from pyserini_ext.errors import PyseriniExtError

CONDITIONS_FILE = Path(__file__).with_name("conditions.yaml")
INDEX_MB = "index MB"
DEV_SETS = ("scifact-train", "msmarco-dev")


class ConditionsError(PyseriniExtError, ValueError):
    """The conditions file is malformed, or a template names a variable that is not defined."""


@dataclass(frozen=True)
class EvalSet:
    """A corpus (BEIR dataset name or folder) with the qrels split that is scored on it."""

    key: str
    dataset: str
    split: str
    title: str
    recall_level: int | None = None


@dataclass(frozen=True)
class Step:
    """One command writing one output (a path relative to the corpus' folder); all three are templates."""

    name: str
    output: str
    command: str
    index: bool = False


@dataclass(frozen=True)
class Method:
    """A condition: a base method (steps + run), a fusion of base methods' runs, or AligneR at several beta_d."""

    key: str
    label: str
    family: str
    steps: tuple[str, ...] = ()
    run: Step | None = None
    fuse: str | None = None
    runs: tuple[str, ...] = ()
    run_prefix: str = ""
    of: str | None = None
    beta_d: tuple[float, ...] = ()
    scores: Mapping[str, Mapping] = field(default_factory=dict)


@dataclass(frozen=True)
class Conditions:
    tolerance: float
    metrics: Mapping[str, str]  # shown name -> trec_eval name, e.g. nDCG@10 -> ndcg_cut_10
    settings: Mapping[str, object]
    datasets: Mapping[str, EvalSet]
    evaluation: tuple[str, ...]
    evaluation_with_recall_level: tuple[str, ...]
    steps: Mapping[str, Step]
    fusions: Mapping[str, tuple[str, Step]]  # key -> (shown name, run step)
    methods: Mapping[str, Method]
    development: Mapping
    evidence: tuple[Mapping, ...]
    # tables measured on the test queries after every choice, each by the command it names (not rerun or checked
    # by the report: the parts of one vector cannot be searched with Pyserini's commands)
    ablations: tuple[Mapping, ...] = ()

    def base_methods(self, method: str) -> tuple[str, ...]:
        """The base methods whose runs `method` needs: itself, the runs a fusion fuses (the lexical run first), or
        the method a pruning row varies."""
        m = self.methods[method]
        return m.runs or ((m.of,) if m.of else (method,))

    def base_method_names(self) -> list[str]:
        return [k for k, m in self.methods.items() if m.run is not None]

    def family(self, method: str) -> str:
        """'baseline', 'ours', or the fusion's shown name: what the effectiveness plot colours a bar by."""
        m = self.methods[method]
        return self.fusions[m.fuse][0] if m.fuse else m.family


def _step(data: Mapping, where: str) -> Step:
    missing = {"name", "output", "command"} - set(data)
    if missing:
        raise ConditionsError(f"conditions file: {where} lacks {', '.join(sorted(missing))}")
    return Step(str(data["name"]), str(data["output"]), " ".join(str(data["command"]).split()),
                bool(data.get("index", False)))


def _method(key: str, data: Mapping, conditions_steps: Mapping[str, Step], fusions: Mapping) -> Method:
    where = f"method {key!r}"
    unknown = set(data.get("steps", ())) - set(conditions_steps)
    if unknown:
        raise ConditionsError(f"conditions file: {where} needs unknown steps {sorted(unknown)}; "
                              f"known: {', '.join(conditions_steps)}")
    if data.get("fuse") is not None and data["fuse"] not in fusions:
        raise ConditionsError(f"conditions file: {where} fuses by unknown fusion {data['fuse']!r}")
    if ("run" in data) + ("fuse" in data) + ("of" in data) != 1:
        raise ConditionsError(f"conditions file: {where} needs exactly one of run, fuse, of")
    return Method(key, str(data.get("label", key)), str(data.get("family", "")), tuple(data.get("steps", ())),
                  _step(data["run"], f"{where} run") if "run" in data else None, data.get("fuse"),
                  tuple(data.get("runs", ())), str(data.get("run_prefix", "")), data.get("of"),
                  tuple(float(b) for b in data.get("beta_d", ())), data.get("scores") or {})


def load_conditions(path: str | Path = CONDITIONS_FILE) -> Conditions:
    """Read and check the conditions file: every step, fusion and fused method a condition names exists."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConditionsError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(raw, dict):
        raise ConditionsError(f"{path}: expected a mapping at the top level")
    try:
        steps = {k: _step(v, f"step {k!r}") for k, v in raw["steps"].items()}
        fusions = {k: (str(v["name"]), _step(v["run"], f"fusion {k!r}")) for k, v in raw["fusions"].items()}
        methods = {k: _method(k, v, steps, fusions) for k, v in raw["methods"].items()}
        datasets = {k: EvalSet(k, v["dataset"], str(v["split"]), v["title"], v.get("recall_level"))
                    for k, v in raw["datasets"].items()}
        conditions = Conditions(float(raw["tolerance"]), dict(raw["metrics"]), dict(raw["settings"]), datasets,
                                tuple(raw["evaluation"]), tuple(raw["evaluation_with_recall_level"]), steps,
                                fusions, methods, raw.get("development") or {}, tuple(raw.get("evidence") or ()),
                                tuple(raw.get("ablations") or ()))
    except KeyError as error:
        raise ConditionsError(f"{path}: missing key {error.args[0]!r}") from None
    for method in methods.values():
        for needed in (*method.runs, *((method.of,) if method.of else ())):
            if needed not in methods or methods[needed].run is None:
                raise ConditionsError(f"{path}: method {method.key!r} needs {needed!r}, which is not a base method")
        unknown = set(method.scores) - set(datasets)
        if unknown:
            raise ConditionsError(f"{path}: method {method.key!r} has scores for unknown datasets {sorted(unknown)}")
    return conditions


class Variables(Mapping):
    """Template variables; a value may be a function, called once when a template first uses it (a model folder
    is looked up only by the methods that need it)."""

    def __init__(self, values: Mapping[str, object] | None = None, **more: object):
        self._values = {**(values or {}), **more}

    def __getitem__(self, name: str) -> object:
        value = self._values[name]
        if callable(value):
            value = self._values[name] = value()
        return value

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def but(self, **values: object) -> Variables:
        """A copy with `values` set (the unevaluated functions are shared, not called)."""
        return Variables(self._values, **values)


def _substitute(template: str, variables: Mapping[str, object]) -> str:
    try:
        return Template(template).substitute({k: v for k, v in _expanded(template, variables)})
    except ValueError as error:
        raise ConditionsError(f"template {template!r}: {error}") from None


def _expanded(template: str, variables: Mapping[str, object]) -> Iterable[tuple[str, str]]:
    for match in Template.pattern.finditer(template):
        name = match.group("named") or match.group("braced")
        if name is None:
            continue
        if name not in variables:
            raise ConditionsError(f"template {template!r} uses ${name}, which is not defined here; defined: "
                                  f"{', '.join(sorted(variables))}")
        yield name, str(variables[name])


def expand_text(template: str, variables: Mapping[str, object]) -> str:
    """A step's name or output: the template with its variables replaced."""
    return _substitute(template, variables)


def expand_command(template: str, variables: Mapping[str, object]) -> list[str]:
    """A command as an argument list: split like a shell line first, then each word expanded, so a path with
    spaces stays one argument; a word that is exactly `$name` with a list value becomes one argument per item
    (`--runs $runs`)."""
    argv: list[str] = []
    for word in shlex.split(template):
        name = word[1:] if word.startswith("$") and word[1:].isidentifier() else None
        if name is not None and name in variables and isinstance(variables[name], list | tuple):
            argv.extend(str(v) for v in variables[name])
        else:
            argv.append(_substitute(word, variables))
    return argv


def number(value: float) -> str:
    """How a number is written in commands and names: `1`, `0.4`, `50`."""
    return f"{float(value):g}"


# ---------------------------------------------------------------------------------------------------------
# expected figures and the tolerance check

@dataclass(frozen=True)
class Failure:
    """A figure outside its tolerance (or a choice that differs): one line of `repro --check`."""

    method: str
    dataset: str
    metric: str
    expected: float | None
    got: float | None
    tolerance: float

    def line(self) -> str:
        def shown(value: float | None) -> str:
            return "missing" if value is None else f"{value:.4f}"

        return (f"FAIL {self.method} {self.dataset} {self.metric}: expected {shown(self.expected)}, "
                f"got {shown(self.got)}, tolerance {self.tolerance:g}")


def expected_results(conditions: Conditions, datasets: Iterable[str]) -> tuple[dict, dict]:
    """(results, pruning) as a report run measures them ({dataset: {method: {trec name: value, index_mb}}},
    {dataset: {beta_d: figures}}), from the expected scores: what the report shows without rerunning."""
    def figures(scores: Mapping) -> dict[str, float]:
        out = {conditions.metrics[m]: float(v) for m, v in scores.items() if m in conditions.metrics}
        if INDEX_MB in scores:
            out["index_mb"] = float(scores[INDEX_MB])
        return out

    results: dict[str, dict] = {}
    pruning: dict[str, dict] = {}
    for key in datasets:
        results[key] = {m.key: figures(m.scores[key]) for m in conditions.methods.values()
                        if not m.beta_d and key in m.scores}
        pruning[key] = {float(b): figures(s) for m in conditions.methods.values() if m.beta_d
                        for b, s in (m.scores.get(key) or {}).items()}
    return results, pruning


def compare(conditions: Conditions, results: Mapping, pruning: Mapping | None = None,
            tolerance: float | None = None) -> tuple[int, list[Failure]]:
    """(figures compared, failures) of measured `results` / `pruning` (the shapes `expected_results` returns)
    against the expected scores; a measured condition without an expected figure is a failure too."""
    tolerance = conditions.tolerance if tolerance is None else tolerance
    expected, expected_pruning = expected_results(conditions, results)
    checked, failures = 0, []

    def check(method: str, dataset: str, want: Mapping, got: Mapping) -> None:
        nonlocal checked
        for shown, name in conditions.metrics.items():
            if name not in got:
                continue
            checked += 1
            if name not in want or abs(got[name] - want[name]) > tolerance + 1e-12:
                failures.append(Failure(method, dataset, shown, want.get(name), got[name], tolerance))

    for dataset, rows in results.items():
        for method, got in rows.items():
            check(method, dataset, expected[dataset].get(method, {}), got)
    for dataset, rows in (pruning or {}).items():
        for beta, got in rows.items():
            check(f"aligner-pruning beta_d {number(beta)}", dataset, expected_pruning[dataset].get(float(beta), {}),
                  got)
    return checked, failures


def compare_development(conditions: Conditions, deepct: Mapping, tolerance: float | None = None
                        ) -> tuple[int, list[Failure]]:
    """The DeepCT settings chosen on the development queries (exactly) and the grid's nDCG@10 (within the
    tolerance) against the conditions' `development` record."""
    tolerance = conditions.tolerance if tolerance is None else tolerance
    recorded = expected_development(conditions)
    failures = [Failure("deepct-tuning", "development", name, recorded[name], deepct[name], 0.0)
                for name in ("k1", "b", "lambda") if float(deepct[name]) != float(recorded[name])]
    checked = 3
    keyed: list[tuple[str, Callable[[Mapping], tuple]]] = [("grid", lambda r: (r["k1"], r["b"])),
                                                           ("qljm_grid", lambda r: (r["lambda"],))]
    for grid, key in keyed:
        want = {key(r): r for r in recorded[grid]}
        for row in deepct.get(grid, ()):
            for name in DEV_SETS:
                checked += 1
                expected = want.get(key(row), {}).get(name, {}).get("ndcg_cut_10")
                got = row[name]["ndcg_cut_10"]
                if expected is None or abs(got - expected) > tolerance + 1e-12:
                    label = "deepct " + " ".join(f"{k} {number(v)}" for k, v in zip(("k1", "b"), key(row))) \
                        if grid == "grid" else f"deepct-qljm lambda {number(key(row)[0])}"
                    failures.append(Failure(label, name, "nDCG@10", expected, got, tolerance))
    return checked, failures


def expected_development(conditions: Conditions) -> dict:
    """The `development` record in the shape the report's DeepCT tuning returns (figures as {ndcg_cut_10})."""
    dev = conditions.development

    def row(data: Mapping, keys: tuple[str, ...]) -> dict:
        out = {k: float(data[k]) for k in keys}
        out.update({n: {"ndcg_cut_10": float(data[n])} for n in DEV_SETS})
        out["mean_ndcg_cut_10"] = sum(float(data[n]) for n in DEV_SETS) / len(DEV_SETS)
        return out

    choice = dev["choice"]
    return {"k1": float(choice["k1"]), "b": float(choice["b"]), "lambda": float(choice["lambda"]),
            "grid": [row(r, ("k1", "b")) for r in dev["bm25_grid"]],
            "qljm_grid": [row(r, ("lambda",)) for r in dev["qljm_grid"]],
            "bm25_reference": {n: {"ndcg_cut_10": float(dev["bm25_reference"][n])} for n in DEV_SETS},
            "query_dev": {n: {m: {"ndcg_cut_10": float(v[n])} for m, v in dev["query_dev"].items()}
                          for n in DEV_SETS},
            "source": "recorded in the conditions file: each the best mean nDCG@10 over SciFact train and the "
                      "MS MARCO triples dev set"}

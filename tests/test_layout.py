"""The stage order of the package, checked on the source: no module imports a later stage, and no circle.

data -> models -> encode -> index -> search -> train / evaluation -> cli (and demo). `java_bridge` and `registry`
are the foundation (they import no stage statically: registry names encoders as strings); so is `integration`
(every patch of Pyserini: imported at start-up), except its modules that plug a later stage's functions into
Pyserini, which sit at that stage: `integration.encode` resolves model names with models/, `integration.encoders`
holds Pyserini's encoder classes over encode/'s runtime encoders, `integration.prebuilt` and the `search_*` patches
wrap Pyserini's loaders with index/prebuilt's downloads and checks (the target functions stay in index/; only the
patching is in integration/).
`_startup` is an entry point like the CLI (the .pth hook; it names the integration modules as strings).
Every `import` counts, also those inside functions, so a lazy import cannot hide a backwards dependency or a circle
(two modules of one stage importing each other, directly or through others).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = {
    "java_bridge": 0, "pyserini_ext": 0, "pyserini_ext._startup": 7, "pyserini_ext.registry": 0,
    "pyserini_ext.data": 1, "pyserini_ext.models": 2, "pyserini_ext.encode": 3, "pyserini_ext.index": 4,
    "pyserini_ext.search": 5, "pyserini_ext.train": 6, "pyserini_ext.evaluation": 6, "pyserini_ext.cli": 7,
    "pyserini_ext.demo": 7, "pyserini_ext.integration": 0, "pyserini_ext.integration.encode": 2,
    "pyserini_ext.integration.encoders": 3,
    "pyserini_ext.integration.prebuilt": 4, "pyserini_ext.integration.search_lucene": 4,
    "pyserini_ext.integration.search_faiss": 4, "pyserini_ext.integration.server_models": 4,
    "pyserini_ext.integration.server_controller": 5, "pyserini_ext.integration.server_routes": 5,
    "pyserini_ext.repro": 6,  # the report's harness: runs commands, imports no cli
}
# (importer, imported) pairs still waiting for another change; each entry names it
PENDING: set[tuple[str, str]] = set()
# experiments/ (one folder per decision) sits beside the product: nothing that ships or checks it may use it
EXPERIMENTS = ROOT / "experiments"
PRODUCT = ("pyserini_ext", "java_bridge", "tests", "bench", "scripts")
EXPERIMENTS_PATH = re.compile(r"(?<![\w.-])experiments([/\\]|$)")


def stage(module: str) -> int | None:
    """The stage of the longest STAGES prefix of `module`; None for modules outside our packages."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in STAGES:
            return STAGES[".".join(parts[:end])]
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pyserini_ext import registry`, `from pyserini_ext.integration import encode`: the stage is the
            # name's where the package's modules have stages of their own
            if any(key.startswith(f"{node.module}.") for key in STAGES):
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                names.add(node.module)
    return names


def backward_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted([*(ROOT / "pyserini_ext").rglob("*.py"), *(ROOT / "java_bridge").rglob("*.py")]):
        importer = module_name(path)
        for imported in imported_modules(path):
            target = stage(imported)
            if target is not None and target > stage(importer):
                found.add((importer, imported))
    return found


def test_no_module_imports_a_later_stage():
    assert backward_imports() - PENDING == set()


def import_graph(root: Path = ROOT, tops: tuple[str, ...] = ("pyserini_ext", "java_bridge")) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (every `import`, lazy ones included; `from a import b` is the
    module a.b where that is one, else a; relative imports resolved). A package's `__init__` counts as the package."""
    files = {}
    for top in tops:
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names)
        graph[module] = {name for name in found if name in files and name != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every circle is in one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = [stack.pop()]
            while component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert len(graph) > 50 and "pyserini_ext.models.folder" in graph["pyserini_ext.models.aggretriever.model"]
    assert circles(graph) == []


def test_encoders_know_nothing_of_pyserini():
    """encode/ runs on torch / ONNX Runtime alone: its modules import no Pyserini module, and nothing they or
    models/ reach, through our other modules, imports Pyserini's encoder classes (`pyserini.encode`: our subclasses
    of them are integration/encoders.py) or integration/; nor does an index builder. (DeepCT's word analysis in
    models/ uses Lucene's analyzers through `pyserini.analysis`, as the index does.)"""
    graph = import_graph()
    reached = {m for m in graph if m.startswith(("pyserini_ext.encode", "pyserini_ext.models"))}
    frontier = set(reached)
    while frontier:
        frontier = {t for m in frontier for t in graph[m]} - reached
        reached |= frontier
    assert "pyserini_ext.data.text" in reached and not any(m.startswith("pyserini_ext.integration") for m in reached)
    imports = {m: imported_modules(module_path(m)) for m in reached | {m for m in graph if ".index" in m}}
    assert [(m, n) for m, names in imports.items() for n in names if n.split(".")[0] == "pyserini"
            and (m.startswith("pyserini_ext.encode") or n.startswith("pyserini.encode"))] == []


def module_path(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_the_circle_check_sees_lazy_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub import b\n")  # a package importing its module
    (package / "a.py").write_text("import json\ndef f():\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("from . import c\n")
    (package / "sub" / "c.py").write_text("X = 1\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.sub": {"pkg.sub.b"}, "pkg.a": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.sub.c"},
                     "pkg.sub.c": set()}
    assert circles(graph) == []
    (package / "sub" / "c.py").write_text("def g():\n    from ..a import f\n")  # lazy, relative: a circle
    assert circles(import_graph(tmp_path, ("pkg",))) == [["pkg.a", "pkg.sub.b", "pkg.sub.c"]]


def test_the_check_sees_lazy_and_from_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from pyserini_ext.search import lucene\n    import pyserini_ext.cli.data\n"
                      "from pyserini_ext import evaluation\n")
    assert sorted(imported_modules(source)) == ["pyserini_ext.cli.data", "pyserini_ext.evaluation",
                                                "pyserini_ext.search"]
    assert [stage(m) for m in sorted(imported_modules(source))] == [7, 6, 5]
    assert stage("pyserini_ext.models.deepct_terms") == 2 and stage("torch") is None
    source.write_text("from pyserini_ext.integration import arguments, prebuilt\n")
    assert sorted(stage(m) for m in imported_modules(source)) == [0, 4]  # integration's modules have own stages


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the module, class and function docstring nodes of `tree` (prose may name experiments/)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def uses_of_experiments(path: Path, module_names: set[str]) -> list[str]:
    """What `path` takes from experiments/: imports of its modules, and path literals naming the folder."""
    if path.suffix != ".py":
        code = [line.split("#")[0] for line in path.read_text().splitlines()]  # shell: comments are prose
        return [f"{path.name}: names experiments/"] if any(EXPERIMENTS_PATH.search(line) for line in code) else []
    tree = ast.parse(path.read_text(), str(path))
    uses = [f"{path.name}: imports {name}" for name in imported_modules(path) if name.split(".")[0] in module_names]
    prose = docstrings(tree)
    uses += [f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
             and EXPERIMENTS_PATH.search(node.value)]
    return uses


def test_nothing_that_ships_or_checks_imports_experiments():
    module_names = {"experiments", *(p.stem for p in EXPERIMENTS.rglob("*.py"))}
    files = [p for top in PRODUCT for p in sorted((ROOT / top).rglob("*")) if p.suffix in (".py", ".sh")
             and p.resolve() != Path(__file__).resolve()]
    assert len(files) > 50 and "devsets" in module_names
    assert [use for p in files for use in uses_of_experiments(p, module_names)] == []


def test_the_experiments_check_sees_imports_and_paths(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""Chosen in experiments/teacher-weights."""\nimport sys\nfrom devsets import rerank_ndcg\n'
                      'sys.path.insert(0, "experiments/aligner-recipe")\nx = "experimental"\n')
    assert uses_of_experiments(source, {"devsets"}) == ["m.py: imports devsets",
                                                        "m.py:4: 'experiments/aligner-recipe'"]
    script = tmp_path / "run.sh"
    script.write_text("# as chosen in experiments/aligner-recipe\n")
    assert uses_of_experiments(script, set()) == []
    script.write_text("python experiments/aligner-recipe/dev_rerank.py\n")
    assert uses_of_experiments(script, set()) == ["run.sh: names experiments/"]

"""The stage order of the package, checked on the source: no module imports a later stage.

data -> models -> encode -> index -> search -> train / evaluation -> cli (and demo). `java_bridge` and `registry`
are the foundation (they import no stage statically: registry names encoders as strings); `_startup` is an entry
point like the CLI (the .pth hook; its post-import hooks register the prebuilt catalogues from index/).
Every `import` counts, also those inside functions, so a lazy import cannot hide a backwards dependency.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = {
    "java_bridge": 0, "pyserini_ext": 0, "pyserini_ext._startup": 7, "pyserini_ext.registry": 0,
    "pyserini_ext.data": 1, "pyserini_ext.models": 2, "pyserini_ext.encode": 3, "pyserini_ext.index": 4,
    "pyserini_ext.search": 5, "pyserini_ext.train": 6, "pyserini_ext.evaluation": 6, "pyserini_ext.cli": 7,
    "pyserini_ext.demo": 7,
}
# (importer, imported) pairs still waiting for another change; each entry names it
PENDING: set[tuple[str, str]] = set()


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
            if node.module == "pyserini_ext":  # `from pyserini_ext import registry`: the stage is the name's
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


def test_the_check_sees_lazy_and_from_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from pyserini_ext.search import lucene\n    import pyserini_ext.cli.data\n"
                      "from pyserini_ext import evaluation\n")
    assert sorted(imported_modules(source)) == ["pyserini_ext.cli.data", "pyserini_ext.evaluation",
                                                "pyserini_ext.search"]
    assert [stage(m) for m in sorted(imported_modules(source))] == [7, 6, 5]
    assert stage("pyserini_ext.models.deepct_terms") == 2 and stage("torch") is None

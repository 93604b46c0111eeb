"""pyserini_ext/integration/: every change to Pyserini goes through its patch helper, is recorded, is made once, and
is made nowhere else."""
from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

from pyserini_ext.integration import PATCHED_MODULES, patch

ROOT = Path(__file__).resolve().parents[1]


def test_every_patch_is_recorded_and_installing_again_changes_nothing():
    import pyserini.encode as encode
    import pyserini.server.rest.app  # noqa: F401  (the servers' modules: every module of PATCHED_MODULES imported)
    import pyserini.setup
    import pyserini.util
    from pyserini.search.faiss import FaissSearcher
    from pyserini.search.lucene import LuceneImpactSearcher

    replaced = {k for k, how in patch.INSTALLED.items() if how == "replaced"}
    assert {"pyserini.setup.configure_classpath", "pyserini.encode.AutoDocumentEncoder",
            "pyserini.encode.AutoQueryEncoder", "pyserini.util.download_prebuilt_index",
            "pyserini.util.download_encoded_queries", "argparse._ActionsContainer.add_argument",
            "argparse.ArgumentParser.parse_known_args",
            "pyserini.search.lucene._impact_searcher.LuceneImpactSearcher._init_query_encoder_from_str",
            "pyserini.search.lucene._impact_searcher.LuceneImpactSearcher.from_prebuilt_index",
            "pyserini.search.faiss._searcher.FaissSearcher.from_prebuilt_index",
            "pyserini.encode.query_encoder_class_map['tct_colbert']"} <= replaced
    assert {k.split(".")[0] for k in patch.INSTALLED} <= {"import pyserini", "pyserini", "argparse"}
    assert "pyserini.encode.document_encoder_class_map['deepct']" in patch.INSTALLED
    assert {f"import {m}" for m in PATCHED_MODULES} <= set(patch.INSTALLED)

    def current():
        return [pyserini.setup.configure_classpath, encode.AutoQueryEncoder,
                encode.query_encoder_class_map["tct_colbert"], pyserini.util.download_prebuilt_index,
                argparse.ArgumentParser.parse_known_args, FaissSearcher.__dict__["from_prebuilt_index"],
                LuceneImpactSearcher.__dict__["from_prebuilt_index"],
                LuceneImpactSearcher.__dict__["_init_query_encoder_from_str"]]

    before, recorded = current(), dict(patch.INSTALLED)
    for module_name, ours in PATCHED_MODULES.items():
        importlib.import_module(ours).install(sys.modules[module_name])
    assert all(a is b for a, b in zip(current(), before, strict=True)) and patch.INSTALLED == recorded
    assert encode.AutoQueryEncoder.__mro__[1].__module__.startswith("pyserini.encode")  # subclassed once


def pyserini_patch_sites(path: Path) -> list[int]:
    """Lines that assign to (or setattr on) names imported from Pyserini, in one source file."""
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "pyserini"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pyserini":
            names |= {a.asname or a.name for a in node.names}
    sites = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = node.args[:1]
        for target in targets:
            root = target
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if (root is not target or isinstance(node, ast.Call)) and isinstance(root, ast.Name) and root.id in names:
                sites.append(node.lineno)
    return sorted(sites)


def test_nothing_outside_integration_patches_pyserini(tmp_path):
    outside = [p for p in [*(ROOT / "pyserini_ext").rglob("*.py"), *(ROOT / "java_bridge").rglob("*.py")]
               if "integration" not in p.relative_to(ROOT).parts]
    assert {str(p.relative_to(ROOT)): pyserini_patch_sites(p) for p in outside if pyserini_patch_sites(p)} == {}
    assert [str(p.relative_to(ROOT)) for p in outside if patch.MARK in p.read_text()] == []
    probe = tmp_path / "probe.py"  # the check itself sees a patch
    probe.write_text("import pyserini.util as u\nfrom pyserini.encode import query_encoder_class_map as m\n"
                     "u.download_prebuilt_index = None\nm['x'] = 1\nsetattr(u, 'y', 2)\nv = u.x\n")
    assert pyserini_patch_sites(probe) == [3, 4, 5]

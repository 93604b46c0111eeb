"""`pip wheel .` then `pip install` into a new venv: models, catalogue and start-up hook come with it, and the
commands work from there (bare names resolve inside the installed package, not this checkout).

The new venv gets the heavy dependencies (torch, Pyserini, ...) by a path entry to this environment's
site-packages, without processing that folder's .pth files: only the installed wheel provides pyserini_ext.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, REPO, cwd=out)
    return next(out.glob("pyserini_ext-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("venv") / "env"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # not this checkout
    run(sys.executable, "-m", "venv", "--without-pip", root, env=env)
    python = root / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel, env=env)
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", env=env).stdout.strip())
    (site / "zz_shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env["PATH"] = "/usr/bin:/bin"  # an unactivated venv
    return root, env


@pytest.mark.slow
def test_wheel_carries_models_catalogue_and_hook(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyserini_ext.pth" in names and "pyserini_ext/_startup.py" in names
    defaults = json.loads((REPO / "resources" / "models" / "defaults.json").read_text())
    assert "pyserini_ext/resources/models/defaults.json" in names
    for folder in set(defaults.values()):
        assert f"pyserini_ext/resources/models/{folder}/model.safetensors" in names
    if (REPO / "resources" / "prebuilt_indexes.json").is_file():
        assert "pyserini_ext/resources/prebuilt_indexes.json" in names


@pytest.mark.slow
def test_installed_wheel_resolves_names_inside_the_package(venv):
    root, env = venv
    code = ("import json, pyserini_ext; from pyserini_ext.models.folder import resolve_model; "
            "print(json.dumps({'package': pyserini_ext.__file__, "
            "'models': {n: resolve_model(n) for n in ('aggretriever', 'deepct', 'aligner')}}))")
    info = json.loads(run(root / "bin" / "python", "-c", code, env=env, cwd=root).stdout)
    assert info["package"].startswith(str(root))
    for path in info["models"].values():
        assert path.startswith(str(root)) and "/pyserini_ext/resources/models/" in path


@pytest.mark.slow
def test_installed_wheel_runs_pyserini_commands_with_bare_names(venv, scifact, tmp_path):
    """Unactivated venv: DeepCT through Pyserini's sparse route, then `python -m pyserini.search` (old entry
    point) and our `pyserini-ext` console script."""
    root, env = venv
    python = root / "bin" / "python"
    docs = {d: scifact.corpus[d] for d in sorted(scifact.corpus)[:20]}
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "docs.jsonl").write_text("".join(
        json.dumps({"id": d, "contents": f"{v['title']}\n{v['text']}", "title": v["title"], "text": v["text"]}) + "\n"
        for d, v in docs.items()))
    (tmp_path / "topics.tsv").write_text("q1\tinsulin resistance in obese mice\nq2\tstem cell differentiation\n")
    run(python, "-m", "pyserini.encode", "input", "--corpus", tmp_path / "c" / "docs.jsonl", "--fields", "title",
        "text", "output", "--embeddings", tmp_path / "vectors", "encoder", "--encoder", "deepct", "--fields",
        "title", "text", "--device", "cpu", env=env, cwd=tmp_path)
    run(python, "-m", "pyserini.index.lucene", "--collection", "JsonVectorCollection", "--input", tmp_path / "vectors",
        "--index", tmp_path / "impact", "--generator", "DefaultLuceneDocumentGenerator", "--impact", "--pretokenized",
        "--threads", "1", env=env, cwd=tmp_path)
    run(python, "-m", "pyserini.search", "--index", tmp_path / "impact", "--topics", tmp_path / "topics.tsv",
        "--output", tmp_path / "run.txt", "--impact", "--encoder", "deepct", "--hits", "5", env=env, cwd=tmp_path)
    lines = (tmp_path / "run.txt").read_text().splitlines()
    assert len(lines) >= 6 and {line.split()[0] for line in lines} == {"q1", "q2"}
    query = json.loads(run(root / "bin" / "pyserini-ext", "deepct", "query", "--model", "deepct",
                           "insulin resistance", env=env, cwd=tmp_path).stdout)
    assert set(query) == {"insulin", "resistance"} and all(w > 0 for w in query.values())

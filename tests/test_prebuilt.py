"""Packing a real Lucene index, fetching it back through a URL, and refusing corrupt or unknown ones."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.index.prebuilt import PrebuiltIndexError, download_prebuilt, md5sum, pack_index


@pytest.fixture(scope="module")
def lucene_index(tmp_path_factory, scifact):
    root = tmp_path_factory.mktemp("lucene")
    subprocess.run([sys.executable, "-m", "pyserini_ext.cli", "data", "export", str(scifact.root),
                    "--output", str(root / "export"), "--split", "test", "--no-download"], check=True,
                   capture_output=True)
    subset = root / "subset"
    subset.mkdir()
    lines = (root / "export" / "collection" / "docs.jsonl").read_text().splitlines()[:300]
    (subset / "docs.jsonl").write_text("\n".join(lines) + "\n")
    index = root / "index"
    return build_lucene_index(subset, index)


def _top_hits(index, query="cancer cells"):
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index))
    return [(h.docid, round(h.score, 4)) for h in searcher.search(query, k=5)]


def test_pack_then_download_gives_the_same_index(lucene_index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    catalogue = tmp_path / "catalogue.json"
    record = pack_index(lucene_index, "scifact-subset-bm25", tmp_path / "dist", description="test",
                        catalogue=catalogue)
    assert record["md5"] == md5sum(tmp_path / "dist" / "scifact-subset-bm25.tar.gz")
    assert json.loads(catalogue.read_text())["scifact-subset-bm25"]["size_bytes"] == record["size_bytes"]
    path = download_prebuilt("scifact-subset-bm25", catalogue)
    assert path == tmp_path / "cache" / "indexes" / f"scifact-subset-bm25.{record['md5']}"
    hits = _top_hits(path)
    assert len(hits) == 5 and hits == _top_hits(lucene_index)
    assert download_prebuilt("scifact-subset-bm25", catalogue) == path  # cached, no second fetch


def test_packing_is_reproducible(lucene_index, tmp_path):
    """The same index files give the same archive bytes (no timestamps or owners in it), so a rebuilt prebuilt
    index of a deterministic encoding keeps its catalogue md5."""
    copy = tmp_path / "copy"
    shutil.copytree(lucene_index, copy)
    for path in copy.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))  # other timestamps than the original's
    first = pack_index(lucene_index, "idx", tmp_path / "a")
    second = pack_index(copy, "idx", tmp_path / "b")
    assert first["md5"] == second["md5"] and first["size_bytes"] == second["size_bytes"]
    with tarfile.open(tmp_path / "a" / "idx.tar.gz") as tar:
        members = tar.getmembers()
    assert members[0].name == "idx" and {(m.mtime, m.uname) for m in members} == {(0, "")}
    assert sorted(m.name for m in members if m.isfile()) == sorted(
        f"idx/{p.relative_to(lucene_index)}" for p in Path(lucene_index).rglob("*") if p.is_file())


def test_packed_metadata_names_no_folder_of_the_packing_machine(lucene_index, tmp_path):
    """An index whose metadata names the model by an absolute path (as an index built from an absolute --model
    records it) is packed, in the archive and in the catalogue record, with a portable path."""
    from pyserini_ext.registry import resources_dir

    index = tmp_path / "index"
    shutil.copytree(lucene_index, index)
    shipped = resources_dir().resolve() / "models" / "aligner-minilm"
    for model, portable in ((shipped, "resources/models/aligner-minilm"), (tmp_path / "my-model", "my-model")):
        (index / "metadata.json").write_text(json.dumps({"format": "x", "model": {"path": str(model), "dim": 128}}))
        record = pack_index(index, "idx", tmp_path / "dist", kind="lucene")
        assert record["metadata"] == {"format": "x", "model": {"path": portable, "dim": 128}}
        with tarfile.open(tmp_path / "dist" / "idx.tar.gz") as tar:
            assert json.load(tar.extractfile("idx/metadata.json"))["model"]["path"] == portable
            assert len([m for m in tar.getmembers() if m.name == "idx/metadata.json"]) == 1
    assert json.loads((index / "metadata.json").read_text())["model"]["path"] == str(tmp_path / "my-model")


def test_corrupt_download_is_refused_and_leaves_nothing(lucene_index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    catalogue = tmp_path / "catalogue.json"
    pack_index(lucene_index, "idx", tmp_path / "dist", catalogue=catalogue)
    tarball = tmp_path / "dist" / "idx.tar.gz"
    tarball.write_bytes(tarball.read_bytes()[:-100])
    with pytest.raises(PrebuiltIndexError, match="expected .* bytes with md5"):
        download_prebuilt("idx", catalogue)
    assert [p.name for p in (tmp_path / "cache" / "indexes").iterdir()] == []


def test_unknown_name_lists_the_catalogue(tmp_path):
    catalogue = tmp_path / "c.json"
    catalogue.write_text(json.dumps({"a": {"urls": [], "md5": "x"}}))
    with pytest.raises(PrebuiltIndexError, match="unknown prebuilt index 'b'; known: a"):
        download_prebuilt("b", catalogue)


def test_all_mirrors_failing_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    catalogue = tmp_path / "c.json"
    catalogue.write_text(json.dumps({"a": {"urls": [(tmp_path / "missing.tar.gz").as_uri()], "md5": "0"}}))
    with pytest.raises(PrebuiltIndexError, match="could not fetch prebuilt index 'a'"):
        download_prebuilt("a", catalogue)

"""Prebuilt indexes by name through Pyserini's own loaders, served from a local HTTP server on 127.0.0.1.

Real small indexes (BM25, DeepCT, Aggretriever Faiss, AligneR) are built from 40 SciFact passages, packed into
a catalogue whose URLs point at the server, and opened by name: `LuceneSearcher.from_prebuilt_index`,
`LuceneImpactSearcher.from_prebuilt_index`, `python -m pyserini.search.lucene|faiss|hybrid --index NAME` and
`pyserini-ext aligner search --index NAME`. Pyserini's own `msmarco-v1-passage.aggretriever-distilbert` and its
encoded queries are served as small stand-ins (same file names and layout) through `$PYSERINI_EXT_MIRROR`.
"""
from __future__ import annotations

import http.server
import json
import os
import runpy
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from unittest import mock

import faiss
import numpy as np
import pandas as pd
import pytest

from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index import prebuilt
from pyserini_ext.integration import prebuilt as prebuilt_integration
from pyserini_ext.models.folder import resolve_model

pytestmark = pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
TOPICS = {"q1": "insulin resistance in obese mice", "q2": "stem cell differentiation", "q3": "cancer risk"}
PYSERINI_AGG = "msmarco-v1-passage.aggretriever-distilbert"
PYSERINI_AGG_QUERIES = "aggretriever-distilbert-msmarco-passage-dev-subset"


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the folder; `/cut/<file>` announces the whole file but sends half of it, then hangs up."""

    def do_GET(self):
        if self.path.startswith("/cut/"):
            data = (Path(self.directory) / self.path.removeprefix("/cut/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            lambda *a, **k: Handler(*a, directory=str(root), **k))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def run_module(module: str, argv: list) -> None:
    with mock.patch.object(sys, "argv", [module, *map(str, argv)]):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            assert e.code in (None, 0), f"{module} exited with {e.code}"


def faiss_index(encoder, docs: dict, folder: Path) -> Path:
    """Pyserini's Faiss layout (`index` + `docid`), vectors from our Aggretriever document encoder."""
    folder.mkdir(parents=True)
    vectors = encoder.encode([d["text"] for d in docs.values()], titles=[d["title"] for d in docs.values()],
                             max_length=128)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.write_index(index, str(folder / "index"))
    (folder / "docid").write_text("".join(f"{d}\n" for d in docs))
    return folder


@pytest.fixture(scope="module")
def catalogue(scifact, server, tmp_path_factory, one_thread):
    """Four real indexes packed into a catalogue served by the local server; the SciFact passages they hold."""
    from pyserini_ext.cli.aligner import main as aligner_main
    from pyserini_ext.data import write_json_collection
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
    from pyserini_ext.index.deepct import build_deepct_index
    from pyserini_ext.models.deepct import DeepCTModel

    served, url = server
    root = tmp_path_factory.mktemp("built")
    docs = {d: scifact.corpus[d] for d in sorted(scifact.corpus)[:40]}
    write_json_collection(docs, root / "collection")
    run_module("pyserini.index.lucene", ["--collection", "JsonCollection", "--input", root / "collection",
                                         "--index", root / "bm25", "--generator", "DefaultLuceneDocumentGenerator",
                                         "--storeRaw", "--threads", 1])
    build_deepct_index(DeepCTModel.from_pretrained(resolve_model("deepct")), docs, root / "deepct")
    faiss_index(AggretrieverDocumentEncoder(resolve_model("aggretriever")), docs, root / "agg")
    assert aligner_main(["index", "--corpus", str(root / "collection"), "--model", "aligner",
                         "--output", str(root / "aligner")]) == 0
    path = root / "catalogue.json"
    for name, index, model in [("scifact-mini.bm25", "bm25", None), ("scifact-mini.deepct", "deepct", "deepct"),
                               ("scifact-mini.aggretriever", "agg", "aggretriever"),
                               ("scifact-mini.aligner", "aligner", "aligner")]:
        prebuilt.pack_index(root / index, name, served, urls=[f"{url}/{name}.tar.gz"], catalogue=path, model=model,
                            texts="scifact-mini.bm25" if index == "agg" else None)
    return path, root, docs


@pytest.fixture
def registered(catalogue, tmp_path, monkeypatch):
    """The catalogue registered with Pyserini in this process, as the start-up hook does in a fresh one."""
    import pyserini.util

    monkeypatch.setenv(prebuilt.CATALOGUE_ENV, str(catalogue[0]))
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(prebuilt.MIRROR_ENV, raising=False)
    saved = {d: dict(getattr(pyserini.util, d)) for d in ("TF_INDEX_INFO", "IMPACT_INDEX_INFO", "FAISS_INDEX_INFO")}
    prebuilt_integration.install(pyserini.util)
    yield catalogue
    for dict_name, entries in saved.items():  # Pyserini's dicts as they were
        getattr(pyserini.util, dict_name).clear()
        getattr(pyserini.util, dict_name).update(entries)


def hits(searcher, k: int = 5) -> dict[str, list[tuple[str, float]]]:
    return {q: [(h.docid, round(float(h.score), 4)) for h in searcher.search(t, k)] for q, t in TOPICS.items()}


def test_catalogue_records_kind_stats_and_model(catalogue):
    entries = json.loads(catalogue[0].read_text())
    assert {n: e["kind"] for n, e in entries.items()} == {
        "scifact-mini.bm25": "lucene", "scifact-mini.deepct": "deepct", "scifact-mini.aggretriever": "faiss",
        "scifact-mini.aligner": "aligner"}
    assert entries["scifact-mini.bm25"]["stats"]["documents"] == 40
    assert entries["scifact-mini.deepct"]["model"] == prebuilt.model_fingerprint(resolve_model("deepct"))
    assert "model" not in entries["scifact-mini.bm25"]


def test_lucene_and_impact_prebuilt_by_name_through_pyserini(registered, tmp_path):
    from pyserini.search.lucene import LuceneImpactSearcher, LuceneSearcher

    from pyserini_ext.integration.encoders import DeepCTQueryEncoder

    _, root, _ = registered
    bm25 = LuceneSearcher.from_prebuilt_index("scifact-mini.bm25")
    assert bm25 is not None and hits(bm25) == hits(LuceneSearcher(str(root / "bm25")))
    assert [p.name.split(".")[0] for p in (tmp_path / "cache" / "indexes").iterdir()] == ["scifact-mini"]
    impact = LuceneImpactSearcher.from_prebuilt_index("scifact-mini.deepct", "deepct")
    expected = hits(LuceneImpactSearcher(str(root / "deepct"), DeepCTQueryEncoder(resolve_model("deepct"))))
    assert hits(impact) == expected and all(expected.values())
    bm25_on_deepct = LuceneSearcher.from_prebuilt_index("scifact-mini.deepct")  # true-length index: BM25 works too
    assert hits(bm25_on_deepct) == hits(LuceneSearcher(str(root / "deepct")))


def test_searching_with_another_model_version_is_an_error(registered, tmp_path):
    from pyserini.search.lucene import LuceneImpactSearcher

    other = tmp_path / "deepct-retrained"
    shutil.copytree(resolve_model("deepct"), other)
    weights = other / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(prebuilt.PrebuiltIndexError, match="built by deepct-splade-tiny .* searched with"):
        LuceneImpactSearcher.from_prebuilt_index("scifact-mini.deepct", str(other))
    with pytest.raises(prebuilt.PrebuiltIndexError, match="not one of our models"):
        LuceneImpactSearcher.from_prebuilt_index("scifact-mini.deepct", "castorini/unicoil-msmarco-passage")


def test_faiss_and_hybrid_cli_by_prebuilt_name_with_bare_encoder(registered, tmp_path):
    from pyserini.search.faiss import FaissSearcher

    from pyserini_ext.integration.encoders import AggretrieverQueryEncoder

    _, root, _ = registered
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    dense, hybrid = tmp_path / "dense.txt", tmp_path / "hybrid.txt"
    run_module("pyserini.search.faiss", ["--index", "scifact-mini.aggretriever", "--encoder", "aggretriever",
                                         "--topics", topics, "--output", dense, "--hits", 5])
    run_module("pyserini.search.hybrid", ["dense", "--index", "scifact-mini.aggretriever", "--encoder",
                                          "aggretriever", "sparse", "--index", "scifact-mini.bm25",
                                          "fusion", "--alpha", "0.5", "run", "--topics", topics,
                                          "--output", hybrid, "--hits", 5])
    local = FaissSearcher(str(root / "agg"), AggretrieverQueryEncoder(resolve_model("aggretriever")))
    run = read_trec_run(dense)
    for qid, expected in hits(local).items():
        assert [d for d, _ in run[qid]] == [d for d, _ in expected]
    assert all(len(v) == 5 for v in read_trec_run(hybrid).values())


def test_aligner_search_by_prebuilt_name(registered, tmp_path):
    from pyserini_ext.cli.aligner import main as aligner_main

    _, root, _ = registered
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    by_name, local = tmp_path / "by-name.txt", tmp_path / "local.txt"
    for index, out in (("scifact-mini.aligner", by_name), (root / "aligner", local)):
        assert aligner_main(["search", "--index", str(index), "--model", "aligner", "--topics", str(topics),
                             "--output", str(out), "--hits", "5"]) == 0
    assert read_trec_run(by_name) == read_trec_run(local) and len(read_trec_run(local)) == 3


def test_md5_mismatch_and_interrupted_downloads_leave_nothing_and_fall_back(catalogue, server, tmp_path,
                                                                            monkeypatch):
    from pyserini.search.lucene import LuceneSearcher

    served, url = server
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    entries = json.loads(catalogue[0].read_text())
    record = entries["scifact-mini.bm25"]
    bad = dict(record, md5="0" * 32)
    cut = dict(record, urls=[f"{url}/cut/{record['filename']}"])
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"bad": bad, "cut": cut, "fallback": dict(record, urls=cut["urls"] + record["urls"])}))
    with pytest.raises(prebuilt.PrebuiltIndexError, match="expected .* bytes with md5 0000"):
        prebuilt.download_prebuilt("bad", path)
    with pytest.raises(prebuilt.PrebuiltIndexError, match="IncompleteRead"):
        prebuilt.download_prebuilt("cut", path)
    assert list((tmp_path / "cache" / "indexes").iterdir()) == []
    got = prebuilt.download_prebuilt("fallback", path)  # the cut mirror fails, the next one serves it
    assert got.name == f"scifact-mini.bm25.{record['md5']}"
    assert hits(LuceneSearcher(str(got))) == hits(LuceneSearcher(str(catalogue[1] / "bm25")))


def test_pyserini_aggretriever_index_and_encoded_queries_through_a_mirror(registered, server, tmp_path, monkeypatch):
    """Stand-ins with the names and layout of Pyserini's own Aggretriever index and pre-encoded queries."""
    import pyserini.util
    from pyserini.encode import QueryEncoder
    from pyserini.search.faiss import FaissSearcher

    from pyserini_ext.integration.encoders import AggretrieverQueryEncoder

    served, url = server
    _, root, docs = registered
    mirror = served / "mirror"
    mirror.mkdir(exist_ok=True)
    index_record, query_record = pyserini.util.FAISS_INDEX_INFO[PYSERINI_AGG], pyserini.util.QUERY_INFO[
        PYSERINI_AGG_QUERIES]
    index_file = index_record["filename"]
    with tarfile.open(mirror / index_file, "w:gz") as tar:
        tar.add(root / "agg", arcname=index_file.removesuffix(".tar.gz"))
    encoder = AggretrieverQueryEncoder(resolve_model("aggretriever"))
    query_dir = tmp_path / "encoded"
    query_dir.mkdir()
    pd.DataFrame({"text": list(TOPICS.values()),
                  "embedding": [encoder.encode(t) for t in TOPICS.values()]}).to_pickle(query_dir / "embedding.pkl")
    query_file = query_record["urls"][0].rsplit("/", 1)[-1]
    with tarfile.open(mirror / query_file, "w:gz") as tar:
        tar.add(query_dir, arcname=query_file.removesuffix(".tar.gz"))
    # the stand-in's checksums, and its passages in our small BM25 index instead of msmarco-v1-passage
    monkeypatch.setitem(pyserini.util.FAISS_INDEX_INFO, PYSERINI_AGG, {
        **index_record, "urls": ["http://127.0.0.1:9/unreachable.tar.gz"], "md5": prebuilt.md5sum(mirror / index_file),
        "size compressed (bytes)": (mirror / index_file).stat().st_size, "texts": "scifact-mini.bm25"})
    query_md5 = prebuilt.md5sum(mirror / query_file)
    monkeypatch.setitem(pyserini.util.QUERY_INFO, PYSERINI_AGG_QUERIES, {
        **query_record, "md5": query_md5, "size (bytes)": (mirror / query_file).stat().st_size})
    monkeypatch.setenv(prebuilt.MIRROR_ENV, f"http://127.0.0.1:9/down {url}/mirror")

    queries = QueryEncoder.load_encoded_queries(PYSERINI_AGG_QUERIES)
    cached = tmp_path / "cache" / "queries" / f"{query_file.removesuffix('.tar.gz')}.{query_md5}"
    ours = AggretrieverQueryEncoder(encoded_query_dir=str(cached))
    by_name = FaissSearcher.from_prebuilt_index(PYSERINI_AGG, queries)
    with_ours = FaissSearcher.from_prebuilt_index(PYSERINI_AGG, ours)
    local = FaissSearcher(str(root / "agg"), encoder)
    expected = hits(local)
    assert hits(by_name) == expected and hits(with_ours) == expected and all(expected.values())
    first = expected["q1"][0][0]
    assert json.loads(by_name.doc(first).raw())["id"] == first and first in docs


def test_fresh_interpreter_finds_a_users_catalogue_by_name(catalogue, tmp_path):
    """`pyserini-ext prebuilt pack --catalogue C` then `PYSERINI_EXT_CATALOGUE=C python -m pyserini.search.lucene
    --index NAME`: registration at start-up, download from the local server, search."""
    from pyserini.search.lucene import LuceneSearcher

    _, root, _ = catalogue
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    run = tmp_path / "run.txt"
    env = {**os.environ, prebuilt.CATALOGUE_ENV: str(catalogue[0]),
           "PYSERINI_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "pyserini.search.lucene", "--index", "scifact-mini.bm25",
                           "--topics", str(topics), "--output", str(run), "--bm25", "--hits", "5"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = hits(LuceneSearcher(str(root / "bm25")))
    assert {q: [(d, round(s, 4)) for d, s in v] for q, v in read_trec_run(run).items()} == expected


def test_pyserini_names_fail_as_pyserini_expects_when_no_mirror_serves_them(tmp_path, monkeypatch):
    """Pyserini's loaders catch ValueError (a Faiss index whose passage index is unavailable still searches)."""
    import pyserini.util

    monkeypatch.setitem(pyserini.util.FAISS_INDEX_INFO, PYSERINI_AGG, {
        **pyserini.util.FAISS_INDEX_INFO[PYSERINI_AGG], "urls": ["http://127.0.0.1:9/unreachable.tar.gz"]})
    monkeypatch.setenv(prebuilt.MIRROR_ENV, "http://127.0.0.1:9/down")
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    prebuilt_integration.install(pyserini.util)
    with pytest.raises(ValueError, match=r"(?s)could not fetch prebuilt index .*127.0.0.1:9/down/faiss-flat"):
        pyserini.util.download_prebuilt_index(PYSERINI_AGG)

"""Pyserini's own REST and MCP servers serving our three models by prebuilt name (issue 58).

The small prebuilt indexes of tests/test_prebuilt_pyserini.py (40 SciFact passages: BM25, DeepCT, Aggretriever
Faiss, AligneR) are packed into a catalogue served by a local HTTP server; the REST app runs in uvicorn on
127.0.0.1 (a free port) and the MCP tools are called through fastmcp's in-process Client. Both answer with the
hits of Pyserini's commands (`pyserini.search.faiss` / `.lucene`, `pyserini-ext aligner search`) on the same
names: same docids, scores within 1e-4.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import faiss
import numpy as np
import pytest
import requests
from test_prebuilt_pyserini import catalogue, run_module, server  # noqa: F401  (module-scoped fixtures reused)

from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index import prebuilt

pytestmark = pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
TOPICS = {"q1": "insulin resistance in obese mice", "q2": "stem cell differentiation", "q3": "cancer risk",
          "q4": "vitamin D deficiency and bone density"}
OURS = {"scifact-mini.aggretriever": "faiss", "scifact-mini.deepct": "tf", "scifact-mini.aligner": "aligner"}


def interface_addresses() -> set[str]:
    """The IPv4 addresses of this machine's network interfaces (Linux: SIOCGIFADDR on each)."""
    import fcntl
    import struct

    found = set()
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:  # an interface without an IPv4 address
                continue
            found.add(socket.inet_ntoa(packed[20:24]))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(catalogue, server, tmp_path_factory):  # noqa: F811
    """Our catalogue plus an AligneR record with texts and a Faiss index that fails inside its searcher,
    registered with Pyserini; the REST app running in uvicorn; the controller both servers share."""
    import pyserini.util

    from pyserini_ext.integration import prebuilt as prebuilt_integration

    path, root, docs = catalogue
    served_dir, url = server
    broken = root / "broken"  # a Faiss index of 8-dim vectors: opens, then fails inside the searcher
    broken.mkdir(exist_ok=True)
    index = faiss.IndexFlatIP(8)
    index.add(np.random.default_rng(0).normal(size=(len(docs), 8)).astype(np.float32))
    faiss.write_index(index, str(broken / "index"))
    (broken / "docid").write_text("".join(f"{d}\n" for d in docs))
    ours = tmp_path_factory.mktemp("catalogue") / "catalogue.json"
    ours.write_text(path.read_text())
    for name, index, texts in (("scifact-mini.aligner-texts", "aligner", "scifact-mini.bm25"),
                               ("scifact-mini.broken", "broken", None)):
        prebuilt.pack_index(root / index, name, served_dir, urls=[f"{url}/{name}.tar.gz"], catalogue=ours,
                            kind="aligner" if index == "aligner" else "faiss",
                            model="aligner" if index == "aligner" else "aggretriever", texts=texts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(prebuilt.CATALOGUE_ENV, str(ours))
        mp.setenv("PYSERINI_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.delenv(prebuilt.MIRROR_ENV, raising=False)
        saved = {d: dict(getattr(pyserini.util, d)) for d in ("TF_INDEX_INFO", "IMPACT_INDEX_INFO",
                                                             "FAISS_INDEX_INFO")}
        prebuilt_integration.install(pyserini.util)
        import uvicorn
        from pyserini.server.rest.app import app
        from pyserini.server.search_controller import get_controller

        port = free_port()
        uvicorn_server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=uvicorn_server.run, daemon=True)
        thread.start()
        deadline = time.time() + 60
        while not uvicorn_server.started and time.time() < deadline:
            time.sleep(0.05)
        assert uvicorn_server.started
        yield {"url": f"http://127.0.0.1:{port}/v1", "root": root, "docs": docs, "controller": get_controller()}
        uvicorn_server.should_exit = True
        thread.join(10)
        for name in [n for n in get_controller().indexes if n.startswith("scifact-mini")]:
            del get_controller().indexes[name]
        for dict_name, entries in saved.items():  # Pyserini's dicts as they were
            getattr(pyserini.util, dict_name).clear()
            getattr(pyserini.util, dict_name).update(entries)


@pytest.fixture(scope="module")
def cli_runs(served, tmp_path_factory):
    """Top-10 of Pyserini's commands (and ours for AligneR) on the same prebuilt names: qid -> [(docid, score)]."""
    from pyserini_ext.cli.aligner import main as aligner_main

    out = tmp_path_factory.mktemp("runs")
    topics = out / "topics.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    runs = {name: out / f"{name}.txt" for name in [*OURS, "scifact-mini.bm25"]}
    run_module("pyserini.search.faiss", ["--index", "scifact-mini.aggretriever", "--encoder", "aggretriever",
                                         "--topics", topics, "--output", runs["scifact-mini.aggretriever"],
                                         "--hits", 10])
    for name in ("scifact-mini.deepct", "scifact-mini.bm25"):
        run_module("pyserini.search.lucene", ["--index", name, "--bm25", "--topics", topics, "--output",
                                              runs[name], "--hits", 10])
    assert aligner_main(["search", "--index", "scifact-mini.aligner", "--topics", str(topics), "--output",
                         str(runs["scifact-mini.aligner"]), "--hits", "10"]) == 0
    return {name: read_trec_run(path) for name, path in runs.items()}


def rest_search(served, index: str, query, **params) -> requests.Response:
    return requests.post(f"{served['url']}/indexes/{index}/search", json={"query": query, **params}, timeout=120)


def assert_same_hits(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [d for d, _ in got] == [d for d, _ in expected]
    assert np.allclose([s for _, s in got], [s for _, s in expected], atol=1e-4, rtol=0)


def mcp_call(controller, calls: list[tuple[str, dict]]):
    """Results of MCP tool calls on Pyserini's own MCP tools (as `python -m pyserini.server.mcp` registers them)."""
    from fastmcp import Client, FastMCP
    from pyserini.server.mcp.tools import register_tools

    mcp = FastMCP("mcpyserini")
    register_tools(mcp, controller)

    async def run():
        async with Client(mcp) as client:
            return [await client.call_tool(name, args, raise_on_error=False) for name, args in calls]

    return asyncio.run(run())


def mcp_items(result) -> list:
    """A tool's returned list: one JSON text block, or one block per item."""
    items = []
    for block in result.content:
        text = getattr(block, "text", "")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = text
        items.extend(parsed if isinstance(parsed, list) else [parsed])
    return items


def mcp_hits(result) -> list[tuple[str, float]]:
    """(docid, score) from the search tool's "DocID: d | Score: s" lines."""
    found = [re.fullmatch(r"DocID: (\S+) \| Score: (\S+)", item) for item in mcp_items(result)
             if isinstance(item, str)]
    return [(m.group(1), float(m.group(2))) for m in found if m]


def test_rest_search_by_name_equals_the_cli_top_10(served, cli_runs):
    for name, index_type in [*OURS.items(), ("scifact-mini.bm25", "tf")]:
        for qid, text in TOPICS.items():
            response = rest_search(served, name, text, hits=10, qid=qid)
            assert response.status_code == 200, response.text
            body = response.json()
            got = [(c["docid"], c["score"]) for c in body["candidates"]]
            assert_same_hits(got, cli_runs[name][qid])
            assert body["query"] == {"qid": qid, "query_txt": text, "query_img_path": None,
                                     "query_modality": "text", "fp16": False}
        assert served["controller"].indexes[name].index_type == index_type
    # the catalogue's model was used without an encoder argument; an explicit one (the same model) still works
    assert served["controller"].indexes["scifact-mini.aggretriever"].encoder == "aggretriever-minilm-fullwidth"
    response = rest_search(served, "scifact-mini.aggretriever", TOPICS["q1"], encoder="aggretriever")
    assert_same_hits([(c["docid"], c["score"]) for c in response.json()["candidates"]],
                     cli_runs["scifact-mini.aggretriever"]["q1"])


def test_rest_searches_run_on_the_controllers_search_thread(served, cli_runs, monkeypatch):
    """8 requests at once are answered concurrently, but the searcher runs on the controller's one search thread
    (server_controller.SearchThreads): not on FastAPI's pool threads, each of which grew its own malloc arena."""
    from concurrent.futures import ThreadPoolExecutor

    name = "scifact-mini.aggretriever"
    rest_search(served, name, TOPICS["q1"])  # opened
    searcher = served["controller"].indexes[name].searcher
    threads, original = [], searcher.search

    def search(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(searcher, "search", search)
    qids = [*TOPICS] * 2
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda qid: rest_search(served, name, TOPICS[qid], hits=10, qid=qid), qids))
    for qid, response in zip(qids, responses):
        assert response.status_code == 200, response.text
        assert_same_hits([(c["docid"], c["score"]) for c in response.json()["candidates"]], cli_runs[name][qid])
    assert len(threads) == len(qids) and set(threads) == {"pyserini-ext-search_0"}


def test_rest_documents_and_passages_of_our_indexes(served, cli_runs):
    docs = served["docs"]
    first = sorted(docs)[0]
    for name in ("scifact-mini.aggretriever", "scifact-mini.deepct", "scifact-mini.bm25",
                 "scifact-mini.aligner-texts"):
        response = requests.get(f"{served['url']}/indexes/{name}/documents/{first}", timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["id"] == first and docs[first]["text"][:40] in response.json()["contents"]
    hit = rest_search(served, "scifact-mini.aligner-texts", TOPICS["q2"], hits=3).json()["candidates"][0]
    assert docs[hit["docid"]]["text"][:40] in hit["document_txt"]
    # reading a document does not turn the dense index into its BM25 texts index (Pyserini's controller did)
    again = rest_search(served, "scifact-mini.aggretriever", TOPICS["q1"]).json()["candidates"]
    assert served["controller"].indexes["scifact-mini.aggretriever"].index_type == "faiss"
    assert type(served["controller"].indexes["scifact-mini.aggretriever"].searcher).__name__ == "FaissSearcher"
    assert_same_hits([(c["docid"], c["score"]) for c in again], cli_runs["scifact-mini.aggretriever"]["q1"])


def test_rest_bad_requests_are_4xx_with_one_line_and_failures_500(served):
    url = served["url"]
    checks = [
        (rest_search(served, "no-such-index", "stem cells"), 404, "unknown index 'no-such-index'"),
        (rest_search(served, "scifact-mini.bm25", ""), 400, "empty query"),
        (rest_search(served, "scifact-mini.bm25", "   "), 400, "empty query"),
        (rest_search(served, "scifact-mini.bm25", "cancer", hits=0), 400, "hits must be"),
        (rest_search(served, "scifact-mini.aggretriever", "cancer", hits=-3), 400, "hits must be"),
        (rest_search(served, "scifact-mini.aligner", "cancer", hits=10 ** 9), 400, "from 1 to 1000"),
        (requests.get(f"{url}/indexes/scifact-mini.bm25/documents/no-such-doc", timeout=60), 404,
         "document 'no-such-doc' not found"),
        (requests.get(f"{url}/indexes/scifact-mini.aligner/documents/x", timeout=60), 404, "no document texts"),
        (requests.get(f"{url}/indexes/no-such-index/documents/x", timeout=60), 404, "unknown index"),
        (requests.get(f"{url}/indexes/", params={"index_type": "nope"}, timeout=60), 400, "unknown index type"),
        (requests.get(f"{url}/indexes/no-such-index/status", timeout=60), 404, "unknown index"),
        (requests.get(f"{url}/indexes/no-such-index/settings", timeout=60), 404, "has not been opened"),
        # an M-BEIR index without the optional UniIR package: a 400 naming the package
        (rest_search(served, "m-beir-cirr_task7.clip-sf-large", "a red dress", instruction_config="i.yaml"),
         400, "uniir"),
        # the searcher fails (its docid list is cut short): a 500 with one line, and the server stays up
        (rest_search(served, "scifact-mini.broken", "cancer risk"), 500, "search in scifact-mini.broken failed"),
    ]
    for response, status, detail in checks:
        assert response.status_code == status, response.text
        message = response.json()["detail"]
        assert detail in message and "\n" not in message and "Traceback" not in message
    assert rest_search(served, "scifact-mini.bm25", "hits", hits="many").status_code == 422  # FastAPI's own
    assert rest_search(served, "scifact-mini.bm25", "cancer risk").status_code == 200


def test_rest_lists_status_and_settings_of_ours(served):
    url = served["url"]
    listed = {t: requests.get(f"{url}/indexes/", params={"index_type": t}, timeout=60).json()
              for t in ("aligner", "faiss", "tf", "impact")}
    assert {"scifact-mini.aligner", "beir-v1.0.0-scifact.aligner"} <= set(listed["aligner"])
    assert "scifact-mini.aggretriever" in listed["faiss"] and "scifact-mini.aligner" not in listed["faiss"]
    assert {"scifact-mini.deepct", "scifact-mini.bm25"} <= set(listed["tf"]) and "scifact-mini.deepct" in listed[
        "impact"]
    rest_search(served, "scifact-mini.aligner", "cancer")
    status = requests.get(f"{url}/indexes/scifact-mini.aligner/status", timeout=60).json()
    assert status["downloaded"] is True and int(status["size_bytes"]) > 0
    assert requests.get(f"{url}/indexes/beir-v1.0.0-scifact.aligner-tiny/status", timeout=60).json()[
        "downloaded"] is False
    settings = requests.get(f"{url}/indexes/scifact-mini.aligner/settings", timeout=60).json()
    assert settings["encoder"] == "aligner-minilm"


def test_mcp_tools_list_search_and_fuse_ours(served, cli_runs):
    controller = served["controller"]
    calls = [("list_indexes", {"index_type": "aligner"})]
    calls += [("search", {"query": {"query_txt": TOPICS["q1"]}, "index_name": name, "k": 10})
              for name in [*OURS, "scifact-mini.bm25"]]
    calls += [("search", {"query": {"query_txt": ""}, "index_name": "scifact-mini.bm25"}),
              ("search", {"query": {"query_txt": "x"}, "index_name": "no-such-index"}),
              ("get_document", {"docid": "no-such-doc", "index_name": "scifact-mini.bm25"})]
    listed, *results = mcp_call(controller, calls)
    assert "scifact-mini.aligner" in mcp_items(listed)
    searches, errors = results[:4], results[4:]
    for name, result in zip([*OURS, "scifact-mini.bm25"], searches):
        assert not result.is_error
        assert_same_hits(mcp_hits(result), cli_runs[name]["q1"])
    for result, detail in zip(errors, ("empty query", "unknown index 'no-such-index'", "not found")):
        assert result.is_error and detail in result.content[0].text
    # local index folders by path (the controller takes one; MCP passes it through)
    root = served["root"]
    by_path = mcp_call(controller, [("search", {"query": {"query_txt": TOPICS["q1"]}, "index_name": str(root / name),
                                                "k": 10}) for name in ("bm25", "aligner")])
    for result, name in zip(by_path, ("scifact-mini.bm25", "scifact-mini.aligner")):
        assert not result.is_error, result.content
        assert_same_hits(mcp_hits(result), cli_runs[name]["q1"])
    # a hybrid through the agent's own tools: BM25 and AligneR hits fused by fuse_search_results
    bm25, aligner = (dict(mcp_hits(r)) for r in (searches[3], searches[2]))
    fused, = mcp_call(controller, [("fuse_search_results", {
        "hits1": [{"docid": d, "score": s} for d, s in aligner.items()],
        "hits2": [{"docid": d, "score": s} for d, s in bm25.items()], "k": 5})])
    assert not fused.is_error
    fused_ids = [hit["docid"] for hit in mcp_items(fused)]
    from pyserini.search.faiss import DenseSearchResult
    from pyserini.search.hybrid import HybridSearcher

    expected = HybridSearcher._hybrid_results([DenseSearchResult(d, s) for d, s in aligner.items()],
                                              [DenseSearchResult(d, s) for d, s in bm25.items()], 1, 5, True)
    assert fused_ids == [h.docid for h in expected] and len(fused_ids) == 5


def test_rest_server_starts_on_loopback_by_default(tmp_path):
    """`python -m pyserini.server.rest`: starts with only our package (no UniIR), no download at start, binds
    127.0.0.1 unless --host says otherwise."""
    port = free_port()
    env = {**os.environ, "PYSERINI_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    from pyserini_ext.integration.server_rest import parser

    assert "--host" in parser().format_help() and parser().parse_args([]).host == "127.0.0.1"
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pyserini.server.rest", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline, answer = time.time() + 600, None  # a loaded machine starts Python, torch and the JVM slowly
        while time.time() < deadline and proc.poll() is None:
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.5)
        assert answer is not None and answer.status_code == 200, Path(log).read_text()[-3000:]
        assert answer.json()["name"] == "Pyserini API"
        unknown = requests.post(f"http://127.0.0.1:{port}/v1/indexes/no-such-index/search", json={"query": "x"},
                                timeout=120)
        assert unknown.status_code == 404 and "unknown index" in unknown.json()["detail"]
        assert "Downloading index" not in log.read_text() and not (tmp_path / "cache" / "indexes").exists()
        for address in interface_addresses() - {"127.0.0.1"}:  # not reachable on the machine's other addresses
            with socket.create_server(("0.0.0.0", 0)) as control:  # where one bound to 0.0.0.0 is
                socket.create_connection((address, control.getsockname()[1]), timeout=5).close()
            with pytest.raises(requests.ConnectionError):
                requests.get(f"http://{address}:{port}/", timeout=5)
    finally:
        proc.terminate()
        proc.wait(30)

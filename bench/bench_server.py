"""A bounded load test of Pyserini's own REST server on loopback, serving an Aggretriever prebuilt index by name,
beside the same queries through the Python API in one process (the server's overhead as a ratio).

The index: the first --passages SciFact passages encoded by the default Aggretriever into Pyserini's Faiss layout,
packed as a prebuilt index whose passages are a BM25 index of the same passages (catalogue `texts`), both into a
temporary catalogue ($PYSERINI_EXT_CATALOGUE, file:// URLs). The server (`python -m pyserini.server.rest`, a
subprocess) answers --requests searches of SciFact queries (cycled), --concurrency at a time, each asking for 10
hits with their passages: every answer must be 200. The Python API side runs the same queries one by one in this
process: FaissSearcher with our query encoder, then the 10 passages from the Lucene texts index (the server's work
without HTTP). Both sides get --threads torch / OpenMP threads and the same queries after a warm-up of
2 x --concurrency queries. The server's RSS is sampled through the run and reported at each quarter of the
requests answered (`rss_growth_after_first_quarter_pct`: from 25 % of the requests to the end, the target being
under 5 %), and this process's RSS likewise on the API side (the same searcher, JVM and encoder without the
server; this process built the index first, so its heap starts with free memory that the searches reuse).
The server runs its searches on $PYSERINI_EXT_SEARCH_THREADS threads (default 1; server_controller.py); neither
side compiles the Aggretriever's vocabulary kernel (the server turns it off; $PYSERINI_EXT_COMPILE=0 here).

    python -m bench.bench_server --requests 500 --concurrency 8
    PYSERINI_EXT_SEARCH_THREADS=2 python -m bench.bench_server --requests 1000 --passages 300
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

INDEX = "bench-scifact.aggretriever"
TEXTS = "bench-scifact.texts"


def build(folder: Path, passages: int, threads: int) -> tuple[Path, list[str]]:
    """The Faiss and texts indexes, packed into a catalogue; returns (catalogue, query texts)."""
    import faiss
    import numpy as np
    import torch

    from pyserini_ext.data import load_dataset, write_json_collection
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
    from pyserini_ext.index.lucene import build_lucene_index
    from pyserini_ext.index.prebuilt import pack_index
    from pyserini_ext.models.folder import resolve_model

    torch.set_num_threads(threads)
    dataset = load_dataset("scifact", download=False)
    docs = {d: dataset.corpus[d] for d in list(dataset.corpus)[:passages]}
    write_json_collection(docs, folder / "collection")
    build_lucene_index(folder / "collection", folder / "texts")
    encoder = AggretrieverDocumentEncoder(resolve_model("aggretriever"))
    ids, vectors = list(docs), []
    for start in range(0, len(ids), 64):
        batch = [docs[d] for d in ids[start:start + 64]]
        vectors.append(encoder.encode([d["text"] for d in batch], titles=[d["title"] for d in batch], max_length=128))
    matrix = np.ascontiguousarray(np.concatenate(vectors), dtype=np.float32)
    (folder / "faiss").mkdir()
    index = faiss.IndexFlatIP(matrix.shape[1])
    index.add(matrix)
    faiss.write_index(index, str(folder / "faiss" / "index"))
    (folder / "faiss" / "docid").write_text("".join(f"{d}\n" for d in ids))
    catalogue = folder / "catalogue.json"
    pack_index(folder / "texts", TEXTS, folder / "served", catalogue=catalogue)
    pack_index(folder / "faiss", INDEX, folder / "served", catalogue=catalogue, model="aggretriever", texts=TEXTS)
    return catalogue, list(dataset.queries.values())


def percentiles(latencies: list[float]) -> dict:
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"p50_ms": round(1000 * cuts[49], 1), "p95_ms": round(1000 * cuts[94], 1)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def serve(catalogue: Path, cache: Path, queries: list[str], requests_n: int, concurrency: int, threads: int,
          port: int) -> dict:
    env = dict(os.environ, **{"PYSERINI_EXT_CATALOGUE": str(catalogue), "PYSERINI_CACHE": str(cache),
                     "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    log = open(cache.parent / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "pyserini.server.rest", "--port", str(port)], stdout=log,
                              stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1/indexes/{INDEX}/search"
    try:
        started = time.time()
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except requests.ConnectionError:
                if server.poll() is not None or time.time() - started > 900:  # a loaded machine starts slowly
                    tail = (cache.parent / "server.log").read_text()[-2000:]
                    raise RuntimeError(f"the server did not start: {tail}") from None
                time.sleep(0.5)
        start_seconds = time.time() - started
        local = threading.local()
        completed, lock = [0], threading.Lock()

        def one(i: int) -> tuple[int, float, int]:
            if not hasattr(local, "session"):
                local.session = requests.Session()
            begin = time.perf_counter()
            response = local.session.post(url, json={"query": queries[i % len(queries)], "hits": 10}, timeout=300)
            hits = len(response.json().get("candidates", [])) if response.status_code == 200 else 0
            with lock:
                completed[0] += 1
            return response.status_code, time.perf_counter() - begin, hits

        with ThreadPoolExecutor(concurrency) as pool:
            # warm-up, as concurrent as the run: opens the indexes and starts the server's worker threads
            assert all(status == 200 for status, _, _ in pool.map(one, range(2 * concurrency)))
            completed[0] = 0
            rss = [(0, rss_mb(server.pid))]  # (requests answered, server RSS in MB)
            done = threading.Event()

            def sample():
                while not done.wait(0.2):
                    rss.append((completed[0], rss_mb(server.pid)))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            begin = time.perf_counter()
            answers = list(pool.map(one, range(2 * concurrency, 2 * concurrency + requests_n)))
            wall = time.perf_counter() - begin
            done.set()
            sampler.join()
        rss.append((requests_n, rss_mb(server.pid)))
        # RSS at 0, 25, 50, 75 and 100 % of the requests answered (the first sample at or past each)
        by_quarter = [next(r for n, r in rss if n >= requests_n * q / 4) for q in range(5)]
        statuses = {}
        for status, _, _ in answers:
            statuses[status] = statuses.get(status, 0) + 1
        return {"requests": requests_n, "concurrency": concurrency,
                "search_threads": int(os.environ.get("PYSERINI_EXT_SEARCH_THREADS") or 1), "statuses": statuses,
                "all_200": statuses == {200: requests_n}, "hits_per_answer": min(h for _, _, h in answers),
                **percentiles([s for _, s, _ in answers]), "throughput_qps": round(requests_n / wall, 2),
                "wall_s": round(wall, 1), "server_start_s": round(start_seconds, 1),
                "rss_mb_by_quarter": [round(r, 1) for r in by_quarter], "rss_mb_max": round(max(r for _, r in rss), 1),
                "rss_growth_after_first_quarter_pct": round(100 * (by_quarter[4] / by_quarter[1] - 1), 1)}
    finally:
        server.terminate()
        server.wait(60)
        log.close()


def python_api(catalogue: Path, cache: Path, queries: list[str], requests_n: int, threads: int,
               warm_up: int) -> dict:
    """The same searches through the Python API in this process: the server's work without HTTP."""
    os.environ["PYSERINI_EXT_CATALOGUE"], os.environ["PYSERINI_CACHE"] = str(catalogue), str(cache)
    os.environ.setdefault("PYSERINI_EXT_COMPILE", "0")  # as the server (server_controller.SearchThreads)
    import pyserini.util  # noqa: F401  (registers the catalogue: the start-up hook reads it at this import)
    import torch
    from pyserini.search.faiss import FaissSearcher
    from pyserini.search.lucene import LuceneSearcher

    from pyserini_ext.encode.aggretriever import AggretrieverQueryEncoder
    from pyserini_ext.index.prebuilt import download_prebuilt
    from pyserini_ext.models.folder import resolve_model

    torch.set_num_threads(threads)
    searcher = FaissSearcher(str(download_prebuilt(INDEX)), AggretrieverQueryEncoder(resolve_model("aggretriever")))
    texts = LuceneSearcher(str(download_prebuilt(TEXTS)))

    def one(text: str) -> int:
        hits = searcher.search(text, 10)
        return len([json.loads(texts.doc(hit.docid).raw())["contents"] for hit in hits])

    for i in range(warm_up):
        one(queries[i % len(queries)])
    latencies, rss = [], [rss_mb(os.getpid())]
    begin = time.perf_counter()
    for n, i in enumerate(range(warm_up, warm_up + requests_n), 1):
        start = time.perf_counter()
        one(queries[i % len(queries)])
        latencies.append(time.perf_counter() - start)
        if n in {round(requests_n * q / 4) for q in range(1, 5)}:
            rss.append(rss_mb(os.getpid()))
    wall = time.perf_counter() - begin
    return {"requests": requests_n, **percentiles(latencies), "throughput_qps": round(requests_n / wall, 2),
            "wall_s": round(wall, 1), "rss_mb_by_quarter": [round(r, 1) for r in rss],
            "rss_growth_after_first_quarter_pct": round(100 * (rss[4] / rss[1] - 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--passages", type=int, default=2000, help="SciFact passages in the index")
    parser.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads on each side")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1 or args.passages < 10:
        parser.error("--requests and --concurrency must be >= 1, --passages >= 10")
    with tempfile.TemporaryDirectory(prefix="bench-server.") as tmp:
        folder = Path(tmp)
        catalogue, queries = build(folder, args.passages, args.threads)
        server = serve(catalogue, folder / "cache", queries, args.requests, args.concurrency, args.threads,
                       args.port)
        api = python_api(catalogue, folder / "cache-api", queries, args.requests, args.threads,
                         2 * args.concurrency)
    result = {"passages": args.passages, "threads": args.threads, "server": server, "python_api": api,
              "p50_ratio_server_over_api": round(server["p50_ms"] / api["p50_ms"], 2),
              "throughput_ratio_server_over_api": round(server["throughput_qps"] / api["throughput_qps"], 2),
              "rss_growth_mb": round(server["rss_mb_by_quarter"][-1] - server["rss_mb_by_quarter"][0], 1),
              "rss_growth_after_first_quarter_pct": server["rss_growth_after_first_quarter_pct"],
              "load_average": [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

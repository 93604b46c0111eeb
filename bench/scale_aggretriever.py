"""Aggretriever at scale: the compressed index the streaming builder writes, built and searched at N passages
(bench/bench_scale.py's Aggretriever rows).

Encoding millions of passages is days on 2 CPU cores, so the index stages run on vectors: 3,584 of the DL19 subset's
passages encoded from text by the shipped default model (the shortest of DL19's judged passages, BASE_PASSAGES;
their docids kept, so DL19 nDCG@10 is measured), then distractors, each a mixture of two real encoded passages
(weights 0.5-0.8, each part rescaled to the norms of the heavier one: mixtures of real vectors, never i.i.d. noise;
seeded by the distractor's number, so every step sees the same vectors). The base passages were pooled for the DL
queries, so the distractors are more on-topic than MS MARCO's random passages: nDCG@10 falls with N faster than on
the real collection; what the rows compare is the compressed index against exact (flat) search of the same vectors.

Per N, each step is its own process: build (the real AggretrieverIndexBuilder and streaming build, only `encode`
replaced: time, peak RSS), search (the index read as Pyserini's FaissSearcher reads it, read_faiss_index: plain
faiss.read_index, or memory-mapped for ivfpq-refine; the file's pages evicted from the page cache first, so what
the build left there counts for nothing; one query at a time, two passes: the first meets the pages a query maps
on disk (cold), the second in the page cache (warm: p50/p95); wall-clock and CPU p50/p95 over DL19's 43 and DL20's
54 queries, peak RSS, and its anonymous and file-backed parts) and exact (flat inner products over every vector,
block by block: top-10 recall of the index; DL19 nDCG@10 of both).

    python -m bench.scale_aggretriever --sizes 30000,100000 --work runs/scale      # ivfsq and ivfpq-refine (VARIANTS)
    python -m bench.scale_aggretriever --sizes 100000 --index-type ivfpq-refine --settings '{"pq_m": 128}'
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from bench.common import DATASET, base_corpus, measure, memory_mb, python, scale_parser

MODEL = "aggretriever-minilm-fullwidth"  # the shipped default's folder, pinned: its vectors are cached
BLOCK = 4096  # distractors drawn per seeded block (the same vectors whatever the chunking)
SEED = 13
HITS = 1000  # Pyserini's `--hits` default: what `python -m pyserini.search.faiss` asks of the index
EXACT_BLOCK = 65536
# The real passages: the first 3,584 of base_order (seven chunks of 512), i.e. the shortest 3,584 of DL19's 4,342
# judged passages in the subset. docs/scale-results.md's rows were measured on them; a fixed count keeps a fresh
# clone's rows comparable (and its encoding at ~2 minutes on 2 cores instead of the subset's 30,005 passages).
BASE_PASSAGES = 3584


def base_order() -> list:
    """The subset's passages, DL19's judged ones first, each group by length (batches with little padding): an
    interrupted encoding's complete parts already hold every judged passage."""
    from pyserini_ext.data import load_dataset

    judged = {d for docs in load_dataset(DATASET).qrels("test").values() for d in docs}
    return sorted(base_corpus(), key=lambda item: (item[0] not in judged, len(item[1]["text"])))


def encode_base(work: Path, model: str = MODEL, threads: int = 2) -> Path:
    """The first BASE_PASSAGES of the DL19 subset's passages through the streaming flat build (resumable: rerun to
    continue) and the DL19 + DL20 queries, encoded once by the model (cached under WORK/aggretriever-base)."""
    import torch

    from pyserini_ext.index.aggretriever import AggretrieverIndexBuilder, AggretrieverIndexSettings
    from pyserini_ext.index.streaming import build
    from pyserini_ext.models.folder import resolve_model

    model = resolve_model(model, "aggretriever")
    cache = work / "aggretriever-base"
    cache.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    if not (cache / "queries.npz").is_file():
        from pyserini_ext.data import load_dataset
        from pyserini_ext.integration.encoders import AggretrieverQueryEncoder

        encoder = AggretrieverQueryEncoder(model)
        queries = load_dataset(DATASET).queries  # DL19's 43 judged and DL20's 54 (no judgments in this copy)
        np.savez(cache / "queries.npz", **{q: encoder.encode(text) for q, text in queries.items()})
    if not (cache / "flat" / "index").is_file():
        builder = AggretrieverIndexBuilder(model, AggretrieverIndexSettings(batch_size=16), {"progress": False})
        build(builder, base_order()[:BASE_PASSAGES], cache / "flat", chunk_docs=512, total=BASE_PASSAGES,
              progress=True)
    return cache


def base_vectors(work: Path) -> Path:
    """WORK/aggretriever-base/vectors.npy + docids.txt: the encoded passages (the finished flat index, or the
    complete parts of an encoding still under way), written once."""
    cache = work / "aggretriever-base"
    if (cache / "vectors.npy").is_file():
        return cache
    import faiss

    if (cache / "flat" / "index").is_file():
        index = faiss.read_index(str(cache / "flat" / "index"))
        vectors = index.reconstruct_n(0, index.ntotal)
        docids = (cache / "flat" / "docid").read_text().split()
    else:
        parts = sorted(p for p in (cache / "flat.building" / "parts").iterdir() if (p / "part.json").is_file())
        vectors = np.concatenate([np.load(p / "vectors.npy") for p in parts])
        docids = [d for p in parts for d in (p / "docids.txt").read_text().split()]
    np.save(cache / "vectors.npy", vectors.astype(np.float32))
    (cache / "docids.txt").write_text("".join(f"{d}\n" for d in docids))
    return cache


class Base:
    """The real encoded passages and the mixtures made from them."""

    def __init__(self, folder: Path):
        self.vectors = np.load(folder / "vectors.npy")
        self.docids = (folder / "docids.txt").read_text().split()
        self.row = {d: i for i, d in enumerate(self.docids)}
        from pyserini_ext.models.aggretriever import AggretrieverConfig

        config = json.loads((Path(_model_folder()) / "aggretriever_config.json").read_text())
        self.cls_dim = config.get("cls_dim", AggretrieverConfig().cls_dim)

    def mixtures(self, numbers: np.ndarray) -> np.ndarray:
        """Distractors `x<number>`: w * a + (1 - w) * b of two real passages, w in [0.5, 0.8], each part rescaled
        to a's norm (a mixture of unit-norm parts is shorter: unscaled it would rank below every real passage)."""
        out = np.empty((len(numbers), self.vectors.shape[1]), np.float32)
        blocks = numbers // BLOCK
        for block in np.unique(blocks):
            rng = np.random.default_rng([SEED, int(block)])
            first, second = rng.integers(0, len(self.vectors), (2, BLOCK))
            weight = rng.uniform(0.5, 0.8, BLOCK).astype(np.float32)
            rows = np.flatnonzero(blocks == block)
            k = numbers[rows] % BLOCK
            a, b, w = self.vectors[first[k]], self.vectors[second[k]], weight[k, None]
            mixed = w * a + (1 - w) * b
            for part in (slice(0, self.cls_dim), slice(self.cls_dim, None)):
                norm = np.linalg.norm(mixed[:, part], axis=1, keepdims=True)
                mixed[:, part] *= np.linalg.norm(a[:, part], axis=1, keepdims=True) / np.maximum(norm, 1e-12)
            out[rows] = mixed
        return out

    def of(self, docids: list[str]) -> np.ndarray:
        real = np.array([self.row.get(d, -1) for d in docids])
        out = np.empty((len(docids), self.vectors.shape[1]), np.float32)
        out[real >= 0] = self.vectors[real[real >= 0]]
        fake = np.flatnonzero(real < 0)
        if len(fake):
            out[fake] = self.mixtures(np.array([int(docids[i][1:]) for i in fake]))
        return out

    def docids_of(self, n: int) -> list[str]:
        return self.docids[:n] + [f"x{i}" for i in range(max(0, n - len(self.docids)))]


def _model_folder() -> str:
    from pyserini_ext.models.folder import resolve_model

    return resolve_model(MODEL, "aggretriever")


def _builder_class():
    from pyserini_ext.index.aggretriever import AggretrieverIndexBuilder

    class MixtureBuilder(AggretrieverIndexBuilder):
        """The real builder; a document's vector comes from the base (real) or its mixture (distractor)."""

        def __init__(self, model, settings=None, runtime=None):
            super().__init__(model, settings, runtime)
            self.base = Base(Path(self.runtime["base"]))

        def describe(self) -> dict:
            return {**super().describe(), "base": str(self.runtime["base"]), "seed": SEED}

        def encode(self, documents):
            return self.base.of([d for d, _ in documents])

    return MixtureBuilder


def load_queries(base: Path) -> dict[str, np.ndarray]:
    with np.load(base / "queries.npz") as data:
        return {q: data[q].astype(np.float32) for q in data}


def build_step(args) -> None:
    from pyserini_ext.index.aggretriever import METADATA_FILE, AggretrieverIndexSettings
    from pyserini_ext.index.streaming import build

    settings = AggretrieverIndexSettings(**json.loads(args.settings))
    builder = _builder_class()(_model_folder(), settings, {"base": args.base})
    documents = ((d, {}) for d in builder.base.docids_of(args.n))
    started = time.time()
    folder = build(builder, documents, args.index, total=args.n, overwrite=True, progress=False)
    meta = json.loads((folder / METADATA_FILE).read_text())
    print(json.dumps({"build_seconds": round(time.time() - started, 1), "rss_mb": memory_mb("VmHWM"),
                      "index_bytes": meta["index_bytes"], "ram_bytes": meta.get("ram_bytes", meta["index_bytes"]),
                      "settings": meta["settings"]}))


def search_step(args) -> None:
    """What FaissSearcher does (through our patch: read_faiss_index), then one query at a time (`python -m
    pyserini.search.faiss --batch-size 1`), twice over the queries: cold, then warm."""
    from pyserini_ext.integration.search_faiss import read_faiss_index  # no torch: the index's memory alone

    queries = load_queries(Path(args.base))
    evict(Path(args.index) / "index")
    index = read_faiss_index(args.index)
    docids = (Path(args.index) / "docid").read_text().split()
    loaded = memory_mb("VmRSS")
    for q in list(queries.values())[:3]:  # warm the caches, as a long-running searcher has them
        index.search(q[None], HITS)
    passes, anonymous = [], 0.0
    for _ in range(2):
        times, cpu, runs = [], [], {}
        for qid, q in queries.items():
            started, started_cpu = time.perf_counter(), time.thread_time()
            scores, found = index.search(q[None], HITS)  # one query: Faiss's IVF search runs it on this thread
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - started_cpu)
            runs[qid] = [(docids[i], float(s)) for s, i in zip(scores[0][:10], found[0][:10]) if i >= 0]
            anonymous = max(anonymous, memory_mb("RssAnon"))  # no peak of it in /proc: the largest seen
        passes.append((times, cpu))
    Path(args.run).write_text(json.dumps(runs))
    (cold, _), (times, cpu) = passes
    print(json.dumps({"p50_ms": round(1000 * float(np.median(times)), 1),
                      "p95_ms": round(1000 * float(np.percentile(times, 95)), 1),
                      "p50_cpu_ms": round(1000 * float(np.median(cpu)), 1),
                      "p95_cpu_ms": round(1000 * float(np.percentile(cpu, 95)), 1),
                      "p50_cold_ms": round(1000 * float(np.median(cold)), 1),
                      "p95_cold_ms": round(1000 * float(np.percentile(cold, 95)), 1), "rss_mb": memory_mb("VmHWM"),
                      "rss_anon_mb": anonymous, "rss_file_mb": memory_mb("RssFile"), "loaded_rss_mb": loaded,
                      "index_mapped_mb": mapped_mb(Path(args.index) / "index")}))


def mapped_mb(path: Path) -> float:
    """The resident pages of `path`'s memory mappings in this process (/proc/self/smaps), in MB."""
    real, kib, inside = str(path.resolve()), 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == real
            elif inside and fields[0] == "Rss:":
                kib += int(fields[1])
    return round(kib / 1024, 1)


def evict(path: Path) -> None:
    """Drop this file's pages from the page cache (written back first): a freshly built index is in the page cache
    in the large folios its writes made, which a memory-mapped read maps whole (MBs of RSS for one vector)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def exact_top10(base: Base, queries: dict[str, np.ndarray], n: int) -> dict[str, list[tuple[str, float]]]:
    """Top-10 by exact inner product over the N vectors (what the flat index returns), block by block."""
    matrix = np.stack(list(queries.values()))
    docids = base.docids_of(n)
    best_scores = np.full((len(matrix), 0), -np.inf, np.float32)
    best_rows = np.zeros((len(matrix), 0), np.int64)
    for start in range(0, n, EXACT_BLOCK):
        block = docids[start:start + EXACT_BLOCK]
        scores = matrix @ base.of(block).T
        scores = np.concatenate([best_scores, scores], axis=1)
        rows = np.concatenate([best_rows, np.broadcast_to(np.arange(start, start + len(block)),
                                                          (len(matrix), len(block)))], axis=1)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        best_scores, best_rows = np.take_along_axis(scores, top, 1), np.take_along_axis(rows, top, 1)
    return {q: [(docids[r], float(s)) for r, s in zip(best_rows[i], best_scores[i])]
            for i, q in enumerate(queries)}


def exact_step(args) -> None:
    base = Base(Path(args.base))
    Path(args.run).write_text(json.dumps(exact_top10(base, load_queries(Path(args.base)), args.n)))
    print(json.dumps({"rss_mb": memory_mb("VmHWM")}))


def recall_at_10(run: dict, reference: dict, queries) -> float:
    return float(np.mean([len({d for d, _ in run[q]} & {d for d, _ in reference[q]}) / 10 for q in queries]))


def variant(settings: dict) -> str:
    if settings["index_type"] == "ivfpq-refine":
        return (f"ivfpq-refine PQ{settings['pq_m']} k_factor {settings['k_factor']:g} "
                f">={settings['min_candidates']} {settings['refine']}")
    if settings["index_type"] == "ivfsq":
        transform = f"PCA{settings['pca']}" if settings["pca"] else "rotated" if settings["rotate"] else ""
        return " ".join(filter(None, ["ivfsq", f"{settings['sq_bits']}-bit", transform]))
    return settings["index_type"]


# the rows bench_scale shows: the small in-RAM index, and the one for MS MARCO size (docs/scale.md)
VARIANTS = ({"index_type": "ivfsq"}, {"index_type": "ivfpq-refine"})


def rows(sizes: list[int], work: Path, ray: bool = True, settings: dict | None = None) -> list[dict]:
    """One row per N and variant: the index the builder writes by default for a corpus of N passages (`settings`:
    one variant's builder settings, e.g. {"index_type": "flat"}; None: each of VARIANTS)."""
    if settings is None:
        return [row for variant_settings in VARIANTS for row in rows(sizes, work, ray, variant_settings)]
    from bench.common import ndcg10
    from pyserini_ext.data import load_dataset

    if not (work / "aggretriever-base" / "vectors.npy").is_file():
        encode_base(work)
    base = base_vectors(work)
    real = len((base / "docids.txt").read_text().split())
    qrels = load_dataset(DATASET).qrels("test")
    found = []
    for n in sizes:
        name = "aggretriever-" + "-".join(f"{k}{v}" for k, v in sorted(settings.items())) + f"-{n}"
        index, run, exact = work / name, work / f"{name}.run.json", work / f"aggretriever-{n}.exact.json"
        if (work / f"{name}.row.json").is_file():  # measured before (delete it to measure again)
            found.append(json.loads((work / f"{name}.row.json").read_text()))
            continue
        common = [python(), "-m", "bench.scale_aggretriever", "--base", base, "--index", index, "--n", n]
        if not (work / f"{name}.build.json").is_file():  # a build kept from an earlier run (delete it to rebuild)
            built = measure([*common, "--settings", json.dumps(settings), "build"], {"OMP_NUM_THREADS": "1"})
            (work / f"{name}.build.json").write_text(json.dumps(built))
        built = json.loads((work / f"{name}.build.json").read_text())
        searched = measure([*common, "--run", run, "search"], {"OMP_NUM_THREADS": "1"})
        if not exact.is_file():
            measure([*common, "--run", exact, "exact"], {"OMP_NUM_THREADS": "1"})
        shipped, reference = json.loads(run.read_text()), json.loads(exact.read_text())
        dl19 = [q for q in reference if q in qrels]
        used = built["settings"]
        found.append({
            "model": "Aggretriever", "variant": variant(used), "N": n,
            "source": f"{min(n, real)} real DL19-subset passages + mixtures of them",
            "index_type": used["index_type"], "nlist": used.get("nlist"), "nprobe": used.get("nprobe"),
            "build_s": built["build_seconds"], "build_rss_mb": built["rss_mb"],
            "index_mb": round(built["index_bytes"] / 2**20, 1),
            "bytes_per_passage": round(built["index_bytes"] / n, 1),
            # the part search holds in RAM (ivfpq-refine: all but the memory-mapped refine codes)
            "ram_mb": round(built.get("ram_bytes", built["index_bytes"]) / 2**20, 1),
            "ram_bytes_per_passage": round(built.get("ram_bytes", built["index_bytes"]) / n, 1),
            "search_rss_mb": searched["rss_mb"], "p50_ms": searched["p50_ms"], "p95_ms": searched["p95_ms"],
            "p50_cpu_ms": searched["p50_cpu_ms"], "p95_cpu_ms": searched["p95_cpu_ms"],
            "p50_cold_ms": searched.get("p50_cold_ms"), "p95_cold_ms": searched.get("p95_cold_ms"),
            "search_rss_anon_mb": searched.get("rss_anon_mb"), "search_rss_file_mb": searched.get("rss_file_mb"),
            "search_index_mapped_mb": searched.get("index_mapped_mb"),
            "load": round(os.getloadavg()[0], 1),  # another job on the 2 cores shows here (timings are shared)
            "recall_at_10_vs_exact": round(recall_at_10(shipped, reference, dl19), 4),
            "recall_at_10_vs_exact_dl20": round(recall_at_10(shipped, reference, [q for q in reference
                                                                                   if q not in qrels]), 4),
            "ndcg_at_10": round(ndcg10(qrels, {q: dict(shipped[q]) for q in dl19}), 4),
            "ndcg_at_10_exact": round(ndcg10(qrels, {q: dict(reference[q]) for q in dl19}), 4)})
        (work / f"{name}.row.json").write_text(json.dumps(found[-1]))
        print(json.dumps(found[-1]), flush=True)
    return found


def main() -> None:
    parser = scale_parser(__doc__, ("encode", "build", "search", "exact"))
    parser.add_argument("--settings", default="{}", help="builder settings (JSON): of the build step; with the rows, "
                                                         "added to --index-type's")
    parser.add_argument("--index-type", help="the rows' index type, with the builder's defaults for it (default: "
                                              "each of VARIANTS)")
    args = parser.parse_args()
    if args.step == "encode":
        encode_base(Path(args.work))
    elif args.step:
        {"build": build_step, "search": search_step, "exact": exact_step}[args.step](args)
    else:
        extra = json.loads(args.settings)
        settings = {"index_type": args.index_type or VARIANTS[0]["index_type"], **extra}  # --settings: of one type
        if not (args.index_type or extra):
            settings = None
        print(json.dumps(rows([int(s) for s in args.sizes.split(",")], Path(args.work).resolve(), settings=settings),
                         indent=1))


if __name__ == "__main__":
    main()

"""AligneR at scale: build and search the shipped index layout at N documents (bench/bench_scale.py's AligneR rows).

Encoding millions of passages is days on 2 CPU cores, so the index stages run on token vectors: the DL19 subset's
judged passages (4,000-odd, encoded from text by the shipped model, their docids kept, so DL19 nDCG@10 is
measured) plus synthetic distractors recombined from runs of those passages' real token vectors (seeded; a little
noise, renormalised), each of the length of a real passage. The base is pooled to 40% of its tokens once, as the
prebuilt indexes are, and every row builds the layout the command chooses for large corpora (residual PQ32x6 codes,
centroid candidates, nlist by corpus size; index/aligner/) on those reduced vectors (beta_d = 1: the Ward
pooling of a million documents alone would take hours here; its cost is per document, linear in N, and measured
with the text build of the test suite). Per N, each step is its own process:
build (time, peak RSS), search (open + 43 DL19 queries: p50/p95, documents touched, peak RSS) and an exhaustive
exact scoring of the same index for top-10 recall.

    python -m bench.scale_aligner --sizes 30000,100000 --work runs/scale
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from bench.common import DATASET, measure, python, scale_parser
from pyserini_ext.index.aligner import AlignerIndexBuilder, AlignerIndexSettings, EncodedCorpus

RUN_LENGTH = 8  # tokens per recombined run
EXACT_BLOCK = 8192  # documents decoded at a time by the exhaustive scoring
BETA_D = 0.4  # the prebuilt indexes' fraction of tokens
SETTINGS = AlignerIndexSettings(codec="residual-pq", candidates="centroid")


def base_encoding(work: Path, model: str, threads: int = 1) -> Path:
    """The judged DL19 passages and the DL19 queries, encoded once by the shipped AligneR (cached)."""
    cache = work / "aligner-base"
    if (cache / "done").is_file():
        return cache
    import torch

    from pyserini_ext.data import load_dataset
    from pyserini_ext.index.aligner import encode_corpus, pool_tokens
    from pyserini_ext.models.aligner import AlignerModel
    from pyserini_ext.models.folder import resolve_model
    from pyserini_ext.search.aligner import AlignerSearcher  # noqa: F401  (the query side below)

    torch.set_num_threads(threads)
    dataset = load_dataset(DATASET)
    qrels = dataset.qrels("test")
    judged = sorted({d for docs in qrels.values() for d in docs})
    corpus = dataset.corpus
    path = str(resolve_model(model, "aligner"))
    aligner = AlignerModel.from_pretrained(path).eval()
    encoded = encode_corpus(aligner, {d: corpus[d] for d in judged if d in corpus}, model_path=path)
    offsets, vectors, scores = pool_tokens(encoded.offsets, encoded.vectors, encoded.salience_scores, BETA_D)
    encoded = EncodedCorpus(encoded.docids, offsets, vectors, scores, encoded.model_info)
    cache.mkdir(parents=True, exist_ok=True)
    encoded.save(cache / "encoded.npz")
    from pyserini_ext.models.aligner import QUERY
    from pyserini_ext.models.alignment import DEFAULT_BETA_Q

    queries = dataset.split_queries("test")
    batch = aligner.encode_batch(list(queries.values()), QUERY)
    weights, kept = batch.weights(DEFAULT_BETA_Q)
    np.savez(cache / "queries.npz", **{qid: np.concatenate([batch.vectors[i][kept[i]].detach().numpy(),
                                                            weights[i][kept[i]].detach().numpy()[:, None]], axis=1)
                                       for i, qid in enumerate(queries)})
    (cache / "model.json").write_text(json.dumps({"model": path, "fingerprint": aligner.fingerprint()}))
    (cache / "done").write_text("")
    return cache


class SyntheticBuilder(AlignerIndexBuilder):
    """Documents are ("x<number>" or a real docid, {}); their token vectors come from the base encoding."""

    def __init__(self, model: str, settings: AlignerIndexSettings, runtime: dict | None = None):
        super().__init__(model, settings, runtime)
        self.base_folder = Path(self.runtime["base"])
        self.base = EncodedCorpus.load(self.base_folder / "encoded.npz")
        self.row = {d: i for i, d in enumerate(self.base.docids)}
        self.lengths = np.diff(self.base.offsets)
        self.info = json.loads((self.base_folder / "model.json").read_text())

    def describe(self) -> dict:
        return {**super().describe(), "base": str(self.base_folder)}

    def model_info(self) -> dict:
        return {"path": self.info["model"], "fingerprint": self.info["fingerprint"],
                "doc_max_length": 256, "dim": int(self.base.vectors.shape[1])}

    def encode(self, documents):
        vectors, scores, lengths = [], [], []
        for docid, _ in documents:
            if docid in self.row:  # a real passage: its own vectors
                real = self.base.subset([self.row[docid]])
                vectors.append(real.vectors)
                scores.append(real.salience_scores)
                lengths.append(len(real.vectors))
                continue
            number = int(docid[1:])
            rng = np.random.default_rng(number)
            length = int(self.lengths[rng.integers(len(self.lengths))])
            starts = rng.integers(0, len(self.base.vectors) - RUN_LENGTH, -(-length // RUN_LENGTH))
            rows = (starts[:, None] + np.arange(RUN_LENGTH)).ravel()[:length]
            v = self.base.vectors[rows].astype(np.float32) + rng.normal(0, 0.02, (length, self.base.vectors.shape[1]))
            vectors.append((v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16))
            scores.append(self.base.salience_scores[rows])
            lengths.append(length)
        return EncodedCorpus([d for d, _ in documents], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                             np.concatenate(vectors), np.concatenate(scores).astype(np.float32), self.model_info())


def documents(base: EncodedCorpus, n: int):
    yield from ((d, {}) for d in base.docids[:n])
    yield from ((f"x{i}", {}) for i in range(max(0, n - len(base.docids))))


def build_step(args) -> None:
    from pyserini_ext.index.streaming import build

    base = EncodedCorpus.load(Path(args.base) / "encoded.npz")
    builder = SyntheticBuilder("", SETTINGS, {"base": args.base})
    started = time.time()
    folder = build(builder, documents(base, args.n), args.index, total=args.n, overwrite=True, progress=False)
    meta = json.loads((folder / "metadata.json").read_text())
    print(json.dumps({"build_seconds": round(time.time() - started, 1), "codec": meta["codec"],
                      "candidates": meta["candidates"], "nlist": meta["nlist"], "tokens": meta["counts"]["tokens"],
                      "index_mb": round(sum(meta["bytes"].values()) / 2**20, 1),
                      "bytes_per_token": round(meta["bytes_per_token"], 2)}))


def ray_step(args) -> None:
    """The same build on 2 Ray workers: the driver's peak RSS is what this process measures."""
    from pyserini_ext.index.streaming import build_on_ray

    base = EncodedCorpus.load(Path(args.base) / "encoded.npz")
    builder = SyntheticBuilder("", SETTINGS, {"base": args.base})
    started = time.time()
    build_on_ray(builder, documents(base, args.n), args.index, workers=2, total=args.n, overwrite=True,
                 progress=False)
    print(json.dumps({"build_seconds": round(time.time() - started, 1)}))


def load_queries(base: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with np.load(base / "queries.npz") as data:
        return {qid: (data[qid][:, :-1].astype(np.float32), data[qid][:, -1].astype(np.float32)) for qid in data}


def search_step(args) -> None:
    from pyserini_ext.index.aligner import AlignerIndex
    from pyserini_ext.search.aligner import AlignerSearcher

    queries = load_queries(Path(args.base))
    index = AlignerIndex.open(args.index)
    searcher = AlignerSearcher(index, index.metadata["model"]["path"], check_model=False)
    times, touched, runs = [], [], {}
    for qid, (vectors, weights) in queries.items():
        started = time.perf_counter()
        hits = searcher.rank(vectors, weights, 10)
        times.append(time.perf_counter() - started)
        touched.append(index.candidates.touched)
        runs[qid] = [(h.docid, h.score) for h in hits]
    Path(args.run).write_text(json.dumps(runs))
    print(json.dumps({"p50_ms": round(1000 * float(np.median(times)), 1),
                      "p95_ms": round(1000 * float(np.percentile(times, 95)), 1),
                      "touched_mean": round(float(np.mean(touched)), 1)}))


def exact_step(args) -> None:
    """Top-10 of every query by exact alignment scores over every document: blocks of documents decoded once and
    scored for every query by the searcher's own scoring (a view of the index on the block)."""
    import copy
    from types import SimpleNamespace

    from pyserini_ext.index.aligner import AlignerIndex
    from pyserini_ext.search.aligner import AlignerSearcher

    queries = load_queries(Path(args.base))
    index = AlignerIndex.open(args.index)
    searcher = AlignerSearcher(index, index.metadata["model"]["path"], check_model=False)
    best: dict[str, list[tuple[float, int]]] = {qid: [] for qid in queries}
    for start in range(0, len(index), EXACT_BLOCK):
        stop = min(start + EXACT_BLOCK, len(index))
        first, last = int(index.offsets[start]), int(index.offsets[stop])
        view = copy.copy(index)
        view.offsets = np.asarray(index.offsets[start:stop + 1]) - first
        view.weights = np.asarray(index.weights[first:last])
        view.candidates = SimpleNamespace(decoded=index.codec.decode(np.arange(first, last)))
        searcher.index = view
        block = np.arange(stop - start)
        for qid, (vectors, weights) in queries.items():
            scores = searcher.score_documents(vectors, weights, block)
            top = np.argpartition(-scores, min(10, len(scores) - 1))[:10]
            best[qid] = sorted(best[qid] + [(float(scores[i]), start + int(i)) for i in top], reverse=True)[:10]
    Path(args.run).write_text(json.dumps({qid: [(index.docids[d], s) for s, d in hits] for qid, hits in
                                          best.items()}))
    print(json.dumps({"queries": len(queries)}))


def rows(sizes: list[int], work: Path, model: str = "aligner", ray: bool = True) -> list[dict]:
    from pyserini_ext.data import load_dataset
    from pyserini_ext.evaluation import evaluate

    base = base_encoding(work, model)
    qrels = load_dataset(DATASET).qrels("test")
    found = []
    for n in sizes:
        index, run, exact = work / f"aligner-{n}", work / f"aligner-{n}.run.json", work / f"aligner-{n}.exact.json"
        common = [python(), __file__, "--base", base, "--index", index, "--n", n]
        build_file = work / f"aligner-{n}.build.json"
        if not (build_file.is_file() and (index / "metadata.json").is_file()):  # else a build kept from an earlier
            exact.unlink(missing_ok=True)  # run (delete build.json to rebuild); a new build, a new exact top 10
            build_file.write_text(json.dumps(measure([*common, "build"], {"OMP_NUM_THREADS": "1"})))
        built = json.loads(build_file.read_text())
        searched = measure([*common, "--run", run, "search"], {"OMP_NUM_THREADS": "1"})
        on_ray = measure([python(), __file__, "--base", base, "--index", work / f"aligner-ray-{n}", "--n", n, "ray"],
                         {"OMP_NUM_THREADS": "1"}) if ray else {}
        if not exact.is_file():  # exact scoring of the index's codes: search settings do not change it
            measure([*common, "--run", exact, "exact"], {"OMP_NUM_THREADS": "1"})
        shipped, reference = json.loads(run.read_text()), json.loads(exact.read_text())
        recall = np.mean([len({d for d, _ in shipped[q]} & {d for d, _ in reference[q]}) / 10 for q in reference])
        ndcg = evaluate(qrels, {q: list(hits) for q, hits in shipped.items()}, ["ndcg_cut_10"])["ndcg_cut_10"]
        found.append({"model": "AligneR", "variant": "residual-pq + centroid (40% pooled)", "N": n,
                      "source": "DL19 judged passages (text) + synthetic token vectors",
                      "codec": built["codec"], "candidates": built["candidates"], "nlist": built["nlist"],
                      "build_s": built["build_seconds"], "build_rss_mb": built["peak_rss_mb"],
                      "ray_driver_rss_mb": on_ray.get("peak_rss_mb"), "ray_build_s": on_ray.get("build_seconds"),
                      "index_mb": built["index_mb"], "bytes_per_token": built["bytes_per_token"],
                      "search_rss_mb": searched["peak_rss_mb"], "p50_ms": searched["p50_ms"],
                      "p95_ms": searched["p95_ms"], "touched": searched["touched_mean"],
                      "touched_pct": round(100 * searched["touched_mean"] / n, 2),
                      "recall_at_10_vs_exact": round(float(recall), 4), "ndcg_at_10": round(float(ndcg), 4)})
        print(json.dumps(found[-1]), flush=True)
    return found


def main() -> None:
    parser = scale_parser(__doc__, ("build", "search", "exact", "ray"))
    parser.add_argument("--model", default="aligner")
    parser.add_argument("--no-ray", action="store_true", help="leave out the Ray driver measurement")
    args = parser.parse_args()
    if args.step:
        {"build": build_step, "search": search_step, "exact": exact_step, "ray": ray_step}[args.step](args)
        return
    found = rows([int(s) for s in args.sizes.split(",")], Path(args.work), args.model, not args.no_ray)
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()

"""DeepCT at scale (issue 45, items 4 and 5): DeepCT Lucene indexes of N passages built by the streaming builder
(pyserini_ext/index/deepct.py: a Lucene index per chunk, joined by Lucene at the end), searched with BM25 by
Pyserini's LuceneSearcher.

    python -m bench.scale_deepct --sizes 30000,100000 --workdir runs/scale

One row per N and source; every figure of a build or a search comes from one child process of its own:
  build s, build MB     wall time, and peak RSS of the build process alone (its VmHWM at its end: the model, the
                        JVM and the Lucene merges of finalise included)
  build CPU s           user + system seconds of the build process (all its threads): its cost whatever else runs
                        on the machine, where wall time on a shared one mostly measures the neighbours
  ray s, ray driver MB  the same build on 2 Ray workers (a local Ray): wall time, peak RSS of the driver alone
                        (it reads the stream, hands out chunks and finalises; the workers are other processes)
  ray merge MB          peak RSS of the process that runs the Lucene merge for the Ray driver (finalise starts
                        it where Ray runs: java_bridge.lucene.merge_indexes_apart), from RUSAGE_CHILDREN: an
                        upper bound
  ray = one             the Ray index gives the one-process index's statistics and top-10 hits (docids, scores)
  index MB              bytes of the index folder (Lucene stores the raw passages too)
  search MB, p50/p95    peak RSS of the search process; per query, BM25 with DeepCT's k1/b (the conditions file),
                        1000 hits, 43 DL19 queries, 1 warm-up round then 3 timed rounds, 1 thread
  p50 CPU ms            the search thread's CPU time per query (Lucene runs in it, through JNI), median
  matched %             documents holding a query term (all of which an exhaustive search scores) / N, mean
  recall@10             top-10 of the shipped search against exhaustive scoring of the same index (Lucene's
                        TopScoreDocCollector with no early termination; ties at the 10th score count as found)
  nDCG@10               the DL19 queries (pyserini_ext.evaluation)
Where the word weights come from (`source`):
  text       end to end from the corpus file with the shipped model (torch float32, 1 thread): what `pyserini-ext
             deepct index` runs; N up to the 30,005 DL19 passages
  synthetic  the same builder (part writing: tf rule, Lucene analysis, one Lucene index per chunk; finalise: the
             Lucene merge) with only `weigh` replaced: the DL19 passages get the shipped model's weights (computed
             once, chunk by chunk as the build does, and cached: at 30,005 the index equals the text build's), each
             distractor word its mean model weight over the DL19 passages; N from 30,000 up
`rows(sizes, workdir)` is what bench/bench_scale.py calls. Measured rows are kept under WORKDIR/deepct/rows and
reused (--fresh measures again).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench.common import DATASET, base_corpus, measure, memory_mb, module_command, write_corpus

SIZES = (30000, 100000, 300000, 1000000)
REAL_PASSAGES = 30005
# synthetic rows from here up (at 30,000 beside the text row, which checks them); below, the text build is cheap and
# the weight table would cost weighing all 30,005 DL19 passages
SYNTHETIC_FROM = 30000
ROUNDS, HITS, SPLIT = 3, 1000, "dl19"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0"}


def deepct_bm25() -> tuple[float, float]:
    """DeepCT's BM25 k1 and b, as the report searches its indexes (chosen on the development queries)."""
    from pyserini_ext.repro.conditions import load_conditions

    choice = load_conditions().development["choice"]
    return float(choice["k1"]), float(choice["b"])


def shipped_model() -> str:
    from pyserini_ext.models.folder import resolve_model

    return resolve_model("deepct", "deepct")


# ---- synthetic word weights ----------------------------------------------------------------------------------
class WeightTable:
    """The DL19 passages' model weights (by text) and each word's mean weight over them; word splitting as the
    model's (its tokenizer's words, pieces joined), without torch."""

    def __init__(self, folder: Path, model: str):
        from tokenizers import Tokenizer

        arrays = np.load(folder / "weights.npz")
        self.offsets, self.word_ids, self.weights = arrays["offsets"], arrays["word_ids"], arrays["weights"]
        self.vocabulary = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
        texts = json.loads((folder / "texts.json").read_text(encoding="utf-8"))
        self.rows = {t: i for i, t in enumerate(texts)}
        sums = np.bincount(self.word_ids, weights=self.weights, minlength=len(self.vocabulary))
        counts = np.bincount(self.word_ids, minlength=len(self.vocabulary))
        self.mean = dict(zip(self.vocabulary, (sums / np.maximum(counts, 1)).tolist()))
        self.tokenizer = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))

    def __call__(self, text: str) -> list[tuple[str, float]]:
        row = self.rows.get(text)
        if row is not None:
            ids = self.word_ids[self.offsets[row]:self.offsets[row + 1]]
            values = self.weights[self.offsets[row]:self.offsets[row + 1]]
            return [(self.vocabulary[i], float(w)) for i, w in zip(ids.tolist(), values.tolist())]
        return [(w, self.mean.get(w, 0.0)) for w in self.words(text)]

    def words(self, text: str) -> list[str]:
        if not text.strip():
            return []
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        words: list[str] = []
        previous = None
        for token, word_id in zip(encoding.tokens, encoding.word_ids):
            if word_id is None:
                continue
            piece = token[2:] if token.startswith("##") else token
            if word_id != previous:
                words.append(piece)
                previous = word_id
            else:
                words[-1] += piece
        return words


def write_weight_table(folder: Path, model: str) -> Path:
    """The shipped model's weights of the DL19 passages, weighed chunk by chunk as the build weighs them."""
    if (folder / "weights.npz").is_file():
        return folder
    from tqdm.auto import tqdm

    from pyserini_ext.data import document_text
    from pyserini_ext.data.text import sanitize_texts
    from pyserini_ext.encode.deepct import RuntimeDeepCTModel
    from pyserini_ext.index.deepct import DeepCTIndexSettings
    from pyserini_ext.index.streaming import DEFAULT_CHUNK_DOCS

    folder.mkdir(parents=True, exist_ok=True)
    model_ = RuntimeDeepCTModel(model)
    batch = DeepCTIndexSettings().batch_size
    texts = sanitize_texts((document_text(doc) for _, doc in base_corpus()), "corpus")
    vocabulary: dict[str, int] = {}
    word_ids, weights, offsets = [], [], [0]
    for start in tqdm(range(0, len(texts), DEFAULT_CHUNK_DOCS), desc="DL19 passages' weights"):
        for occurrences in model_.word_weights(texts[start:start + DEFAULT_CHUNK_DOCS], batch):
            word_ids += [vocabulary.setdefault(w, len(vocabulary)) for w, _ in occurrences]
            weights += [x for _, x in occurrences]
            offsets.append(len(word_ids))
    (folder / "vocabulary.json").write_text(json.dumps(list(vocabulary)), encoding="utf-8")
    (folder / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    np.savez(folder / "weights.tmp.npz", offsets=np.array(offsets, np.int64), word_ids=np.array(word_ids, np.int32),
             weights=np.array(weights, np.float32))
    os.replace(folder / "weights.tmp.npz", folder / "weights.npz")
    return folder


def _builder_class():
    from pyserini_ext.index.deepct import DeepCTIndexBuilder

    class SyntheticDeepCTBuilder(DeepCTIndexBuilder):
        """The DeepCT builder with `weigh` replaced by the cached and synthetic word weights."""

        def weigh(self, texts):
            if not hasattr(self, "_table"):
                self._table = WeightTable(Path(self.runtime["weights"]), self.model)
            return [self._table(t) for t in texts]

    return SyntheticDeepCTBuilder


# ---- child processes -----------------------------------------------------------------------------------------
def child_build(args: argparse.Namespace) -> None:
    from pyserini_ext.data import iter_corpus
    from pyserini_ext.index.deepct import DeepCTIndexBuilder, read_index_metadata
    from pyserini_ext.index.streaming import build, build_on_ray

    if args.weights:
        builder = _builder_class()(args.model, runtime={"weights": args.weights})
    else:
        builder = DeepCTIndexBuilder(args.model)
    common = {"total": args.size, "overwrite": True, "resume": False, "progress": False}
    if args.workers > 1:
        import ray

        ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": ONE_THREAD})
        build_on_ray(builder, iter_corpus(args.corpus), args.output, workers=args.workers, **common)
        # the Lucene merge ran in a child process (finalise, when Ray runs here): its peak, read before Ray's own
        # processes end; at most overstated by this process's RSS when it forked
        merge_mb = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
        ray.shutdown()
    else:
        build(builder, iter_corpus(args.corpus), args.output, **common)
        merge_mb = None
    info = read_index_metadata(args.output)
    print(json.dumps({"documents": info["documents"], "parts": info["parts"], "total_tf": info["total_tf"],
                      "self_rss_mb": memory_mb(), "merge_rss_mb": merge_mb}))


def child_search(args: argparse.Namespace) -> None:
    from pyserini.search.lucene import LuceneSearcher

    from pyserini_ext.data import load_dataset

    queries = load_dataset(DATASET).split_queries(SPLIT)
    searcher = LuceneSearcher(args.index)
    searcher.set_bm25(*deepct_bm25())
    times, cpu_times, run = [], [], {}
    for round_ in range(ROUNDS + 1):
        for qid, text in queries.items():
            start, cpu = time.perf_counter(), time.thread_time()
            hits = searcher.search(text, k=HITS)
            if round_:  # round 0 warms the JVM up
                times.append(time.perf_counter() - start)
                # the search runs in this thread (Lucene through JNI): its CPU time is the query's cost on a
                # loaded machine, where wall time mostly measures the neighbours
                cpu_times.append(time.thread_time() - cpu)
            run[qid] = [(h.docid, float(h.score)) for h in hits]
    Path(args.run).write_text(json.dumps(run))
    print(json.dumps({"p50_ms": 1000 * float(np.percentile(times, 50)),
                      "p95_ms": 1000 * float(np.percentile(times, 95)),
                      "cpu_p50_ms": 1000 * float(np.percentile(cpu_times, 50)), "self_rss_mb": memory_mb()}))


# ---- checks in this process (not measured) -------------------------------------------------------------------
def exhaustive(index: Path, queries: dict[str, str]) -> dict[str, tuple[int, list[tuple[str, float]]]]:
    """Per query: documents holding a query term, and the top 20 of exhaustive BM25 scoring (every one of them
    scored: no early termination) of the query Anserini builds from the text (a bag of analyzed terms, boosted by
    their counts)."""
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    from java_bridge import autoclass
    from java_bridge.lucene import bm25_similarity, weighted_terms_query

    analyzer = Analyzer(get_lucene_analyzer())  # starts the JVM with Anserini's classpath, before jnius is imported
    from jnius import cast

    directory = autoclass("org.apache.lucene.store.FSDirectory").open(autoclass("java.io.File")(str(index)).toPath())
    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
    searcher = autoclass("org.apache.lucene.search.IndexSearcher")(cast("org.apache.lucene.index.IndexReader", reader))
    searcher.setSimilarity(bm25_similarity(*deepct_bm25()))
    collector_class = autoclass("org.apache.lucene.search.TopScoreDocCollector")
    no_early_end = autoclass("java.lang.Integer").MAX_VALUE
    stored_fields = reader.storedFields()
    found = {}
    for qid, text in queries.items():
        terms = Counter(analyzer.analyze(text))
        if not terms:
            found[qid] = (0, [])
            continue
        collector = collector_class.create(20, no_early_end)
        searcher.search(weighted_terms_query(terms), cast("org.apache.lucene.search.Collector", collector))
        top = collector.topDocs()
        found[qid] = (int(top.totalHits.value),
                      [(stored_fields.document(d.doc).get("id"), float(d.score)) for d in top.scoreDocs])
    reader.close()
    directory.close()
    return found


def recall_at_10(run: dict, exact: dict) -> float:
    """Share of the exhaustive top 10 the shipped search returns in its top 10 (documents tied with the 10th
    exhaustive score count as the same rank: their order is a tie-break)."""
    shares = []
    for qid, (_, top) in exact.items():
        if not top:
            continue
        tenth = top[min(9, len(top) - 1)][1]
        eligible = {d for d, s in top if s >= tenth - 1e-4}
        shares.append(len({d for d, _ in run.get(qid, [])[:10]} & eligible) / min(10, len(top)))
    return float(np.mean(shares))


def same_hits(index: Path, other: Path, queries: dict[str, str]) -> bool:
    """Two indexes give the same statistics and top-10 BM25 hits (docids and scores) for every query."""
    from pyserini.index.lucene import LuceneIndexReader
    from pyserini.search.lucene import LuceneSearcher

    if LuceneIndexReader(str(index)).stats() != LuceneIndexReader(str(other)).stats():
        return False
    hits = []
    for folder in (index, other):
        searcher = LuceneSearcher(str(folder))
        searcher.set_bm25(*deepct_bm25())
        hits.append({q: [(h.docid, h.score) for h in searcher.search(t, k=10)] for q, t in queries.items()})
        searcher.close()
    return hits[0] == hits[1]


# ---- the rows ------------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, workdir: Path, fresh: bool):
        self.root = Path(workdir) / "deepct"
        self.corpora = Path(workdir) / "corpora"
        (self.root / "rows").mkdir(parents=True, exist_ok=True)
        self.fresh = fresh
        self.model = shipped_model()

    def cached(self, name: str, make) -> dict:
        path = self.root / "rows" / f"{name}.json"
        if path.is_file() and not self.fresh:
            return json.loads(path.read_text())
        row = make()
        path.write_text(json.dumps(row, indent=1))
        return row

    def run(self, command: list, what: str) -> dict:
        print(f"[scale_deepct] {what}", file=sys.stderr, flush=True)
        return measure(["nice", "-n", "5", *command], env=ONE_THREAD)

    def built(self, n: int, source: str, workers: int) -> tuple[Path, dict]:
        name = f"{source}-{n}" + ("-ray" if workers > 1 else "")
        output = self.root / name
        corpus = write_corpus(n, self.corpora / f"corpus-{n}.jsonl")
        weights = ["--weights", write_weight_table(self.root / "weights", self.model)] if source == "synthetic" else []
        result = self.cached(name + ".build", lambda: self.run(
            [*module_command("scale_deepct"), "build", "--size", n, "--corpus", corpus, "--model", self.model,
             "--output", output, "--workers", workers, *weights], f"{name}: build"))
        return output, result

    def row(self, n: int, source: str, ray: bool) -> dict:
        from pyserini_ext.data import load_dataset
        from pyserini_ext.evaluation import evaluate

        dataset = load_dataset(DATASET)
        queries, qrels = dataset.split_queries(SPLIT), dataset.qrels(SPLIT)
        index, built = self.built(n, source, 1)
        run_file = index.with_name(index.name + ".run.json")
        searched = self.cached(index.name + ".search", lambda: self.run(
            [*module_command("scale_deepct"), "search", "--index", index, "--run", run_file], f"{index.name}: search"))
        run = json.loads(run_file.read_text())

        def checks() -> dict:
            exact = exhaustive(index, queries)
            return {"matched": float(np.mean([m for m, _ in exact.values()])) / n,
                    "recall10": recall_at_10(run, exact),
                    "ndcg10": evaluate(qrels, run, ["ndcg_cut_10"])["ndcg_cut_10"]}

        checked = self.cached(index.name + ".checks", checks)
        row = {"model": "deepct", "variant": "bm25", "N": n, "source": source,
               "build_s": built["seconds"], **({"build_cpu_s": built["cpu_seconds"]} if "cpu_seconds" in built else {}),
               "build_rss_mb": built["self_rss_mb"], "parts": built["parts"],
               "index_mb": round(sum(f.stat().st_size for f in index.iterdir()) / 2 ** 20, 1),
               "search_rss_mb": searched["self_rss_mb"], "p50_ms": round(searched["p50_ms"], 2),
               "p95_ms": round(searched["p95_ms"], 2), "p50_cpu_ms": round(searched["cpu_p50_ms"], 2),
               "touched_pct": round(100 * checked["matched"], 2),
               "recall_at_10_vs_exact": round(checked["recall10"], 4), "ndcg_at_10": round(checked["ndcg10"], 4)}
        if ray:
            ray_index, on_ray = self.built(n, source, 2)
            same = self.cached(ray_index.name + ".same", lambda: {"same": same_hits(index, ray_index, queries)})
            shutil.rmtree(ray_index, ignore_errors=True)  # compared once; the row keeps its figures
            row.update({"ray_build_s": on_ray["seconds"], "ray_driver_rss_mb": on_ray["self_rss_mb"],
                        "ray_merge_rss_mb": on_ray["merge_rss_mb"], "ray_same": same["same"]})
        return row


def rows(sizes: list[int] | tuple[int, ...] = SIZES, workdir: str | os.PathLike = "runs/scale", ray: bool = True,
         fresh: bool = False) -> list[dict]:
    """Every row for `sizes` (see the module docstring); measured ones are reused from `workdir`."""
    bench = Bench(Path(workdir), fresh)
    found = []
    for n in sorted(sizes):
        if n <= REAL_PASSAGES:
            found.append(bench.row(n, "text", ray))
        if n >= SYNTHETIC_FROM:
            found.append(bench.row(n, "synthetic", ray))
    return found


COLUMNS = (("N", "N", "d"), ("source", "weights", "s"), ("build_s", "build s", ".0f"),
           ("build_cpu_s", "build CPU s", ".0f"), ("build_rss_mb", "build MB", ".0f"), ("ray_build_s", "ray s", ".0f"),
           ("ray_driver_rss_mb", "ray driver MB", ".0f"), ("ray_merge_rss_mb", "ray merge MB", ".0f"),
           ("ray_same", "ray = one", ""),
           ("index_mb", "index MB", ".1f"), ("search_rss_mb", "search MB", ".0f"), ("p50_ms", "p50 ms", ".1f"),
           ("p95_ms", "p95 ms", ".1f"), ("p50_cpu_ms", "p50 CPU ms", ".1f"), ("touched_pct", "matched %", ".1f"),
           ("recall_at_10_vs_exact", "recall@10", ".3f"), ("ndcg_at_10", "nDCG@10", ".4f"))


def markdown(found: list[dict]) -> str:
    lines = ["| " + " | ".join(title for _, title, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in found:
        lines.append("| " + " | ".join(format(row[key], spec) if key in row else "" for key, _, spec in COLUMNS)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("build")
    child.add_argument("--size", type=int, required=True)
    child.add_argument("--corpus", required=True)
    child.add_argument("--model", required=True)
    child.add_argument("--output", required=True)
    child.add_argument("--workers", type=int, default=1)
    child.add_argument("--weights", help="synthetic weights: the folder of the cached DL19 weights")
    search = sub.add_parser("search")
    search.add_argument("--index", required=True)
    search.add_argument("--run", required=True)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated corpus sizes")
    parser.add_argument("--workdir", default="runs/scale")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="measure again rather than reuse measured rows")
    args = parser.parse_args()
    if args.command == "build":
        return child_build(args)
    if args.command == "search":
        return child_search(args)
    found = rows([int(s) for s in args.sizes.split(",")], args.workdir, not args.no_ray, args.fresh)
    print(json.dumps(found))
    print(markdown(found))


if __name__ == "__main__":
    main()

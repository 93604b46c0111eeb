"""`make report`: the shipped models, the baselines and their fusions with BM25 (RRF, weighted min-max), evaluated
through the unchanged Pyserini commands on SciFact (test), the DL19 subset, Cranfield and Vaswani.

    python scripts/report.py                                   # everything (hours of CPU on 2 cores)
    python scripts/report.py --datasets cranfield --methods bm25 deepct rrf-deepct --threads 2
    python scripts/report.py --datasets cranfield --subset 500  # development: first 500 + all judged documents

Every step is a subprocess (`python -m pyserini.index.lucene`, `pyserini.encode`, `pyserini.search.lucene`,
`pyserini.search.faiss`, `pyserini.fusion`, `pyserini.eval.trec_eval`; `pyserini-ext` only for the DeepCT
index build, QL-JM search, AligneR index/search and weighted min-max fusion), printed with its wall time and
logged with its output to `<workdir>/commands.log`. A step whose output exists is skipped: outputs are written
under a `.partial` name and renamed when the step succeeds, so an existing output is complete. Index and run names
carry the model folder's name and a fingerprint of its files, so a retrained model is never scored with a stale
index.

Nothing is tuned on test queries. The settings the report chooses, DeepCT's BM25 k1/b and its QL-JM lambda, are
chosen once for all datasets on development queries: SciFact's train split and an MS MARCO dev set built from the 100
training triples (corpus = DL19 subset passages + the 200 triple passages, qrels = each query's positive). RRF's k and
the lexical run's weight in min-max fusion were chosen on the same queries once, offline (`RRF_K`,
`NORM_LEXICAL_WEIGHT`).
Writes docs/report.md and the PNG plots in docs/ (with `--subset`: report-subset<N>.md and -subset<N> plots).
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyserini_ext.data import (
    atomic_output,
    data_home,
    load_dataset,
    read_triples,
    write_json_collection,
    write_topics,
    write_trec_qrels,
)
from pyserini_ext.evaluation import evaluate as evaluate_run
from pyserini_ext.index.aligner import DEFAULT_REDUCTION, DUPLICATE_COSINE
from pyserini_ext.index.lucene import lucene_index_command
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.models.folder import default_models


@dataclass(frozen=True)
class EvalSet:
    """A corpus (BEIR dataset name or folder) with the qrels split that is scored on it."""

    key: str
    dataset: str
    split: str
    title: str
    recall_level: int | None = None  # trec_eval -l for R@100 (DL19: grade >= 2); nDCG uses the graded labels


DATASETS = {
    "scifact": EvalSet("scifact", "scifact", "test", "SciFact (test, 300 queries)"),
    "dl19": EvalSet("dl19", "msmarco-dl19-subset", "dl19", "TREC DL19 passage, pooled subset (43 queries)", 2),
    "cranfield": EvalSet("cranfield", "cranfield", "test", "Cranfield (225 queries)"),
    "vaswani": EvalSet("vaswani", "vaswani", "test", "Vaswani / NPL (93 queries)"),
}
MSMARCO_DEV = "msmarco-dev"
DEV_SETS = ("scifact-train", MSMARCO_DEV)
OURS = ("aggretriever", "deepct", "aligner")
DEEPCT_QUERY = ("deepct-query", "deepct-index-query")  # query words weighted by the DeepCT model (DeepCT-Query)
BASE_METHODS = ("bm25", "splade-tiny", "minilm", "aggretriever", "deepct", "deepct-qljm", *DEEPCT_QUERY, "aligner")
FUSED = ("aggretriever", "deepct", "aligner", "minilm")
# Fusions in the report: "rrf-X" = RRF of BM25 and X (`python -m pyserini.fusion --method rrf`); "norm-X" = each
# run's scores min-max normalised per query, then summed with the lexical run (BM25, or DeepCT-Query) weighted
# NORM_LEXICAL_WEIGHT and the rest sharing the remainder (`pyserini-ext fusion normalize --weights`; Pyserini's
# `--method normalize` has equal weights only)
FUSIONS = {"rrf": "RRF", "norm": "min-max"}
OURS_FUSED = "ours"  # "rrf-ours", "norm-ours": BM25 and all three of our models
OWN_LEXICAL_FUSED = "dq-aligner"  # DeepCT-Query in BM25's place, with AligneR: a fusion of our models alone
FUSED_RUNS = {**{m: ("bm25", m) for m in FUSED}, OURS_FUSED: ("bm25", *OURS),
              OWN_LEXICAL_FUSED: ("deepct-query", "aligner")}  # what each fusion fuses, the lexical run first
METHODS = (*BASE_METHODS, *(f"{f}-{m}" for f in FUSIONS for m in FUSED_RUNS), "aligner-pruning")
LABELS = {
    "bm25": "BM25 (k1 0.9, b 0.4)",
    "splade-tiny": "splade-tiny impact",
    "minilm": "all-MiniLM-L6-v2 (Faiss flat)",
    "aggretriever": "Aggretriever (ours)",
    "deepct": "DeepCT-Index + BM25 (ours)",
    "deepct-qljm": "DeepCT-Index + QL-JM (ours)",
    "deepct-query": "DeepCT-Query + BM25, plain index (ours)",
    "deepct-index-query": "DeepCT-Index + DeepCT-Query + BM25 (ours)",
    "aligner": "AligneR (ours)",
    **{f"{f}-{m}": f"{name}({', '.join({'bm25': 'BM25', 'deepct-query': 'DeepCT-Query'}.get(r, r) for r in runs)})"
       for f, name in FUSIONS.items() for m, runs in FUSED_RUNS.items()},
}
# k1 up to 50: with 2.0-10.0 only, the best mean was the grid's edge (10); 20 and 50 were added on 2026-12-03
DEEPCT_GRID = tuple(itertools.product((0.9, 2.0, 5.0, 10.0, 20.0, 50.0), (0.4, 0.7, 0.9)))
DEEPCT_QLJM_GRID = (0.1, 0.2, 0.4, 0.6, 0.8, 0.9)  # Jelinek-Mercer lambda (weight of the collection model)
PRUNING_BETAS = (1.0, 0.4, 0.2, 0.1)
# RRF's k (Pyserini's default 60), chosen on the development queries (nDCG@10 at k 10 / 30 / 60 / 100). SciFact
# train: RRF(BM25, AligneR) 0.7179 / 0.7141 / 0.7119 / 0.7108, RRF(BM25, MiniLM) 0.7223 / 0.7204 / 0.7138 / 0.7130,
# RRF(BM25, AligneR, DeepCT) 0.7208 / 0.7170 / 0.7143 / 0.7140; MS MARCO triples dev: RRF(BM25, AligneR) 0.9492 /
# 0.9506 / 0.9506 / 0.9506, RRF(BM25, DeepCT) 0.8842 / 0.8840 / 0.8841 / 0.8840. Best mean for RRF(BM25, AligneR): 10.
# Which fusion of our models (SciFact train, 809 queries, k 10, with the agg+ Aggretriever): BM25 + Aggretriever
# 0.7153, BM25 + AligneR 0.7179, BM25 + Aggretriever + AligneR 0.7240, BM25 + all three 0.7272 (FUSED_OURS).
RRF_K = 10
# The lexical run's weight in min-max fusion, chosen on the development queries (nDCG@10 of BM25 + AligneR at BM25
# weight 0.1 / 0.2 / 0.3 / 0.4 / 0.5): SciFact train 0.7143 / 0.7236 / 0.7312 / 0.7331 / 0.7311, MS MARCO triples dev
# 0.9605 / 0.9541 / 0.9491 / 0.9432 / 0.9345; best mean: 0.3 (0.8402, against RRF k 10's 0.8354: 0.7179 and 0.9529).
# Equal weights (0.5, Pyserini's `--method normalize`) win on SciFact train and lose on MS MARCO (docs/fusion.md).
# DeepCT-Query + AligneR at 0.2 / 0.3 / 0.4: SciFact train 0.7241 / 0.7318 / 0.7313, MS MARCO 0.9535 / 0.9541 /
# 0.9489; best mean: 0.3 again (0.8430; RRF k 10: 0.8369).
NORM_LEXICAL_WEIGHT = 0.3
HITS = 1000
BM25_K1_B = (0.9, 0.4)  # Pyserini's defaults, for BM25 on the plain index


# ---------------------------------------------------------------------------------------------------------
# small helpers of this script

def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` through pyserini-ext's atomic output (a complete file or none, even on Ctrl-C)."""
    with atomic_output(path, overwrite=True) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def partial_path(output: Path) -> Path:
    """`run.bm25.txt` -> `run.bm25.partial.txt` (numpy and Pyserini keep the last suffix)."""
    return output.with_name(f"{output.stem}.partial{output.suffix}")


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def model_tag(folder: Path) -> str:
    """`<folder name>-<8 hex>`: the hash covers file names and contents, so a retrained model changes it and a
    checkout or copy of the same files does not. The encoders' own caches inside the folder (the exported ONNX
    graphs in `onnx/`) are left out."""
    digest = hashlib.sha256()
    root = folder.resolve()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != "onnx"):
        digest.update(f"{path.relative_to(root)}\0".encode())
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return f"{folder.name}-{digest.hexdigest()[:8]}"


def subset_corpus(corpus: Mapping[str, Mapping[str, str]], judged: Iterable[str], size: int
                  ) -> dict[str, Mapping[str, str]]:
    """The first `size` documents plus every judged one (in corpus order): for development runs only."""
    keep = set(judged) | set(itertools.islice(corpus, size))
    return {docid: doc for docid, doc in corpus.items() if docid in keep}


def base_methods(method: str) -> tuple[str, ...]:
    """The base methods whose runs `method` needs: itself, or the runs a fusion row fuses (the lexical run first)."""
    for fusion in FUSIONS:
        if method.startswith(f"{fusion}-"):
            return FUSED_RUNS[method.removeprefix(f"{fusion}-")]
    return (method,)


def build_msmarco_dev_set(passages: Mapping[str, Mapping[str, str]], triples_path: Path, out_dir: Path) -> Path:
    """A BEIR folder for development queries: corpus = `passages` + `triples-p{i}` / `triples-n{i}`,
    queries `triples-q{i}` = the triples' queries, qrels/dev.tsv = each query's positive (relevance 1)."""
    triples = read_triples(triples_path)
    clash = {f"triples-{k}{i}" for i in range(len(triples)) for k in "pn"} & set(passages)
    if clash:
        raise ValueError(f"passage ids clash with the triple passages' ids: {sorted(clash)[:3]}")
    out_dir.mkdir(parents=True, exist_ok=True)

    def corpus_lines():
        for docid, doc in passages.items():
            yield json.dumps({"_id": docid, "title": doc.get("title", ""), "text": doc.get("text", "")},
                             ensure_ascii=False) + "\n"
        for i, (_, positive, negative) in enumerate(triples):
            for kind, text in (("p", positive), ("n", negative)):
                yield json.dumps({"_id": f"triples-{kind}{i}", "title": "", "text": text}, ensure_ascii=False) + "\n"

    atomic_write_text(out_dir / "corpus.jsonl", "".join(corpus_lines()))
    atomic_write_text(out_dir / "queries.jsonl", "".join(
        json.dumps({"_id": f"triples-q{i}", "text": query}, ensure_ascii=False) + "\n"
        for i, (query, _, _) in enumerate(triples)))
    atomic_write_text(out_dir / "qrels" / "dev.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
        f"triples-q{i}\ttriples-p{i}\t1\n" for i in range(len(triples))))
    return out_dir


def evaluate(qrels: Path, run: Path, recall_level: int | None) -> dict[str, float]:
    """nDCG@10 on the graded labels and R@100 (with `-l recall_level` where given), by Pyserini's trec_eval."""
    return evaluate_run(qrels, run, ("ndcg_cut_10", "recall_100"), recall_level=recall_level)


def lucene_grid(index: Path, topics: Path, qrels: Path, similarities: Sequence[tuple[float, ...]], threads: int,
                hits: int = 100) -> list[dict[str, float]]:
    """nDCG@10 and R@100 over a Lucene index for each similarity, in one JVM: (k1, b) is BM25 (Pyserini's
    LuceneSearcher.set_bm25, what `python -m pyserini.search.lucene --bm25 --k1 --b` runs), (lambda,) is QL-JM
    (what `pyserini-ext lucene search --qljm --lambda` runs); scored by ir_measures, a query without hits counts
    0, as with trec_eval -c."""
    import ir_measures
    from ir_measures import R, nDCG

    from pyserini_ext.search.lucene import ClassicLuceneSearcher

    queries = dict(line.rstrip("\n").split("\t", 1) for line in topics.read_text(encoding="utf-8").splitlines()
                   if line.strip())
    judged = list(ir_measures.read_trec_qrels(str(qrels)))
    qids = {q.query_id for q in judged}
    searcher = ClassicLuceneSearcher(str(index))
    figures = []
    for similarity in similarities:
        if len(similarity) == 2:
            searcher.set_bm25(*similarity)
        else:
            searcher.set_qljm(*similarity)
        results = searcher.batch_search(list(queries.values()), list(queries), k=hits, threads=threads)
        run = {qid: {hit.docid: hit.score for hit in hits_} for qid, hits_ in results.items() if hits_}
        totals = {"ndcg_cut_10": 0.0, "recall_100": 0.0}
        for metric in ir_measures.iter_calc([nDCG @ 10, R @ 100], judged, run):
            totals["ndcg_cut_10" if metric.measure == nDCG @ 10 else "recall_100"] += metric.value
        figures.append({k: v / len(qids) for k, v in totals.items()})
    searcher.close()
    return figures


def eval_command(qrels: Path, run: Path, recall_level: int | None) -> str:
    base = "python -m pyserini.eval.trec_eval -c"
    if recall_level is None:
        return f"{base} -m ndcg_cut.10 -m recall.100 {qrels} {run}"
    return f"{base} -m ndcg_cut.10 {qrels} {run}\n{base} -l {recall_level} -m recall.100 {qrels} {run}"


# ---------------------------------------------------------------------------------------------------------
# markdown and plots

def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return f"{value:.4f}" if isinstance(value, float) else ("–" if value is None else str(value))

    align = ["---", *["---:"] * (len(header) - 1)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def dataset_table(results: Mapping[str, Mapping[str, float]]) -> str:
    """rows = methods (in METHODS order), columns nDCG@10, R@100, index MB (fusions: the two indexes)."""
    rows = []
    for method in METHODS:
        if method in results:
            r = results[method]
            rows.append((LABELS.get(method, method), r["ndcg_cut_10"], r["recall_100"],
                         f"{r['index_mb']:.1f}" if r.get("index_mb") is not None else None))
    return markdown_table(("method", "nDCG@10", "R@100", "index MB"), rows)


def summary_table(results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """rows = methods, columns = nDCG@10 per dataset and their mean over the datasets where it ran."""
    datasets = list(results)
    rows = []
    for method in METHODS:
        values = [results[d].get(method, {}).get("ndcg_cut_10") for d in datasets]
        if any(v is not None for v in values):
            present = [v for v in values if v is not None]
            mean = sum(present) / len(present) if len(present) == len(values) else None
            rows.append((LABELS.get(method, method), *values, mean))
    return markdown_table(("nDCG@10", *datasets, "mean"), rows)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def method_family(method: str) -> str:
    """'baseline', 'ours', or the fusion's name: what the effectiveness plot colours a bar by."""
    if method in BASE_METHODS:
        return "ours" if method in (*OURS, "deepct-qljm", *DEEPCT_QUERY) else "baseline"
    return FUSIONS[method.split("-", 1)[0]]


def plot_effectiveness(results: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path) -> Path:
    """One panel per dataset, a labelled horizontal bar per method (20+ methods: a legend of colours would not
    be readable), coloured by family, with its nDCG@10 written at the bar's end."""
    plt = _pyplot()
    datasets = list(results)
    methods = [m for m in METHODS if any(m in results[d] for d in datasets)]
    colours = {"baseline": "0.6", "ours": "tab:blue", **dict(zip(FUSIONS.values(), ("tab:orange", "tab:green")))}
    fig, axes = plt.subplots(1, len(datasets), sharey=True, squeeze=False,
                             figsize=(3 + 2.6 * len(datasets), 1.5 + 0.26 * len(methods)))
    rows = range(len(methods))[::-1]  # the first method at the top
    for ax, dataset in zip(axes[0], datasets):
        values = [results[dataset].get(m, {}).get("ndcg_cut_10") for m in methods]
        ax.barh(rows, [v or 0.0 for v in values], color=[colours[method_family(m)] for m in methods])
        top = max((v for v in values if v is not None), default=1.0)
        for row, value in zip(rows, values):
            ax.text((value or 0.0) + 0.01 * top, row, "–" if value is None else f"{value:.3f}", va="center",
                    fontsize=6)
        ax.set_xlim(0, 1.18 * top)
        ax.set_title(dataset)
        ax.set_xlabel("nDCG@10")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(list(rows), [LABELS.get(m, m) for m in methods], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_pruning(pruning: Mapping[str, Mapping[float, Mapping[str, float]]], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for dataset, points in pruning.items():
        betas = sorted(points)
        ax.plot([100 * b for b in betas], [points[b]["ndcg_cut_10"] for b in betas], "o-", label=dataset)
    ax.set_xscale("log")
    ticks = sorted({100 * b for points in pruning.values() for b in points})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlabel(f"document vectors kept at index time ({DEFAULT_REDUCTION}), --beta-d (%)")
    ax.set_ylabel("nDCG@10")
    ax.set_title(f"AligneR index-time token reduction ({DEFAULT_REDUCTION})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_size(results: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = "osD^v<>"
    for i, (dataset, rows) in enumerate(results.items()):
        points = [(m, r) for m, r in rows.items() if m in BASE_METHODS and r.get("index_mb")]
        ax.scatter([r["index_mb"] for _, r in points], [r["ndcg_cut_10"] for _, r in points],
                   marker=markers[i % len(markers)], label=dataset)
        for method, r in points:
            ax.annotate(method, (r["index_mb"], r["ndcg_cut_10"]), fontsize=6, xytext=(3, 2),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("index size (MB, log scale)")
    ax.set_ylabel("nDCG@10")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------
# the pipeline

@dataclass
class Corpus:
    """One corpus' Pyserini inputs in the work folder, and the qrels splits scored on it."""

    name: str
    folder: Path
    beir: str  # dataset name or BEIR folder (for `pyserini-ext ... --dataset`)
    documents: int
    topics: dict[str, Path] = field(default_factory=dict)
    qrels: dict[str, Path] = field(default_factory=dict)

    @property
    def collection(self) -> Path:
        return self.folder / "collection"


class Report:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.root = Path(args.workdir) / (f"subset{args.subset}" if args.subset else "full")
        self.root.mkdir(parents=True, exist_ok=True)
        self.log = self.root / "commands.log"
        self.timings_path = self.root / "timings.json"
        self.timings: dict[str, float] = (json.loads(self.timings_path.read_text())
                                          if self.timings_path.exists() else {})
        self.commands: dict[str, list[str]] = {}
        self.steps = {"run": 0, "cached": 0}
        self.env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
                    "TOKENIZERS_PARALLELISM": "false"}
        self.py = sys.executable
        self.corpora: dict[str, Corpus] = {}
        models = Path(args.models_dir)
        self.model_dirs = {m: (models / getattr(args, f"{m}_model")) for m in OURS}
        # Pyserini picks the impact query encoder by a substring of --encoder ("splade"); the packaged
        # splade-tiny folder is called .../model, so it is reached through a link with an honest name.
        self.splade = self.root / "models" / "splade-tiny"
        if not self.splade.exists():
            self.splade.parent.mkdir(parents=True, exist_ok=True)
            self.splade.symlink_to(backbone_path("splade-tiny"))
        self.minilm = backbone_path("all-minilm-l6-v2")

    # -- steps --------------------------------------------------------------------------------------------

    def printable(self, command: Sequence[str]) -> str:
        return " ".join("python" if c == self.py else shlex.quote(str(c)) for c in command)

    def step(self, group: str, name: str, command: list[str], output: Path) -> Path:
        """Run `command` unless `output` exists; the command writes to output's .partial name, renamed at the end."""
        text = self.printable(command)
        self.commands.setdefault(group, []).append(text)
        if output.exists():
            print(f"  [cached] {name}: {output}", flush=True)
            self.steps["cached"] += 1
            return output
        tmp = partial_path(output)
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        command = [str(tmp) if str(c) == str(output) else str(c) for c in command]
        print(f"  [run] {name} ...", flush=True)
        started = time.perf_counter()
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"\n$ {text}\n")
            log.flush()
            proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        if proc.returncode != 0:
            raise SystemExit(f"step {name} failed ({proc.returncode}): {text}\nits output: {self.log}")
        if not tmp.exists():
            raise SystemExit(f"step {name} wrote no {tmp}: {text}\nits output: {self.log}")
        os.replace(tmp, output)
        seconds = time.perf_counter() - started
        self.timings[f"{group}/{name}"] = round(seconds, 1)
        self.save_timings()
        print(f"  [done] {name} in {seconds:.0f} s", flush=True)
        self.steps["run"] += 1
        return output

    def save_timings(self) -> None:
        """Merged with the file: another report process may share the work folder."""
        saved = json.loads(self.timings_path.read_text()) if self.timings_path.exists() else {}
        self.timings = {**saved, **self.timings}
        atomic_write_text(self.timings_path, json.dumps(self.timings, indent=1))

    def scores(self, corpus: Corpus, split: str, run: Path, recall_level: int | None) -> dict[str, float]:
        """trec_eval figures of a run, kept next to it (recomputed when the run is newer)."""
        cache = run.with_name(run.name + ".eval.json")
        self.commands.setdefault(corpus.name, []).append(eval_command(corpus.qrels[split], run, recall_level))
        if cache.exists() and cache.stat().st_mtime >= run.stat().st_mtime:
            return json.loads(cache.read_text())
        result = evaluate(corpus.qrels[split], run, recall_level)
        atomic_write_text(cache, json.dumps(result))
        return result

    # -- inputs -------------------------------------------------------------------------------------------

    def corpus(self, name: str, dataset: str, splits: Sequence[str], subset: int | None = None) -> Corpus:
        """Export a dataset's corpus (once) and the topics/qrels of `splits` (always, cheap)."""
        subset = self.args.subset if subset is None else subset
        if name in self.corpora and all(s in self.corpora[name].topics for s in splits):
            return self.corpora[name]
        data = load_dataset(dataset)
        folder = self.root / name
        docs = folder / "collection" / "docs.jsonl"
        beir = folder / "beir"  # a subset corpus in BEIR layout, for `pyserini-ext ... --dataset`
        corpus = self.corpora.get(name) or Corpus(name, folder, str(beir) if subset else dataset, 0)
        if not docs.exists() or (subset and not (beir / "corpus.jsonl").exists()):
            documents = data.corpus
            if subset:
                judged = {d for s in data.splits() for q in data.qrels(s).values() for d in q}
                documents = subset_corpus(documents, judged, subset)
                atomic_write_text(beir / "corpus.jsonl", "".join(
                    json.dumps({"_id": d, **doc}, ensure_ascii=False) + "\n" for d, doc in documents.items()))
                atomic_write_text(beir / "queries.jsonl", "".join(
                    json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in data.queries.items()))
            write_json_collection(documents, folder / "collection")
        with open(docs, encoding="utf-8") as f:
            corpus.documents = sum(1 for _ in f)
        for split in splits:
            corpus.topics[split] = write_topics(data.split_queries(split), folder / f"topics.{split}.tsv")
            corpus.qrels[split] = write_trec_qrels(data.qrels(split), folder / f"qrels.{split}.txt")
        self.corpora[name] = corpus
        return corpus

    def msmarco_dev(self) -> Corpus:
        """The MS MARCO dev set (DL19 subset passages + triple passages; see build_msmarco_dev_set)."""
        source = self.root / MSMARCO_DEV / "source"
        if not (source / "qrels" / "dev.tsv").exists():
            passages = load_dataset(DATASETS["dl19"].dataset).corpus
            if self.args.subset:  # the dev qrels judge only the triple passages
                passages = subset_corpus(passages, (), self.args.subset)
            build_msmarco_dev_set(passages, Path(self.args.triples), source)
        return self.corpus(MSMARCO_DEV, str(source), ["dev"], subset=0)  # the source is already a subset

    # -- indexes ------------------------------------------------------------------------------------------

    def lucene_index(self, c: Corpus) -> Path:
        return self.step(c.name, "BM25 index", lucene_index_command(c.collection, c.folder / "index.bm25",
                                                                     self.args.threads), c.folder / "index.bm25")

    def splade_index(self, c: Corpus) -> Path:
        vectors = self.step(c.name, "splade-tiny encode", [
            self.py, "-m", "pyserini.encode", "input", "--corpus", c.collection / "docs.jsonl",
            "--fields", "title", "text", "output", "--embeddings", c.folder / "vectors.splade-tiny",
            "encoder", "--encoder", self.splade, "--encoder-class", "splade", "--fields", "title", "text",
            "--max-length", str(self.args.max_length), "--batch-size", str(self.args.batch_size),
            "--device", "cpu"], c.folder / "vectors.splade-tiny")
        return self.step(c.name, "splade-tiny impact index", [
            self.py, "-m", "pyserini.index.lucene", "--collection", "JsonVectorCollection", "--input", vectors,
            "--index", c.folder / "index.splade-tiny", "--generator", "DefaultLuceneDocumentGenerator",
            "--threads", str(self.args.threads), "--impact", "--pretokenized", "--storeRaw"],
            c.folder / "index.splade-tiny")

    def faiss_index(self, c: Corpus, label: str, encoder: Path, encoder_class: str, dimension: int,
                    extra: Sequence[str] = ()) -> Path:
        output = c.folder / f"index.{label}"
        return self.step(c.name, f"{label} encode", [
            self.py, "-m", "pyserini.encode", "input", "--corpus", c.collection / "docs.jsonl",
            "--fields", "title", "text", "output", "--embeddings", output, "--to-faiss",
            "encoder", "--encoder", encoder, "--encoder-class", encoder_class, "--fields", "title", "text",
            "--dimension", str(dimension), "--max-length", str(self.args.max_length),
            "--batch-size", str(self.args.batch_size), "--device", "cpu", *extra], output)

    def deepct_index(self, c: Corpus) -> Path:
        model = self.model("deepct")
        output = c.folder / f"index.deepct.{model_tag(model)}"
        return self.step(c.name, "DeepCT index", [
            self.py, "-m", "pyserini_ext.cli", "deepct", "index", "--model", model, "--dataset", c.beir,
            "--output", output], output)

    def aligner_index(self, c: Corpus, beta_d: float) -> Path:
        model = self.model("aligner")
        tag = model_tag(model)
        # the reduction rule is in the name: an index reduced by an older rule is never reused
        rule = ""
        if beta_d < 1:
            rule = ".pool" if DEFAULT_REDUCTION == "pool" else f".dup{DUPLICATE_COSINE:g}"
        output = c.folder / f"index.aligner.{tag}.beta{beta_d:g}{rule}"
        return self.step(c.name, f"AligneR index beta_d {beta_d:g}{rule}", [
            self.py, "-m", "pyserini_ext.cli", "aligner", "index", "--model", model, "--dataset", c.beir,
            "--encoded", c.folder / f"aligner.{tag}.encoded.npz", "--beta-d", f"{beta_d:g}",
            "--threads", str(self.args.threads), "--output", output], output)

    def model(self, method: str) -> Path:
        folder = self.model_dirs[method]
        if not folder.is_dir():
            raise SystemExit(f"{method}: model folder {folder} not found (set --models-dir / --{method}-model, "
                             f"or leave {method} out of --methods)")
        return folder

    # -- runs ---------------------------------------------------------------------------------------------

    def lucene_search(self, c: Corpus, split: str, index: Path, label: str, options: Sequence[str],
                      hits: int = HITS) -> Path:
        run = c.folder / f"run.{label}.{split}.txt"
        return self.step(c.name, f"{label} search ({split})", [
            self.py, "-m", "pyserini.search.lucene", "--index", index, "--topics", c.topics[split],
            "--output", run, *options, "--hits", str(hits), "--threads", str(self.args.threads),
            "--batch-size", "64"], run)

    def faiss_search(self, c: Corpus, split: str, index: Path, label: str, encoder: Path, encoder_class: str,
                     extra: Sequence[str] = ()) -> Path:
        run = c.folder / f"run.{label}.{split}.txt"
        return self.step(c.name, f"{label} search ({split})", [
            self.py, "-m", "pyserini.search.faiss", "--index", index, "--topics", c.topics[split],
            "--encoder", encoder, "--encoder-class", encoder_class, *extra, "--device", "cpu",
            "--output", run, "--hits", str(HITS), "--batch-size", "64", "--threads", str(self.args.threads)], run)

    def run_method(self, c: Corpus, split: str, method: str, deepct: dict | None) -> tuple[Path, list[Path]]:
        """(run, indexes it needs) for one base method."""
        if method == "bm25":
            index = self.lucene_index(c)
            k1, b = BM25_K1_B
            return self.lucene_search(c, split, index, "bm25", ["--bm25", "--k1", f"{k1:g}", "--b", f"{b:g}"]), [index]
        if method == "splade-tiny":
            index = self.splade_index(c)
            options = ["--impact", "--encoder", str(self.splade)]
            return self.lucene_search(c, split, index, "splade-tiny", options), [index]
        if method == "minilm":
            pooling = ["--pooling", "mean", "--l2-norm"]
            dimension = json.loads((self.minilm / "config.json").read_text())["hidden_size"]
            index = self.faiss_index(c, "minilm", self.minilm, "auto", dimension, pooling)
            return self.faiss_search(c, split, index, "minilm", self.minilm, "auto", pooling), [index]
        if method == "aggretriever":
            model = self.model("aggretriever")
            config = json.loads((model / "aggretriever_config.json").read_text())
            dimension = int(config.get("agg_dim", 0)) + int(config.get("cls_dim", 0))
            tag = model_tag(model)
            index = self.faiss_index(c, f"aggretriever.{tag}", model, self.args.aggretriever_document_encoder,
                                     dimension)
            return self.faiss_search(c, split, index, f"aggretriever.{tag}", model, "aggretriever"), [index]
        if method == "deepct":
            index = self.deepct_index(c)
            k1, b = deepct["k1"], deepct["b"]
            label = f"{index.name.removeprefix('index.')}.k1_{k1:g}.b_{b:g}"
            return self.lucene_search(c, split, index, label, ["--bm25", "--k1", f"{k1:g}", "--b", f"{b:g}"]), [index]
        if method == "deepct-qljm":  # Pyserini's search has no Jelinek-Mercer smoothing: our `lucene search` does
            index = self.deepct_index(c)
            lambda_ = deepct["lambda"]
            run = c.folder / f"run.{index.name.removeprefix('index.')}.qljm_{lambda_:g}.{split}.txt"
            return self.step(c.name, f"{index.name} QL-JM lambda {lambda_:g} search ({split})", [
                self.py, "-m", "pyserini_ext.cli", "lucene", "search", "--index", index, "--topics", c.topics[split],
                "--qljm", "--lambda", f"{lambda_:g}", "--hits", str(HITS), "--threads", str(self.args.threads),
                "--output", run], run), [index]
        if method in DEEPCT_QUERY:  # Pyserini's --impact would score q weight x tf, not BM25: our `deepct search`
            model = self.model("deepct")
            on_deepct = method == "deepct-index-query"
            index = self.deepct_index(c) if on_deepct else self.lucene_index(c)
            k1, b = (deepct["k1"], deepct["b"]) if on_deepct else BM25_K1_B
            run = c.folder / (f"run.deepct-query.{model_tag(model)}.{index.name.removeprefix('index.')}"
                              f".k1_{k1:g}.b_{b:g}.{split}.txt")
            return self.step(c.name, f"DeepCT-Query on {index.name}, BM25 k1 {k1:g} b {b:g} ({split})", [
                self.py, "-m", "pyserini_ext.cli", "deepct", "search", "--index", index, "--topics", c.topics[split],
                "--bm25", "--k1", f"{k1:g}", "--b", f"{b:g}", "--query-model", model, "--hits", str(HITS),
                "--threads", str(self.args.threads), "--output", run], run), [index]
        if method == "aligner":
            return self.aligner_run(c, split, self.args.aligner_beta_d)
        raise ValueError(method)

    def aligner_run(self, c: Corpus, split: str, beta_d: float) -> tuple[Path, list[Path]]:
        index = self.aligner_index(c, beta_d)
        beta_q = self.args.aligner_beta_q
        run = c.folder / f"run.{index.name.removeprefix('index.')}.q{beta_q:g}.{split}.txt"
        return self.step(c.name, f"AligneR search beta_d {beta_d:g} beta_q {beta_q:g} ({split})", [
            self.py, "-m", "pyserini_ext.cli", "aligner", "search", "--index", index, "--model", self.model("aligner"),
            "--topics", c.topics[split], "--beta-q", f"{beta_q:g}", "--hits", str(HITS),
            "--threads", str(self.args.threads), "--output", run], run), [index]

    def fuse(self, c: Corpus, split: str, runs: Sequence[Path], label: str, fusion: str) -> Path:
        """`fusion` is a FUSIONS key: RRF with k --rrf-k, or min-max with the lexical run (`runs[0]`) weighted
        --norm-lexical-weight."""
        if fusion == "rrf":
            k = self.args.rrf_k
            name = f"rrf-k{k}"
            command = [self.py, "-m", "pyserini.fusion", "--runs", *runs, "--method", "rrf", "--rrf.k", str(k)]
        else:  # the lexical run first, then the runs sharing the rest of the weight
            lexical = self.args.norm_lexical_weight
            name = f"minmax-w{lexical:g}"
            weights = [lexical, *[(1 - lexical) / (len(runs) - 1)] * (len(runs) - 1)]
            command = [self.py, "-m", "pyserini_ext.cli", "fusion", "normalize", "--runs", *runs,
                       "--weights", *(f"{w:.6g}" for w in weights)]
        output = c.folder / f"run.{name}.{label}.{split}.txt"
        return self.step(c.name, f"{name} {label} ({split})", [*command, "--output", output], output)

    # -- DeepCT's k1/b on the development queries ---------------------------------------------------------

    def tune_deepct(self) -> dict:
        """DeepCT's BM25 (k1, b) and QL-JM lambda: each the best mean nDCG@10 over the development sets."""
        given = self.args.deepct_k1_b is not None, self.args.deepct_lambda is not None
        if all(given):
            k1, b = self.args.deepct_k1_b
            return {"k1": k1, "b": b, "lambda": self.args.deepct_lambda, "grid": [], "qljm_grid": [],
                    "source": "given on the command line (--deepct-k1-b, --deepct-lambda)"}
        tag = model_tag(self.model("deepct"))
        cache = self.root / f"deepct-tuning.{tag}.json"
        result = json.loads(cache.read_text()) if cache.exists() else {}
        searched = ({(r["k1"], r["b"]) for r in result.get("grid", [])},
                    {r["lambda"] for r in result.get("qljm_grid", [])})
        if searched != (set(DEEPCT_GRID), set(DEEPCT_QLJM_GRID)):  # no cache, or one of other grids: search again
            result = self._deepct_grids()
            atomic_write_text(cache, json.dumps(result, indent=1))
            self.save_timings()
        if given[0]:
            result.update(zip(("k1", "b"), self.args.deepct_k1_b), source="k1/b given on the command line")
        if given[1]:
            result.update({"lambda": self.args.deepct_lambda, "source": "lambda given on the command line"})
        return result

    def dev_sets(self) -> dict[str, tuple[Corpus, str]]:
        return {"scifact-train": (self.corpus("scifact", "scifact", ["test", "train"]), "train"),
                MSMARCO_DEV: (self.msmarco_dev(), "dev")}

    def deepct_query_dev(self, deepct: dict) -> dict[str, dict[str, dict[str, float]]]:
        """{dev set: {method: figures}} for BM25, DeepCT-Index and the two DeepCT-Query methods, with the BM25
        settings chosen above and nothing further tuned: the development evidence for the DeepCT-Query rows."""
        return {name: {m: self.scores(c, split, self.run_method(c, split, m, deepct)[0], None)
                       for m in ("bm25", "deepct", *DEEPCT_QUERY)}
                for name, (c, split) in self.dev_sets().items()}

    def _deepct_grids(self) -> dict:
        print("DeepCT BM25 k1/b and QL-JM lambda on development queries (SciFact train + MS MARCO triples dev)",
              flush=True)
        dev = self.dev_sets()
        similarities = [*DEEPCT_GRID, *((lambda_,) for lambda_ in DEEPCT_QLJM_GRID)]
        figures, reference = {}, {}
        for name, (c, split) in dev.items():
            plain, deepct = self.lucene_index(c), self.deepct_index(c)
            started = time.perf_counter()
            print(f"  [run] {name}: {len(similarities)} settings on {deepct.name} ...", flush=True)
            self.commands.setdefault("development queries", []).append(
                f"# in one process: pyserini_ext's ClassicLuceneSearcher (Pyserini's LuceneSearcher + QL-JM):\n"
                f"#   set_bm25(k1, b), what python -m pyserini.search.lucene --index INDEX --topics "
                f"{c.topics[split]} --bm25 --k1 K1 --b B --hits 100 runs,\n#   set_qljm(lambda), what pyserini-ext "
                f"lucene search --qljm --lambda L runs; scored with ir_measures nDCG@10 and R@100 (qrels "
                f"{c.qrels[split]})")
            reference[name] = lucene_grid(plain, c.topics[split], c.qrels[split], [BM25_K1_B], self.args.threads)[0]
            figures[name] = lucene_grid(deepct, c.topics[split], c.qrels[split], similarities, self.args.threads)
            seconds = time.perf_counter() - started
            self.timings[f"development queries/{name} DeepCT grid"] = round(seconds, 1)
            print(f"  [done] {name} grid in {seconds:.0f} s", flush=True)
        rows = []
        for i, similarity in enumerate(similarities):
            row = dict(zip(("k1", "b"), similarity)) if len(similarity) == 2 else {"lambda": similarity[0]}
            row.update({name: figures[name][i] for name in dev})
            row["mean_ndcg_cut_10"] = sum(row[n]["ndcg_cut_10"] for n in dev) / len(dev)
            print(f"  {similarity}: " + ", ".join(f"{n} {row[n]['ndcg_cut_10']:.4f}" for n in dev)
                  + f", mean {row['mean_ndcg_cut_10']:.4f}", flush=True)
            rows.append(row)
        grid, qljm_grid = rows[:len(DEEPCT_GRID)], rows[len(DEEPCT_GRID):]
        best = max(grid, key=lambda r: r["mean_ndcg_cut_10"])  # ties: the first in grid order
        best_qljm = max(qljm_grid, key=lambda r: r["mean_ndcg_cut_10"])
        print(f"  chosen BM25 k1 {best['k1']:g} b {best['b']:g}, QL-JM lambda {best_qljm['lambda']:g}", flush=True)
        return {"k1": best["k1"], "b": best["b"], "lambda": best_qljm["lambda"], "grid": grid,
                "qljm_grid": qljm_grid, "bm25_reference": reference,
                "source": "each the best mean nDCG@10 over SciFact train and the MS MARCO triples dev set"}

    # -- one dataset --------------------------------------------------------------------------------------

    def evaluate_dataset(self, spec: EvalSet, methods: Sequence[str], deepct: dict | None) -> tuple[dict, dict]:
        splits = ["test", "train"] if spec.key == "scifact" else [spec.split]
        c = self.corpus(spec.key, spec.dataset, splits)
        print(f"{spec.title}: {c.documents} documents", flush=True)
        split = spec.split
        results: dict[str, dict] = {}
        runs: dict[str, Path] = {}
        indexes: dict[str, list[Path]] = {}
        needed = {part for m in methods for part in base_methods(m)}
        wanted = [m for m in BASE_METHODS if m in needed]  # BM25 first: the fusions need it

        def score(label: str, run: Path, index_paths: Sequence[Path]) -> dict:
            """Figures of one run, printed as soon as they exist."""
            figures = {**self.scores(c, split, run, spec.recall_level),
                       "index_mb": sum(folder_bytes(p) for p in index_paths) / 2 ** 20}
            print(f"  = {spec.key} {label}: nDCG@10 {figures['ndcg_cut_10']:.4f}  R@100 {figures['recall_100']:.4f}"
                  f"  index {figures['index_mb']:.1f} MB", flush=True)
            return figures

        for method in wanted:
            runs[method], indexes[method] = self.run_method(c, split, method, deepct)
            if method in methods:
                results[method] = score(LABELS[method], runs[method], indexes[method])
        def label_of(method: str) -> str:
            return runs[method].name.removeprefix("run.").removesuffix(f".{split}.txt")

        for method in methods:
            fusion = method.split("-", 1)[0]
            if fusion not in FUSIONS:
                continue
            fused = base_methods(method)
            label = (("ours." if method.endswith(f"-{OURS_FUSED}") else "")  # BM25 is the default lexical run
                     + ".".join(label_of(m) for m in fused if m != "bm25"))
            run = self.fuse(c, split, [runs[m] for m in fused], label, fusion)
            results[method] = score(LABELS[method], run, sum((indexes[m] for m in fused), []))
        pruning = {}
        if "aligner-pruning" in methods:
            for beta in PRUNING_BETAS:
                run, index = self.aligner_run(c, split, beta)
                pruning[beta] = score(f"AligneR beta_d {beta:g}", run, index)
        return results, pruning


# ---------------------------------------------------------------------------------------------------------
# docs/report.md

def training_section(model_dirs: Mapping[str, Path]) -> str:
    parts = ["## How the shipped models were trained\n"]
    for method, folder in model_dirs.items():
        parts.append(f"### {method}: `{folder}`\n")
        if not folder.is_dir():
            parts.append("Not evaluated (folder missing).\n")
            continue
        log = folder / "training_log.json"
        if log.is_file():
            data = json.loads(log.read_text())
            summary = {k: v for k, v in data.items() if not isinstance(v, list)} if isinstance(data, dict) else {}
            losses = data.get("losses") if isinstance(data, dict) else None
            if isinstance(losses, list) and losses and all(isinstance(x, (int, float)) for x in losses):
                summary["losses"] = f"{len(losses)} steps, first {losses[0]:.4f}, last {losses[-1]:.4f}"
            parts.append("training_log.json (lists summarised):\n\n```json\n"
                         + json.dumps(summary, indent=1, default=str) + "\n```\n")
        else:
            parts.append("No training_log.json (untrained or hand-made model).\n")
        card = folder / "README.md"
        if card.is_file():
            parts.append("Model card (README.md):\n\n" + "\n".join("> " + line if line else ">"
                                                                   for line in card.read_text().splitlines()) + "\n")
        else:
            parts.append("No model card (README.md).\n")
    return "\n".join(parts)


def write_report(path: Path, report: Report, results: dict, pruning: dict, deepct: dict | None,
                 plots: Mapping[str, Path], elapsed: float) -> Path:
    args = report.args
    out = ["# pyserini-ext evaluation report\n",
           f"Generated by `{report.printable([report.py, *sys.argv])}` in {elapsed / 60:.0f} min "
           f"(threads {args.threads}; {report.steps['run']} steps run, {report.steps['cached']} reused from earlier "
           f"runs, whose times are in the table of step times); work folder `{report.root}`.\n"]
    if args.subset:
        out.append(f"**Development run on corpus subsets** (first {args.subset} documents plus every judged "
                   f"one): figures are not comparable with published ones.\n")
    out.append("All runs are produced by the unchanged Pyserini commands (`pyserini-ext` only for the DeepCT "
               "index build, QL-JM and DeepCT-Query search, which Pyserini's commands cannot express, AligneR "
               "index/search and weighted min-max fusion), scored by `python -m pyserini.eval.trec_eval`: nDCG@10 on "
               "the graded judgements, R@100 (DL19: relevant = grade >= 2, `-l 2`). Index MB = bytes on disk "
               "(Lucene indexes store the raw documents, as the DeepCT index build does; Faiss and AligneR "
               "indexes hold vectors only); for fusions the sum of the fused indexes. 1000 hits per query; RRF with "
               f"k {args.rrf_k} (Pyserini's default 60; 10 was chosen on the development queries, `RRF_K` in "
               "scripts/report.py) and Pyserini's depth 1000. min-max = each run's scores min-max normalised per "
               f"query and summed, the lexical run (BM25, or DeepCT-Query) weighted {args.norm_lexical_weight:g} and "
               "the other runs sharing the rest "
               "(`pyserini-ext fusion normalize --weights`; the weight was chosen on the development queries, "
               "`NORM_LEXICAL_WEIGHT` in scripts/report.py, docs/fusion.md).\n")
    out.append("Models: " + ", ".join(f"{m} `{report.model_dirs[m]}`" for m in OURS) + "; baselines: splade-tiny "
               f"`{backbone_path('splade-tiny')}`, all-MiniLM-L6-v2 `{report.minilm}` (mean pooling, L2-normalised).\n"
               f"splade-tiny is given to Pyserini as `{report.splade}`, a link with \"splade\" in its name: "
               "`--impact --encoder` picks its query encoder by that substring.\n")
    if results:
        out.append("## Summary (nDCG@10)\n\n" + summary_table(results))
    for key, rows in results.items():
        out.append(f"## {DATASETS[key].title}\n\n" + dataset_table(rows))
        if pruning.get(key):
            table = markdown_table(("beta_d", "nDCG@10", "R@100", "index MB"),
                                   [(f"{b:g}", r["ndcg_cut_10"], r["recall_100"], f"{r['index_mb']:.1f}")
                                    for b, r in pruning[key].items()])
            out.append(f"AligneR token reduction (`--beta-d` at index time, {DEFAULT_REDUCTION}):\n\n{table}")
    for name, plot in plots.items():
        out.append(f"![{name}]({os.path.relpath(plot, path.parent)})\n")
    out.append("## Settings chosen on development queries\n")
    out.append("Nothing is tuned on test queries. Development queries: SciFact's train split (809 queries, scored on "
               "the SciFact corpus) and an MS MARCO dev set built from the 100 training triples in "
               f"`{args.triples}` (corpus = the DL19 subset's passages + the 200 triple passages `triples-p{{i}}` / "
               "`triples-n{i}`, qrels = each query's positive). BM25 uses Pyserini's defaults (k1 0.9, b 0.4) "
               "and every other model its defaults: the settings chosen are DeepCT's BM25 k1/b and its QL-JM "
               "lambda, once for all datasets, each by the best mean nDCG@10 over the two development sets (grid "
               "runs: Pyserini's LuceneSearcher, 100 hits, scored with ir_measures). RRF's k and the lexical "
               "run's weight in min-max fusion were chosen on the same two sets once, offline, by the best mean "
               "nDCG@10 of BM25 + AligneR and DeepCT-Query + AligneR (`RRF_K`, `NORM_LEXICAL_WEIGHT` in "
               "scripts/report.py; docs/fusion.md).\n")
    if deepct:
        out.append(f"DeepCT: BM25 k1 = {deepct['k1']:g}, b = {deepct['b']:g}; QL-JM lambda = {deepct['lambda']:g} "
                   f"({deepct['source']}).\n")
        if deepct.get("grid"):
            names = [n for n in DEV_SETS if n in deepct["grid"][0]]
            rows = [(f"{r['k1']:g}", f"{r['b']:g}", *(r[n]["ndcg_cut_10"] for n in names), r["mean_ndcg_cut_10"])
                    for r in deepct["grid"]]
            ref = deepct["bm25_reference"]
            rows.append(("BM25 0.9", "0.4 (plain index)", *(ref[n]["ndcg_cut_10"] for n in names),
                         sum(ref[n]["ndcg_cut_10"] for n in names) / len(names)))
            out.append(markdown_table(("k1", "b", *(f"{n} nDCG@10" for n in names), "mean"), rows))
        if deepct.get("qljm_grid"):
            names = [n for n in DEV_SETS if n in deepct["qljm_grid"][0]]
            out.append(markdown_table(("QL-JM lambda", *(f"{n} nDCG@10" for n in names), "mean"), [
                (f"{r['lambda']:g}", *(r[n]["ndcg_cut_10"] for n in names), r["mean_ndcg_cut_10"])
                for r in deepct["qljm_grid"]]))
        if deepct.get("query_dev"):
            dev = deepct["query_dev"]
            names = [n for n in DEV_SETS if n in dev]
            out.append("DeepCT-Query (the query's words weighted by the DeepCT model, `pyserini-ext deepct search "
                       "--query-model`) on the development queries, with the BM25 settings above and nothing "
                       "further tuned:\n")
            out.append(markdown_table(("method", *(f"{n} nDCG@10" for n in names), "mean"), [
                (LABELS[m], *(dev[n][m]["ndcg_cut_10"] for n in names),
                 sum(dev[n][m]["ndcg_cut_10"] for n in names) / len(names)) for m in dev[names[0]]]))
    if report.timings:
        out.append("## Wall time per step (this machine, seconds)\n\n" + markdown_table(
            ("step", "s"), [(k, f"{v:.0f}") for k, v in report.timings.items()]))
    out.append("## Commands\n\nEvery command as run (`python` = the project's venv interpreter), per corpus:\n")
    for group, commands in report.commands.items():
        unique = list(dict.fromkeys(commands))
        out.append(f"### {group}\n\n```bash\n" + "\n".join(unique) + "\n```\n")
    out.append(training_section(report.model_dirs))
    return atomic_write_text(path, "\n".join(out))


def weight_in_unit_interval(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--models-dir", default="resources/models")
    shipped = default_models()  # the defaults the bare names resolve to
    parser.add_argument("--aggretriever-model", default=shipped["aggretriever"],
                        help="folder name under --models-dir (or a path); default: the shipped default")
    parser.add_argument("--deepct-model", default=shipped["deepct"])
    parser.add_argument("--aligner-model", default=shipped["aligner"])
    parser.add_argument("--aggretriever-document-encoder", choices=("aggretriever-onnx", "aggretriever"),
                        default="aggretriever-onnx", help="corpus encoder class (same vectors; ONNX is faster)")
    parser.add_argument("--aligner-beta-d", type=float, default=1.0, help="AligneR index pruning in the main table")
    parser.add_argument("--aligner-beta-q", type=float, default=DEFAULT_BETA_Q,
                        help="AligneR query tokens kept (the searcher's default)")
    parser.add_argument("--deepct-k1-b", type=float, nargs=2, metavar=("K1", "B"),
                        help="DeepCT's BM25 k1 b instead of the development-set choice (the report says so)")
    parser.add_argument("--rrf-k", type=int, default=RRF_K, help="RRF's k (default: the development-set choice)")
    parser.add_argument("--norm-lexical-weight", type=weight_in_unit_interval, default=NORM_LEXICAL_WEIGHT,
                        help="the lexical run's (BM25's, DeepCT-Query's) weight in min-max fusion, in [0, 1] "
                             "(default: the development-set choice)")
    parser.add_argument("--deepct-lambda", type=float,
                        help="DeepCT's QL-JM lambda instead of the development-set choice (the report says so)")
    parser.add_argument("--triples", default=str(data_home() / "msmarco-train-triples-sample" / "triples.tsv.gz"))
    parser.add_argument("--max-length", type=int, default=256, help="passage tokens for pyserini.encode")
    parser.add_argument("--batch-size", type=int, default=32, help="pyserini.encode batch size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--subset", type=int, default=0,
                        help="development only: first N documents of each corpus plus every judged one")
    parser.add_argument("--skip", nargs="+", default=[], metavar="DATASET:METHOD",
                        help="leave these out (e.g. dl19:minilm when its 30k-passage encoding is not affordable); "
                             "they are left out of that dataset's table")
    parser.add_argument("--workdir", default="runs/report")
    parser.add_argument("--output", default="docs/report.md")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    started = time.perf_counter()
    report = Report(args)
    print(f"work folder {report.root}; each step's own progress bars: tail -f {report.log}", flush=True)
    needs_deepct = {"deepct", "deepct-qljm", *DEEPCT_QUERY}
    deepct = (report.tune_deepct() if any(needs_deepct & set(base_methods(m)) for m in args.methods) else None)
    if set(DEEPCT_QUERY) & set(args.methods):
        deepct["query_dev"] = report.deepct_query_dev(deepct)
    results, pruning = {}, {}
    for key in args.datasets:
        methods = [m for m in args.methods
                   if not {f"{key}:{part}" for part in (m, *base_methods(m))} & set(args.skip)]
        results[key], pruning[key] = report.evaluate_dataset(DATASETS[key], methods, deepct)
    output = Path(args.output)
    if args.subset:
        output = output.with_name(f"{output.stem}-subset{args.subset}{output.suffix}")
    suffix = f"-subset{args.subset}" if args.subset else ""
    output.parent.mkdir(parents=True, exist_ok=True)
    plots = {"nDCG@10 per dataset": plot_effectiveness(results, output.parent / f"report-effectiveness{suffix}.png"),
             "nDCG@10 vs index size": plot_size(results, output.parent / f"report-index-size{suffix}.png")}
    if any(pruning.values()):
        plots["AligneR pruning"] = plot_pruning({k: v for k, v in pruning.items() if v},
                                                output.parent / f"report-aligner-pruning{suffix}.png")
    atomic_write_text(report.root / "results.json", json.dumps(
        {"results": results, "pruning": {k: {str(b): r for b, r in v.items()} for k, v in pruning.items()},
         "deepct": deepct}, indent=1))
    write_report(output, report, results, pruning, deepct, plots, time.perf_counter() - started)
    print(f"wrote {output} and {', '.join(str(p) for p in plots.values())} in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The report's pipeline: corpora exported once into the work folder, each condition's steps run through the
cached runner (the commands of conditions.yaml), every run scored, DeepCT's settings chosen on development queries.

Index and run names carry the model folder's name and a fingerprint of its files, so a retrained model is never
scored with a stale index. Nothing is tuned on test queries: DeepCT's BM25 k1/b and QL-JM lambda are chosen once for
all datasets on SciFact's train split and an MS MARCO dev set built from the training triples (corpus = DL19 subset
passages + the triple passages, qrels = each query's positive).
"""
from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyserini_ext.data import (
    data_home,
    load_dataset,
    read_triples,
    write_json_collection,
    write_topics,
    write_trec_qrels,
)
from pyserini_ext.evaluation import evaluate as evaluate_run
from pyserini_ext.index.aligner import DEFAULT_REDUCTION, DUPLICATE_COSINE
from pyserini_ext.index.aligner.candidates import EXACT_DOCUMENTS
from pyserini_ext.index.aligner.settings import COMPRESSED_MIN_DOCUMENTS, DEFAULT_NPROBE
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.models.folder import default_models
from pyserini_ext.registry import resources_dir
from pyserini_ext.repro.conditions import (
    DEV_SETS,
    Conditions,
    EvalSet,
    Failure,
    Method,
    Step,
    Variables,
    compare,
    compare_development,
    expand_command,
    expand_text,
    expected_development,
    expected_results,
    number,
)
from pyserini_ext.repro.runner import StepRunner, atomic_write_text, folder_bytes, model_tag

MSMARCO_DEV = "msmarco-dev"
DEEPCT_METHODS = ("deepct", "deepct-qljm", "deepct-query", "deepct-index-query")  # need the development choice
DEEPCT_QUERY = ("deepct-query", "deepct-index-query")
OURS = ("aggretriever", "deepct", "aligner")


@dataclass
class Options:
    """What a report run may change; None = the conditions file's setting."""

    workdir: str = "runs/report"
    subset: int = 0  # development only: first N documents of each corpus plus every judged one
    threads: int = 2
    models_dir: str | None = None  # default: the shipped models
    aggretriever_model: str | None = None  # folder name under models_dir (or a path); default: the shipped default
    deepct_model: str | None = None
    aligner_model: str | None = None
    aggretriever_document_encoder: str = "aggretriever-onnx"
    aligner_beta_d: float | None = None
    aligner_beta_q: float = DEFAULT_BETA_Q
    deepct_k1_b: Sequence[float] | None = None
    deepct_lambda: float | None = None
    rrf_k: int | None = None
    norm_lexical_weight: float | None = None
    triples: str = field(default_factory=lambda: str(data_home() / "msmarco-train-triples-sample" /
                                                     "triples.tsv.gz"))
    max_length: int | None = None
    batch_size: int | None = None
    skip: Sequence[str] = ()  # DATASET:METHOD pairs left out
    dry_run: bool = False  # only the commands (for a report rendered from the conditions file)


@dataclass
class Corpus:
    """One corpus' Pyserini inputs in the work folder, and the qrels splits scored on it."""

    name: str
    folder: Path
    beir: str  # dataset name or BEIR folder (for `pyserini-ext ... --dataset`)
    documents: int = 0
    topics: dict[str, Path] = field(default_factory=dict)
    qrels: dict[str, Path] = field(default_factory=dict)

    @property
    def collection(self) -> Path:
        return self.folder / "collection"


def subset_corpus(corpus: Mapping[str, Mapping[str, str]], judged: Iterable[str], size: int
                  ) -> dict[str, Mapping[str, str]]:
    """The first `size` documents plus every judged one (in corpus order): for development runs only."""
    keep = set(judged) | set(itertools.islice(corpus, size))
    return {docid: doc for docid, doc in corpus.items() if docid in keep}


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
    """nDCG@10 on the graded labels and R@100 (with `-l recall_level` where given), as Pyserini's trec_eval."""
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


class Reproduction:
    """The conditions run on the corpora of a work folder (`<workdir>/full`, or `subset<N>`)."""

    def __init__(self, conditions: Conditions, options: Options):
        self.conditions = conditions
        self.options = options
        self.root = Path(options.workdir) / (f"subset{options.subset}" if options.subset else "full")
        self.runner = StepRunner(self.root, options.threads, dry_run=options.dry_run)
        self.corpora: dict[str, Corpus] = {}
        models = Path(options.models_dir) if options.models_dir else resources_dir() / "models"
        shipped = default_models()
        self.model_dirs = {m: models / (getattr(options, f"{m}_model") or shipped[m]) for m in OURS}
        # Pyserini picks the impact query encoder by a substring of --encoder ("splade"); the packaged
        # splade-tiny folder is called .../model, so it is reached through a link with an honest name.
        self.splade = self.root / "models" / "splade-tiny"
        self.minilm = backbone_path("all-minilm-l6-v2")
        given = {"rrf_k": options.rrf_k, "norm_lexical_weight": options.norm_lexical_weight,
                 "aligner_beta_d": options.aligner_beta_d, "max_length": options.max_length,
                 "batch_size": options.batch_size}
        self.settings = {**conditions.settings, **{k: v for k, v in given.items() if v is not None}}
        self.variables = Variables(
            python=sys.executable, threads=options.threads, hits=self.settings["hits"],
            max_length=self.settings["max_length"], batch_size=self.settings["batch_size"],
            bm25_k1=number(self.settings["bm25_k1"]), bm25_b=number(self.settings["bm25_b"]),
            rrf_k=self.settings["rrf_k"], norm_lexical_weight=number(self.settings["norm_lexical_weight"]),
            aligner_beta_d=number(self.settings["aligner_beta_d"]),
            aligner_rule=lambda: self.aligner_rule(float(self.settings["aligner_beta_d"])),
            aligner_path=self.aligner_path(),
            aligner_beta_q=number(options.aligner_beta_q), splade=self.splade_link,
            minilm=lambda: self.minilm,
            minilm_dim=lambda: json.loads((self.minilm / "config.json").read_text())["hidden_size"],
            aggretriever_document_encoder=options.aggretriever_document_encoder,
            aggretriever_dim=self.aggretriever_dim,
            **{f"{m}_model": (lambda m=m: self.model(m)) for m in OURS},
            **{f"{m}_tag": (lambda m=m: model_tag(self.model(m))) for m in OURS})

    # -- inputs -------------------------------------------------------------------------------------------

    def model(self, method: str) -> Path:
        folder = self.model_dirs[method]
        if not folder.is_dir():
            raise FileNotFoundError(f"{method}: model folder {folder} not found (set --models-dir / --{method}-model, "
                                    f"or leave {method} out of --methods)")
        return folder

    def splade_link(self) -> Path:
        if not self.splade.exists() and not self.options.dry_run:
            self.splade.parent.mkdir(parents=True, exist_ok=True)
            self.splade.symlink_to(backbone_path("splade-tiny"))
        return self.splade

    def aggretriever_dim(self) -> int:
        config = json.loads((self.model("aggretriever") / "aggretriever_config.json").read_text())
        return int(config.get("agg_dim", 0)) + int(config.get("cls_dim", 0))

    @staticmethod
    def aligner_rule(beta_d: float) -> str:
        """The reduction rule is in the index name: an index reduced by an older rule is never reused."""
        if beta_d >= 1:
            return ""
        return ".pool" if DEFAULT_REDUCTION == "pool" else f".dup{DUPLICATE_COSINE:g}"

    @staticmethod
    def aligner_path() -> str:
        """The command's default path is in the index and run names (compressed from this many documents up, the
        lists probed, the documents decoded): indexes and runs of an older default are never reused."""
        return f".auto{COMPRESSED_MIN_DOCUMENTS}-p{DEFAULT_NPROBE}-s{EXACT_DOCUMENTS}"

    def corpus(self, name: str, dataset: str, splits: Sequence[str], subset: int | None = None) -> Corpus:
        """Export a dataset's corpus (once) and the topics/qrels of `splits` (always, cheap)."""
        subset = self.options.subset if subset is None else subset
        if name in self.corpora and all(s in self.corpora[name].topics for s in splits):
            return self.corpora[name]
        folder = self.root / name
        beir = folder / "beir"  # a subset corpus in BEIR layout, for `pyserini-ext ... --dataset`
        corpus = self.corpora.get(name) or Corpus(name, folder, str(beir) if subset else dataset)
        self.corpora[name] = corpus
        if self.options.dry_run:
            for split in splits:
                corpus.topics[split] = folder / f"topics.{split}.tsv"
                corpus.qrels[split] = folder / f"qrels.{split}.txt"
            return corpus
        data = load_dataset(dataset)
        docs = folder / "collection" / "docs.jsonl"
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
        return corpus

    def msmarco_dev(self) -> Corpus:
        """The MS MARCO dev set (DL19 subset passages + triple passages; see build_msmarco_dev_set)."""
        source = self.root / MSMARCO_DEV / "source"
        if not (source / "qrels" / "dev.tsv").exists() and not self.options.dry_run:
            passages = load_dataset(self.conditions.datasets["dl19"].dataset).corpus
            if self.options.subset:  # the dev qrels judge only the triple passages
                passages = subset_corpus(passages, (), self.options.subset)
            build_msmarco_dev_set(passages, Path(self.options.triples), source)
        return self.corpus(MSMARCO_DEV, str(source), ["dev"], subset=0)  # the source is already a subset

    # -- steps --------------------------------------------------------------------------------------------

    def corpus_variables(self, c: Corpus, split: str) -> Variables:
        return self.variables.but(folder=c.folder, collection=c.collection, docs=c.collection / "docs.jsonl",
                                  dataset=c.beir, split=split, topics=c.topics[split], qrels=c.qrels[split])

    def run_step(self, c: Corpus, step: Step, variables: Variables) -> Path:
        output = c.folder / expand_text(step.output, variables)
        command = expand_command(step.command, variables.but(output=output))
        return self.runner.step(c.name, expand_text(step.name, variables), command, output)

    def run_method(self, c: Corpus, split: str, method: str, variables: Variables | None = None
                   ) -> tuple[Path, list[Path]]:
        """(run, indexes it needs) for one base method: its steps, then its run."""
        m: Method = self.conditions.methods[method]
        variables = self.corpus_variables(c, split) if variables is None else variables
        indexes = []
        for key in m.steps:
            step = self.conditions.steps[key]
            output = self.run_step(c, step, variables)
            variables = variables.but(**{key: output})
            if step.index:
                indexes.append(output)
        return self.run_step(c, m.run, variables), indexes

    def fuse(self, c: Corpus, split: str, runs: Sequence[Path], label: str, fusion: str) -> Path:
        """RRF, or min-max with the lexical run (`runs[0]`) weighted norm_lexical_weight and the others sharing
        the rest."""
        lexical = float(self.settings["norm_lexical_weight"])
        weights = [lexical, *[(1 - lexical) / (len(runs) - 1)] * (len(runs) - 1)]
        variables = self.corpus_variables(c, split).but(runs=list(runs), label=label,
                                                        weights=[f"{w:.6g}" for w in weights])
        return self.run_step(c, self.conditions.fusions[fusion][1], variables)

    def scores(self, corpus: Corpus, split: str, run: Path, recall_level: int | None) -> dict[str, float]:
        """trec_eval figures of a run, kept next to it (recomputed when the run is newer)."""
        templates = (self.conditions.evaluation if recall_level is None
                     else self.conditions.evaluation_with_recall_level)
        variables = Variables(qrels=corpus.qrels[split], run=run, recall_level=recall_level)
        for template in templates:
            self.runner.record(corpus.name, self.runner.display.command(expand_command(template, variables)))
        if self.options.dry_run:
            return {}
        cache = run.with_name(run.name + ".eval.json")
        if cache.exists() and cache.stat().st_mtime >= run.stat().st_mtime:
            return json.loads(cache.read_text())
        result = evaluate(corpus.qrels[split], run, recall_level)
        atomic_write_text(cache, json.dumps(result))
        return result

    # -- DeepCT's k1/b on the development queries ---------------------------------------------------------

    def tune_deepct(self) -> dict:
        """DeepCT's BM25 (k1, b) and QL-JM lambda: each the best mean nDCG@10 over the development sets (in a
        dry run: the conditions file's record)."""
        given = self.options.deepct_k1_b is not None, self.options.deepct_lambda is not None
        if all(given):
            k1, b = self.options.deepct_k1_b
            result = {"k1": k1, "b": b, "lambda": self.options.deepct_lambda, "grid": [], "qljm_grid": [],
                      "source": "given on the command line (--deepct-k1-b, --deepct-lambda)"}
        elif self.options.dry_run:
            result = expected_development(self.conditions)
        else:
            result = self._tuned_deepct()
        if given[0] and not given[1]:
            result.update(zip(("k1", "b"), self.options.deepct_k1_b), source="k1/b given on the command line")
        if given[1] and not given[0]:
            result.update({"lambda": self.options.deepct_lambda, "source": "lambda given on the command line"})
        self.variables = self.variables.but(deepct_k1=number(result["k1"]), deepct_b=number(result["b"]),
                                            deepct_lambda=number(result["lambda"]))
        return result

    def _tuned_deepct(self) -> dict:
        grid = [(float(r["k1"]), float(r["b"])) for r in self.conditions.development["bm25_grid"]]
        qljm_grid = [float(r["lambda"]) for r in self.conditions.development["qljm_grid"]]
        cache = self.root / f"deepct-tuning.{model_tag(self.model('deepct'))}.json"
        result = json.loads(cache.read_text()) if cache.exists() else {}
        searched = ({(r["k1"], r["b"]) for r in result.get("grid", [])},
                    {r["lambda"] for r in result.get("qljm_grid", [])})
        if searched != (set(grid), set(qljm_grid)):  # no cache, or one of other grids: search again
            result = self._deepct_grids(grid, qljm_grid)
            atomic_write_text(cache, json.dumps(result, indent=1))
            self.runner.save_timings()
        return result

    def dev_sets(self) -> dict[str, tuple[Corpus, str]]:
        sets = {"scifact-train": (self.corpus("scifact", "scifact", ["train"]), "train"),
                MSMARCO_DEV: (self.msmarco_dev(), "dev")}
        assert tuple(sets) == DEV_SETS
        return sets

    def deepct_query_dev(self) -> dict[str, dict[str, dict[str, float]]]:
        """{dev set: {method: figures}} for BM25, DeepCT-Index and the two DeepCT-Query methods, with the BM25
        settings chosen above and nothing further tuned: the development evidence for the DeepCT-Query rows."""
        return {name: {m: self.scores(c, split, self.run_method(c, split, m)[0], None)
                       for m in ("bm25", "deepct", *DEEPCT_QUERY)}
                for name, (c, split) in self.dev_sets().items()}

    def _deepct_grids(self, grid: list[tuple[float, float]], qljm_grid: list[float]) -> dict:
        print("DeepCT BM25 k1/b and QL-JM lambda on development queries (SciFact train + MS MARCO triples dev)",
              flush=True)
        dev = self.dev_sets()
        similarities = [*grid, *((lambda_,) for lambda_ in qljm_grid)]
        bm25 = (float(self.settings["bm25_k1"]), float(self.settings["bm25_b"]))
        figures, reference = {}, {}
        for name, (c, split) in dev.items():
            variables = self.corpus_variables(c, split)
            plain = self.run_step(c, self.conditions.steps["bm25_index"], variables)
            deepct = self.run_step(c, self.conditions.steps["deepct_index"], variables)
            started = time.perf_counter()
            print(f"  [run] {name}: {len(similarities)} settings on {deepct.name} ...", flush=True)
            self.runner.record("development queries", self.runner.display.text(
                f"# in one process: pyserini_ext's ClassicLuceneSearcher (Pyserini's LuceneSearcher + QL-JM):\n"
                f"#   set_bm25(k1, b), what python -m pyserini.search.lucene --index INDEX --topics "
                f"{c.topics[split]} --bm25 --k1 K1 --b B --hits 100 runs,\n#   set_qljm(lambda), what pyserini-ext "
                f"lucene search --qljm --lambda L runs; scored with ir_measures nDCG@10 and R@100 (qrels "
                f"{c.qrels[split]})"))
            reference[name] = lucene_grid(plain, c.topics[split], c.qrels[split], [bm25], self.options.threads)[0]
            figures[name] = lucene_grid(deepct, c.topics[split], c.qrels[split], similarities, self.options.threads)
            seconds = time.perf_counter() - started
            self.runner.time(f"development queries/{name} DeepCT grid", seconds)
            print(f"  [done] {name} grid in {seconds:.0f} s", flush=True)
        rows = []
        for i, similarity in enumerate(similarities):
            row = dict(zip(("k1", "b"), similarity)) if len(similarity) == 2 else {"lambda": similarity[0]}
            row.update({name: figures[name][i] for name in dev})
            row["mean_ndcg_cut_10"] = sum(row[n]["ndcg_cut_10"] for n in dev) / len(dev)
            print(f"  {similarity}: " + ", ".join(f"{n} {row[n]['ndcg_cut_10']:.4f}" for n in dev)
                  + f", mean {row['mean_ndcg_cut_10']:.4f}", flush=True)
            rows.append(row)
        bm25_rows, qljm_rows = rows[:len(grid)], rows[len(grid):]
        best = max(bm25_rows, key=lambda r: r["mean_ndcg_cut_10"])  # ties: the first in grid order
        best_qljm = max(qljm_rows, key=lambda r: r["mean_ndcg_cut_10"])
        print(f"  chosen BM25 k1 {best['k1']:g} b {best['b']:g}, QL-JM lambda {best_qljm['lambda']:g}", flush=True)
        return {"k1": best["k1"], "b": best["b"], "lambda": best_qljm["lambda"], "grid": bm25_rows,
                "qljm_grid": qljm_rows, "bm25_reference": reference,
                "source": "each the best mean nDCG@10 over SciFact train and the MS MARCO triples dev set"}

    # -- one dataset --------------------------------------------------------------------------------------

    def evaluate_dataset(self, spec: EvalSet, methods: Sequence[str]) -> tuple[dict, dict]:
        """({method: figures}, {beta_d: figures}) of `methods` on one dataset's test queries."""
        c = self.corpus(spec.key, spec.dataset, [spec.split])
        if not self.options.dry_run:
            print(f"{spec.title}: {c.documents} documents", flush=True)
        split, conditions = spec.split, self.conditions
        results: dict[str, dict] = {}
        runs: dict[str, Path] = {}
        indexes: dict[str, list[Path]] = {}
        needed = {part for m in methods for part in conditions.base_methods(m)}
        wanted = [m for m in conditions.base_method_names() if m in needed]  # BM25 first: the fusions need it

        def score(label: str, run: Path, index_paths: Sequence[Path]) -> dict:
            """Figures of one run, printed as soon as they exist."""
            figures = self.scores(c, split, run, spec.recall_level)
            if self.options.dry_run:
                return figures
            figures["index_mb"] = sum(folder_bytes(p) for p in index_paths) / 2 ** 20
            print(f"  = {spec.key} {label}: nDCG@10 {figures['ndcg_cut_10']:.4f}  R@100 {figures['recall_100']:.4f}"
                  f"  index {figures['index_mb']:.1f} MB", flush=True)
            return figures

        for method in wanted:
            runs[method], indexes[method] = self.run_method(c, split, method)
            if method in methods:
                results[method] = score(conditions.methods[method].label, runs[method], indexes[method])

        def label_of(method: str) -> str:
            return runs[method].name.removeprefix("run.").removesuffix(f".{split}.txt")

        for method in methods:
            m = conditions.methods[method]
            if m.fuse is None:
                continue
            label = ".".join([*([m.run_prefix] if m.run_prefix else []),  # BM25 is the default lexical run
                              *(label_of(r) for r in m.runs if r != "bm25")])
            run = self.fuse(c, split, [runs[r] for r in m.runs], label, m.fuse)
            results[method] = score(m.label, run, sum((indexes[r] for r in m.runs), []))
        pruning = {}
        for method in methods:
            m = conditions.methods[method]
            for beta in m.beta_d:
                variables = self.corpus_variables(c, split).but(aligner_beta_d=number(beta),
                                                                aligner_rule=self.aligner_rule(beta))
                run, index = self.run_method(c, split, m.of, variables)
                pruning[beta] = score(f"{conditions.methods[m.of].label} beta_d {number(beta)}", run, index)
        return results, pruning

    def run(self, datasets: Sequence[str], methods: Sequence[str]) -> dict:
        """Every condition of `methods` on `datasets` (DeepCT's development choice first, where needed):
        {"results": ..., "pruning": ..., "deepct": ...}."""
        needs_deepct = any(set(DEEPCT_METHODS) & set(self.conditions.base_methods(m)) for m in methods)
        deepct = self.tune_deepct() if needs_deepct else None
        if deepct is not None and set(DEEPCT_QUERY) & set(methods):
            query_dev = self.deepct_query_dev()
            if not self.options.dry_run:  # a dry run keeps the conditions file's record (and the commands)
                deepct["query_dev"] = query_dev
        results, pruning = {}, {}
        for key in datasets:
            kept = [m for m in methods
                    if not {f"{key}:{part}" for part in (m, *self.conditions.base_methods(m))} & set(self.options.skip)]
            results[key], pruning[key] = self.evaluate_dataset(self.conditions.datasets[key], kept)
        if self.options.dry_run:  # nothing measured: the conditions file's figures of what would have run
            expected, expected_pruning = expected_results(self.conditions, datasets)
            results = {d: {m: expected[d][m] for m in rows if m in expected[d]} for d, rows in results.items()}
            pruning = {d: {b: expected_pruning[d][b] for b in rows if b in expected_pruning[d]}
                       for d, rows in pruning.items()}
        return {"results": results, "pruning": pruning, "deepct": deepct}


def check(conditions: Conditions, datasets: Sequence[str], methods: Sequence[str], options: Options,
          tolerance: float | None = None) -> tuple[int, list[Failure]]:
    """Rerun `methods` on `datasets` (steps whose output exists in the work folder are reused) and compare every
    figure with the expected scores: (figures compared, failures). DeepCT's development choice is compared too
    when a DeepCT condition ran."""
    figures = Reproduction(conditions, options).run(datasets, methods)
    checked, failures = compare(conditions, figures["results"], figures["pruning"], tolerance)
    if figures["deepct"] is not None:
        more, dev_failures = compare_development(conditions, figures["deepct"], tolerance)
        checked, failures = checked + more, [*dev_failures, *failures]
    return checked, failures

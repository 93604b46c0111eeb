"""The distillation data path shared by the three trainers: training queries, candidates, cached teacher scores.

What the packaged MS MARCO-trained models know (all-MiniLM-L6-v2's dense scores, splade-tiny's term weights)
is transferred to our models on ANY corpus, without labels:
1. Training queries: labelled pairs where a dataset has them (a BEIR train split, the MS MARCO triples
   sample), plus pseudo-queries for every sampled passage: its title, one of its sentences (inverse cloze),
   or a keyword query from its top splade-tiny terms. Deterministic under a seed.
2. Candidates per query: BM25 top-k (Pyserini's Lucene index of the training corpus), MiniLM top-k (Faiss flat)
   and splade-tiny top-k, plus the query's known positives.
3. Teacher scores on every candidate: MiniLM cosine, splade-tiny dot product, BM25. The ensemble is a weighted
   sum of per-query z-scores (each teacher's scale differs); `ENSEMBLE_WEIGHTS` were picked by reranking the
   candidates of labelled TRAIN queries (SciFact train, MS MARCO triples), see docs/report.md.
All of it is cached under `cache_dir`, keyed by a fingerprint of the corpus, the queries and the settings, so a
second run (or another model's trainer) reuses it instead of re-encoding with the teachers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from pyserini_ext.data import data_home, document_text, load_dataset, read_triples, write_json_collection
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.models.folder import load_transformer
from pyserini_ext.train.loop import TrainConfig

logger = logging.getLogger(__name__)

TEACHERS = ("minilm", "splade", "bm25")
# z-score weights of the teacher ensemble (chosen on labelled train queries; see module docstring)
ENSEMBLE_WEIGHTS = {"minilm": 0.5, "splade": 0.35, "bm25": 0.15}
PSEUDO_KINDS = ("title", "sentence", "keywords")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
_KEYWORD = re.compile(r"^[a-z][a-z0-9\-]{2,}$")


@dataclass(frozen=True)
class TrainingQuery:
    qid: str
    text: str
    kind: str  # "labelled" or one of PSEUDO_KINDS
    positives: tuple[str, ...] = ()  # judged relevant docids, or the passage a pseudo-query was made from


@dataclass
class DistillDataConfig:
    """Which corpora and queries to distil on, and how candidates are gathered."""
    # dataset -> passages sampled for pseudo-queries (None: all); sized for a 2-core CPU (teachers ~20 min)
    datasets: dict[str, int | None] = field(default_factory=lambda: {"scifact": 3000, "msmarco-dl19-subset": 4000})
    labelled_splits: dict[str, str] = field(default_factory=lambda: {"scifact": "train"})
    # MS MARCO triples (folder name in the dataset cache, or path) to mix in as labelled pairs. Off by default:
    # the shipped recipe keeps the 100-query sample aside as its MS MARCO development set (docs/report.md).
    triples: str | None = None
    pseudo_queries_per_doc: int = 1
    depth: int = 20  # candidates per teacher (BM25, MiniLM, splade-tiny)
    passage_max_length: int = 192
    query_max_length: int = 32
    seed: int = 42
    weights: dict[str, float] = field(default_factory=lambda: dict(ENSEMBLE_WEIGHTS))


def fingerprint(*parts: object) -> str:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, ensure_ascii=True).encode())
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- corpus, queries

def training_corpus(config: DistillDataConfig) -> tuple[dict[str, dict[str, str]], list[TrainingQuery], list[str]]:
    """(corpus, labelled queries, docids to make pseudo-queries from). Docids are prefixed `dataset/docid` so
    corpora can be mixed; a sampled dataset keeps every judged passage of its labelled split."""
    rng = random.Random(config.seed)
    corpus: dict[str, dict[str, str]] = {}
    labelled: list[TrainingQuery] = []
    sources: list[str] = []
    for name, sample in config.datasets.items():
        dataset = load_dataset(name)
        docids = list(dataset.corpus)
        chosen = docids if sample is None or sample >= len(docids) else sorted(rng.sample(docids, sample))
        keep = set(chosen)
        split = config.labelled_splits.get(name)
        if split:
            qrels = dataset.qrels(split)
            for qid in sorted(qrels):
                positives = sorted(d for d, rel in qrels[qid].items() if rel > 0 and d in dataset.corpus)
                text = dataset.queries.get(qid, "").strip()
                if text and positives:
                    keep.update(positives)
                    labelled.append(TrainingQuery(f"{name}/{qid}", text, "labelled",
                                                  tuple(f"{name}/{d}" for d in positives)))
        for docid in docids:
            if docid in keep:
                corpus[f"{name}/{docid}"] = dataset.corpus[docid]
        sources += [f"{name}/{d}" for d in chosen]
    if config.triples:
        folder = Path(config.triples)
        folder = folder if folder.exists() else data_home() / config.triples
        for i, (query, positive, negative) in enumerate(read_triples(folder)):
            corpus[f"triples/p{i}"] = {"title": "", "text": positive}
            corpus[f"triples/n{i}"] = {"title": "", "text": negative}
            labelled.append(TrainingQuery(f"triples/q{i}", query, "labelled", (f"triples/p{i}",)))
    return corpus, labelled, sources


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def keyword_terms(vector: sp.csr_matrix, vocabulary: Sequence[str], top: int = 10) -> list[str]:
    """The passage's highest-weighted whole-word vocabulary terms of a splade vector (no pieces, no [unused])."""
    order = np.argsort(-vector.data)
    terms = []
    for index in order:
        token = vocabulary[vector.indices[index]]
        if _KEYWORD.match(token):
            terms.append(token)
            if len(terms) == top:
                break
    return terms


def pseudo_queries(corpus: Mapping[str, Mapping[str, str]], docids: Sequence[str],
                   keywords: Mapping[str, list[str]], seed: int, per_doc: int = 1) -> list[TrainingQuery]:
    """`per_doc` pseudo-queries for each docid: a title (if it has >= 3 words), a 4-30 word sentence of a
    multi-sentence passage (inverse cloze), or 2-5 of its top-10 splade-tiny terms. The kind and the choice are
    drawn from a generator seeded by (seed, docid), so a passage's queries do not depend on the others."""
    queries = []
    for docid in docids:
        doc = corpus[docid]
        rng = random.Random(f"{seed}/{docid}")
        title = (doc.get("title") or "").strip()
        candidates = [s for s in sentences(doc.get("text") or "") if 4 <= len(s.split()) <= 30]
        kinds = [k for k, ok in (("title", len(title.split()) >= 3),
                                 ("sentence", len(candidates) >= 2),
                                 ("keywords", len(keywords.get(docid, ())) >= 2)) if ok]
        for n in range(min(per_doc, len(kinds)) if kinds else 0):
            kind = rng.choice(kinds)
            kinds.remove(kind)
            if kind == "title":
                text = title
            elif kind == "sentence":
                text = rng.choice(candidates)
            else:
                terms = keywords[docid]
                count = rng.randint(2, min(5, len(terms)))
                text = " ".join(sorted(rng.sample(terms, count), key=terms.index))
            queries.append(TrainingQuery(f"pseudo/{docid}/{n}", text, kind, (docid,)))
    return queries


# ---------------------------------------------------------------------------------------------- teachers

def _batches(items: Sequence, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _packaged_model(backbone: str, auto_class: str, device: str):
    """(tokenizer, model in eval mode on `device`) of a packaged backbone, through transformers' `auto_class`."""
    import transformers
    folder = backbone_path(backbone)
    model = load_transformer(getattr(transformers, auto_class), folder).to(device).eval()
    return transformers.AutoTokenizer.from_pretrained(folder), model


class MiniLMTeacher:
    """all-MiniLM-L6-v2 as sentence-transformers runs it: mean pooling over tokens, L2-normalised."""

    def __init__(self, device: str = "cpu"):
        self.tokenizer, self.model = _packaged_model("all-minilm-l6-v2", "AutoModel", device)
        self.device = device

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], max_length: int, batch_size: int = 64, desc: str = "minilm") -> np.ndarray:
        out = []
        order = np.argsort([len(t) for t in texts])  # similar lengths together: less padding
        for chunk in tqdm(list(_batches(order, batch_size)), desc=desc, leave=False):
            inputs = self.tokenizer([texts[i] for i in chunk], max_length=max_length, truncation=True,
                                    padding=True, return_tensors="pt").to(self.device)
            hidden = self.model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        vectors = np.zeros((len(texts), out[0].shape[1] if out else 384), dtype=np.float32)
        if out:
            vectors[order] = np.concatenate(out)
        return vectors


class SpladeTeacher:
    """splade-tiny: log(1 + ReLU(MLM logits)), max over non-padding positions, as sparse vocabulary vectors."""

    def __init__(self, device: str = "cpu"):
        self.tokenizer, self.model = _packaged_model("splade-tiny", "AutoModelForMaskedLM", device)
        self.device = device
        vocab = self.tokenizer.get_vocab()
        self.vocabulary = [""] * len(vocab)
        for token, index in vocab.items():
            self.vocabulary[index] = token

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], max_length: int, batch_size: int = 16,
               desc: str = "splade") -> sp.csr_matrix:
        rows: list[sp.csr_matrix] = [None] * len(texts)  # type: ignore[list-item]
        order = np.argsort([len(t) for t in texts])
        for chunk in tqdm(list(_batches(order, batch_size)), desc=desc, leave=False):
            inputs = self.tokenizer([texts[i] for i in chunk], max_length=max_length, truncation=True,
                                    padding=True, return_tensors="pt").to(self.device)
            logits = self.model(**inputs).logits
            weights = torch.log1p(torch.relu(logits)) * inputs["attention_mask"].unsqueeze(-1)
            pooled = weights.amax(1).float().cpu().numpy()
            for i, row in zip(chunk, pooled):
                rows[i] = sp.csr_matrix(row)
        if not rows:
            return sp.csr_matrix((0, len(self.vocabulary)), dtype=np.float32)
        return sp.vstack(rows).tocsr().astype(np.float32)


def bm25_rankings(corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str], depth: int,
                  threads: int = 1) -> dict[str, list[tuple[str, float]]]:
    """qid -> BM25 top-`depth` (docid, score) with Pyserini's defaults (k1 0.9, b 0.4) over a Lucene index of
    `corpus` built by `build_lucene_index` in a temporary folder."""
    from pyserini.search.lucene import LuceneSearcher
    with tempfile.TemporaryDirectory(prefix="pyserini-ext-bm25-") as tmp:
        collection = write_json_collection(corpus, Path(tmp) / "collection").parent
        index = build_lucene_index(collection, Path(tmp) / "index", threads)
        searcher = LuceneSearcher(str(index))
        qids = list(queries)
        rankings = {}
        for chunk in _batches(qids, 1000):
            hits = searcher.batch_search([queries[q] for q in chunk], list(chunk), k=depth, threads=threads)
            rankings.update({q: [(h.docid, float(h.score)) for h in hits.get(q, [])] for q in chunk})
        searcher.close()
    return rankings


def cached_encoding(encode, texts: Sequence[str], cache_dir: Path, name: str, chunk: int = 1000):
    """`encode(texts)` in chunks of `chunk` texts, each saved under `cache_dir` (keyed by the texts and `name`) as
    soon as it is done: an interrupted run resumes at the first missing chunk; a finished one recomputes nothing.
    Returns the stacked result (dense ndarray or sparse CSR)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for start in range(0, len(texts), chunk):
        part = list(texts[start:start + chunk])
        path = cache_dir / f"{name}-{fingerprint(part)}.npz"
        if path.is_file():
            parts.append(sp.load_npz(path) if "format" in np.load(path).files else np.load(path)["dense"])
            continue
        encoded = encode(part)
        tmp = path.with_name(path.stem + ".tmp.npz")
        if sp.issparse(encoded):
            sp.save_npz(tmp, encoded)
        else:
            np.savez(tmp, dense=encoded)
        tmp.replace(path)
        parts.append(encoded)
        logger.info("%s: %d of %d encoded", name, min(start + chunk, len(texts)), len(texts))
    if not parts:
        raise ValueError(f"{name}: nothing to encode")
    return sp.vstack(parts).tocsr() if sp.issparse(parts[0]) else np.concatenate(parts)


def passage_encodings(teacher: str, texts: Sequence[str], max_length: int, cache_dir: Path, device: str = "cpu"):
    """One teacher's passage encodings through `cached_encoding` (separate processes may warm the two teachers'
    caches in parallel: `python -m pyserini_ext.train.distill --warm minilm`)."""
    model = SpladeTeacher(device) if teacher == "splade" else MiniLMTeacher(device)
    return cached_encoding(lambda part: model.encode(part, max_length, desc=f"{teacher} passages"), texts,
                           cache_dir, f"{teacher}-passages-{max_length}")


# ---------------------------------------------------------------------------------------------- the data set

@dataclass
class DistillationSet:
    """Training queries with their candidates and per-teacher scores (aligned lists, one entry per query)."""
    corpus: dict[str, dict[str, str]]
    queries: list[TrainingQuery]
    candidates: list[list[str]]
    scores: dict[str, list[np.ndarray]]  # teacher -> per-query scores over its candidates

    def ensemble(self, weights: Mapping[str, float] | None = None) -> list[np.ndarray]:
        """Per query: sum over teachers of weight x z-score of that teacher's scores over the candidates."""
        weights = dict(weights or ENSEMBLE_WEIGHTS)
        unknown = set(weights) - set(self.scores)
        if unknown:
            raise KeyError(f"no scores for teachers {sorted(unknown)}; have {sorted(self.scores)}")
        combined = []
        for i in range(len(self.queries)):
            total = np.zeros(len(self.candidates[i]), dtype=np.float32)
            for name, weight in weights.items():
                s = self.scores[name][i]
                total += weight * (s - s.mean()) / (s.std() + 1e-6)
            combined.append(total)
        return combined

    def relevant_queries(self, temperature: float = 1.0, min_probability: float = 0.05
                         ) -> dict[str, list[tuple[int, float]]]:
        """docid -> [(query index, p)] where p = the ensemble's softmax probability of the doc among the query's
        candidates, for p >= `min_probability`: which training queries the teachers find each passage relevant to."""
        found: dict[str, list[tuple[int, float]]] = {}
        for i, scores in enumerate(self.ensemble()):
            probabilities = np.exp((scores - scores.max()) / temperature)
            probabilities /= probabilities.sum()
            for docid, p in zip(self.candidates[i], probabilities):
                if p >= min_probability:
                    found.setdefault(docid, []).append((i, float(p)))
        return found

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        lengths = np.array([len(c) for c in self.candidates])
        np.savez(folder / "scores.npz", lengths=lengths,
                 **{name: np.concatenate(values) for name, values in self.scores.items()})
        (folder / "queries.json").write_text(json.dumps({
            "queries": [asdict(q) for q in self.queries], "candidates": self.candidates}))

    @classmethod
    def load(cls, folder: Path, corpus: dict[str, dict[str, str]]) -> DistillationSet:
        meta = json.loads((folder / "queries.json").read_text())
        queries = [TrainingQuery(q["qid"], q["text"], q["kind"], tuple(q["positives"])) for q in meta["queries"]]
        arrays = np.load(folder / "scores.npz")
        splits = np.cumsum(arrays["lengths"])[:-1]
        scores = {name: np.split(arrays[name], splits) for name in arrays.files if name != "lengths"}
        return cls(corpus, queries, meta["candidates"], scores)


def build_distillation_set(config: DistillDataConfig, cache_dir: str | Path, device: str = "cpu",
                           corpus_and_queries: tuple | None = None) -> DistillationSet:
    """Build (or load from `cache_dir`) the distillation set for `config`.

    `corpus_and_queries` = (corpus, labelled queries, pseudo-query source docids) replaces `training_corpus(config)`
    (tests use small corpora)."""
    corpus, labelled, sources = corpus_and_queries or training_corpus(config)
    docids = sorted(corpus)
    key = fingerprint([(d, corpus[d].get("title", ""), corpus[d].get("text", "")) for d in docids],
                      [asdict(q) for q in labelled], sources,
                      {k: v for k, v in asdict(config).items() if k != "weights"})
    folder = Path(cache_dir) / key
    if (folder / "scores.npz").is_file():
        logger.info("distillation set: cached at %s", folder)
        return DistillationSet.load(folder, corpus)

    texts = [document_text(corpus[d]) for d in docids]
    position = {d: i for i, d in enumerate(docids)}
    encodings = Path(cache_dir) / "encodings"
    doc_sparse = passage_encodings("splade", texts, config.passage_max_length, encodings, device)
    splade = SpladeTeacher(device)
    keywords = {d: keyword_terms(doc_sparse[position[d]], splade.vocabulary) for d in sources}
    queries = labelled + pseudo_queries(corpus, sources, keywords, config.seed, config.pseudo_queries_per_doc)
    query_texts = [q.text for q in queries]
    query_sparse = splade.encode(query_texts, config.query_max_length, desc="splade queries")
    del splade
    doc_dense = passage_encodings("minilm", texts, config.passage_max_length, encodings, device)
    minilm = MiniLMTeacher(device)
    query_dense = minilm.encode(query_texts, config.query_max_length, desc="minilm queries")
    del minilm
    bm25 = bm25_rankings(corpus, {q.qid: q.text for q in queries}, config.depth)

    candidates: list[list[str]] = []
    scores: dict[str, list[np.ndarray]] = {name: [] for name in TEACHERS}
    doc_sparse_t = doc_sparse.T.tocsr()
    for start in tqdm(range(0, len(queries), 512), desc="candidates", leave=False):
        stop = min(start + 512, len(queries))
        dense = query_dense[start:stop] @ doc_dense.T
        sparse = (query_sparse[start:stop] @ doc_sparse_t).toarray()
        for row, i in enumerate(range(start, stop)):
            query = queries[i]
            ranked = bm25.get(query.qid, [])
            pool = dict.fromkeys(list(query.positives) + [d for d, _ in ranked]
                                 + [docids[j] for j in np.argsort(-dense[row])[:config.depth]]
                                 + [docids[j] for j in np.argsort(-sparse[row])[:config.depth]])
            chosen = list(pool)
            index = [position[d] for d in chosen]
            bm25_score = dict(ranked)
            floor = min(bm25_score.values(), default=0.0)
            candidates.append(chosen)
            scores["minilm"].append(dense[row, index].astype(np.float32))
            scores["splade"].append(sparse[row, index].astype(np.float32))
            # a candidate outside BM25's top-depth scores at most the depth-th score: use it as a floor
            scores["bm25"].append(np.array([bm25_score.get(d, floor) for d in chosen], dtype=np.float32))
    result = DistillationSet(corpus, queries, candidates, scores)
    tmp = folder.with_name(folder.name + ".tmp")
    result.save(tmp)
    tmp.replace(folder) if not folder.exists() else None
    return result


# ---------------------------------------------------------------------------------------------- losses

def listwise_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || student) over each row's candidates (softmax of scores / temperature), batch mean."""
    target = torch.softmax(teacher / temperature, dim=-1)
    return torch.nn.functional.kl_div(torch.log_softmax(student / temperature, dim=-1), target,
                                      reduction="batchmean")


def margin_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al.): (student[:, 0] - student[:, j]) vs the teacher's margins, j >= 1."""
    return torch.nn.functional.mse_loss(student[:, :1] - student[:, 1:], teacher[:, :1] - teacher[:, 1:])


def in_batch_nll(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Cross-entropy of each query's first candidate (its teacher-best) among ALL passages of the batch.

    `scores` is [B, B * group_size]: query i's own group is columns [i * group_size, (i + 1) * group_size)."""
    labels = torch.arange(scores.shape[0], device=scores.device) * group_size
    return torch.nn.functional.cross_entropy(scores, labels)


@dataclass
class DistillBatch:
    query_texts: list[str]
    passage_texts: list[str]  # B x group_size, grouped by query, teacher-best first
    teacher: torch.Tensor  # [B, group_size] ensemble scores
    # name -> [B, group_size] scores of the same candidates by another weighting of the teachers (`other_weights`)
    other_teachers: dict[str, torch.Tensor] = field(default_factory=dict)


def distillation_batches(data: DistillationSet, batch_size: int, group_size: int, seed: int, epoch: int,
                         weights: Mapping[str, float] | None = None,
                         other_weights: Mapping[str, Mapping[str, float]] | None = None):
    """Batches of `batch_size` queries; per query its teacher-best candidate, then `group_size - 1` others
    drawn at random from the rest of its candidates (seeded by seed + epoch). `other_weights` adds, under each
    name, another ensemble's scores of the same candidates (a target for one part of a model)."""
    ensemble = data.ensemble(weights)
    others = {name: data.ensemble(w) for name, w in (other_weights or {}).items()}
    rng = random.Random(seed + epoch)
    usable = [i for i, c in enumerate(data.candidates) if len(c) >= group_size]
    rng.shuffle(usable)
    for start in range(0, len(usable) - batch_size + 1, batch_size):
        query_texts, passages, teacher = [], [], []
        other: dict[str, list[np.ndarray]] = {name: [] for name in others}
        for i in usable[start:start + batch_size]:
            order = np.argsort(-ensemble[i])
            chosen = [int(order[0])] + rng.sample([int(j) for j in order[1:]], group_size - 1)
            query_texts.append(data.queries[i].text)
            passages += [document_text(data.corpus[data.candidates[i][j]]) for j in chosen]
            teacher.append(ensemble[i][chosen])
            for name, scores in others.items():
                other[name].append(scores[i][chosen])
        yield DistillBatch(query_texts, passages, torch.tensor(np.stack(teacher)),
                           {name: torch.tensor(np.stack(rows)) for name, rows in other.items()})


def distillation_loss(scores: torch.Tensor, teacher: torch.Tensor, config: TrainConfig) -> torch.Tensor:
    """KL over each query's own group plus in-batch NLL; `scores` [B, B * group_size], `teacher` [B, group_size]."""
    batch, group = teacher.shape
    own = scores.reshape(batch, batch, group)[torch.arange(batch), torch.arange(batch)]
    return (config.kl_weight * listwise_kl(own, teacher.to(scores.device) / config.teacher_temperature)
            + config.in_batch_weight * in_batch_nll(scores, group))


def steps_per_epoch(data: DistillationSet, config: TrainConfig) -> int:
    usable = sum(len(c) >= config.group_size for c in data.candidates)
    return usable // config.batch_size


def main(argv: list[str] | None = None) -> int:
    """Warm one teacher's passage cache for the default data config (to run the two teachers in parallel)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m pyserini_ext.train.distill")
    parser.add_argument("--warm", choices=("splade", "minilm"), required=True)
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO)
    config = DistillDataConfig()
    corpus, _, _ = training_corpus(config)
    texts = [document_text(corpus[d]) for d in sorted(corpus)]
    passage_encodings(args.warm, texts, config.passage_max_length, args.cache / "encodings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

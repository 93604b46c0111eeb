"""AligneR searcher: token-level candidate generation, then exact sparse-alignment scoring.

query -> token vectors, pruned to the top ceil(beta_q * n) tokens by query salience -> candidate documents from
the index's candidate generator (the documents of the `neighbours` nearest document tokens per query token in a
token-level Faiss index, or the best `neighbours` documents under the query tokens' nearest centroids) ->
(residual codes with centroid candidates: the best `exact_documents` of those by the alignment score on every token's
centroid, PLAID's centroid interaction, no decoding) -> exact alignment score on the stored tokens (top-k or top-p,
salience weighted, see pyserini_ext.models.alignment) -> top hits.

`search()` / `batch_search()` return `pyserini.search.faiss.DenseSearchResult`s, so Pyserini's
`HybridSearcher(AlignerSearcher(...), LuceneSearcher(...))` fuses AligneR with BM25 unchanged.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from pyserini.search.faiss import DenseSearchResult
from tqdm.auto import tqdm

from pyserini_ext.encode.aligner import AlignerQueryEncoder
from pyserini_ext.index.aligner import AlignerIndex, AlignerIndexError
from pyserini_ext.models.aligner import QUERY, AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q, MAXSIM, Alignment, aligned_scores


class AlignerSearcher:
    def __init__(self, index: str | os.PathLike | AlignerIndex, model: str | os.PathLike | AlignerModel,
                 beta_q: float = DEFAULT_BETA_Q, alignment: Alignment | str = MAXSIM, neighbours: int | None = None,
                 nprobe: int | None = None, score_batch: int = 512, check_model: bool = True,
                 query_encoder: AlignerQueryEncoder | None = None, exact_documents: int | None = None):
        """`neighbours`: see `candidates` (default: the index's candidate generator's); `nprobe`: centroids or IVF
        lists probed per query token (default: what the index records for its size); `exact_documents`: see
        `shortlist` (default: the candidate generator's; 0: every candidate);
        `query_encoder`: encode queries on its backend/precision (ONNX Runtime, bf16, int8) instead of `model`."""
        self.index = index if isinstance(index, AlignerIndex) else AlignerIndex.open(index, nprobe=nprobe)
        self.model = model if isinstance(model, AlignerModel) else AlignerModel.from_pretrained(model)
        if check_model and self.model.fingerprint() != self.index.model_fingerprint:
            built_with = self.index.metadata["model"].get("path") or "an unnamed model"
            raise AlignerIndexError(
                f"{self.index.folder} was built with {built_with} (fingerprint {self.index.model_fingerprint}), "
                f"but the query model has fingerprint {self.model.fingerprint()}: queries and documents must be "
                "encoded by the same AligneR model")
        if not 0 < beta_q <= 1:
            raise ValueError(f"beta_q must be in (0, 1], got {beta_q}")
        if neighbours is None:
            neighbours = self.index.candidates.default_neighbours
        if neighbours < 1:
            raise ValueError(f"neighbours must be >= 1, got {neighbours}")
        if exact_documents is None:
            exact_documents = self.index.candidates.default_exact_documents or 0
        if exact_documents < 0:
            raise ValueError(f"exact_documents must be >= 0, got {exact_documents}")
        self.exact_documents = exact_documents
        self.beta_q = beta_q
        self.alignment = Alignment.parse(alignment) if isinstance(alignment, str) else alignment
        self.neighbours = neighbours
        self.score_batch = score_batch
        self.query_encoder = query_encoder

    # ---- steps --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_queries(self, queries: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (kept token vectors [n', dim], their salience weights [n'])."""
        if self.query_encoder is not None:
            return self.query_encoder.encode_tokens(list(queries), beta=self.beta_q)
        encoded = self.model.encode_batch(list(queries), QUERY)
        weights, kept = encoded.weights(self.beta_q)
        return [(encoded.vectors[i][kept[i]].cpu().numpy(), weights[i][kept[i]].cpu().numpy())
                for i in range(len(queries))]

    def candidates(self, query_vectors: np.ndarray, query_weights: np.ndarray, k: int = 0) -> np.ndarray:
        """Indices of the documents to score exactly: those owning any of the `neighbours` nearest tokens of any
        query token (flat, ivfpq, hnsw), or the best max(`neighbours`, k) by centroid approximation (centroid:
        a search for k hits scores at least k documents, as PLAID's ndocs grows with k)."""
        generator = self.index.candidates
        neighbours = max(self.neighbours, k) if generator.neighbours_are_documents else self.neighbours
        return generator.candidates(query_vectors, query_weights, neighbours)

    def shortlist(self, query_vectors: np.ndarray, query_weights: np.ndarray, doc_indices: np.ndarray, k: int = 0,
                  alignment: Alignment | None = None) -> np.ndarray:
        """Of the candidates, the best max(`exact_documents`, k) by the alignment score on the codec's approximate
        similarities (residual codes: every token's centroid, PLAID's centroid interaction), sorted; all of them
        where the codec has no approximation, `exact_documents` is 0 or they are no more."""
        keep = max(self.exact_documents, k)
        if not self.exact_documents or len(doc_indices) <= keep or not self.index.approximates:
            return doc_indices
        if (alignment or self.alignment) == MAXSIM:
            rows, lengths = self.index.token_rows(doc_indices)
            scores = maxsim_concatenated(self.index.codec.approximate_similarities(rows, query_vectors),
                                         query_weights, np.asarray(self.index.weights[rows], dtype=np.float32),
                                         lengths)
        else:
            scores = self.score_documents(query_vectors, query_weights, doc_indices, alignment, approximate=True)
        return np.sort(doc_indices[np.argpartition(-scores, keep - 1)[:keep]])

    def score_documents(self, query_vectors: np.ndarray, query_weights: np.ndarray, doc_indices: np.ndarray,
                        alignment: Alignment | None = None, approximate: bool = False) -> np.ndarray:
        """Alignment scores of one query against the given documents (batched over documents), on the stored
        tokens (approximate: on the codec's approximate similarities)."""
        alignment = alignment or self.alignment
        qw = torch.from_numpy(query_weights)[None]
        qm = torch.ones_like(qw, dtype=torch.bool)
        scores = []
        for start in range(0, len(doc_indices), self.score_batch):
            # token similarities straight from the stored tokens: no padded [C, L, dim] copy of the documents
            similarities, weights, mask = self.index.document_similarities(
                doc_indices[start:start + self.score_batch], query_vectors, approximate)
            scores.append(aligned_scores(torch.from_numpy(similarities).transpose(1, 2)[None], qw, qm,
                                         torch.from_numpy(weights), torch.from_numpy(mask), alignment)[0].numpy())
        return np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)

    def rank(self, query_vectors: np.ndarray, query_weights: np.ndarray, k: int,
             alignment: Alignment | None = None, doc_indices: np.ndarray | None = None) -> list[DenseSearchResult]:
        if doc_indices is None:
            doc_indices = self.shortlist(query_vectors, query_weights, self.candidates(query_vectors, query_weights, k),
                                         k, alignment)
        scores = self.score_documents(query_vectors, query_weights, doc_indices, alignment)
        # ties: the smaller docid first, the same order write_trec_run uses
        order = sorted(range(len(doc_indices)), key=lambda i: (-scores[i], self.index.docids[doc_indices[i]]))[:k]
        return [DenseSearchResult(self.index.docids[doc_indices[i]], float(scores[i])) for i in order]

    # ---- Pyserini-shaped API ------------------------------------------------------------------------------
    def search(self, query: str, k: int = 10, alignment: Alignment | None = None) -> list[DenseSearchResult]:
        (vectors, weights), = self.encode_queries([query])
        return self.rank(vectors, weights, k, alignment)

    def batch_search(self, queries: Sequence[str], q_ids: Sequence[str], k: int = 10, threads: int = 1,
                     alignment: Alignment | None = None, query_batch: int = 64, progress: bool = False
                     ) -> dict[str, list[DenseSearchResult]]:
        """qid -> hits; `threads` is accepted for Pyserini compatibility (torch's thread count applies);
        `progress`: a bar with time left on the terminal."""
        if len(queries) != len(q_ids):
            raise ValueError(f"{len(queries)} queries but {len(q_ids)} query ids")
        results: dict[str, list[DenseSearchResult]] = {}
        with tqdm(total=len(queries), desc="aligner search", unit="query", disable=not progress) as bar:
            for start in range(0, len(queries), query_batch):
                encoded = self.encode_queries(queries[start:start + query_batch])
                for qid, (vectors, weights) in zip(q_ids[start:start + query_batch], encoded):
                    results[qid] = self.rank(vectors, weights, k, alignment)
                    bar.update(1)
        return results

    def brute_force(self, query: str, k: int = 10, alignment: Alignment | None = None) -> list[DenseSearchResult]:
        """Exact alignment score of every document (no candidate generation): the reference for tests/evals."""
        (vectors, weights), = self.encode_queries([query])
        return self.rank(vectors, weights, k, alignment, doc_indices=np.arange(len(self.index)))


def maxsim_concatenated(similarities: np.ndarray, query_weights: np.ndarray, doc_weights: np.ndarray,
                        lengths: np.ndarray) -> np.ndarray:
    """The k = 1 (MaxSim) alignment score of documents whose tokens are concatenated: similarities [n, T] of the
    n query tokens with the T tokens, doc_weights [T], lengths [C] (each >= 1) -> [C]. What `aligned_scores` gives
    on the padded documents, in three passes over [n, T] instead of padded copies and a top-k; where tokens of a
    document tie for a query token's maximum (residual codes' centroid approximation: the tokens of a centroid),
    the most salient of them counts."""
    bounds = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    best = np.maximum.reduceat(similarities, bounds, axis=1)  # [n, C]
    tied = similarities == np.repeat(best, lengths, axis=1)
    weight = np.maximum.reduceat(np.where(tied, doc_weights, np.float32(-1)), bounds, axis=1)  # u^d of the aligned
    query_weights = np.asarray(query_weights, dtype=np.float32)[:, None]
    numerator = (query_weights * weight * best).sum(0)
    return numerator / np.maximum((query_weights * weight).sum(0), 1e-9)


def open_searcher(index: str | os.PathLike, model: str | os.PathLike | None = None, nprobe: int | None = None,
                  **kwargs) -> AlignerSearcher:
    """Searcher whose model defaults to the model path recorded in the index metadata."""
    opened = AlignerIndex.open(index, nprobe=nprobe)
    model = model or opened.metadata["model"].get("path")
    if not model:
        raise AlignerIndexError(f"{index}: the index records no model path; pass the model folder")
    return AlignerSearcher(opened, model, **kwargs)

"""How an AligneR index finds candidate documents: candidate generators, each an object that owns its files.

    fit(vectors, options, codec, prepared)     first pass: train what it needs (default: nothing)
    write_part(part, vectors, lengths, stored, codec, prepared)   one chunk's share, into its part folder
    finalise(parts, documents, files, options, prepared) -> counts   the parts joined into the index folder
    read(files, codec, offsets, options)       an opened index; candidates(query_vectors, query_weights,
                                               neighbours) -> sorted document rows to score exactly

  flat      nothing stored; exact: every decoded vector scored by a blocked matrix product (torch), top-k merged.
  ivfpq     a token-level Faiss IVF-PQ index (candidates.faiss, about 42 bytes per token).
  hnsw      a token-level Faiss HNSW index (candidates.faiss).
  centroid  PLAID-style, from the centroid ids the residual-pq codes already hold: inverted lists centroid ->
            documents per segment of at most 65,536 documents (centroid_docs.npy uint16, centroid_offsets.npy
            [segments, nlist + 1], segments.npy), one entry per distinct (centroid, document); the documents under
            the `nprobe` nearest centroids of each query token are ranked by their centroid approximation (sum over
            query tokens of weight x max over the document's tokens of q . centroid) and the best `neighbours` go
            on to the searcher's shortlist (every token's centroid) and exact scoring.
"""
from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import faiss
import numpy as np
import torch
from numpy.lib import format as npy_format

from pyserini_ext.index.aligner.codecs import BATCH, ResidualPQStore, TokenCodec, train_ivfpq
from pyserini_ext.index.aligner.files import AlignerIndexError, IndexFiles

# query-token scores per block of the flat candidate stage (64 MB of float32)
FLAT_SCORES_PER_BLOCK = 1 << 24
# documents per block of the centroid stage
SEGMENT_DOCS = 1 << 16  # documents per segment of the centroid lists: their numbers fit in 2 bytes
CANDIDATES_FILE = "candidates.faiss"
# documents of the centroid stage's candidates scored on decoded codes, the best by centroid interaction over all
# their tokens: all of the 1,024 by default. Fewer (`--exact-documents`) are faster and cost nothing on SciFact
# train, but on MS MARCO train queries over the DL19 subset's index recall@10 against exact scoring of the codes was
# 0.615 / 0.80 / 0.907 at 128 / 512 / 1,024 (40% pooled, 1,024 lists) and 0.91 / 0.945 / 0.962 at 256 / 512 / 1,024
# (every token, 16,384 lists): the centroids of short, similar passages do not rank them (docs/aligner.md)
EXACT_DOCUMENTS = 1024


def documents_of(offsets: np.ndarray, token_rows: np.ndarray) -> np.ndarray:
    """The document of each token row (no per-token array: a binary search in the document offsets)."""
    return np.searchsorted(offsets, token_rows, side="right") - 1


def concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[0]..starts[0]+lengths[0]-1, starts[1]..., as one array."""
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(int(lengths.sum()))


class CandidateGenerator(ABC):
    name: ClassVar[str]
    trains: ClassVar[bool] = False  # whether `fit` needs a sample of token vectors (and an nlist)
    recorded: ClassVar[tuple[str, ...]] = ()  # settings the index metadata records for it
    requires_codec: ClassVar[str | None] = None  # the codec whose stored rows it reads, if any
    default_neighbours: ClassVar[int] = 256  # a searcher's `neighbours` when it is not given
    # True: `neighbours` counts documents to score exactly (so a search asks for at least its k); False: nearest
    # tokens per query token
    neighbours_are_documents: ClassVar[bool] = False
    # of the candidates, those scored on the codec's full similarities after a shortlist on its approximate ones
    # (`AlignerSearcher.shortlist`); None: every candidate
    default_exact_documents: ClassVar[int | None] = None
    # every stored vector decoded to float32, where the generator keeps them in memory (flat): exact scoring gathers
    # rows from it instead of decoding the codec's rows again (3x faster than float16 -> float32 per batch)
    decoded: np.ndarray | None = None
    touched: int = 0  # documents the last query's candidate stage looked at

    @classmethod
    def check_codec(cls, codec: str) -> None:
        """The one check that this generator can work with the codec named `codec`."""
        if cls.requires_codec is not None and codec != cls.requires_codec:
            raise ValueError(f"candidates {cls.name!r} reads the stored rows of the {cls.requires_codec} codec; use "
                             f"codec={cls.requires_codec!r} (or another candidate generator), not {codec!r}")

    @classmethod
    def fit(cls, vectors: np.ndarray, options: dict, codec: TokenCodec, prepared: Path) -> None:
        """Train on a sample of the kept token vectors, into the build's `prepared` folder (default: nothing)."""
        return None

    @classmethod
    def write_part(cls, part: Path, vectors: np.ndarray, lengths: np.ndarray, stored: np.ndarray,
                   codec: TokenCodec, prepared: Path) -> None:
        """One chunk's share (vectors: kept token vectors; stored: the codec's rows of them; lengths: per document)."""
        return None

    @classmethod
    def finalise(cls, parts: list[Path], documents: list[int], files: IndexFiles, options: dict,
                 prepared: Path) -> dict:
        """Join the parts' shares into the index folder; return counts for the metadata."""
        return {}

    @classmethod
    @abstractmethod
    def read(cls, files: IndexFiles, codec: TokenCodec, offsets: np.ndarray, options: dict) -> CandidateGenerator:
        ...

    @abstractmethod
    def candidates(self, query_vectors: np.ndarray, query_weights: np.ndarray, neighbours: int) -> np.ndarray:
        """Sorted distinct document rows to score exactly."""


class FlatCandidates(CandidateGenerator):
    """Exact: the documents owning any of the `neighbours` highest-scoring tokens of any query token, every stored
    token scored by a matrix product, in blocks whose top `neighbours` are merged. Nothing stored; the decoded
    vectors are kept in memory when the index opens (small corpora).
    Faiss's IndexFlatIP search with k = 256 took about twice the time of this product and torch's top-k."""
    name = "flat"

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray):
        self.decoded, self.vectors, self.offsets = vectors, torch.from_numpy(vectors), offsets

    @classmethod
    def read(cls, files, codec, offsets, options):
        tokens = int(offsets[-1])
        vectors = np.empty((tokens, options["dim"]), dtype=np.float32)
        for start in range(0, tokens, BATCH):
            vectors[start:start + BATCH] = codec.decode(np.arange(start, min(start + BATCH, tokens)))
        return cls(vectors, offsets)

    def candidates(self, query_vectors, query_weights, neighbours):
        rows = torch.from_numpy(np.ascontiguousarray(query_vectors, dtype=np.float32))
        k = min(neighbours, len(self.vectors))
        block = max(k, FLAT_SCORES_PER_BLOCK // max(1, len(rows)))
        best_scores = torch.empty(len(rows), 0)
        best_ids = torch.empty(len(rows), 0, dtype=torch.int64)
        for start in range(0, len(self.vectors), block):
            top = torch.topk(rows @ self.vectors[start:start + block].T, min(k, len(self.vectors) - start), dim=1)
            merged_scores = torch.cat([best_scores, top.values], dim=1)
            merged_ids = torch.cat([best_ids, top.indices + start], dim=1)
            keep = torch.topk(merged_scores, min(k, merged_scores.shape[1]), dim=1).indices
            best_scores, best_ids = merged_scores.gather(1, keep), merged_ids.gather(1, keep)
        self.touched = len(self.offsets) - 1
        return np.unique(documents_of(self.offsets, best_ids.numpy()))


class StoredTokenCandidates(CandidateGenerator):
    """A token-level Faiss index in candidates.faiss: the documents owning any of the `neighbours` nearest tokens of
    any query token. IVF-PQ (`nprobe`) or HNSW (`ef_search`)."""

    def __init__(self, index: faiss.Index, offsets: np.ndarray):
        self.index, self.offsets = index, offsets

    @staticmethod
    @abstractmethod
    def search_parameter(options: dict) -> str: ...

    @classmethod
    def read(cls, files, codec, offsets, options):
        index = files.faiss_index(CANDIDATES_FILE)
        if index.ntotal != int(offsets[-1]):
            raise AlignerIndexError(f"{files.folder / CANDIDATES_FILE}: {index.ntotal} vectors, metadata says "
                                    f"{int(offsets[-1])}")
        faiss.ParameterSpace().set_index_parameters(index, cls.search_parameter(options))
        return cls(index, offsets)

    def candidates(self, query_vectors, query_weights, neighbours):
        n = min(neighbours, self.index.ntotal)
        _, token_ids = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), n)
        docs = np.unique(documents_of(self.offsets, token_ids[token_ids >= 0]))
        self.touched = len(docs)
        return docs


class IvfPqCandidates(StoredTokenCandidates):
    name = "ivfpq"
    trains = True
    recorded = ("nlist", "pq_m")
    empty = "candidates-empty.faiss"

    @classmethod
    def fit(cls, vectors, options, codec, prepared):
        # the codec's coarse centroids and codebooks when it has them: one training, shared
        index = codec.trained_ivf() or train_ivfpq(vectors, options["nlist"], options["pq_m"], options["train_size"])
        faiss.write_index(index, str(prepared / cls.empty))

    @classmethod
    def write_part(cls, part, vectors, lengths, stored, codec, prepared):
        index = faiss.read_index(str(prepared / cls.empty))
        for start in range(0, len(vectors), 1 << 16):
            index.add(np.asarray(vectors[start:start + 1 << 16], dtype=np.float32))
        faiss.write_index(index, str(part / CANDIDATES_FILE))

    @classmethod
    def finalise(cls, parts, documents, files, options, prepared):
        merged = faiss.read_index(str(parts[0] / CANDIDATES_FILE))
        for part in parts[1:]:
            merged.merge_from(faiss.read_index(str(part / CANDIDATES_FILE)), merged.ntotal)
        files.save_faiss(CANDIDATES_FILE, merged)
        return {}

    @staticmethod
    def search_parameter(options):
        return f"nprobe={options['nprobe']}"


class HnswCandidates(StoredTokenCandidates):
    name = "hnsw"
    recorded = ("hnsw_m",)
    raw = "raw.npy"  # the part's kept vectors (float16), which the graph is built from when the parts are joined

    @classmethod
    def write_part(cls, part, vectors, lengths, stored, codec, prepared):
        np.save(part / cls.raw, np.asarray(vectors).astype(np.float16))

    @classmethod
    def finalise(cls, parts, documents, files, options, prepared):
        hnsw = faiss.index_factory(options["dim"], f"HNSW{options['hnsw_m']}", faiss.METRIC_INNER_PRODUCT)
        for part in parts:
            hnsw.add(np.load(part / cls.raw).astype(np.float32))
        files.save_faiss(CANDIDATES_FILE, hnsw)
        return {}

    @staticmethod
    def search_parameter(options):
        return f"efSearch={options['ef_search']}"


def segments_of(documents_per_part: list[int]) -> list[list[int]]:
    """Consecutive parts grouped into segments of at most SEGMENT_DOCS documents."""
    groups: list[list[int]] = [[]]
    size = 0
    for number, documents in enumerate(documents_per_part):
        if groups[-1] and size + documents > SEGMENT_DOCS:
            groups.append([])
            size = 0
        groups[-1].append(number)
        size += documents
    return groups


class CentroidCandidates(CandidateGenerator):
    """PLAID-style: the documents in the inverted lists of each query token's `nprobe` nearest centroids, ranked by
    their centroid approximation; the best `neighbours` (at least the hits asked for) go on to the searcher's
    shortlist (every token's centroid; the best `default_exact_documents` of them are decoded and scored). The
    lists are stored per segment of at most 65,536 documents (centroid_offsets [segments, nlist + 1], 2-byte
    document numbers): opening the index builds no per-token array.

    The approximation is read off the probed lists alone, as PLAID prunes centroids: a document's score is
    sum_i w_i max(0, max over the probed centroids it has a token in of q_i . centroid). Its tokens under other
    centroids count 0; reading every candidate token's centroid from the codes instead cost 15x more (105 against
    7 CPU ms a query on SciFact's 5,183 documents) for the same nDCG@10 on SciFact train (bench_aligner_search);
    the shortlist reads them for the 1,024 candidates only."""
    name = "centroid"
    requires_codec = ResidualPQStore.name
    # documents to exact scoring when fewer hits are asked for, chosen on development queries (docs/aligner.md;
    # 256 lost 1.9 points on the MS MARCO triples dev set)
    default_neighbours = 1024
    neighbours_are_documents = True
    default_exact_documents = EXACT_DOCUMENTS
    pairs = "pairs.npy"  # a part's distinct (centroid, document) pairs, as centroid * SEGMENT_DOCS + document

    def __init__(self, codec: ResidualPQStore, list_offsets: np.ndarray, list_docs: np.ndarray,
                 segment_starts: np.ndarray, offsets: np.ndarray, nprobe: int):
        self.codec, self.centroids = codec, codec.centroid_table()
        self.list_offsets, self.list_docs, self.segment_starts = list_offsets, list_docs, segment_starts
        self.offsets, self.nprobe = offsets, nprobe

    @classmethod
    def write_part(cls, part, vectors, lengths, stored, codec, prepared):
        doc_of_token = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        np.save(part / cls.pairs, np.unique(codec.centroid_ids_of(stored, codec.centroid_bytes) * SEGMENT_DOCS
                                            + doc_of_token))

    @classmethod
    def finalise(cls, parts, documents, files, options, prepared):
        """centroid_docs.npy (uint16 numbers within a segment), centroid_offsets.npy [segments, nlist + 1] and
        segments.npy [segments + 1] (first document of each), one segment's pairs in memory at a time."""
        nlist = options["nlist"]
        groups = segments_of(documents)
        starts = np.concatenate([[0], np.cumsum(documents)]).astype(np.int64)
        offsets = np.zeros((len(groups), nlist + 1), dtype=np.int64)
        entries = 0
        with open(files.folder / "centroid_docs.tmp", "wb") as out:
            for row, group in enumerate(groups):
                pairs = np.sort(np.concatenate([np.load(parts[p] / cls.pairs) + (starts[p] - starts[group[0]])
                                                for p in group]))
                lists, docs = np.divmod(pairs, SEGMENT_DOCS)
                out.write(docs.astype(np.uint16).tobytes())
                offsets[row] = entries + np.searchsorted(lists, np.arange(nlist + 1))
                entries += len(pairs)
        with open(files.folder / "centroid_docs.npy", "wb") as f:
            npy_format.write_array_header_2_0(f, {"descr": "<u2", "fortran_order": False, "shape": (entries,)})
            with open(files.folder / "centroid_docs.tmp", "rb") as body:
                shutil.copyfileobj(body, f, 1 << 24)
        (files.folder / "centroid_docs.tmp").unlink()
        files.save("centroid_offsets.npy", offsets)
        files.save("segments.npy", starts[[g[0] for g in groups] + [len(documents)]])
        return {"centroid_list_entries": int(entries), "segments": len(groups)}

    @classmethod
    def read(cls, files, codec, offsets, options):
        cls.check_codec(codec.name)
        nlist = codec.options()["nlist"]
        if files.exists("segments.npy"):
            segment_starts = np.asarray(files.array("segments.npy", -1))
            list_offsets = np.asarray(files.array("centroid_offsets.npy", len(segment_starts) - 1))
        else:  # format 1: one segment
            segment_starts = np.array([0, options["documents"]], dtype=np.int64)
            list_offsets = np.asarray(files.array("centroid_offsets.npy", nlist + 1))[None]
        if list_offsets.shape[1] != nlist + 1:
            raise AlignerIndexError(f"{files.folder / 'centroid_offsets.npy'}: {list_offsets.shape[1] - 1} lists, "
                                    f"the codec has {nlist}")
        list_docs = files.array("centroid_docs.npy", int(list_offsets[-1, -1]))
        return cls(codec, list_offsets, list_docs, segment_starts, offsets, min(options["nprobe"], nlist))

    def candidates(self, query_vectors, query_weights, neighbours):
        scores = np.ascontiguousarray(query_vectors, dtype=np.float32) @ self.centroids.T  # [q, nlist]
        nprobe = min(self.nprobe, scores.shape[1])
        probed = np.unique(np.argpartition(-scores, nprobe - 1, axis=1)[:, :nprobe])
        starts, ends = self.list_offsets[:, probed], self.list_offsets[:, probed + 1]  # [segments, probed]
        lengths = (ends - starts).ravel()
        entries = concatenated_ranges(starts.ravel(), lengths)  # (probed centroid, document) pairs
        segment_of_entry = np.repeat(np.repeat(np.arange(len(starts)), len(probed)), lengths)
        centroid_of_entry = np.repeat(np.tile(probed, len(starts)), lengths)
        doc_of_entry = np.asarray(self.list_docs[entries], dtype=np.int64) + self.segment_starts[segment_of_entry]
        order = np.argsort(doc_of_entry, kind="stable")
        doc_sorted = doc_of_entry[order]
        if not len(doc_sorted):
            self.touched = 0
            return doc_sorted
        firsts = np.flatnonzero(np.r_[True, doc_sorted[1:] != doc_sorted[:-1]])
        docs = doc_sorted[firsts]
        self.touched = len(docs)
        if len(docs) <= neighbours:
            return docs
        best = np.maximum.reduceat(np.maximum(scores[:, centroid_of_entry[order]].T, 0), firsts, axis=0)  # [docs, q]
        approx = best @ np.asarray(query_weights, dtype=np.float32)
        return np.sort(docs[np.argpartition(-approx, neighbours - 1)[:neighbours]])


CANDIDATES: dict[str, type[CandidateGenerator]] = {
    c.name: c for c in (FlatCandidates, IvfPqCandidates, HnswCandidates, CentroidCandidates)}

"""An opened AligneR index: its files checked against the metadata, its codec and its candidate generator."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from pyserini_ext.index.aligner.candidates import (
    CANDIDATES,
    CandidateGenerator,
    concatenated_ranges,
    documents_of,
)
from pyserini_ext.index.aligner.codecs import CODECS, TokenCodec
from pyserini_ext.index.aligner.files import (
    INDEX_FORMAT,
    METADATA_FILE,
    READABLE_FORMATS,
    AlignerIndexError,
    IndexFiles,
)
from pyserini_ext.index.aligner.settings import DEFAULT_NPROBE


def _named(table: dict, kind: str, name: object, folder: Path):
    if name not in table:
        raise AlignerIndexError(f"{folder}: unknown {kind} {name!r} in {METADATA_FILE} (known: {tuple(table)})")
    return table[name]


class AlignerIndex:
    """An opened AligneR index: document tokens for exact scoring (through its codec) and its candidate generator.
    Every array is memory-mapped; nothing per token is built in memory (but the flat generator's decoded vectors)."""

    def __init__(self, folder: Path, metadata: dict, docids: list[str], offsets: np.ndarray, weights: np.ndarray,
                 codec: TokenCodec, candidates: CandidateGenerator):
        self.folder, self.metadata, self.docids = folder, metadata, docids
        self.offsets, self.weights, self.codec, self.candidates = offsets, weights, codec, candidates

    @classmethod
    def open(cls, folder: str | os.PathLike, nprobe: int | None = None, ef_search: int = 256) -> AlignerIndex:
        """nprobe: IVF lists (ivfpq) or centroids per query token (centroid) probed (default: the index's);
        ef_search: HNSW. Indexes of format 1 and 2 open."""
        folder = Path(folder)
        if not folder.is_dir():
            raise AlignerIndexError(f"{folder}: no such AligneR index folder")
        meta_path = folder / METADATA_FILE
        if not meta_path.is_file():
            raise AlignerIndexError(f"{folder}: no {METADATA_FILE}; not an AligneR index or an unfinished build")
        try:
            metadata = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise AlignerIndexError(f"{meta_path}: corrupt metadata ({e})") from None
        if metadata.get("format") not in READABLE_FORMATS:
            raise AlignerIndexError(f"{folder}: index format {metadata.get('format')!r}, expected {INDEX_FORMAT!r}")
        counts = metadata["counts"]
        files = IndexFiles(folder, counts["tokens"])
        docids_path = folder / "docids.txt"
        if not docids_path.is_file():
            raise AlignerIndexError(f"{folder}: missing docids.txt")
        docids = docids_path.read_text(encoding="utf-8").splitlines()
        if len(docids) != counts["documents"]:
            raise AlignerIndexError(f"{docids_path}: {len(docids)} docids, metadata says {counts['documents']}")
        offsets = files.array("offsets.npy", counts["documents"] + 1)
        if offsets[0] != 0 or offsets[-1] != counts["tokens"] or np.any(np.diff(offsets) < 0):
            raise AlignerIndexError(f"{folder / 'offsets.npy'}: offsets do not cover {counts['tokens']} tokens")
        weights = files.array("weights.npy")
        if nprobe is None:
            nprobe = metadata.get("search", {}).get("nprobe", DEFAULT_NPROBE)
        options = {**metadata, "documents": counts["documents"], "nprobe": nprobe, "ef_search": ef_search}
        codec = _named(CODECS, "codec", metadata.get("codec"), folder).read(files, options)
        generator = _named(CANDIDATES, "candidate generator", metadata.get("candidates"), folder)
        return cls(folder, metadata, docids, offsets, weights, codec, generator.read(files, codec, offsets, options))

    def documents_of(self, token_rows: np.ndarray) -> np.ndarray:
        """The document row of each token row."""
        return documents_of(self.offsets, token_rows)

    @property
    def model_fingerprint(self) -> str:
        return self.metadata["model"].get("fingerprint", "")

    def __len__(self) -> int:
        return len(self.docids)

    @property
    def tokens(self) -> int:
        return int(self.metadata["counts"]["tokens"])

    def document_similarities(self, doc_indices: np.ndarray, query_vectors: np.ndarray, approximate: bool = False
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded (similarities [C, L, n] float32 of each document token with the n query vectors, weights [C, L],
        mask [C, L]): what scoring needs, without materialising padded document vectors. approximate: the codec's
        cheaper approximation (`TokenCodec.approximate_similarities`; the caller checks `approximates`)."""
        if query_vectors.ndim != 2 or query_vectors.shape[1] != self.metadata["dim"]:
            raise ValueError(f"query vectors of shape {tuple(query_vectors.shape)}; {self.folder} holds "
                             f"{self.metadata['dim']}-dim token vectors")
        rows, weights, mask = self._padded_rows(doc_indices)
        similarities = np.zeros(rows.shape + (len(query_vectors),), dtype=np.float32)
        queries = np.ascontiguousarray(query_vectors, np.float32)
        decoded = self.candidates.decoded
        if approximate:
            similarities[mask] = self.codec.approximate_similarities(rows[mask], queries).T
        elif decoded is not None:
            similarities[mask] = decoded[rows[mask]] @ queries.T
        else:
            similarities[mask] = self.codec.similarities(rows[mask], queries)
        return similarities, weights, mask

    @property
    def approximates(self) -> bool:
        """Whether the codec has a cheaper approximation of token similarities (a shortlist stage can use it)."""
        return self.candidates.decoded is None and self.codec.approximates

    def token_rows(self, doc_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The token rows of the documents, concatenated in their order, and each document's token count."""
        starts = self.offsets[doc_indices]
        lengths = self.offsets[doc_indices + 1] - starts
        return concatenated_ranges(starts, lengths), lengths

    def _padded_rows(self, doc_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts = self.offsets[doc_indices]
        lengths = self.offsets[doc_indices + 1] - starts
        positions = np.arange(max(1, int(lengths.max(initial=1))))
        mask = positions[None, :] < lengths[:, None]
        rows = np.where(mask, starts[:, None] + positions[None, :], 0)
        weights = np.where(mask, np.asarray(self.weights[rows.ravel()]).reshape(rows.shape), 0).astype(np.float32)
        return rows, weights, mask

    def bytes_per_token(self) -> float:
        return float(self.metadata["bytes_per_token"])

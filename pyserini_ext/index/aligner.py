"""AligneR token index: salience-pruned token vectors, stored compactly, plus a token-level Faiss index.

Two steps, so that one (slow) encoding serves several pruning ratios:
1. `encode_corpus` -> `EncodedCorpus`: every token vector (float16) and its document-salience pre-activation.
2. `build_index(encoded, folder, beta_d, codec, candidates)`: keeps the top ceil(beta_d * m) tokens of each
   document by salience (original order kept), and writes

   metadata.json   format, model (path, fingerprint), dims, beta_d, codec, candidates, counts, bytes per part
   docids.txt      one docid per line, in index order
   offsets.npy     int64 [documents + 1]: tokens of document i are rows offsets[i]:offsets[i + 1]
   weights.npy     float16 [tokens]: document salience u = ReLU(W d + b) of every kept token
   vectors.npy     float16 [tokens, dim]                            (codec "float16")
   codes.npy + codec.faiss   uint8 [tokens, code bytes] + trained IVF-PQ   (codec "residual-pq": centroid id
                   + PQ code of the residual, ColBERTv2-style; decoded with Faiss `sa_decode`)
   candidates.faiss          token-level ANN index (candidates "ivfpq" or "hnsw"); "flat" stores nothing
                   and builds an exact IndexFlatIP from the stored vectors when the index is opened.

The folder is written under a temporary name and renamed when complete, so an interrupted build leaves no
folder that opens; `AlignerIndex.open` checks every file against the metadata and names what is wrong.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np
from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output, check_id
from pyserini_ext.data.text import corpus_fingerprint, document_text, sanitize_texts
from pyserini_ext.errors import CacheMismatchError, IndexFolderError, OutputExistsError
from pyserini_ext.models.aligner import DOCUMENT, AlignerModel

INDEX_FORMAT = "pyserini-ext-aligner-index/1"
METADATA_FILE = "metadata.json"
CODECS = ("float16", "residual-pq")
CANDIDATE_INDEXES = ("flat", "ivfpq", "hnsw")
ENCODED_FILE = "encoded.npz"


class AlignerIndexError(IndexFolderError):
    """An AligneR index folder is missing, incomplete, corrupt, or does not fit the model used with it."""


@dataclass
class EncodedCorpus:
    """Unpruned token vectors of a corpus (float16), their salience pre-activations, and document offsets."""
    docids: list[str]
    offsets: np.ndarray
    vectors: np.ndarray
    salience_scores: np.ndarray
    model_info: dict = field(default_factory=dict)  # path, fingerprint, doc_max_length, corpus_fingerprint
    truncated: int = 0  # documents cut at doc_max_length tokens
    skipped_empty: list[str] = field(default_factory=list)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        with atomic_output(path, overwrite=True) as tmp, open(tmp, "wb") as f:
            np.savez(f, offsets=self.offsets, vectors=self.vectors, salience_scores=self.salience_scores,
                     docids=np.array(self.docids, dtype=str),
                     info=np.array(json.dumps({"model": self.model_info, "truncated": self.truncated,
                                               "skipped_empty": self.skipped_empty})))
        return path

    def check_matches(self, path: str | os.PathLike, model: AlignerModel,
                      corpus: Mapping[str, Mapping[str, str]] | None = None, max_length: int | None = None) -> None:
        """Refuse a cache made with another model or max length, or from another corpus (when one is given)."""
        if max_length and max_length != self.model_info.get("doc_max_length"):
            raise CacheMismatchError(f"{path}: encoding cache made with max length "
                                     f"{self.model_info.get('doc_max_length')}, not {max_length}; delete it or "
                                     "give another --encoded")
        made_with = self.model_info.get("fingerprint")
        if made_with != model.fingerprint():
            raise CacheMismatchError(f"{path}: encoding cache made with another model (fingerprint {made_with}, "
                                     f"this model {model.fingerprint()}); delete it or give another --encoded")
        if corpus is not None and self.model_info.get("corpus_fingerprint") != corpus_fingerprint(corpus):
            raise CacheMismatchError(f"{path}: encoding cache made from another corpus; delete it or give another "
                                     "--encoded")

    @classmethod
    def load(cls, path: str | os.PathLike) -> EncodedCorpus:
        try:
            with np.load(path) as data:  # docids are a unicode array: no pickle
                info = json.loads(str(data["info"]))
                return cls([str(d) for d in data["docids"]], data["offsets"], data["vectors"],
                           data["salience_scores"], info["model"], info["truncated"], info["skipped_empty"])
        except (ValueError, KeyError, OSError) as e:
            raise AlignerIndexError(f"{path}: not a readable AligneR encoding cache ({e}); delete it to re-encode"
                                    ) from None


def encode_corpus(model: AlignerModel, corpus: Mapping[str, Mapping[str, str]], batch_size: int = 32,
                  max_length: int | None = None, fp16: bool = False, model_path: str = "",
                  progress: bool = True) -> EncodedCorpus:
    """Encode every document (title + text). Empty documents are skipped and listed; long ones are truncated."""
    max_length = max_length or model.config.doc_max_length
    docids, texts, skipped = [], [], []
    for docid, doc in corpus.items():
        check_id(docid, "corpus")
        text = sanitize_texts([document_text(doc)], f"document {docid!r}")[0]
        (docids if text else skipped).append(docid)
        if text:
            texts.append(text)
    if not texts:
        raise ValueError("encode_corpus: every document is empty; nothing to index")
    encoded = model.encode_texts(texts, DOCUMENT, batch_size=batch_size, max_length=max_length, fp16=fp16,
                                 progress=progress)
    lengths = np.array([len(scores) for _, scores in encoded], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return EncodedCorpus(
        docids=docids, offsets=offsets,
        vectors=np.concatenate([v for v, _ in encoded]).astype(np.float16),
        salience_scores=np.concatenate([s for _, s in encoded]).astype(np.float32),
        model_info={"path": model_path, "fingerprint": model.fingerprint(), "doc_max_length": max_length,
                    "dim": model.config.dim, "corpus_fingerprint": corpus_fingerprint(corpus)},
        truncated=int((lengths >= max_length).sum()), skipped_empty=skipped)


def prune_tokens(offsets: np.ndarray, salience_scores: np.ndarray, beta_d: float) -> np.ndarray:
    """Row numbers of the kept tokens: the top ceil(beta_d * m) of each document by salience, in original order."""
    if not 0 < beta_d <= 1:
        raise ValueError(f"beta_d must be in (0, 1], got {beta_d}")
    lengths = np.diff(offsets)
    doc_of_token = np.repeat(np.arange(len(lengths)), lengths)
    order = np.lexsort((-salience_scores, doc_of_token))  # by document, then by salience descending
    rank_in_doc = np.empty(len(order), dtype=np.int64)
    rank_in_doc[order] = np.arange(len(order)) - offsets[doc_of_token[order]]
    keep_per_doc = np.maximum(1, np.ceil(lengths * beta_d - 1e-9).astype(np.int64))
    return np.flatnonzero(rank_in_doc < keep_per_doc[doc_of_token])


def _train_ivfpq(vectors: np.ndarray, nlist: int, pq_m: int, train_size: int | None = None, seed: int = 42
                 ) -> faiss.Index:
    # "np": no polysemous training (minutes of simulated annealing we do not use)
    index = faiss.index_factory(vectors.shape[1], f"IVF{nlist},PQ{pq_m}np", faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    # Faiss wants >= 39 points per centroid: 64 per IVF list, and >= 2^16 for the 256-centroid PQ codebooks
    sample_size = min(len(vectors), train_size or max(64 * nlist, 1 << 16))
    sample = vectors[np.sort(rng.choice(len(vectors), sample_size, replace=False))].astype(np.float32)
    index.cp.seed = seed
    index.train(sample)
    return index


def default_nlist(n_tokens: int) -> int:
    """About 4 * sqrt(tokens) coarse centroids (power of two), between 16 and 1024 (CPU k-means time)."""
    return int(min(1024, max(16, 2 ** round(np.log2(max(1.0, 4 * np.sqrt(n_tokens)))))))


def build_index(encoded: EncodedCorpus, folder: str | os.PathLike, beta_d: float = 1.0, codec: str = "float16",
                candidates: str = "flat", nlist: int | None = None, pq_m: int = 32, hnsw_m: int = 32,
                train_size: int | None = None, overwrite: bool = False, progress: bool = True) -> Path:
    """Write an AligneR index folder (see the module docstring); returns its path.

    train_size: token vectors sampled to train IVF/PQ (default max(64 * nlist, 65536)).
    """
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    if candidates not in CANDIDATE_INDEXES:
        raise ValueError(f"candidates must be one of {CANDIDATE_INDEXES}, got {candidates!r}")
    folder = Path(folder)
    if folder.exists() and not overwrite:  # before any work; atomic_output checks again when writing
        raise OutputExistsError(f"{folder} exists; pass overwrite=True (--overwrite) to replace it")
    dim = encoded.vectors.shape[1]
    if dim % pq_m and (codec == "residual-pq" or candidates == "ivfpq"):
        raise ValueError(f"pq_m={pq_m} must divide the vector dimension {dim}")
    steps = tqdm(total=4, desc=f"index beta_d={beta_d:g}", disable=not progress)
    started = time.time()
    kept = prune_tokens(encoded.offsets, encoded.salience_scores, beta_d)
    lengths = np.diff(encoded.offsets)
    kept_lengths = np.bincount(np.repeat(np.arange(len(lengths)), lengths)[kept], minlength=len(lengths))
    offsets = np.concatenate([[0], np.cumsum(kept_lengths)]).astype(np.int64)
    vectors = encoded.vectors[kept]
    weights = np.maximum(encoded.salience_scores[kept], 0).astype(np.float16)
    steps.update(1)

    try:
        with atomic_output(folder, overwrite, owned=lambda p: (p / METADATA_FILE).is_file()) as tmp:
            tmp.mkdir()
            (tmp / "docids.txt").write_text("".join(f"{d}\n" for d in encoded.docids), encoding="utf-8")
            np.save(tmp / "offsets.npy", offsets)
            np.save(tmp / "weights.npy", weights)
            nlist = nlist or default_nlist(len(vectors))
            trained = None
            if codec == "residual-pq" or candidates == "ivfpq":
                trained = _train_ivfpq(vectors, nlist, pq_m, train_size)
            steps.update(1)
            if codec == "float16":
                np.save(tmp / "vectors.npy", vectors)
            else:
                faiss.write_index(trained, str(tmp / "codec.faiss"))
                np.save(tmp / "codes.npy", trained.sa_encode(vectors.astype(np.float32)))
            steps.update(1)
            if candidates != "flat":
                ann = faiss.clone_index(trained) if candidates == "ivfpq" else faiss.index_factory(
                    dim, f"HNSW{hnsw_m}", faiss.METRIC_INNER_PRODUCT)
                for start in range(0, len(vectors), 65536):
                    ann.add(vectors[start:start + 65536].astype(np.float32))
                faiss.write_index(ann, str(tmp / "candidates.faiss"))
            steps.update(1)
            part_bytes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
            metadata = {
                "format": INDEX_FORMAT, "model": encoded.model_info, "dim": dim, "beta_d": beta_d, "codec": codec,
                "candidates": candidates, "nlist": nlist if trained is not None else None,
                "pq_m": pq_m if trained is not None else None, "hnsw_m": hnsw_m if candidates == "hnsw" else None,
                "counts": {"documents": len(encoded.docids), "tokens": int(len(vectors)),
                           "tokens_before_pruning": int(len(encoded.vectors)), "truncated": encoded.truncated,
                           "skipped_empty": len(encoded.skipped_empty)},
                "skipped_empty_docids": encoded.skipped_empty[:1000],
                "bytes": part_bytes, "bytes_per_token": sum(part_bytes.values()) / max(1, len(vectors)),
                "build_seconds": round(time.time() - started, 2),
            }
            # metadata last: a folder without it never opens
            (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=1))
    finally:
        steps.close()
    return folder


class AlignerIndex:
    """An opened AligneR index: document tokens for exact scoring and the token-level Faiss index."""

    def __init__(self, folder: Path, metadata: dict, docids: list[str], offsets: np.ndarray, weights: np.ndarray,
                 vectors: np.ndarray | None, codes: np.ndarray | None, codec: faiss.Index | None,
                 candidate_index: faiss.Index):
        self.folder, self.metadata, self.docids = folder, metadata, docids
        self.offsets, self.weights, self.vectors, self.codes, self.codec = offsets, weights, vectors, codes, codec
        self.candidate_index = candidate_index
        self.doc_of_token = np.repeat(np.arange(len(docids), dtype=np.int64), np.diff(offsets))

    @classmethod
    def open(cls, folder: str | os.PathLike, nprobe: int = 32, ef_search: int = 256) -> AlignerIndex:
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
        if metadata.get("format") != INDEX_FORMAT:
            raise AlignerIndexError(f"{folder}: index format {metadata.get('format')!r}, expected {INDEX_FORMAT!r}")
        counts = metadata["counts"]

        def load_array(name: str, rows: int) -> np.ndarray:
            path = folder / name
            if not path.is_file():
                raise AlignerIndexError(f"{folder}: missing {name}")
            try:
                array = np.load(path, mmap_mode="r")
            except (ValueError, OSError, EOFError) as e:
                raise AlignerIndexError(f"{path}: corrupt ({e})") from None
            if array.shape[0] != rows:
                raise AlignerIndexError(f"{path}: {array.shape[0]} rows, metadata says {rows}")
            return array

        def load_faiss(name: str) -> faiss.Index:
            path = folder / name
            if not path.is_file():
                raise AlignerIndexError(f"{folder}: missing {name}")
            try:
                return faiss.read_index(str(path))
            except RuntimeError as e:
                raise AlignerIndexError(f"{path}: corrupt Faiss index ({str(e).splitlines()[0]})") from None

        docids_path = folder / "docids.txt"
        if not docids_path.is_file():
            raise AlignerIndexError(f"{folder}: missing docids.txt")
        docids = docids_path.read_text(encoding="utf-8").splitlines()
        if len(docids) != counts["documents"]:
            raise AlignerIndexError(f"{docids_path}: {len(docids)} docids, metadata says {counts['documents']}")
        offsets = np.asarray(load_array("offsets.npy", counts["documents"] + 1))
        if offsets[0] != 0 or offsets[-1] != counts["tokens"] or np.any(np.diff(offsets) < 0):
            raise AlignerIndexError(f"{folder / 'offsets.npy'}: offsets do not cover {counts['tokens']} tokens")
        weights = load_array("weights.npy", counts["tokens"])
        vectors = codes = codec = None
        if metadata["codec"] == "float16":
            vectors = load_array("vectors.npy", counts["tokens"])
        else:
            codes = load_array("codes.npy", counts["tokens"])
            codec = load_faiss("codec.faiss")
        if metadata["candidates"] == "flat":
            candidate_index = faiss.IndexFlatIP(metadata["dim"])
            all_rows = np.arange(counts["tokens"])
            for start in range(0, counts["tokens"], 65536):
                candidate_index.add(_decode(vectors, codes, codec, all_rows[start:start + 65536]))
        else:
            candidate_index = load_faiss("candidates.faiss")
            if candidate_index.ntotal != counts["tokens"]:
                raise AlignerIndexError(f"{folder / 'candidates.faiss'}: {candidate_index.ntotal} vectors, "
                                        f"metadata says {counts['tokens']}")
            faiss.ParameterSpace().set_index_parameters(
                candidate_index, f"nprobe={nprobe}" if metadata["candidates"] == "ivfpq" else f"efSearch={ef_search}")
        return cls(folder, metadata, docids, offsets, weights, vectors, codes, codec, candidate_index)

    @property
    def model_fingerprint(self) -> str:
        return self.metadata["model"].get("fingerprint", "")

    def __len__(self) -> int:
        return len(self.docids)

    def document_tokens(self, doc_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded (vectors [C, L, dim] float32, weights [C, L] float32, mask [C, L] bool) of some documents."""
        starts = self.offsets[doc_indices]
        lengths = self.offsets[doc_indices + 1] - starts
        positions = np.arange(max(1, int(lengths.max(initial=1))))
        mask = positions[None, :] < lengths[:, None]
        rows = np.where(mask, starts[:, None] + positions[None, :], 0)
        vectors = np.zeros(rows.shape + (self.metadata["dim"],), dtype=np.float32)
        vectors[mask] = _decode(self.vectors, self.codes, self.codec, rows[mask])
        weights = np.where(mask, np.asarray(self.weights[rows.ravel()]).reshape(rows.shape), 0).astype(np.float32)
        return vectors, weights, mask

    def bytes_per_token(self) -> float:
        return float(self.metadata["bytes_per_token"])


def _decode(vectors: np.ndarray | None, codes: np.ndarray | None, codec: faiss.Index | None,
            rows: np.ndarray) -> np.ndarray:
    if vectors is not None:
        return np.asarray(vectors[rows], dtype=np.float32)
    return codec.sa_decode(np.ascontiguousarray(codes[rows]))

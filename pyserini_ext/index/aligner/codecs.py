"""How an AligneR index stores its token vectors: codecs, each an object that owns every step of its files.

    fit(vectors, options) -> codec      first pass: train on a sample of the kept token vectors
    save(prepared) / load(prepared)     what the parts need from the first pass (a build may run on Ray actors)
    write_part(vectors, part) -> rows   one chunk's stored rows, into its part folder (returned: the candidate
                                        generator may read them, e.g. the centroid ids inside residual codes)
    finalise(parts, files, options)     the parts' files joined into the index folder
    read(files, options) -> codec       an opened index; decode(rows) / similarities(rows, queries) for scoring

as ColBERT's ResidualCodec owns compress / save / load / decompress. The builder asks the codec named in the
settings; it never branches on the name.

  float16       vectors.npy, 2 bytes per dimension, exact up to float16 rounding.
  residual-pq   ColBERTv2-style: a coarse centroid id + a PQ code of the residual, with Faiss's IVF-PQ
                (`sa_encode`/`sa_decode`, decoded vectors renormalised to unit length); codec.faiss holds the
                centroids and codebooks, codes.npy uint8 [tokens, centroid id bytes + PQ code bytes].
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import faiss
import numpy as np

from pyserini_ext.index.aligner.files import IndexFiles

BATCH = 65536
CENTROIDS_FILE = "centroids.npy"
CODEC_FILE = "codec.faiss"
# Residual codes of 32 x 6 bits (24 bytes; ~30.5 bytes per kept token with the centroid id, weights and lists): the
# best loss per byte on development queries (docs/journal/aligner.md)
RESIDUAL_PQ_BITS = 6


class TokenCodec(ABC):
    name: ClassVar[str]
    trains: ClassVar[bool] = False  # whether `fit` needs a sample of token vectors (and an nlist)
    # settings the index metadata records for this codec (the others are recorded as None)
    recorded: ClassVar[tuple[str, ...]] = ()
    # bits per PQ sub-quantizer when none is given (a token-level IVF-PQ beside a codec that has no PQ: 8)
    default_pq_bits: ClassVar[int] = 8
    approximates: ClassVar[bool] = False  # whether `approximate_similarities` is implemented

    @classmethod
    @abstractmethod
    def fit(cls, vectors: np.ndarray, options: dict) -> TokenCodec: ...

    def save(self, prepared: Path) -> None:
        """Write what `load` needs into the build's `prepared` folder (default: nothing was trained)."""
        return None

    @classmethod
    def load(cls, prepared: Path) -> TokenCodec:
        return cls()

    @abstractmethod
    def write_part(self, vectors: np.ndarray, part: Path) -> np.ndarray:
        """Store one chunk's kept token vectors into the folder `part`; return the stored rows."""

    @abstractmethod
    def finalise(self, parts: list[Path], files: IndexFiles, options: dict) -> None:
        """Join the parts' stored rows (in order) into the index folder of `files`."""

    @classmethod
    @abstractmethod
    def read(cls, files: IndexFiles, options: dict) -> TokenCodec: ...

    @abstractmethod
    def decode(self, rows: np.ndarray) -> np.ndarray: ...

    def similarities(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Inner products [len(rows), n] of the stored tokens `rows` with the query vectors [n, dim]."""
        return self.decode(rows) @ queries.T

    def approximate_similarities(self, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """A cheaper approximation of `similarities`, query-major [n, len(rows)] (residual codes: q . the token's
        centroid), where the codec `approximates` (otherwise a searcher scores every candidate on `similarities`)."""
        raise NotImplementedError(f"the {self.name} codec has no approximate similarities")

    def trained_ivf(self) -> faiss.Index | None:
        """A trained, empty IVF index over the same coarse centroids, when the codec has one (a token-level IVF-PQ
        candidate index then shares them instead of training its own)."""
        return None

    def options(self) -> dict:
        """What an opened codec knows of its own shape."""
        return {}


class Float16Store(TokenCodec):
    name = "float16"
    stored = "vectors.npy"

    def __init__(self, vectors: np.ndarray | None = None):
        self.vectors = vectors

    @classmethod
    def fit(cls, vectors, options):
        return cls()

    def write_part(self, vectors, part):
        stored = np.asarray(vectors).astype(np.float16)
        np.save(part / self.stored, stored)
        return stored

    def finalise(self, parts, files, options):
        files.concatenate(self.stored, parts)

    @classmethod
    def read(cls, files, options):
        return cls(files.array(cls.stored))

    def decode(self, rows):
        return np.asarray(self.vectors[rows], dtype=np.float32)


def train_ivfpq(vectors: np.ndarray, nlist: int, pq_m: int, train_size: int | None = None, seed: int = 42,
                pq_bits: int = 8, two_level: bool = False) -> faiss.Index:
    """An empty IVF-PQ trained on a sample of `vectors`. two_level: the coarse centroids from Faiss's two-level
    k-means (sqrt(nlist) clusters, then each split) and an HNSW coarse quantizer, so that training and assigning
    cost ~sqrt(nlist) per vector instead of nlist (large corpora: tens of thousands of lists)."""
    # "np": no polysemous training (minutes of simulated annealing we do not use)
    quantizer = "_HNSW32" if two_level else ""
    index = faiss.index_factory(vectors.shape[1], f"IVF{nlist}{quantizer},PQ{pq_m}x{pq_bits}np",
                                faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    # Faiss wants >= 39 points per centroid: 64 per IVF list, and >= 2^16 for the 256-centroid PQ codebooks
    sample_size = min(len(vectors), train_size or max(64 * nlist, 1 << 16))
    sample = vectors[np.sort(rng.choice(len(vectors), sample_size, replace=False))].astype(np.float32)
    index.cp.seed = seed
    if two_level:
        from faiss.contrib.clustering import two_level_clustering

        centroids, _ = two_level_clustering(sample, int(np.sqrt(nlist)), nlist, clustering_niter=10, seed=seed)
        ivf = faiss.extract_index_ivf(index)
        ivf.quantizer.add(np.ascontiguousarray(centroids, dtype=np.float32))
    index.train(sample)  # with the quantizer filled, only the residual PQ trains
    return index


class ResidualPQStore(TokenCodec):
    name = "residual-pq"
    trains = True
    recorded = ("nlist", "pq_m", "pq_bits")
    default_pq_bits = RESIDUAL_PQ_BITS
    approximates = True
    stored = "codes.npy"

    def __init__(self, ivfpq: faiss.Index, codes: np.ndarray | None = None):
        self.ivfpq, self.codes = ivfpq, codes
        self.centroid_bytes = faiss.extract_index_ivf(ivfpq).coarse_code_size()

    @classmethod
    def fit(cls, vectors, options):
        codec = cls(train_ivfpq(vectors, options["nlist"], options["pq_m"], options.get("train_size"),
                                pq_bits=options.get("pq_bits", 8), two_level=options.get("two_level", False)))
        # the index stores its centroids as float16 (`write_compact`): every token is encoded with those
        codec.round_centroids()
        return codec

    def save(self, prepared):
        faiss.write_index(self.ivfpq, str(prepared / CODEC_FILE))

    @classmethod
    def load(cls, prepared):
        return cls(faiss.read_index(str(prepared / CODEC_FILE)))

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """uint8 codes [tokens, centroid id bytes + PQ code bytes] of float vectors."""
        if not len(vectors):
            return np.zeros((0, self.ivfpq.sa_code_size()), dtype=np.uint8)
        return np.concatenate([self.ivfpq.sa_encode(np.asarray(vectors[s:s + BATCH], dtype=np.float32))
                               for s in range(0, len(vectors), BATCH)])

    def write_part(self, vectors, part):
        codes = self.encode(vectors)
        np.save(part / self.stored, codes)
        return codes

    def finalise(self, parts, files, options):
        files.concatenate(self.stored, parts)
        self.write_compact(files.folder)

    def trained_ivf(self):
        return faiss.clone_index(self.ivfpq)

    @classmethod
    def read(cls, files, options):
        ivfpq = files.faiss_index(CODEC_FILE)
        if files.exists(CENTROIDS_FILE):  # a compact codec: its coarse centroids stored apart
            ivf = faiss.extract_index_ivf(ivfpq)
            centroids = np.asarray(files.array(CENTROIDS_FILE, ivf.nlist), dtype=np.float32)
            quantizer = faiss.IndexFlatIP(centroids.shape[1])
            quantizer.add(centroids)
            ivf.quantizer = quantizer
            ivf.own_fields = False
            store = cls(ivfpq, files.array(cls.stored))
            store.quantizer = quantizer  # Faiss does not own it: keep it alive with the codec
            return store
        return cls(ivfpq, files.array(cls.stored))

    def write_compact(self, folder: Path) -> None:
        """codec.faiss without its coarse quantizer + centroids.npy (float16): the centroid table in half the bytes
        of float32 centroids (a quarter of those with HNSW links, for tens of thousands of lists; at 1,024 lists and
        200k tokens, 1.3 bytes per token less). Exact when the centroids were rounded to float16 before any token
        was encoded (`round_centroids`, which `fit` does)."""
        ivf = faiss.extract_index_ivf(self.ivfpq)
        np.save(folder / CENTROIDS_FILE, self.centroids().astype(np.float16))
        stripped = faiss.clone_index(self.ivfpq)
        stripped_ivf = faiss.extract_index_ivf(stripped)
        stripped_ivf.quantizer = faiss.IndexFlatIP(ivf.d)
        stripped_ivf.own_fields = True
        faiss.write_index(stripped, str(folder / CODEC_FILE))

    def round_centroids(self) -> None:
        """Replace the coarse centroids by their float16 roundings (so that `write_compact` loses nothing)."""
        quantizer = faiss.extract_index_ivf(self.ivfpq).quantizer
        rounded = self.centroids().astype(np.float16).astype(np.float32)
        quantizer.reset()
        quantizer.add(rounded)

    def decode(self, rows):
        # AligneR's vectors are unit length: putting the reconstruction back on the sphere removes the part of
        # the quantisation error along the vector (SciFact train, 300 queries, 1000 documents: PQ16x8 -1.29 ->
        # -0.98 nDCG@10 points from exact, PQ32x6 -0.99 -> -0.67)
        decoded = self.ivfpq.sa_decode(np.ascontiguousarray(self.codes[rows]))
        return decoded / self._norms(decoded)[:, None]

    def similarities(self, rows, queries):
        # the same values as decode(rows) @ queries.T, but the renormalisation divides the [tokens, n] products
        # rather than the [tokens, dim] vectors (n query tokens < dim)
        decoded = self.ivfpq.sa_decode(np.ascontiguousarray(self.codes[rows]))
        return (decoded @ queries.T) / self._norms(decoded)[:, None]

    def approximate_similarities(self, rows, queries):
        # PLAID's centroid interaction: q . centroid of each token, from the 1-2 centroid id bytes of its code (no
        # decoding). The table is computed for the centroids the rows use only (large nlist: most are not)
        ids = self.centroid_ids(rows)
        table = self.centroid_table()
        used = np.zeros(len(table), dtype=bool)
        used[ids] = True
        rank = (np.cumsum(used) - 1).astype(np.int32)
        return np.take(np.asarray(queries, dtype=np.float32) @ table[used].T, rank[ids], axis=1)

    def centroid_table(self) -> np.ndarray:
        """The coarse centroids as float32 [nlist, dim], reconstructed once per opened index."""
        if getattr(self, "_centroid_table", None) is None:
            self._centroid_table = np.ascontiguousarray(self.centroids(), dtype=np.float32)
        return self._centroid_table

    @staticmethod
    def _norms(decoded: np.ndarray) -> np.ndarray:
        return np.maximum(np.sqrt(np.einsum("td,td->t", decoded, decoded)), 1e-6)

    def centroid_ids(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The coarse centroid of each stored token `rows`."""
        return self.centroid_ids_of(self.codes[rows], self.centroid_bytes)

    @staticmethod
    def centroid_ids_of(codes: np.ndarray, centroid_bytes: int) -> np.ndarray:
        """The coarse centroid of each code: its little-endian first bytes (Faiss `encode_listno`)."""
        if centroid_bytes in (1, 2, 4, 8) and len(codes):  # one view of the first bytes (3x faster than shifts)
            head = np.ascontiguousarray(codes[:, :centroid_bytes]).view(f"<u{centroid_bytes}")[:, 0]
            return head.astype(np.int64)
        head = np.asarray(codes[:, :centroid_bytes], dtype=np.int64)
        return (head << (8 * np.arange(centroid_bytes))).sum(axis=1)

    def centroids(self) -> np.ndarray:
        quantizer = faiss.extract_index_ivf(self.ivfpq).quantizer
        return quantizer.reconstruct_n(0, quantizer.ntotal)

    def options(self):
        ivf = faiss.extract_index_ivf(self.ivfpq)
        return {"nlist": int(ivf.nlist), "pq_m": int(faiss.downcast_index(self.ivfpq).pq.M)}


CODECS: dict[str, type[TokenCodec]] = {c.name: c for c in (Float16Store, ResidualPQStore)}

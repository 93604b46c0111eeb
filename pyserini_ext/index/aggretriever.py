"""Aggretriever's streaming index build (`IndexBuilder`, see streaming.py): a Pyserini Faiss index folder.

The folder holds what Pyserini's FaissRepresentationWriter writes (`index`, `docid`: the unchanged `python -m
pyserini.search.faiss --index` opens it) plus `pyserini_ext_index.json` (model, settings, counts). Index types:

    flat    IndexFlatIP, Pyserini's default and what `python -m pyserini.encode ... --to-faiss` writes (the same
            bytes). Parts are the chunks' float32 vectors; finalise streams them into the file after a header, so
            the build holds one part at a time.
    ivfpq   IndexIVFPQ (inner product): `prepare` encodes the first `train_docs` documents and trains the coarse
            quantizer and the PQ on them (their vectors are kept and reused by the parts, not encoded twice);
            each part is the chunk's codes added to a copy of the trained empty index (part .faiss); finalise
            writes the inverted lists of all parts, list by list, straight into the file (exactly what Faiss's
            IndexIVF.merge_from of the parts writes), holding one part at a time. `nprobe` is stored in the index:
            Pyserini's FaissSearcher sets none.
    ivfsq   IndexIVFScalarQuantizer (inner product), `sq_bits` per dimension (4, 6, 8, or 16: float16), built
            part by part as ivfpq, behind a random rotation (`rotate`, an IndexPreTransform: inner products are
            unchanged, and the rotated coordinates are spread evenly, which uniform per-dimension quantization
            needs) or an uncentred PCA (`pca` > 0: a LinearTransform without bias; Faiss's PCAMatrix centres, which
            shifts every document's inner product by <mean, doc> and so reorders them). `nprobe` is stored in the
            index. The MS MARCO-size choice (docs/scale.md): 6 bits, rotated, sqrt(N) lists, 1/32 of them probed.
    hnsw    IndexHNSWFlat (inner product), parts are vectors; finalise adds them to the graph, which, as HNSW
            does, holds every vector in RAM. `efSearch` is stored in the index (Pyserini's `--ef-search` overrides).
    ivfpq-refine
            IndexRefine: IVF candidates re-scored from the full vectors. The base is a random rotation (or the
            uncentred PCA) + IVF + PQ (`pq_m` bytes a passage), trained and written part by part as ivfpq; the
            refine index holds every vector (`refine`: fp16, an IndexScalarQuantizer, or float32, an IndexFlat) and
            is memory-mapped at search time (faiss.IO_FLAG_MMAP_IFC; pyserini_ext/integration/search_faiss.py, which
            Pyserini's FaissSearcher reads through), so RAM holds the base and the pages of the candidates a query
            re-scores. Each part is its base codes and its refine codes; finalise writes Faiss's bytes of the
            IndexRefine (header, the base as ivfpq, the refine codes streamed, `k_factor`), one part at a time.
            `nprobe` and `k_factor` (k * k_factor candidates re-scored for k hits) are stored in the index,
            `min_candidates` in the metadata (Pyserini's path re-scores at least that many, for a small k). The
            choice measured in docs/scale.md (recall@10 against flat on development queries at 300k and 1M): PQ64,
            sqrt(N) lists, 1/4 of them probed, k_factor 4, at least 4,000 candidates, fp16 refine vectors.
"""
from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output
from pyserini_ext.encode.aggretriever import DOCUMENT_MAX_LENGTH
from pyserini_ext.errors import IndexFolderError, OptionError
from pyserini_ext.index.streaming import Document, IndexBuilder, part_docids

INDEX_TYPES = ("flat", "ivfpq", "ivfsq", "hnsw", "ivfpq-refine")
IVF_TYPES = ("ivfpq", "ivfsq", "ivfpq-refine")  # trained on the sample, parts are IVF codes
PQ_TYPES = ("ivfpq", "ivfpq-refine")
REFINE_TYPE = "ivfpq-refine"
REFINE_CODECS = ("fp16", "float32")  # the refine index's vectors: IndexScalarQuantizer fp16, IndexFlat
SQ_TYPES = {4: "SQ4", 6: "SQ6", 8: "SQ8", 16: "SQfp16"}  # sq_bits -> Faiss factory codec
METADATA_FILE = "pyserini_ext_index.json"
INDEX_FILE, DOCID_FILE = "index", "docid"  # Pyserini's names
VECTORS_FILE, PART_INDEX_FILE, REFINE_FILE = "vectors.npy", "index.faiss", "refine.npy"
TRAINED_FILE, SAMPLE_VECTORS, SAMPLE_DOCIDS = "trained.faiss", "sample.npy", "sample_docids.txt"
ENCODER_RUNTIME = ("device", "backend", "precision", "threads", "onnx_dir", "position_chunk")
# vectors added to an IVF part at a time: Faiss's PQ encoder (sub-vectors of >= 16 dims) holds a float table of
# n x pq_m x 256 (1 GB for a 16,384-passage chunk at PQ64)
ADD_BATCH = 2048
# the inverted lists block Faiss writes for an empty IndexIVF ("ilar", nlist, code size, "sprs", no sizes)
_EMPTY_LISTS = struct.Struct("<4sQQ4sQ")


@dataclass
class AggretrieverIndexSettings:
    """One build's settings (stored in the work folder and in the index metadata). 0 means "by the corpus size"
    where the help says so; the metadata records the values used."""
    index_type: str = "flat"
    max_length: int = DOCUMENT_MAX_LENGTH  # passage tokens
    batch_size: int = 32  # passages per forward pass
    nlist: int = 0  # ivfpq inverted lists; 0: default_nlist(corpus size)
    nprobe: int = 0  # ivfpq lists searched per query, stored in the index; 0: default_nprobe(nlist)
    pq_m: int = 0  # ivfpq sub-quantizers: bytes per vector (divides the dimension); 0: DEFAULT_PQ_M of the type
    pq_bits: int = 8  # bits per sub-quantizer code
    sq_bits: int = 6  # ivfsq bits per dimension (16: float16)
    rotate: bool = True  # ivfsq / ivfpq-refine: a random rotation before the quantizer (stored in the index)
    pca: int = 0  # ivfpq / ivfsq / ivfpq-refine: dimensions kept by an uncentred PCA in the index (0: all)
    k_factor: float = 4.0  # ivfpq-refine: k * k_factor candidates re-scored for k hits (stored in the index)
    min_candidates: int = 4000  # ivfpq-refine: at least this many re-scored in Pyserini (search_faiss.py)
    refine: str = "fp16"  # ivfpq-refine: the full vectors' codec (REFINE_CODECS)
    train_docs: int = 65536  # ivfpq / ivfsq: documents of the training sample (the first ones of the stream)
    hnsw_m: int = 32  # hnsw neighbours per node
    ef_construction: int = 64
    ef_search: int = 128  # stored in the index

    def __post_init__(self):
        if self.index_type not in INDEX_TYPES:
            raise OptionError(f"unknown index type {self.index_type!r}; known: {', '.join(INDEX_TYPES)}")
        if self.max_length < 2:
            raise OptionError(f"max_length must be >= 2 ([CLS] plus one token), got {self.max_length}")
        for name in ("nlist", "nprobe"):
            if getattr(self, name) < 0:
                raise OptionError(f"{name} must be >= 0 (0: chosen by the corpus size), got {getattr(self, name)}")
        for name in ("batch_size", "train_docs", "hnsw_m", "ef_construction", "ef_search"):
            if getattr(self, name) < 1:
                raise OptionError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.pq_m < 0:
            raise OptionError(f"pq_m must be >= 0 (0: the index type's default), got {self.pq_m}")
        if not 1 <= self.k_factor <= 1000:  # Faiss refuses k_factor < 1 at search time
            raise OptionError(f"k_factor must be in 1..1000, got {self.k_factor:g}")
        if self.min_candidates < 0:
            raise OptionError(f"min_candidates must be >= 0 (0: k * k_factor only), got {self.min_candidates}")
        if self.refine not in REFINE_CODECS:
            raise OptionError(f"refine must be one of {', '.join(REFINE_CODECS)}, got {self.refine!r}")
        if not 1 <= self.pq_bits <= 16:
            raise OptionError(f"pq_bits must be in 1..16, got {self.pq_bits}")
        if self.sq_bits not in SQ_TYPES:
            raise OptionError(f"sq_bits must be one of {', '.join(map(str, SQ_TYPES))}, got {self.sq_bits}")
        if self.pca < 0:
            raise OptionError(f"pca must be >= 0 (0: no PCA), got {self.pca}")
        if self.pca and self.rotate and self.index_type in ("ivfsq", REFINE_TYPE):
            raise OptionError(f"{self.index_type} takes a random rotation or a PCA, not both (rotate=False with pca)")


def default_nlist(documents: int, train_docs: int, per_sqrt: float = 4) -> int:
    """The power of two nearest `per_sqrt` * sqrt(N) (ivfpq: 4, the low end of Faiss's 4-16 sqrt(N) guideline;
    ivfsq: 1, since training and assigning 1,024-dimensional vectors cost nlist inner products per vector; at 100k,
    8 of 256 lists kept DL19's recall@10 vs flat at 0.965, docs/scale.md), at most one list per 16 training
    documents (k-means needs several points per centroid; the sample, not the corpus, bounds it, so that training
    memory stays flat in N)."""
    nlist = 2 ** max(0, round(math.log2(per_sqrt * math.sqrt(max(documents, 1)))))
    cap = 2 ** max(0, int(math.log2(max(min(documents, train_docs) // 16, 1))))
    return max(1, min(nlist, cap))


def default_nprobe(nlist: int, fraction: int = 16) -> int:
    """Lists searched per query: 1/fraction of them (ivfpq 16, ivfsq 32, ivfpq-refine 4), at least 8, at most all."""
    return min(nlist, max(8, nlist // fraction))


# index type -> (lists per sqrt(N), 1/fraction of the lists probed): see default_nlist
_IVF_RULES = {"ivfpq": (4, 16), "ivfsq": (1, 32), REFINE_TYPE: (1, 4)}
DEFAULT_PQ_M = {"ivfpq": 192, REFINE_TYPE: 64}  # bytes a passage (ivfpq-refine: measured in docs/scale.md)


class AggretrieverIndexBuilder(IndexBuilder):
    """Aggretriever documents -> a Pyserini Faiss index (see the module docstring). runtime: the encoder's device,
    backend, precision, threads (not part of the settings: they change how, not what, is computed) and
    `progress` (a bar over each chunk's batches)."""
    kind = "aggretriever"

    def __init__(self, model: str, settings: AggretrieverIndexSettings | None = None, runtime: dict | None = None):
        super().__init__(model, settings or AggretrieverIndexSettings(), runtime)
        self.sample_docs = self.settings.train_docs if self.settings.index_type in IVF_TYPES else 0
        self._encoder = None
        self._trained = None  # (prepared folder, trained empty index)
        self._sample = None  # (prepared folder, {docid: row of the sample's vectors})

    # ---- encoding -------------------------------------------------------------------------------------------
    def encode(self, documents: list[Document]) -> np.ndarray:
        """[n, dim] float32 document vectors, `batch_size` passages per forward pass."""
        if self._encoder is None:
            from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder

            options = {k: v for k, v in self.runtime.items() if k in ENCODER_RUNTIME}
            self._encoder = AggretrieverDocumentEncoder(self.model, **options)
        size = self.settings.batch_size
        starts = tqdm(range(0, len(documents), size), desc="encode", unit="batch", leave=False,
                      disable=not self.runtime.get("progress"))
        return np.concatenate([self._encoder.encode([d.get("text", "") for _, d in documents[i:i + size]],
                                                    titles=[d.get("title", "") for _, d in documents[i:i + size]],
                                                    max_length=self.settings.max_length)
                               for i in starts]).astype(np.float32, copy=False)

    def vectors(self, documents: list[Document], prepared: Path) -> np.ndarray:
        """The chunk's vectors; those of the training sample come from `prepare`'s encoding, not encoded again."""
        rows = self._sample_rows(prepared)
        found = np.array([rows.get(docid, -1) for docid, _ in documents], dtype=np.int64)
        if (found < 0).all():
            return self.encode(documents)
        sample = np.load(prepared / SAMPLE_VECTORS, mmap_mode="r")  # mapped for this chunk only: its pages count
        vectors = np.empty((len(documents), sample.shape[1]), dtype=np.float32)  # in the RSS while mapped
        kept = np.flatnonzero(found >= 0)
        vectors[kept] = sample[found[kept]]
        del sample
        missing = np.flatnonzero(found < 0)
        if len(missing):
            vectors[missing] = self.encode([documents[i] for i in missing])
        return vectors

    def _sample_rows(self, prepared: Path) -> dict[str, int]:
        if not (prepared / SAMPLE_DOCIDS).is_file():
            return {}
        if self._sample is None or self._sample[0] != prepared:
            docids = (prepared / SAMPLE_DOCIDS).read_text(encoding="utf-8").splitlines()
            self._sample = (prepared, {d: i for i, d in enumerate(docids)})
        return self._sample[1]

    # ---- the streaming steps --------------------------------------------------------------------------------
    def prepare(self, sample: list[Document], prepared: Path, total_documents: int | None) -> None:
        """ivfpq: encode the sample (kept for the parts) and train the empty index on it."""
        self._check_sample(len(sample))  # before the encoding work
        vectors = self.encode(sample)
        np.save(prepared / SAMPLE_VECTORS, vectors)
        (prepared / SAMPLE_DOCIDS).write_text("".join(f"{d}\n" for d, _ in sample), encoding="utf-8")
        # a stream shorter than the sample is the whole corpus; a longer one of unknown size: the sample's size
        documents = total_documents if total_documents is not None else len(sample)
        self.train(vectors, prepared, documents)

    def train(self, vectors: np.ndarray, prepared: Path, documents: int) -> None:
        """The trained empty IVF index (nlist and nprobe resolved by `documents`, the corpus size)."""
        import faiss

        settings = self.resolved(documents, len(vectors))
        dimension = settings.pca or vectors.shape[1]
        if settings.pca > vectors.shape[1]:
            raise OptionError(f"pca {settings.pca} exceeds the dimension {vectors.shape[1]}")
        if settings.index_type in PQ_TYPES and dimension % settings.pq_m:
            raise OptionError(f"pq_m {settings.pq_m} does not divide the dimension {dimension}")
        self._check_sample(len(vectors), settings.nlist)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if settings.index_type == "ivfpq" and not settings.pca:
            quantizer = faiss.IndexFlatIP(dimension)
            index = faiss.IndexIVFPQ(quantizer, dimension, settings.nlist, settings.pq_m, settings.pq_bits,
                                     faiss.METRIC_INNER_PRODUCT)
        else:
            codec = (f"PQ{settings.pq_m}x{settings.pq_bits}" if settings.index_type in PQ_TYPES
                     else SQ_TYPES[settings.sq_bits])
            if settings.index_type == REFINE_TYPE:  # no polysemous training: it permutes the codes for Hamming
                codec += "np"  # search, which the refine type never uses, and costs 140 s at 1,024 dims
            index = faiss.index_factory(dimension, f"IVF{settings.nlist},{codec}", faiss.METRIC_INNER_PRODUCT)
            if settings.pca:
                index = faiss.IndexPreTransform(uncentred_pca(vectors, settings.pca), index)
            elif settings.rotate and settings.index_type in ("ivfsq", REFINE_TYPE):  # PQ: even sub-vectors
                index = faiss.IndexPreTransform(faiss.RandomRotationMatrix(dimension, dimension), index)
        index.train(vectors)
        faiss.extract_index_ivf(index).nprobe = settings.nprobe
        faiss.write_index(index, str(prepared / TRAINED_FILE))
        (prepared / "resolved.json").write_text(json.dumps(asdict(settings)))

    def _check_sample(self, documents: int, nlist: int | None = None) -> None:
        nlist = nlist or self.settings.nlist
        pq = self.settings.index_type in PQ_TYPES
        needed = max(nlist, 2 ** self.settings.pq_bits if pq else 1, self.settings.pca)
        if documents < needed:
            why = ", ".join(filter(None, [f"{nlist} lists" if nlist else "",
                                          f"{2 ** self.settings.pq_bits} PQ centroids" if pq else "",
                                          f"PCA to {self.settings.pca}" if self.settings.pca else ""]))
            raise OptionError(f"{self.settings.index_type} needs at least {needed} training documents ({why}), the "
                              f"corpus gives {documents}; use --index-type flat, or smaller --nlist")

    def resolved(self, documents: int, train_docs: int | None = None) -> AggretrieverIndexSettings:
        """The settings with nlist and nprobe chosen for a corpus of `documents`, pq_m by the index type (where they
        are 0)."""
        settings = self.settings
        per_sqrt, fraction = _IVF_RULES.get(settings.index_type, _IVF_RULES["ivfpq"])
        nlist = settings.nlist or default_nlist(documents, train_docs or settings.train_docs, per_sqrt)
        return replace(settings, nlist=nlist, nprobe=min(settings.nprobe or default_nprobe(nlist, fraction), nlist),
                       pq_m=settings.pq_m or DEFAULT_PQ_M.get(settings.index_type, 0))

    def write_part(self, documents: list[Document], part: Path, prepared: Path) -> dict:
        vectors = self.vectors(documents, prepared)
        return self.write_vectors(vectors, part, prepared)

    def write_vectors(self, vectors: np.ndarray, part: Path, prepared: Path) -> dict:
        """One part from its vectors: float32 .npy (flat, hnsw), or the codes in a copy of the trained index."""
        if self.settings.index_type not in IVF_TYPES:
            np.save(part / VECTORS_FILE, np.ascontiguousarray(vectors, dtype=np.float32))
            return {"dimension": int(vectors.shape[1])}
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index = faiss.clone_index(self._trained_index(prepared))
        ids = np.arange(len(vectors), dtype=np.int64)
        for start in range(0, len(vectors), ADD_BATCH):  # the same lists as one add, in bounded memory
            index.add_with_ids(vectors[start:start + ADD_BATCH], ids[start:start + ADD_BATCH])
        faiss.write_index(index, str(part / PART_INDEX_FILE))
        if self.settings.index_type == REFINE_TYPE:  # Faiss's own codes (its fp16 rounds unlike numpy's)
            np.save(part / REFINE_FILE, empty_refine_index(self.settings.refine, index.d).sa_encode(vectors))
        return {"dimension": int(index.d)}

    def _trained_index(self, prepared: Path):
        import faiss

        if self._trained is None or self._trained[0] != prepared:
            self._trained = (prepared, faiss.read_index(str(prepared / TRAINED_FILE)))
        return self._trained[1]

    def finalise(self, parts: list[Path], output: Path, prepared: Path, overwrite: bool) -> Path:
        counts = [len(part_docids(p)) for p in parts]
        dimensions = {json.loads((p / "part.json").read_text())["dimension"] for p in parts}
        if len(dimensions) != 1:
            raise IndexFolderError(f"the parts have different dimensions {sorted(dimensions)}; build again")
        settings = self.settings
        with atomic_output(output, overwrite, owned=self.owns) as tmp:
            tmp.mkdir()
            with open(tmp / DOCID_FILE, "w", encoding="utf-8") as f:
                for part in parts:
                    f.write((part / "docids.txt").read_text(encoding="utf-8"))
            if settings.index_type == "flat":
                write_flat_index([p / VECTORS_FILE for p in parts], tmp / INDEX_FILE, dimensions.pop())
            elif settings.index_type == REFINE_TYPE:
                settings = AggretrieverIndexSettings(**json.loads((prepared / "resolved.json").read_text()))
                base_bytes = write_refine_index(self._trained_index(prepared), parts, counts, tmp / INDEX_FILE,
                                                settings)
            elif settings.index_type in IVF_TYPES:
                settings = AggretrieverIndexSettings(**json.loads((prepared / "resolved.json").read_text()))
                write_ivf_index(self._trained_index(prepared), [p / PART_INDEX_FILE for p in parts], counts,
                                tmp / INDEX_FILE)
            else:
                write_hnsw_index([p / VECTORS_FILE for p in parts], tmp / INDEX_FILE, dimensions.pop(), settings)
            metadata = {"index": self.kind, "index_type": settings.index_type, "model": self.model,
                        "settings": asdict(settings), "documents": sum(counts), "parts": len(parts),
                        "dimension": int(json.loads((parts[0] / "part.json").read_text())["dimension"]),
                        "index_bytes": (tmp / INDEX_FILE).stat().st_size}
            if settings.index_type == REFINE_TYPE:  # what search holds in RAM; the rest (refine codes) is mapped
                metadata["ram_bytes"] = base_bytes
            (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=1))
        return output

    def owns(self, folder: Path) -> bool:
        return is_aggretriever_index(folder)


def is_aggretriever_index(folder: str | os.PathLike) -> bool:
    try:
        return json.loads((Path(folder) / METADATA_FILE).read_text()).get("index") == "aggretriever"
    except (OSError, ValueError):
        return False


# ---- Faiss index files written part by part -----------------------------------------------------------------
def _header(index, documents: int, tail: int) -> bytes:
    """Faiss's serialisation of the empty `index` as if it held `documents` vectors, less its last `tail` bytes
    (the empty data block, which the caller writes)."""
    import faiss

    layers = [index] + ([faiss.downcast_index(index.index)] if isinstance(index, faiss.IndexPreTransform) else [])
    saved = [layer.ntotal for layer in layers]
    for layer in layers:  # a PreTransform's count and its inner index's are both written
        layer.ntotal = documents
    try:
        data = faiss.serialize_index(index).tobytes()
    finally:
        for layer, count in zip(layers, saved):
            layer.ntotal = count
    return data[:-tail] if tail else data


def uncentred_pca(vectors: np.ndarray, dimensions: int):
    """A Faiss LinearTransform onto the top `dimensions` eigenvectors of the vectors' second moment matrix (no
    mean subtracted, no bias: inner products are kept up to what the dropped directions held)."""
    import faiss

    vectors = np.asarray(vectors, dtype=np.float64)
    _, eigenvectors = np.linalg.eigh(vectors.T @ vectors)  # ascending eigenvalues
    matrix = np.ascontiguousarray(eigenvectors[:, ::-1][:, :dimensions].T, dtype=np.float32)
    transform = faiss.LinearTransform(vectors.shape[1], dimensions, False)
    faiss.copy_array_to_vector(matrix.ravel(), transform.A)
    transform.is_trained = True
    return transform


def write_flat_index(vector_files: list[Path], path: Path, dimension: int) -> None:
    """The bytes faiss.write_index writes for an IndexFlatIP of the files' vectors (in order), one file in
    memory at a time: header, the float count, the floats."""
    import faiss

    shapes = [np.load(f, mmap_mode="r").shape for f in vector_files]  # the headers only
    for shape in shapes:
        if len(shape) != 2 or shape[1] != dimension:
            raise IndexFolderError(f"a part holds vectors of shape {shape}, expected [n, {dimension}]")
    documents = sum(shape[0] for shape in shapes)
    empty = faiss.IndexFlatIP(dimension)
    if faiss.serialize_index(empty).tobytes()[-8:] != bytes(8):
        raise RuntimeError("this Faiss version writes IndexFlat differently; cannot stream the flat index")
    with open(path, "wb") as f:
        f.write(_header(empty, documents, 8))
        f.write(struct.pack("<Q", documents * dimension))
        for file in vector_files:  # one part mapped at a time (mapped pages count in the RSS until unmapped)
            array = np.load(file, mmap_mode="r")
            for start in range(0, len(array), 8192):
                f.write(np.ascontiguousarray(array[start:start + 8192], dtype="<f4").tobytes())
            del array


def write_ivf_index(trained, part_files: list[Path], counts: list[int], path: Path) -> None:
    """The bytes Faiss writes for `trained` after `merge_from` of every part (ids shifted by the documents before
    it): header, then the inverted lists (each list's codes, then its ids), written with pwrite at their offsets
    so that one part is in memory at a time."""
    with open(path, "wb") as f:
        _write_ivf(trained, part_files, counts, f)


def _write_ivf(trained, part_files: list[Path], counts: list[int], f) -> int:
    """write_ivf_index's bytes into the open file `f` from its current position; returns the end's offset."""
    import faiss
    from faiss.contrib.inspect_tools import get_invlist

    ivf = faiss.extract_index_ivf(trained)  # the IVF inside a PreTransform (PCA), or the index itself
    nlist, code_size = ivf.nlist, ivf.code_size
    tail = _header(trained, 0, 0)[-_EMPTY_LISTS.size:]
    if tail != _EMPTY_LISTS.pack(b"ilar", nlist, code_size, b"sprs", 0):
        raise RuntimeError("this Faiss version writes inverted lists differently; cannot stream the IVF index")
    sizes = np.zeros(nlist, dtype=np.int64)
    for file in part_files:
        part = faiss.read_index(str(file))  # held: its inverted lists die with it
        lists = faiss.extract_index_ivf(part).invlists
        sizes += [lists.list_size(i) for i in range(nlist)]
    nonempty = np.flatnonzero(sizes)
    if len(nonempty) > nlist // 2:  # Faiss's own choice between a full and a sparse size table
        table = b"full" + struct.pack("<Q", nlist) + sizes.astype("<u8").tobytes()
    else:
        pairs = np.stack([nonempty, sizes[nonempty]], axis=1).astype("<u8")
        table = b"sprs" + struct.pack("<Q", pairs.size) + pairs.tobytes()
    head = _header(trained, int(sizes.sum()), _EMPTY_LISTS.size) + b"ilar" + struct.pack("<QQ", nlist, code_size)
    head += table
    start = f.tell()
    # list l occupies sizes[l] * (code_size + 8) bytes: codes, then ids; lists in order, empty ones take nothing
    starts = start + len(head) + np.concatenate([[0], np.cumsum(sizes * (code_size + 8))[:-1]])
    codes_at, ids_at = starts.copy(), starts + sizes * code_size
    end = int(starts[-1] + sizes[-1] * (code_size + 8))
    f.write(head)
    f.flush()
    f.truncate(end)
    offset = 0
    for file, count in zip(part_files, counts):
        part = faiss.read_index(str(file))
        lists = faiss.extract_index_ivf(part).invlists
        for i in range(nlist):
            if lists.list_size(i) == 0:
                continue
            ids, codes = get_invlist(lists, i)
            os.pwrite(f.fileno(), codes.tobytes(), int(codes_at[i]))
            os.pwrite(f.fileno(), (ids.astype(np.int64) + offset).astype("<i8").tobytes(), int(ids_at[i]))
            codes_at[i] += codes.size
            ids_at[i] += 8 * len(ids)
        offset += count
    f.seek(end)
    return end


def empty_refine_index(codec: str, dimension: int):
    """The refine index of ivfpq-refine, empty: full vectors as fp16 (IndexScalarQuantizer) or float32."""
    import faiss

    if codec == "float32":
        return faiss.IndexFlatIP(dimension)
    return faiss.IndexScalarQuantizer(dimension, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)


def write_refine_index(trained, parts: list[Path], counts: list[int], path: Path,
                       settings: AggretrieverIndexSettings) -> int:
    """The bytes faiss.write_index writes for IndexRefine(base, refine) holding every part: "IxRF" and the index
    header, the base (as write_ivf_index), the refine index (its header, then the parts' codes streamed: one part
    mapped at a time), k_factor. Returns the bytes before the refine codes (what search holds in RAM)."""
    import faiss

    documents = sum(counts)
    refine = empty_refine_index(settings.refine, trained.d)
    outer = faiss.IndexRefine(trained, refine)
    outer.k_factor = settings.k_factor
    base_bytes, refine_bytes = (faiss.serialize_index(i).tobytes() for i in (trained, refine))
    whole = _header(outer, documents, 0)
    prefix = whole[:len(whole) - len(base_bytes) - len(refine_bytes) - 4]
    if (whole[len(prefix):] != base_bytes + refine_bytes + struct.pack("<f", settings.k_factor)
            or refine_bytes[-8:] != bytes(8)):
        raise RuntimeError("this Faiss version writes IndexRefine differently; cannot stream the refine index")
    code_size = refine.code_size
    # the codes vector's length: IndexFlat counts floats, IndexScalarQuantizer bytes
    length = documents * code_size // (4 if settings.refine == "float32" else 1)
    with open(path, "wb") as f:
        f.write(prefix)
        _write_ivf(trained, [p / PART_INDEX_FILE for p in parts], counts, f)
        f.write(_header(refine, documents, 8) + struct.pack("<Q", length))
        ram = f.tell()
        for part in parts:  # one part mapped at a time (mapped pages count in the RSS until unmapped)
            codes = np.load(part / REFINE_FILE, mmap_mode="r")
            if codes.shape[1:] != (code_size,) or codes.dtype != np.uint8:
                raise IndexFolderError(f"{part / REFINE_FILE} holds codes of shape {codes.shape}, expected "
                                       f"[n, {code_size}] bytes; build again")
            for start in range(0, len(codes), 8192):
                f.write(np.ascontiguousarray(codes[start:start + 8192]).tobytes())
            del codes
        f.write(struct.pack("<f", settings.k_factor))
    return ram + 4


def write_hnsw_index(vector_files: list[Path], path: Path, dimension: int,
                     settings: AggretrieverIndexSettings) -> None:
    import faiss

    index = faiss.IndexHNSWFlat(dimension, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = settings.ef_construction
    for file in tqdm(vector_files, desc="hnsw graph", unit="part"):
        index.add(np.ascontiguousarray(np.load(file), dtype=np.float32))
    index.hnsw.efSearch = settings.ef_search
    faiss.write_index(index, str(path))

"""The AligneR index build, streaming (index/streaming.py), as ColBERT/PLAID build theirs:

1. first pass (`prepare`): the first `SAMPLE_DOCS` documents are encoded and reduced (pooled or pruned to beta_d);
   the codec (coarse centroids + residual PQ) and any token-level candidate index are trained on a sample of their
   token vectors; the sample's encodings are kept on disk so that its documents are not encoded twice;
2. each chunk of documents is encoded, reduced and compressed into a part (weights, codes or vectors, the
   (centroid, document) pairs of its inverted lists);
3. `finalise` streams the parts into one folder: arrays are concatenated part by part, inverted lists are built
   per segment of at most 65,536 documents (2-byte document numbers within a segment), so no step holds the
   corpus's token vectors, codes or lists in memory.

Settings left out are chosen by corpus size and written to the metadata: up to `EXACT_MAX_DOCUMENTS` documents
an exact float16 store with flat candidates (what every figure in docs/report.md was measured with); above, residual
PQ codes with centroid candidates, `nlist` growing with the corpus (`default_nlist`).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import faiss
import numpy as np
from numpy.lib import format as npy_format

from pyserini_ext.data import atomic_output
from pyserini_ext.index.aligner import (
    DEFAULT_REDUCTION,
    DUPLICATE_COSINE,
    INDEX_FORMAT,
    METADATA_FILE,
    REDUCTIONS,
    RESIDUAL_PQ_BITS,
    EncodedCorpus,
    default_nlist,
    default_search,
    encode_corpus,
    pool_tokens,
    prune_tokens,
)
from pyserini_ext.index.aligner_codecs import CANDIDATES, CODECS, IndexFiles, ResidualPQStore, train_ivfpq
from pyserini_ext.index.streaming import (
    DEFAULT_CHUNK_DOCS,
    Document,
    IndexBuilder,
    build,
    build_on_ray,
    write_json,
)

SEGMENT_DOCS = 1 << 16  # documents per segment of the inverted lists: their numbers fit in 2 bytes
EXACT_MAX_DOCUMENTS = 1 << 16  # by corpus size: exact float16 + flat candidates up to this many documents
SAMPLE_DOCS = 1 << 15  # documents of the first pass
MAX_TRAIN_TOKENS = 1 << 20  # token vectors the quantizers train on, at most (bounded memory at any corpus size)
TWO_LEVEL_NLIST = 1 << 13  # from this many lists, Faiss's two-level k-means and an HNSW coarse quantizer


@dataclass
class AlignerIndexSettings:
    """Every setting of an AligneR index build; None: chosen by corpus size (see `resolved`)."""
    beta_d: float = 1.0
    reduction: str = DEFAULT_REDUCTION
    duplicate_cosine: float | None = DUPLICATE_COSINE
    codec: str | None = None
    candidates: str | None = None
    nlist: int | None = None
    pq_m: int = 32
    pq_bits: int | None = None
    hnsw_m: int = 32
    train_size: int | None = None
    max_length: int | None = None
    batch_size: int = 32

    def check(self) -> None:
        if not 0 < self.beta_d <= 1:
            raise ValueError(f"beta_d must be in (0, 1], got {self.beta_d}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {self.reduction!r}")
        if self.duplicate_cosine is not None and not 0 < self.duplicate_cosine <= 1:
            raise ValueError(f"duplicate_cosine must be in (0, 1], got {self.duplicate_cosine}")
        if self.codec is not None and self.codec not in CODECS:
            raise ValueError(f"codec must be one of {tuple(CODECS)}, got {self.codec!r}")
        if self.candidates is not None and self.candidates not in CANDIDATES:
            raise ValueError(f"candidates must be one of {tuple(CANDIDATES)}, got {self.candidates!r}")
        if self.candidates == "centroid" and self.codec not in (None, "residual-pq"):
            raise ValueError("candidates 'centroid' reads the centroid ids of the residual-pq codec; use "
                             "codec='residual-pq' (or another candidate generator)")

    def resolved(self, documents: int) -> AlignerIndexSettings:
        """Codec, candidates and PQ bits filled in for a corpus of `documents` documents."""
        large = documents > EXACT_MAX_DOCUMENTS
        codec = self.codec or ("residual-pq" if large or self.candidates == "centroid" else "float16")
        candidates = self.candidates or ("centroid" if large and codec == "residual-pq" else "flat")
        pq_bits = self.pq_bits or (RESIDUAL_PQ_BITS if codec == "residual-pq" else 8)
        return replace(self, codec=codec, candidates=candidates, pq_bits=pq_bits)

    @property
    def trains(self) -> bool:
        return self.codec == "residual-pq" or self.candidates == "ivfpq"


class AlignerIndexBuilder(IndexBuilder):
    """Encodes documents with an AligneR model (on its runtime: torch or ONNX Runtime, any precision)."""
    kind = "aligner"
    sample_docs = SAMPLE_DOCS

    def __init__(self, model: str, settings: AlignerIndexSettings, runtime: Mapping | None = None):
        super().__init__(model, settings, runtime)
        settings.check()
        self._encoder = None

    def encoder(self):
        if self._encoder is None:
            from pyserini_ext.encode.aligner import AlignerDocumentEncoder
            self._encoder = AlignerDocumentEncoder(self.model, **self.runtime)
        return self._encoder

    def encode(self, documents: list[Document]) -> EncodedCorpus:
        return encode_corpus(self.encoder(), documents, batch_size=self.settings.batch_size,
                             max_length=self.settings.max_length, model_path=self.model, progress=False,
                             allow_empty=True)

    def model_info(self) -> dict:
        encoder = self.encoder()
        return {"path": self.model, "fingerprint": encoder.model.fingerprint(),
                "doc_max_length": self.settings.max_length or encoder.model.config.doc_max_length,
                "dim": encoder.model.config.dim}

    # ---- first pass ------------------------------------------------------------------------------------
    def prepare(self, sample: list[Document], prepared: Path, total_documents: int | None) -> None:
        total = total_documents if total_documents is not None else len(sample)
        settings = self.settings.resolved(total)
        info = self.model_info()
        kept = []
        for number, start in enumerate(range(0, len(sample), DEFAULT_CHUNK_DOCS)):
            encoded = self.encode(sample[start:start + DEFAULT_CHUNK_DOCS])
            save_encoding(encoded, prepared / f"sample-{number:05d}")
            if settings.trains:
                _, vectors, _ = reduce_tokens(encoded, settings)
                kept.append(vectors)
        options = {}
        if settings.trains:
            vectors = np.concatenate(kept)
            estimate = int(len(vectors) * total / max(1, len(sample)))
            nlist = settings.nlist or default_nlist(estimate)
            settings = replace(settings, nlist=nlist)
            options = train_options(settings, vectors.shape[1])
            if settings.codec == "residual-pq":
                codec = ResidualPQStore.fit(vectors, options)
                if options["two_level"]:
                    codec.round_centroids()
                faiss.write_index(codec.ivfpq, str(prepared / "codec.faiss"))
            if settings.candidates == "ivfpq":
                empty = (faiss.read_index(str(prepared / "codec.faiss")) if settings.codec == "residual-pq"
                         else train_ivfpq(vectors, nlist, settings.pq_m, settings.train_size))
                faiss.write_index(empty, str(prepared / "candidates-empty.faiss"))
        write_json(prepared / "build.json", {"settings": asdict(settings), "model": info, "total_documents": total})

    # ---- parts ------------------------------------------------------------------------------------------
    def write_part(self, documents: list[Document], part: Path, prepared: Path) -> dict:
        encoded = sample_encoding(prepared, [d for d, _ in documents]) or self.encode(documents)
        return write_encoded_part(encoded, part, prepared)

    def finalise(self, parts: list[Path], output: Path, prepared: Path, overwrite: bool) -> Path:
        return finalise_parts(parts, output, prepared, overwrite)

    def owns(self, folder: Path) -> bool:
        return (folder / METADATA_FILE).is_file()


class EncodedCorpusBuilder(AlignerIndexBuilder):
    """The same build over an encoding made before (`EncodedCorpus`, e.g. an --encoded cache): documents are
    (docid, {}) and their vectors come from it, so one encoding serves several pruning ratios."""

    def __init__(self, encoded: EncodedCorpus, settings: AlignerIndexSettings):
        IndexBuilder.__init__(self, encoded.model_info.get("path", ""), settings)
        settings.check()
        self.encoded = encoded
        self.row = {d: i for i, d in enumerate(encoded.docids)}

    def describe(self) -> dict:
        return {**super().describe(), "encoding": self.encoded.model_info}

    def model_info(self) -> dict:
        return self.encoded.model_info

    def encode(self, documents: list[Document]) -> EncodedCorpus:
        return self.encoded.subset([self.row[d] for d, _ in documents])

    def finalise(self, parts: list[Path], output: Path, prepared: Path, overwrite: bool) -> Path:
        return finalise_parts(parts, output, prepared, overwrite,
                              {"truncated": self.encoded.truncated, "skipped_empty": self.encoded.skipped_empty})


def train_options(settings: AlignerIndexSettings, dim: int) -> dict:
    if dim % settings.pq_m:
        raise ValueError(f"pq_m={settings.pq_m} must divide the vector dimension {dim}")
    train_size = settings.train_size or min(MAX_TRAIN_TOKENS, max(64 * settings.nlist, 1 << 16))
    return {"dim": dim, "nlist": settings.nlist, "pq_m": settings.pq_m, "pq_bits": settings.pq_bits,
            "hnsw_m": settings.hnsw_m, "train_size": train_size, "two_level": settings.nlist >= TWO_LEVEL_NLIST}


def reduce_tokens(encoded: EncodedCorpus, settings: AlignerIndexSettings
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, vectors, salience scores) of the kept (pooled or pruned) tokens of each document."""
    if settings.reduction == "pool" and settings.beta_d < 1:
        return pool_tokens(encoded.offsets, encoded.vectors, encoded.salience_scores, settings.beta_d)
    kept = prune_tokens(encoded.offsets, encoded.salience_scores, settings.beta_d, encoded.vectors,
                        settings.duplicate_cosine)
    lengths = np.diff(encoded.offsets)
    kept_lengths = np.bincount(np.repeat(np.arange(len(lengths)), lengths)[kept], minlength=len(lengths))
    return (np.concatenate([[0], np.cumsum(kept_lengths)]).astype(np.int64), encoded.vectors[kept],
            encoded.salience_scores[kept])


def save_encoding(encoded: EncodedCorpus, folder: Path) -> None:
    folder.mkdir()
    np.save(folder / "offsets.npy", encoded.offsets)
    np.save(folder / "vectors.npy", encoded.vectors)
    np.save(folder / "salience.npy", encoded.salience_scores)
    write_json(folder / "info.json", {"docids": encoded.docids, "model": encoded.model_info,
                                  "truncated": encoded.truncated, "skipped_empty": encoded.skipped_empty})


def sample_encoding(prepared: Path, docids: list[str]) -> EncodedCorpus | None:
    """The first pass's encoding of exactly these documents, when it made one (the sample's chunks)."""
    for folder in sorted(prepared.glob("sample-*")):
        info = json.loads((folder / "info.json").read_text())
        if set(info["docids"]) | set(info["skipped_empty"]) == set(docids):
            return EncodedCorpus(info["docids"], np.load(folder / "offsets.npy"), np.load(folder / "vectors.npy"),
                                 np.load(folder / "salience.npy"), info["model"], info["truncated"],
                                 info["skipped_empty"])
    return None


def _build_settings(prepared: Path) -> tuple[AlignerIndexSettings, dict]:
    recorded = json.loads((prepared / "build.json").read_text())
    return AlignerIndexSettings(**recorded["settings"]), recorded


def write_encoded_part(encoded: EncodedCorpus, part: Path, prepared: Path) -> dict:
    settings, _ = _build_settings(prepared)
    offsets, vectors, scores = reduce_tokens(encoded, settings) if encoded.docids else (
        np.zeros(1, np.int64), encoded.vectors[:0], encoded.salience_scores[:0])
    lengths = np.diff(offsets)
    (part / "docids.txt").write_text("".join(f"{d}\n" for d in encoded.docids), encoding="utf-8")
    np.save(part / "lengths.npy", lengths.astype(np.int32))
    np.save(part / "weights.npy", np.maximum(scores, 0).astype(np.float16))
    if settings.codec == "residual-pq":
        codec = ResidualPQStore(faiss.read_index(str(prepared / "codec.faiss")))
        codes = codec.encode(vectors)
        np.save(part / "codes.npy", codes)
        if settings.candidates == "centroid":
            doc_of_token = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
            pairs = np.unique(ResidualPQStore.centroid_ids_of(codes, codec.centroid_bytes) * SEGMENT_DOCS
                              + doc_of_token)
            np.save(part / "pairs.npy", pairs)  # centroid * SEGMENT_DOCS + document number in the part
    else:
        np.save(part / "vectors.npy", vectors.astype(np.float16))
    if settings.candidates == "ivfpq":
        index = faiss.read_index(str(prepared / "candidates-empty.faiss"))
        for start in range(0, len(vectors), 1 << 16):
            index.add(np.asarray(vectors[start:start + 1 << 16], dtype=np.float32))
        faiss.write_index(index, str(part / "candidates.faiss"))
    if settings.candidates == "hnsw" and settings.codec != "float16":
        np.save(part / "raw.npy", vectors.astype(np.float16))
    return {"documents": len(encoded.docids), "tokens": int(len(vectors)),
            "tokens_before_pruning": int(len(encoded.vectors)), "truncated": encoded.truncated,
            "skipped_empty": encoded.skipped_empty}


# ---- finalise ---------------------------------------------------------------------------------------------
def concatenate_npy(sources: list[Path], target: Path) -> int:
    """Write the row-wise concatenation of .npy files, one source in memory at a time; returns the rows."""
    shapes = [np.load(s, mmap_mode="r") for s in sources]  # headers only: no page of the data is touched
    rows = sum(a.shape[0] for a in shapes)
    header = {"descr": npy_format.dtype_to_descr(shapes[0].dtype), "fortran_order": False,
              "shape": (rows, *shapes[0].shape[1:])}
    del shapes
    with open(target, "wb") as f:
        npy_format.write_array_header_2_0(f, header)
        for source in sources:  # read, not memory-mapped: mapped pages would stay in this process's RSS
            f.write(np.ascontiguousarray(np.load(source)).tobytes())
    return rows


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


def write_centroid_lists(parts: list[Path], documents: list[int], nlist: int, files: IndexFiles) -> dict:
    """centroid_docs.npy (uint16 numbers within a segment), centroid_offsets.npy [segments, nlist + 1] and
    segments.npy [segments + 1] (first document of each), one segment's pairs in memory at a time."""
    groups = segments_of(documents)
    starts = np.concatenate([[0], np.cumsum(documents)]).astype(np.int64)
    offsets = np.zeros((len(groups), nlist + 1), dtype=np.int64)
    entries = 0
    with open(files.folder / "centroid_docs.tmp", "wb") as out:
        for row, group in enumerate(groups):
            pairs = np.sort(np.concatenate([np.load(parts[p] / "pairs.npy") + (starts[p] - starts[group[0]])
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


def finalise_parts(parts: list[Path], output: Path, prepared: Path, overwrite: bool,
                   encoding_counts: dict | None = None) -> Path:
    started = time.time()
    settings, recorded = _build_settings(prepared)
    infos = [json.loads((p / "part.json").read_text()) for p in parts]
    documents = [i["documents"] for i in infos]
    tokens = sum(i["tokens"] for i in infos)
    if not sum(documents):
        raise ValueError("every document is empty; nothing to index")
    skipped = [d for i in infos for d in i["skipped_empty"]]
    truncated = sum(i["truncated"] for i in infos)
    if encoding_counts:  # documents the cached encoding skipped or cut already
        skipped, truncated = encoding_counts["skipped_empty"] + skipped, encoding_counts["truncated"] + truncated
    with atomic_output(output, overwrite, owned=lambda p: (p / METADATA_FILE).is_file()) as tmp:
        tmp.mkdir()
        files = IndexFiles(tmp, tokens)
        with open(tmp / "docids.txt", "w", encoding="utf-8") as f:
            for part in parts:
                f.write((part / "docids.txt").read_text(encoding="utf-8"))
        lengths = np.concatenate([np.load(p / "lengths.npy") for p in parts]).astype(np.int64)
        files.save("offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        concatenate_npy([p / "weights.npy" for p in parts], tmp / "weights.npy")
        stored = "codes.npy" if settings.codec == "residual-pq" else "vectors.npy"
        concatenate_npy([p / stored for p in parts], tmp / stored)
        if settings.codec == "residual-pq" and settings.nlist >= TWO_LEVEL_NLIST:
            ResidualPQStore(faiss.read_index(str(prepared / "codec.faiss"))).write_compact(tmp)
        elif settings.codec == "residual-pq":
            shutil.copyfile(prepared / "codec.faiss", tmp / "codec.faiss")
        candidate_info = {}
        if settings.candidates == "centroid":
            candidate_info = write_centroid_lists(parts, documents, settings.nlist, files)
        elif settings.candidates == "ivfpq":
            merged = faiss.read_index(str(parts[0] / "candidates.faiss"))
            for part in parts[1:]:
                merged.merge_from(faiss.read_index(str(part / "candidates.faiss")), merged.ntotal)
            files.save_faiss("candidates.faiss", merged)
        elif settings.candidates == "hnsw":
            hnsw = faiss.index_factory(recorded["model"]["dim"], f"HNSW{settings.hnsw_m}", faiss.METRIC_INNER_PRODUCT)
            for part in parts:
                hnsw.add(np.load(part / ("raw.npy" if settings.codec != "float16" else "vectors.npy")
                                 ).astype(np.float32))
            files.save_faiss("candidates.faiss", hnsw)
        part_bytes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        trains = settings.trains
        metadata = {
            "format": INDEX_FORMAT, "model": recorded["model"], "dim": recorded["model"]["dim"],
            "beta_d": settings.beta_d, "reduction": settings.reduction if settings.beta_d < 1 else None,
            "duplicate_cosine": (settings.duplicate_cosine if settings.beta_d < 1 and settings.reduction == "prune"
                                 else None),
            "codec": settings.codec, "candidates": settings.candidates,
            "nlist": settings.nlist if trains else None, "pq_m": settings.pq_m if trains else None,
            "pq_bits": settings.pq_bits if settings.codec == "residual-pq" else None,
            "hnsw_m": settings.hnsw_m if settings.candidates == "hnsw" else None,
            "counts": {"documents": int(sum(documents)), "tokens": int(tokens),
                       "tokens_before_pruning": int(sum(i["tokens_before_pruning"] for i in infos)),
                       "truncated": truncated, "skipped_empty": len(skipped), **candidate_info},
            "skipped_empty_docids": skipped[:1000],
            "search": default_search(settings.candidates, settings.nlist if trains else None),
            "settings": asdict(settings), "parts": len(parts),
            "bytes": part_bytes, "bytes_per_token": 0.0,
            "build_seconds": round(sum(i["seconds"] for i in infos) + time.time() - started, 2),
        }
        metadata_size = len(json.dumps(metadata, indent=1)) + 16
        metadata["bytes_per_token"] = (sum(part_bytes.values()) + metadata_size) / max(1, tokens)
        (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=1))  # last: a folder without it never opens
    return output


# ---- entry points -----------------------------------------------------------------------------------------
def build_encoded(encoded: EncodedCorpus, folder: str | os.PathLike, settings: AlignerIndexSettings,
                  overwrite: bool = False, progress: bool = True, chunk_docs: int = DEFAULT_CHUNK_DOCS) -> Path:
    """An index from an encoding made before (see `EncodedCorpusBuilder`)."""
    documents = ((d, {}) for d in encoded.docids)
    return build(EncodedCorpusBuilder(encoded, settings), documents, folder, chunk_docs=chunk_docs,
                 total=len(encoded.docids), overwrite=overwrite, resume=False,
                 progress=progress)


def build_aligner_index(model: str | os.PathLike, documents: Iterable[Document], output: str | os.PathLike,
                        settings: AlignerIndexSettings | None = None, runtime: Mapping | None = None,
                        total: int | None = None, chunk_docs: int = DEFAULT_CHUNK_DOCS, overwrite: bool = False,
                        resume: bool = True, workers: int = 1, ray_address: str | None = None,
                        progress: bool = True) -> Path:
    """Encode `documents` (a stream of (docid, {"title", "text"})) with the AligneR model and write the index, in
    this process or on Ray (`workers` > 1 or a `ray_address`); `runtime`: AlignerDocumentEncoder's device, backend,
    precision. Resumes an interrupted build of the same settings."""
    builder = AlignerIndexBuilder(str(model), settings or AlignerIndexSettings(), runtime)
    if workers > 1 or ray_address:
        return build_on_ray(builder, documents, output, workers, ray_address, chunk_docs, total, overwrite, resume,
                            progress)
    return build(builder, documents, output, chunk_docs, total, overwrite, resume, progress)

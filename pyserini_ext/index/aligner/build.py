"""The AligneR index build, streaming (index/streaming.py), as ColBERT/PLAID build theirs:

1. first pass (`prepare`): the first `SAMPLE_DOCS` documents are encoded and reduced (pooled or pruned to beta_d);
   the codec and the candidate generator train on a sample of their token vectors (when they train); the sample's
   encodings are kept on disk (the one `EncodedCorpus` format) so that its documents are not encoded twice;
2. each chunk of documents is encoded, reduced, and handed to the codec and the candidate generator, which write
   their share of the part (weights and lengths are the builder's);
3. `finalise` joins the parts into one folder, the codec and the candidate generator each joining their own files
   part by part, so no step holds the corpus's token vectors, codes or lists in memory.

The builder asks the codec and the candidate generator named in the settings (objects of codecs.py and
candidates.py); it never branches on their names. Settings left out are chosen by corpus size and written to the
metadata (`AlignerIndexSettings.resolved`).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from pyserini_ext.data import atomic_output
from pyserini_ext.index.aligner.encoding import EncodedCorpus, encode_corpus
from pyserini_ext.index.aligner.files import INDEX_FORMAT, METADATA_FILE, IndexFiles, is_index
from pyserini_ext.index.aligner.reduction import DEFAULT_REDUCTION, DUPLICATE_COSINE, reduce_tokens
from pyserini_ext.index.aligner.settings import AlignerIndexSettings, default_nlist, default_search
from pyserini_ext.index.streaming import (
    DEFAULT_CHUNK_DOCS,
    Document,
    IndexBuilder,
    build,
    build_on_ray,
    write_json,
)

SAMPLE_DOCS = 1 << 15  # documents of the first pass
BUILD_FILE = "build.json"


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

    def encoding_counts(self) -> dict:
        """Documents skipped or cut before the stream reached the builder (an encoding made before)."""
        return {"truncated": 0, "skipped_empty": []}

    @staticmethod
    def reduce(encoded: EncodedCorpus, settings: AlignerIndexSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return reduce_tokens(encoded, settings.beta_d, settings.reduction, settings.duplicate_cosine)

    # ---- first pass ------------------------------------------------------------------------------------
    def prepare(self, sample: list[Document], prepared: Path, total_documents: int | None) -> None:
        total = total_documents if total_documents is not None else len(sample)
        settings = self.settings.resolved(total)
        info = self.model_info()
        kept = []
        for number, start in enumerate(range(0, len(sample), DEFAULT_CHUNK_DOCS)):
            encoded = self.encode(sample[start:start + DEFAULT_CHUNK_DOCS])
            encoded.save(prepared / f"sample-{number:05d}.npz")
            if settings.trains:
                kept.append(self.reduce(encoded, settings)[1])
        if settings.trains:
            vectors = np.concatenate(kept)
            estimate = int(len(vectors) * total / max(1, len(sample)))
            settings = replace(settings, nlist=settings.nlist or default_nlist(estimate, vectors.shape[1]))
            options = settings.build_options(info["dim"])
            codec = settings.codec_class.fit(vectors, options)
            codec.save(prepared)
            settings.candidates_class.fit(vectors, options, codec, prepared)
        write_json(prepared / BUILD_FILE, {"settings": asdict(settings), "model": info, "total_documents": total})

    # ---- parts ------------------------------------------------------------------------------------------
    def write_part(self, documents: list[Document], part: Path, prepared: Path) -> dict:
        docids = [d for d, _ in documents]
        encoded = sample_encoding(prepared, docids) or self.encode(documents)
        settings, recorded = recorded_build(prepared)
        offsets, vectors, scores = self.reduce(encoded, settings)
        lengths = np.diff(offsets)
        (part / "docids.txt").write_text("".join(f"{d}\n" for d in encoded.docids), encoding="utf-8")
        np.save(part / "lengths.npy", lengths.astype(np.int32))
        np.save(part / "weights.npy", np.maximum(scores, 0).astype(np.float16))
        codec = settings.codec_class.load(prepared)
        stored = codec.write_part(vectors, part)
        settings.candidates_class.write_part(part, vectors, lengths, stored, codec, prepared)
        return {"documents": len(encoded.docids), "tokens": int(len(vectors)),
                "tokens_before_pruning": int(len(encoded.vectors)), "truncated": encoded.truncated,
                "skipped_empty": encoded.skipped_empty}

    # ---- finalise ---------------------------------------------------------------------------------------
    def finalise(self, parts: list[Path], output: Path, prepared: Path, overwrite: bool) -> Path:
        started = time.time()
        settings, recorded = recorded_build(prepared)
        options = settings.build_options(recorded["model"]["dim"])
        infos = [json.loads((p / "part.json").read_text()) for p in parts]
        documents = [i["documents"] for i in infos]
        tokens = sum(i["tokens"] for i in infos)
        if not sum(documents):
            raise ValueError("every document is empty; nothing to index")
        before = self.encoding_counts()  # documents the cached encoding skipped or cut already
        skipped = before["skipped_empty"] + [d for i in infos for d in i["skipped_empty"]]
        truncated = before["truncated"] + sum(i["truncated"] for i in infos)
        with atomic_output(output, overwrite, owned=self.owns) as tmp:
            tmp.mkdir()
            files = IndexFiles(tmp, tokens)
            with open(tmp / "docids.txt", "w", encoding="utf-8") as f:
                for part in parts:
                    f.write((part / "docids.txt").read_text(encoding="utf-8"))
            lengths = np.concatenate([np.load(p / "lengths.npy") for p in parts]).astype(np.int64)
            files.save("offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
            files.concatenate("weights.npy", parts)
            settings.codec_class.load(prepared).finalise(parts, files, options)
            candidate_info = settings.candidates_class.finalise(parts, documents, files, options, prepared)
            part_bytes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
            reduced = settings.beta_d < 1
            metadata = {
                "format": INDEX_FORMAT, "model": recorded["model"], "dim": recorded["model"]["dim"],
                "beta_d": settings.beta_d, "reduction": settings.reduction if reduced else None,
                "duplicate_cosine": (settings.duplicate_cosine if reduced and settings.reduction == "prune"
                                     else None),
                "codec": settings.codec, "candidates": settings.candidates, **settings.recorded(),
                "counts": {"documents": int(sum(documents)), "tokens": int(tokens),
                           "tokens_before_pruning": int(sum(i["tokens_before_pruning"] for i in infos)),
                           "truncated": truncated, "skipped_empty": len(skipped), **candidate_info},
                "skipped_empty_docids": skipped[:1000],
                "search": default_search(),
                "settings": asdict(settings), "parts": len(parts),
                "bytes": part_bytes, "bytes_per_token": 0.0,
                "build_seconds": round(sum(i["seconds"] for i in infos) + time.time() - started, 2),
            }
            metadata_size = len(json.dumps(metadata, indent=1)) + 16
            metadata["bytes_per_token"] = (sum(part_bytes.values()) + metadata_size) / max(1, tokens)
            (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=1))  # last: a folder without it never opens
        return output

    def owns(self, folder: Path) -> bool:
        return is_index(folder)


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

    def encoding_counts(self) -> dict:
        return {"truncated": self.encoded.truncated, "skipped_empty": self.encoded.skipped_empty}


def recorded_build(prepared: Path) -> tuple[AlignerIndexSettings, dict]:
    """The resolved settings and the model record of the first pass."""
    recorded = json.loads((prepared / BUILD_FILE).read_text())
    return AlignerIndexSettings(**recorded["settings"]), recorded


def sample_encoding(prepared: Path, docids: list[str]) -> EncodedCorpus | None:
    """The first pass's encoding of exactly these documents, when it made one (the sample's chunks)."""
    for path in sorted(prepared.glob("sample-*.npz")):
        encoded = EncodedCorpus.load(path)
        if set(encoded.docids) | set(encoded.skipped_empty) == set(docids):
            return encoded
    return None


# ---- entry points -----------------------------------------------------------------------------------------
def build_encoded(encoded: EncodedCorpus, folder: str | os.PathLike, settings: AlignerIndexSettings,
                  overwrite: bool = False, progress: bool = True, chunk_docs: int = DEFAULT_CHUNK_DOCS) -> Path:
    """An index from an encoding made before (see `EncodedCorpusBuilder`)."""
    documents = ((d, {}) for d in encoded.docids)
    return build(EncodedCorpusBuilder(encoded, settings), documents, folder, chunk_docs=chunk_docs,
                 total=len(encoded.docids), overwrite=overwrite, resume=False, progress=progress)


def build_index(encoded: EncodedCorpus, folder: str | os.PathLike, beta_d: float = 1.0, codec: str | None = None,
                candidates: str | None = None, nlist: int | None = None, pq_m: int = 32, hnsw_m: int = 32,
                train_size: int | None = None, overwrite: bool = False, progress: bool = True,
                pq_bits: int | None = None, duplicate_cosine: float | None = DUPLICATE_COSINE,
                reduction: str = DEFAULT_REDUCTION, chunk_docs: int | None = None) -> Path:
    """Write an AligneR index folder from an encoding (see the package docstring); returns its path.

    The streaming build over `encoded`, chunk by chunk. codec / candidates: None chooses by corpus size
    (`AlignerIndexSettings.resolved`); train_size: token vectors sampled to train IVF/PQ; pq_bits: bits per PQ
    sub-quantizer code (default: the codec's); reduction: how beta_d < 1 keeps ceil(beta_d * m) vectors per
    document, "pool" or "prune"; duplicate_cosine: when pruning, near-copies of a more salient token of the same
    document go first (None: by salience alone).
    """
    settings = AlignerIndexSettings(beta_d=beta_d, reduction=reduction, duplicate_cosine=duplicate_cosine,
                                    codec=codec, candidates=candidates, nlist=nlist, pq_m=pq_m, pq_bits=pq_bits,
                                    hnsw_m=hnsw_m, train_size=train_size)
    return build_encoded(encoded, folder, settings, overwrite, progress, chunk_docs or DEFAULT_CHUNK_DOCS)


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

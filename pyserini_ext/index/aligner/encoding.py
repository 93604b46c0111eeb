"""Encoding a corpus with an AligneR model: every token vector (float16) and its document-salience pre-activation.

`EncodedCorpus` is one chunk of a stream, or a whole corpus kept as an --encoded cache so that one encoding serves
several pruning ratios. It has one on-disk format (`save` / `load`: an .npz of offsets, vectors, salience scores,
docids and a JSON info record); the build's first pass keeps its sample's encodings in it too.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from pyserini_ext.data import atomic_output, check_id
from pyserini_ext.data.text import corpus_fingerprint, document_text, sanitize_texts
from pyserini_ext.encode.aligner import AlignerDocumentEncoder
from pyserini_ext.errors import CacheMismatchError
from pyserini_ext.index.aligner.files import AlignerIndexError
from pyserini_ext.models.aligner import DOCUMENT, AlignerModel


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

    def subset(self, rows: list[int]) -> EncodedCorpus:
        """The encoding of the documents at `rows` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        tokens = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        return EncodedCorpus([self.docids[r] for r in rows], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                             self.vectors[tokens], self.salience_scores[tokens], self.model_info, 0, [])

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


def encode_corpus(model: AlignerModel | AlignerDocumentEncoder,
                  corpus: Mapping[str, Mapping[str, str]] | Iterable[tuple[str, Mapping[str, str]]],
                  batch_size: int = 32, max_length: int | None = None, model_path: str = "",
                  progress: bool = True, allow_empty: bool = False) -> EncodedCorpus:
    """Encode every document (title + text). Empty documents are skipped and listed; long ones are truncated.

    `corpus`: a docid -> document mapping or (docid, document) pairs (one chunk of a stream). `model` may be an
    `AlignerDocumentEncoder` to encode on its runtime (ONNX Runtime; bf16, fp16, int8). allow_empty: an all-empty
    corpus gives an empty encoding (a chunk of a stream) instead of an error.
    """
    encoder = model if isinstance(model, AlignerDocumentEncoder) else None
    model = encoder.model if encoder else model
    max_length = max_length or model.config.doc_max_length
    encode_batch = partial(encoder.encode_batch, max_length=max_length) if encoder else None
    docids, texts, skipped = [], [], []
    pairs = list(corpus.items() if isinstance(corpus, Mapping) else corpus)
    for docid, doc in pairs:
        check_id(docid, "corpus")
        text = sanitize_texts([document_text(doc)], f"document {docid!r}")[0]
        (docids if text else skipped).append(docid)
        if text:
            texts.append(text)
    if not texts and not allow_empty:
        raise ValueError("encode_corpus: every document is empty; nothing to index")
    encoded = model.encode_texts(texts, DOCUMENT, batch_size=batch_size, max_length=max_length, progress=progress,
                                 encode_batch=encode_batch) if texts else []
    lengths = np.array([len(scores) for _, scores in encoded], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    dim = model.config.dim
    return EncodedCorpus(
        docids=docids, offsets=offsets,
        vectors=(np.concatenate([v for v, _ in encoded]) if encoded else np.zeros((0, dim))).astype(np.float16),
        salience_scores=(np.concatenate([s for _, s in encoded]) if encoded else np.zeros(0)).astype(np.float32),
        model_info={"path": model_path, "fingerprint": model.fingerprint(), "doc_max_length": max_length,
                    "dim": dim, "corpus_fingerprint": corpus_fingerprint(dict(pairs))},
        truncated=int((lengths >= max_length).sum()), skipped_empty=skipped)

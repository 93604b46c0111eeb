"""Pyserini-facing AligneR encoders (registered as `--encoder-class aligner`).

AligneR is multi-vector; Pyserini's encode CLI and Faiss searchers handle one vector per text. Under those tools
the encoders return a *pooled* vector: the salience-weighted mean of the token vectors (u = ReLU(W x + b), no
pruning), L2-normalised. That makes `python -m pyserini.encode ... --encoder-class aligner` and
`python -m pyserini.search.faiss --encoder-class aligner` run end to end, but it is a single-vector
approximation, not AligneR's alignment scoring. For AligneR retrieval build the token index with
`pyserini-ext aligner index` and search it with `pyserini-ext aligner search` (or `AlignerSearcher`), whose
hits fuse with BM25 through Pyserini's `HybridSearcher` / `pyserini.fusion`.

`encode_tokens` gives the real multi-vector output (token vectors + salience weights) for our own code.
"""
from __future__ import annotations

import os

import numpy as np
import torch
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.encode.preflight import check_dimension
from pyserini_ext.models.aligner import DOCUMENT, QUERY, AlignerModel
from pyserini_ext.models.alignment import pool_vectors


def _device(device: str) -> str:
    """Pyserini defaults to 'cuda:0'; fall back to CPU where CUDA is absent."""
    return device if device.startswith("cpu") or torch.cuda.is_available() else "cpu"


class _AlignerEncoder:
    kind: str

    def _load(self, model_name: str | os.PathLike, device: str) -> None:
        self.model = AlignerModel.from_pretrained(model_name, device=_device(device))
        check_dimension(self.model.config.dim, "aligner")

    @torch.no_grad()
    def encode_tokens(self, texts: list[str], max_length: int | None = None, beta: float = 1.0,
                      fp16: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: (kept token vectors [n', dim], salience weights [n']), keeping ceil(beta * n) tokens."""
        with torch.autocast(self.model.device.type, dtype=torch.float16,
                            enabled=fp16 and self.model.device.type == "cuda"):
            encoded = self.model.encode_batch(texts, self.kind, max_length)
        weights, kept = encoded.weights(beta)
        return [(encoded.vectors[i][kept[i]].cpu().numpy(), weights[i][kept[i]].cpu().numpy())
                for i in range(len(texts))]

    @torch.no_grad()
    def _pooled(self, texts: list[str], max_length: int | None, fp16: bool) -> np.ndarray:
        with torch.autocast(self.model.device.type, dtype=torch.float16,
                            enabled=fp16 and self.model.device.type == "cuda"):
            encoded = self.model.encode_batch(texts, self.kind, max_length)
        weights, kept = encoded.weights(1.0)
        return pool_vectors(encoded.vectors, weights, kept).cpu().numpy()


class AlignerDocumentEncoder(_AlignerEncoder, DocumentEncoder):
    kind = DOCUMENT

    def __init__(self, model_name: str | os.PathLike, device: str = "cpu", **_ignored):
        self._load(model_name, device)

    def encode(self, texts: list[str], titles: list[str] | None = None, max_length: int = 256, fp16: bool = False,
               add_sep: bool = False, **_ignored) -> np.ndarray:
        """Pooled vectors [len(texts), dim] (see the module docstring); titles are joined as in our index."""
        return self._pooled(document_texts(texts, titles), max_length, fp16)


class AlignerQueryEncoder(_AlignerEncoder, QueryEncoder):
    kind = QUERY

    def __init__(self, encoder_dir: str | os.PathLike | None = None, device: str = "cpu", fp16: bool = False,
                 encoded_query_dir: str | None = None, **_ignored):
        QueryEncoder.__init__(self, encoded_query_dir)
        self.fp16 = fp16
        if encoder_dir:
            self._load(encoder_dir, device)
            self.has_model = True
        elif not self.has_encoded_query:
            raise ValueError("AlignerQueryEncoder needs a model folder (encoder_dir) or encoded queries")

    def encode(self, query: str, max_length: int | None = None, **_ignored) -> np.ndarray:
        if self.has_encoded_query:
            return super().encode(query)
        return self._pooled(sanitize_texts([query], "query"), max_length, self.fp16)[0]

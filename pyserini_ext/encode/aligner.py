"""AligneR encoders on torch or ONNX Runtime, one per side: `AlignerDocumentEncoder`, `AlignerQueryEncoder`.

`encode_tokens` gives the multi-vector output (token vectors + salience weights) that our index and searcher use;
`encode` (and `pooled`) the single-vector approximation, the salience-weighted mean of the token vectors
(u = ReLU(W x + b), no pruning), L2-normalised, which is what Pyserini's one-vector tools get through the adapter
classes in integration/encoders.py (`--encoder-class aligner`, `aligner-onnx`): it makes `python -m pyserini.encode`
and `python -m pyserini.search.faiss` run end to end, but it is not AligneR's alignment scoring (for that:
`pyserini-ext aligner index` / `search`). Nothing here knows Pyserini. The ONNX backend exports one graph per side,
(input_ids, attention_mask) -> (token vectors, salience pre-activations).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.encode.runtime import EncoderRuntime, OnnxGraph, as_int64
from pyserini_ext.models.aligner import DOCUMENT, QUERY, AlignerModel, EncodedTokens
from pyserini_ext.models.alignment import pool_vectors


def _graph(kind: str) -> OnnxGraph:
    example = (torch.tensor([[101, 7592, 2088, 102, 0]]), torch.tensor([[1, 1, 1, 1, 0]]))
    return OnnxGraph(f"aligner-{kind}", example, ("input_ids", "attention_mask"), ("vectors", "salience_scores"),
                     {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
                      "vectors": {0: "batch", 1: "length"}, "salience_scores": {0: "batch", 1: "length"}})


class _Side(nn.Module):
    """One side of the model as a plain (ids, mask) -> (vectors, salience scores) function, for export."""

    def __init__(self, model: AlignerModel, kind: str):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, input_ids, attention_mask):
        encoded = self.model(input_ids, attention_mask, self.kind)
        return encoded.vectors, encoded.salience_scores


class AlignerEncoder:
    """One side (`kind`) of an AligneR model on one runtime."""
    kind: str

    def __init__(self, model_name: str | os.PathLike, runtime: EncoderRuntime | None = None):
        runtime = runtime or EncoderRuntime()
        self.runtime = runtime
        self.model = AlignerModel.from_pretrained(model_name, device=str(runtime.torch_device))
        self.dim = self.model.config.dim
        self.session = None
        if runtime.backend == "onnx":
            self.session = runtime.session(_graph(self.kind), Path(model_name), lambda: _Side(self.model, self.kind))

    def encode_batch(self, texts: list[str], max_length: int | None = None, fp16: bool = False) -> EncodedTokens:
        """Token vectors, salience pre-activations and mask of a batch, on this encoder's runtime."""
        inputs = self.model.tokenize(texts, self.kind, max_length)
        if self.session is not None:
            vectors, scores = self.session.run(None, {"input_ids": as_int64(inputs["input_ids"]),
                                                      "attention_mask": as_int64(inputs["attention_mask"])})
            return EncodedTokens(torch.from_numpy(vectors), torch.from_numpy(scores), inputs["attention_mask"].bool())
        with torch.no_grad(), self.runtime.autocast("float16" if fp16 else None):
            return self.model(**inputs, kind=self.kind)

    def encode_tokens(self, texts: list[str], max_length: int | None = None, beta: float = 1.0,
                      fp16: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: (kept token vectors [n', dim], salience weights [n']), keeping ceil(beta * n) tokens."""
        encoded = self.encode_batch(texts, max_length, fp16)
        weights, kept = encoded.weights(beta)
        return [(encoded.vectors[i][kept[i]].float().cpu().numpy(), weights[i][kept[i]].float().cpu().numpy())
                for i in range(len(texts))]

    def pooled(self, texts: list[str], max_length: int | None = None, fp16: bool = False) -> np.ndarray:
        """[len(texts), dim]: the salience-weighted mean of each text's token vectors, L2-normalised."""
        encoded = self.encode_batch(texts, max_length, fp16)
        weights, kept = encoded.weights(1.0)
        return pool_vectors(encoded.vectors.float(), weights.float(), kept).cpu().numpy()


class AlignerDocumentEncoder(AlignerEncoder):
    kind = DOCUMENT

    def __init__(self, model_name: str | os.PathLike, device: str = "cpu", backend: str = "torch",
                 precision: str = "float32", threads: int | None = None, onnx_dir: str | None = None, **_ignored):
        super().__init__(model_name, EncoderRuntime(backend, device, precision, threads, onnx_dir))

    def encode(self, texts: list[str], titles: list[str] | None = None, max_length: int = 256, fp16: bool = False,
               **_ignored) -> np.ndarray:
        """Pooled vectors [len(texts), dim] (see the module docstring); titles are joined as in our index."""
        return self.pooled(document_texts(texts, titles), max_length, fp16)


class AlignerQueryEncoder(AlignerEncoder):
    kind = QUERY

    def __init__(self, encoder_dir: str | os.PathLike, device: str = "cpu", fp16: bool = False,
                 backend: str = "torch", precision: str = "float32", threads: int | None = None,
                 onnx_dir: str | None = None, **_ignored):
        super().__init__(encoder_dir, EncoderRuntime(backend, device, precision, threads, onnx_dir))
        self.fp16 = fp16

    def encode(self, query: str, max_length: int | None = None, **_ignored) -> np.ndarray:
        """The query's pooled vector [dim]."""
        return self.pooled(sanitize_texts([query], "query"), max_length, self.fp16)[0]

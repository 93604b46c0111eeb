"""Aggretriever on ONNX Runtime: `--encoder-class aggretriever-onnx` (same vectors as the torch encoder).

The model is exported as two graphs, so that ONNX Runtime never materialises a batch x length x vocabulary
tensor either:
  * `body.onnx`:    (input_ids, attention_mask) -> [CLS] projection, MLM-transformed hidden states of
                    positions 1..L-1, and their term weights;
  * `lexical.onnx`: (rows [R, H], weights [R]) -> max_r softmax(rows @ E^T + b)[r] * weights[r], i.e. one
                    sequence's lexical vector over a chunk of its positions.
The export is cached next to the checkpoint (`<model>/onnx/`; in the user cache if that folder is read-only)
unless another folder is given, and is redone when the checkpoint's weights are newer than the export.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from pyserini.encode import DocumentEncoder, QueryEncoder
from torch import nn

from pyserini_ext import registry
from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.encode.aggretriever import DOCUMENT_MAX_LENGTH, QUERY_MAX_LENGTH
from pyserini_ext.encode.preflight import check_dimension
from pyserini_ext.models.aggretriever import WEIGHTS_NAME, Aggretriever, aggregate
from pyserini_ext.models.folder import load_tokenizer, resolve_model_folder

BODY, LEXICAL = "body.onnx", "lexical.onnx"
OPSET = 17


class _Body(nn.Module):
    def __init__(self, model: Aggretriever):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        hidden = self.model._mlm.hidden_states(input_ids, attention_mask)
        cls = self.model.cls_proj(hidden[:, 0]) if self.model.cls_proj is not None else hidden[:, 0, :0]
        rest = hidden[:, 1:]
        return cls, self.model._mlm.transform(rest), self.model.tok_proj(rest).squeeze(-1)


class _Lexical(nn.Module):
    def __init__(self, model: Aggretriever):
        super().__init__()
        self.model = model

    def forward(self, rows, weights):
        probs = torch.softmax(self.model._mlm.decode(rows), dim=-1)
        return (probs * weights[:, None]).amax(0)


def export_onnx(model_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                model: Aggretriever | None = None) -> Path:
    """Export (or reuse an up-to-date export of) an Aggretriever checkpoint; returns the ONNX folder."""
    model_dir = resolve_model_folder(model_dir)
    out = Path(out_dir) if out_dir else _default_export_dir(model_dir)
    weights = model_dir / WEIGHTS_NAME
    stamp = weights.stat().st_mtime if weights.exists() else 0
    if all((out / f).is_file() and (out / f).stat().st_mtime >= stamp for f in (BODY, LEXICAL)):
        return out
    model = model or Aggretriever.from_pretrained(model_dir)
    if model.config.pooling == "no-mlm":
        raise ValueError("the ONNX backend covers the MLM poolings (agg*, agg+); use the torch encoder for no-mlm")
    out.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # the tracer's notes on shape-dependent Python branches do not apply here
        warnings.simplefilter("ignore")
        _export(model, out)
    return out


def _default_export_dir(model_dir: Path) -> Path:
    """`<model>/onnx`, or a per-model folder in the user cache when the model folder is read-only."""
    if os.access(model_dir, os.W_OK):
        return model_dir / "onnx"
    key = hashlib.sha1(str(model_dir.resolve()).encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "pyserini_ext" / "onnx" / f"{model_dir.name}-{key}"


def _export(model: Aggretriever, out: Path) -> None:
    ids = torch.tensor([[101, 7592, 2088, 102, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    hidden_size = model.tok_proj.in_features
    with torch.no_grad():
        torch.onnx.export(_Body(model), (ids, mask), str(out / (BODY + ".partial")),
                          input_names=["input_ids", "attention_mask"], output_names=["cls", "rows", "weights"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "length"},
                                        "attention_mask": {0: "batch", 1: "length"},
                                        "cls": {0: "batch"}, "rows": {0: "batch", 1: "positions"},
                                        "weights": {0: "batch", 1: "positions"}},
                          opset_version=OPSET, dynamo=False)
        torch.onnx.export(_Lexical(model), (torch.randn(3, hidden_size), torch.ones(3)),
                          str(out / (LEXICAL + ".partial")), input_names=["rows", "weights"],
                          output_names=["lexical"], dynamic_axes={"rows": {0: "rows"}, "weights": {0: "rows"}},
                          opset_version=OPSET, dynamo=False)
    for name in (BODY, LEXICAL):
        os.replace(out / (name + ".partial"), out / name)


class _OnnxAggretriever:
    def __init__(self, model_name: str, tokenizer_name: str | None = None, onnx_dir: str | None = None,
                 threads: int | None = None):
        import onnxruntime as ort

        folder = resolve_model_folder(model_name)
        model = Aggretriever.from_pretrained(folder)
        self.config, self.vocab_size = model.config, model.vocab_size
        onnx_folder = export_onnx(folder, onnx_dir, model)
        del model  # ONNX Runtime holds its own copy of the weights
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.body = ort.InferenceSession(str(onnx_folder / BODY), options, providers=["CPUExecutionProvider"])
        self.lexical = ort.InferenceSession(str(onnx_folder / LEXICAL), options,
                                            providers=["CPUExecutionProvider"])
        self.tokenizer = load_tokenizer(tokenizer_name or folder)
        check_dimension(self.config.cls_dim + self.config.agg_dim, "aggretriever-onnx")
        self.position_chunk = 512

    def encode_texts(self, texts: list[str], max_length: int) -> np.ndarray:
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2 ([CLS] plus one token), got {max_length}")
        inputs = self.tokenizer(texts, max_length=max_length, padding="longest", truncation=True,
                                return_tensors="np")
        ids, mask = inputs["input_ids"].astype(np.int64), inputs["attention_mask"].astype(np.int64)
        cls, rows, weights = self.body.run(None, {"input_ids": ids, "attention_mask": mask})
        lexical = np.empty((len(texts), self.vocab_size), dtype=np.float32)
        for seq in range(len(texts)):
            valid = mask[seq, 1:].astype(bool)
            # same rule as the torch model: padded positions add zeros to the reference max
            best = np.full(self.vocab_size, -np.inf if valid.all() else 0.0, dtype=np.float32)
            seq_rows, seq_weights = rows[seq][valid], weights[seq][valid]
            for start in range(0, len(seq_rows), self.position_chunk):
                part = self.lexical.run(None, {"rows": seq_rows[start:start + self.position_chunk],
                                               "weights": seq_weights[start:start + self.position_chunk]})[0]
                np.maximum(best, part, out=best)
            lexical[seq] = best
        agg = aggregate(torch.from_numpy(lexical), self.config.agg_dim,
                        full=self.config.pooling != "agg+").numpy()
        return np.concatenate([cls, agg], axis=1)


class AggretrieverOnnxDocumentEncoder(DocumentEncoder):
    def __init__(self, model_name: str, tokenizer_name: str | None = None, onnx_dir: str | None = None,
                 threads: int | None = None, **kwargs):
        self._encoder = _OnnxAggretriever(model_name, tokenizer_name, onnx_dir, threads)

    def encode(self, texts: list[str], titles: list[str] | None = None, max_length: int = DOCUMENT_MAX_LENGTH,
               **kwargs) -> np.ndarray:
        return self._encoder.encode_texts(document_texts(texts, titles), max_length)


class AggretrieverOnnxQueryEncoder(QueryEncoder):
    def __init__(self, encoder_dir: str | None = None, tokenizer_name: str | None = None,
                 encoded_query_dir: str | None = None, max_length: int | None = None, onnx_dir: str | None = None,
                 threads: int | None = None, **kwargs):
        super().__init__(encoded_query_dir)
        self.max_length = max_length or registry.cli_max_length() or QUERY_MAX_LENGTH
        if encoder_dir:
            self._encoder = _OnnxAggretriever(encoder_dir, tokenizer_name, onnx_dir, threads)
            self.has_model = True
        if not self.has_model and not self.has_encoded_query:
            raise ValueError("AggretrieverOnnxQueryEncoder needs a model (encoder_dir) or pre-encoded queries")

    def encode(self, query: str, max_length: int | None = None, **kwargs) -> np.ndarray:
        if not self.has_model:
            return np.asarray(self.embedding[query], dtype=np.float32)
        return self._encoder.encode_texts(sanitize_texts([query], "query"), max_length or self.max_length)[0]

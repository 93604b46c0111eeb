"""Aggretriever encoders on torch or ONNX Runtime: `AggretrieverEncoder` (texts -> [n, dim] float32 vectors) and its
document and query sides, `AggretrieverDocumentEncoder` (title + text, 512 tokens by default) and
`AggretrieverQueryEncoder` (the model's `query_max_length` by default); `backend`, `precision` and the rest of
`EncoderRuntime` are keyword options. Nothing here knows Pyserini: its adapter classes (`--encoder-class
aggretriever`, `aggretriever-onnx`) are in integration/encoders.py.

The ONNX graphs and the numpy pooling that completes them live here, with the runtime that runs them, not in
models/: how the model is cut into graphs is a runtime decision (which part runs where, per device and
precision), while models/ holds the torch module and the public parts of it that the graphs are built from
(`Aggretriever.mlm_head`, `dense`, `tok_proj`). The ONNX backend exports the model as two graphs, so that ONNX
Runtime never materialises a batch x length x vocabulary tensor either:
  * `aggretriever-body`:    (input_ids, attention_mask) -> [CLS] projection, MLM-transformed hidden states of
                            positions 1..L-1, and their term weights;
  * `aggretriever-vocabulary`: rows [R, H] -> softmax(rows @ E^T + b), [R, vocab], the distributions of a chunk
                            of one sequence's positions; on CPU, weighting them and the max over positions run in
                            numpy, since ONNX Runtime's ReduceMax over the first axis took a third of the graph's
                            time (docs/bench.md); on a GPU the graph does both (`-pooled`: rows, weights -> [vocab]),
                            so that the [R, vocab] block never crosses to the host. For float32 the bias is one more
                            row of the product's matrix, as in the torch model (a separate Add pass cost ~15%); the
                            graph that int8 quantises keeps it apart (`-separate-bias`): one int8 scale per matrix,
                            and splade-tiny's bias reaches -9.5, a step of 0.075, more than the weights' standard
                            deviation (0.06).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.encode.runtime import EncoderRuntime, OnnxGraph, as_int64
from pyserini_ext.models.aggretriever import Aggretriever, AggretrieverConfig, aggregate
from pyserini_ext.models.folder import load_tokenizer, resolve_model_folder

DOCUMENT_MAX_LENGTH = 512  # as the prebuilt MS MARCO index was built
# pre-encoded queries only; a model's own limit is its config's query_max_length
QUERY_MAX_LENGTH = AggretrieverConfig.query_max_length

_IDS, _MASK = torch.tensor([[101, 7592, 2088, 102, 0]]), torch.tensor([[1, 1, 1, 1, 0]])
BODY = OnnxGraph("aggretriever-body", (_IDS, _MASK), ("input_ids", "attention_mask"), ("cls", "rows", "weights"),
                 {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
                  "cls": {0: "batch"}, "rows": {0: "batch", 1: "positions"}, "weights": {0: "batch", 1: "positions"}})


def _vocabulary_graph(hidden_size: int, fold_bias: bool, pooled: bool) -> OnnxGraph:
    name = "aggretriever-vocabulary" + ("" if fold_bias else "-separate-bias") + ("-pooled" if pooled else "")
    if pooled:
        return OnnxGraph(name, (torch.randn(3, hidden_size), torch.ones(3)), ("rows", "weights"), ("lexical",),
                         {"rows": {0: "rows"}, "weights": {0: "rows"}})
    return OnnxGraph(name, (torch.randn(3, hidden_size),), ("rows",), ("probabilities",),
                     {"rows": {0: "rows"}, "probabilities": {0: "rows"}})


class _Body(nn.Module):
    def __init__(self, model: Aggretriever):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        hidden = self.model.mlm_head.hidden_states(input_ids, attention_mask)
        cls = self.model.dense(attention_mask, hidden)
        rest = hidden[:, 1:]
        return cls, self.model.mlm_head.transform(rest), self.model.tok_proj(rest).squeeze(-1)


class _Vocabulary(nn.Module):
    """softmax(rows @ E^T + b) of a chunk of positions; `pooled`: weighted and maxed over the positions."""

    def __init__(self, model: Aggretriever, fold_bias: bool, pooled: bool):
        super().__init__()
        self.model, self.fold_bias, self.pooled = model, fold_bias, pooled

    def forward(self, rows, weights=None):
        if self.fold_bias:
            decoder = self.model.mlm_head.decoder_columns()
            if decoder.shape[0] > rows.shape[1]:  # the bias row
                rows = torch.cat((rows, torch.ones_like(rows[:, :1])), 1)
            probabilities = torch.softmax(rows @ decoder, dim=-1)
        else:
            probabilities = torch.softmax(self.model.mlm_head.decode(rows), dim=-1)
        return (probabilities * weights[:, None]).amax(0) if self.pooled else probabilities


class AggretrieverEncoder:
    """The model on one runtime: `encode_texts(texts, max_length) -> [n, dim]` float32."""

    def __init__(self, model_name: str, tokenizer_name: str | None = None, runtime: EncoderRuntime | None = None,
                 pooled_graph: bool | None = None):
        """pooled_graph (ONNX): the vocabulary graph weighs and maxes too; default: on a GPU only."""
        folder = resolve_model_folder(model_name)
        runtime = runtime or EncoderRuntime()
        self.runtime = runtime
        self.tokenizer = load_tokenizer(tokenizer_name or folder)
        model = Aggretriever.from_pretrained(folder)
        model.position_chunk = runtime.position_chunk
        self.config, self.vocab_size, self.dim = model.config, model.vocab_size, model.dim
        self.device = runtime.torch_device
        if runtime.backend == "torch":
            # bfloat16 weights, not only autocast: autocast would cast the [vocab, hidden] head weight again for every
            # chunk of positions (28% of the CPU time, measured)
            dtype = torch.bfloat16 if runtime.precision == "bfloat16" else None
            self.model = model.to(runtime.torch_device, dtype)
            return
        if model.config.pooling == "no-mlm":
            raise ValueError("the ONNX backend covers the MLM poolings (agg*, agg+); use the torch backend for no-mlm")
        self.body = runtime.session(BODY, folder, lambda: _Body(model))
        fold_bias = runtime.precision != "int8"
        self.pooled = runtime.torch_device.type != "cpu" if pooled_graph is None else pooled_graph
        self.vocabulary = runtime.session(_vocabulary_graph(model.tok_proj.in_features, fold_bias, self.pooled),
                                          folder, lambda: _Vocabulary(model, fold_bias, self.pooled))
        self.model = None  # ONNX Runtime holds its own copy of the weights

    def encode_texts(self, texts: list[str], max_length: int, precision: str | None = None,
                     queries: bool = False) -> np.ndarray:
        """queries: the model's query-side rule applies (`query_lexical_tokens`: a long query's lexical part
        scaled down)."""
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2 ([CLS] plus one token), got {max_length}")
        inputs = self.tokenizer(texts, max_length=max_length, padding="longest", truncation=True, return_tensors="pt")
        if self.model is None:
            vectors = self._encode_onnx(as_int64(inputs["input_ids"]), as_int64(inputs["attention_mask"]))
        else:
            with torch.inference_mode(), self.runtime.autocast(precision):
                on_device = inputs.to(self.runtime.torch_device)
                vectors = self.model(on_device["input_ids"], on_device["attention_mask"]).float().cpu().numpy()
        if queries and self.config.query_lexical_tokens is not None:
            tokens = inputs["attention_mask"].sum(1).numpy() - 2  # less [CLS] and [SEP]
            vectors[:, self.config.cls_dim:] *= self.config.query_lexical_scales(tokens)[:, None]
        return vectors

    def _encode_onnx(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        cls, rows, weights = self.body.run(None, {"input_ids": ids, "attention_mask": mask})
        chunk = self.runtime.position_chunk
        lexical = np.empty((len(ids), self.vocab_size), dtype=np.float32)
        for seq in range(len(ids)):
            valid = mask[seq, 1:].astype(bool)
            # same rule as the torch model: padded positions add zeros to the reference max
            best = np.full(self.vocab_size, -np.inf if valid.all() else 0.0, dtype=np.float32)
            seq_rows, seq_weights = rows[seq][valid], weights[seq][valid]
            for start in range(0, len(seq_rows), chunk):
                part_rows, part_weights = seq_rows[start:start + chunk], seq_weights[start:start + chunk]
                if self.pooled:
                    part = self.vocabulary.run(None, {"rows": part_rows, "weights": part_weights})[0]
                else:
                    part = self.vocabulary.run(None, {"rows": part_rows})[0]
                    np.multiply(part, part_weights[:, None], out=part)
                    part = part.max(axis=0)
                np.maximum(best, part, out=best)
            lexical[seq] = best
        agg = aggregate(torch.from_numpy(lexical), self.config.agg_dim, full=self.config.pooling != "agg+").numpy()
        return np.concatenate([cls, agg], axis=1)


class AggretrieverDocumentEncoder(AggretrieverEncoder):
    """Document side: title + text, `max_length` 512 by default."""

    def __init__(self, model_name: str, tokenizer_name: str | None = None, device: str | None = "cpu",
                 precision: str = "float32", backend: str = "torch", threads: int | None = None,
                 onnx_dir: str | None = None, position_chunk: int | None = None, **kwargs):
        super().__init__(model_name, tokenizer_name,
                         EncoderRuntime(backend, device, precision, threads, onnx_dir, position_chunk))

    def encode(self, texts: list[str], titles: list[str] | None = None, fp16: bool = False,
               max_length: int = DOCUMENT_MAX_LENGTH, **kwargs) -> np.ndarray:
        precision = "float16" if fp16 and self.runtime.backend == "torch" else None
        return self.encode_texts(document_texts(texts, titles), max_length, precision)


class AggretrieverQueryEncoder(AggretrieverEncoder):
    """Query side: one query -> [dim]; the query length is `max_length` if given, else the model's
    `query_max_length` (32 for Pyserini-layout checkpoints, as Pyserini)."""

    def __init__(self, encoder_dir: str, tokenizer_name: str | None = None, device: str | None = "cpu",
                 max_length: int | None = None, fp16: bool = False, precision: str | None = None,
                 backend: str = "torch", threads: int | None = None, onnx_dir: str | None = None,
                 position_chunk: int | None = None, **kwargs):
        precision = precision or ("float16" if fp16 and backend == "torch" else "float32")
        super().__init__(encoder_dir, tokenizer_name,
                         EncoderRuntime(backend, device, precision, threads, onnx_dir, position_chunk))
        self.max_length = max_length or self.config.query_max_length

    def encode(self, query: str, max_length: int | None = None, **kwargs) -> np.ndarray:
        return self.encode_texts(sanitize_texts([query], "query"), max_length or self.max_length, queries=True)[0]

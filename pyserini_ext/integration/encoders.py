"""The classes Pyserini's commands build for our encoder names (registry.py): subclasses of Pyserini's
`DocumentEncoder` / `QueryEncoder` over our runtime encoders in encode/, which know nothing of Pyserini.

They add Pyserini's side of the contract: its base classes, its query encoders' pre-encoded queries
(`encoded_query_dir`, Aggretriever and AligneR) and, for Aggretriever queries, an explicit `--max-length` of the
Pyserini command (its Faiss and hybrid searchers never pass it on: arguments.py). The dimension checks against the
command's `--dimension` and `--index` run where Pyserini builds these classes (`encode.LazyEncoderClass`,
preflight.py).
"""
from __future__ import annotations

import os

import numpy as np
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_ext.encode import aggretriever, aligner, deepct
from pyserini_ext.integration import arguments


class AggretrieverDocumentEncoder(aggretriever.AggretrieverDocumentEncoder, DocumentEncoder):
    """`--encoder-class aggretriever` / `aggretriever-onnx` in `python -m pyserini.encode` (which passes its
    `--max-length`)."""


class AggretrieverQueryEncoder(aggretriever.AggretrieverQueryEncoder, QueryEncoder):
    """Query side; pre-encoded queries (`encoded_query_dir`) load as for any Pyserini query encoder.

    The query length is `max_length` if given, else an explicit `--max-length` of the Pyserini command that
    built this encoder, else the model's `query_max_length` (32 for Pyserini-layout checkpoints, as Pyserini).
    """

    def __init__(self, encoder_dir: str | None = None, tokenizer_name: str | None = None,
                 encoded_query_dir: str | None = None, device: str | None = "cpu", max_length: int | None = None,
                 fp16: bool = False, precision: str | None = None, backend: str = "torch",
                 threads: int | None = None, onnx_dir: str | None = None,
                 position_chunk: int | None = None, **kwargs):
        QueryEncoder.__init__(self, encoded_query_dir)
        max_length = max_length or arguments.cli_max_length()
        if encoder_dir:
            aggretriever.AggretrieverQueryEncoder.__init__(
                self, encoder_dir, tokenizer_name, device, max_length, fp16, precision, backend, threads, onnx_dir,
                position_chunk)
            self.has_model = True
        else:
            self.max_length = max_length or aggretriever.QUERY_MAX_LENGTH
        if not self.has_model and not self.has_encoded_query:
            raise ValueError("AggretrieverQueryEncoder needs a model (encoder_dir) or pre-encoded queries "
                             "(encoded_query_dir)")

    def encode(self, query: str, max_length: int | None = None, **kwargs) -> np.ndarray:
        if not self.has_model:
            if query not in self.embedding:
                raise KeyError(f"query {query!r} is not among the pre-encoded queries")
            return np.asarray(self.embedding[query], dtype=np.float32)
        return super().encode(query, max_length)


class DeepCTDocumentEncoder(deepct.DeepCTDocumentEncoder, DocumentEncoder):
    """`--encoder-class deepct` in `python -m pyserini.encode` (no `--to-faiss`): a JsonVectorCollection of
    {analyzed term: integer tf} per passage."""


class DeepCTQueryEncoder(deepct.DeepCTQueryEncoder, QueryEncoder):
    """`--impact --encoder deepct` in `python -m pyserini.search.lucene`: {analyzed term: integer weight}."""

    def __init__(self, *args, **kwargs):
        QueryEncoder.__init__(self)
        deepct.DeepCTQueryEncoder.__init__(self, *args, **kwargs)
        self.has_model = True


class AlignerDocumentEncoder(aligner.AlignerDocumentEncoder, DocumentEncoder):
    """`--encoder-class aligner` / `aligner-onnx` in `python -m pyserini.encode`: one pooled vector per passage."""


class AlignerQueryEncoder(aligner.AlignerQueryEncoder, QueryEncoder):
    """`--encoder-class aligner` in `python -m pyserini.search.faiss`: one pooled vector per query, or the
    pre-encoded queries of `encoded_query_dir`."""

    def __init__(self, encoder_dir: str | os.PathLike | None = None, device: str = "cpu", fp16: bool = False,
                 encoded_query_dir: str | None = None, backend: str = "torch", precision: str = "float32",
                 threads: int | None = None, onnx_dir: str | None = None, **_ignored):
        QueryEncoder.__init__(self, encoded_query_dir)
        self.fp16 = fp16
        if encoder_dir:
            aligner.AlignerQueryEncoder.__init__(self, encoder_dir, device, fp16, backend, precision, threads,
                                                 onnx_dir)
            self.has_model = True
        elif not self.has_encoded_query:
            raise ValueError("AlignerQueryEncoder needs a model folder (encoder_dir) or encoded queries")

    def encode(self, query: str, max_length: int | None = None, **_ignored) -> np.ndarray:
        if self.has_encoded_query:
            return QueryEncoder.encode(self, query)
        return super().encode(query, max_length)

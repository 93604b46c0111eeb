"""Our encoder names, and the one place that makes Pyserini accept them.

Pyserini 1.6 has no plugin mechanism: encoder classes live in two plain dicts in `pyserini.encode`
(`document_encoder_class_map`, `query_encoder_class_map`) and the `--encoder-class` options of
`pyserini.encode`, `pyserini.search.faiss` and `pyserini.search.hybrid` are literal argparse `choices`.
`register_with_pyserini` runs right after `pyserini.encode` is imported (a post-import hook set up by
`_startup.py`) and
  * adds our classes to both dicts (`aggretriever` replaces Pyserini's own, which fails on transformers 5),
  * extends any `--encoder-class` option that has `choices` with our names,
  * remembers an explicit `--max-length` given to those commands, because Pyserini's faiss/hybrid searchers
    never pass it to query encoders (`cli_max_length`).
`register_impact_encoders` runs after `pyserini.search.lucene._impact_searcher` is imported: Pyserini resolves
`--impact --encoder X` by substrings of X and ignores the class maps, so a DeepCT model folder (one holding
`deepct_config.json`) is resolved to our `deepct` query encoder there.
Pyserini's files are never edited.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class EncoderEntry:
    document: str | None  # "module:Class"
    query: str | None
    options: dict = field(default_factory=dict)  # keyword defaults for both classes, e.g. {"backend": "onnx"}


ENCODERS: dict[str, EncoderEntry] = {
    "aggretriever": EncoderEntry(
        "pyserini_ext.encode.aggretriever:AggretrieverDocumentEncoder",
        "pyserini_ext.encode.aggretriever:AggretrieverQueryEncoder",
    ),
    "aggretriever-onnx": EncoderEntry(
        "pyserini_ext.encode.aggretriever:AggretrieverDocumentEncoder",
        "pyserini_ext.encode.aggretriever:AggretrieverQueryEncoder",
        {"backend": "onnx"},
    ),
    "deepct": EncoderEntry(None, "pyserini_ext.encode.deepct:DeepCTQueryEncoder"),
    "deepct-onnx": EncoderEntry(None, "pyserini_ext.encode.deepct:DeepCTQueryEncoder", {"backend": "onnx"}),
    "aligner": EncoderEntry(
        "pyserini_ext.encode.aligner:AlignerDocumentEncoder",
        "pyserini_ext.encode.aligner:AlignerQueryEncoder",
    ),
    "aligner-onnx": EncoderEntry(
        "pyserini_ext.encode.aligner:AlignerDocumentEncoder",
        "pyserini_ext.encode.aligner:AlignerQueryEncoder",
        {"backend": "onnx"},
    ),
}

ENCODER_CLASS_OPTION = "--encoder-class"
_cli_options: dict[str, object] = {}


class UnknownEncoderError(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def _load(path: str):
    module_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(module_name), attr)


class LazyEncoderClass:
    """Stands in Pyserini's class maps for one of our classes; imports it only when Pyserini calls it.

    Pyserini only ever calls the map's values (`encoder_class(**kwargs)`), so registering costs no import.
    """

    def __init__(self, path: str, options: dict | None = None):
        self.path = path
        self.options = options or {}

    def __call__(self, *args, **kwargs):
        return _load(self.path)(*args, **{**self.options, **kwargs})

    def __repr__(self) -> str:
        return f"<pyserini-ext encoder {self.path}>"


def encoder_class(name: str, kind: str = "document"):
    """Our document or query encoder class for `name` (with the name's options bound); the error lists the
    known names."""
    entry = ENCODERS.get(name)
    path = getattr(entry, kind, None) if entry else None
    if path is None:
        known = sorted(n for n, e in ENCODERS.items() if getattr(e, kind))
        raise UnknownEncoderError(f"unknown {kind} encoder {name!r}; known: {', '.join(known)}")
    return functools.partial(_load(path), **entry.options) if entry.options else _load(path)


def cli_max_length() -> int | None:
    """`--max-length` as given explicitly on a Pyserini command line in this process, else None."""
    return _cli_options.get("max_length")


def _extend_encoder_class_choices(add_argument):
    def wrapped(self, *args, **kwargs):
        choices = kwargs.get("choices")
        if ENCODER_CLASS_OPTION in args and isinstance(choices, (list, tuple)):
            kwargs["choices"] = list(choices) + [n for n in ENCODERS if n not in choices]
        return add_argument(self, *args, **kwargs)

    wrapped._pyserini_ext = True
    return wrapped


def _remember_max_length(parse_known_args):
    def wrapped(self, args=None, namespace=None):
        result = parse_known_args(self, args, namespace)
        given = sys.argv[1:] if args is None else list(args)
        if ENCODER_CLASS_OPTION in self._option_string_actions and any(
            a == "--max-length" or a.startswith("--max-length=") for a in given
        ):
            _cli_options["max_length"] = result[0].max_length
        return result

    wrapped._pyserini_ext = True
    return wrapped


def _patch_argparse() -> None:
    container = argparse._ActionsContainer
    if not getattr(container.add_argument, "_pyserini_ext", False):
        container.add_argument = _extend_encoder_class_choices(container.add_argument)
    parser = argparse.ArgumentParser
    if not getattr(parser.parse_known_args, "_pyserini_ext", False):
        parser.parse_known_args = _remember_max_length(parser.parse_known_args)


DEEPCT_MODEL_MARKER = "deepct_config.json"


def register_impact_encoders(impact_module) -> None:
    """Let `python -m pyserini.search.lucene --impact --encoder <DeepCT model folder>` use our encoder."""
    searcher = impact_module.LuceneImpactSearcher
    original = searcher._init_query_encoder_from_str
    if getattr(original, "_pyserini_ext", False):
        return

    def init_query_encoder_from_str(query_encoder):
        if isinstance(query_encoder, str) and (Path(query_encoder) / DEEPCT_MODEL_MARKER).is_file():
            return encoder_class("deepct", "query")(query_encoder)
        return original(query_encoder)

    init_query_encoder_from_str._pyserini_ext = True
    searcher._init_query_encoder_from_str = staticmethod(init_query_encoder_from_str)


def register_with_pyserini(encode_module=None) -> None:
    """Add our encoders to Pyserini's class maps and CLI choices (idempotent)."""
    if encode_module is None:
        encode_module = importlib.import_module("pyserini.encode")
    for name, entry in ENCODERS.items():
        if entry.document:
            encode_module.document_encoder_class_map[name] = LazyEncoderClass(entry.document, entry.options)
        if entry.query:
            encode_module.query_encoder_class_map[name] = LazyEncoderClass(entry.query, entry.options)
    _patch_argparse()

"""`pyserini.encode`: our encoder classes in its class maps, and Pyserini's own classes hand our models over.

Pyserini 1.6 keeps encoder classes in two plain dicts (`document_encoder_class_map`, `query_encoder_class_map`).
`install` (run right after `pyserini.encode` is imported)
  * adds our classes to both dicts, lazily (`aggretriever` replaces Pyserini's own, which fails on transformers 5),
  * replaces each of Pyserini's own classes in the maps, and its `AutoDocumentEncoder` / `AutoQueryEncoder`
    fallbacks, by a subclass that hands our models (bare names, shipped folder names, folders with our configs,
    Hugging Face names of Aggretriever models) to our classes: Pyserini picks a class by substrings of `--encoder`
    (an AligneR folder named `...-splade-tiny` would load as SPLADE), so `--encoder-class` can be omitted,
  * extends the `--encoder-class` choices of Pyserini's parsers (arguments.py),
  * sizes `FaissRepresentationWriter`'s index at our encoder's width when `--dimension` was not given (Pyserini's
    default 768 would fail on a 1,024-dim Aggretriever at the first batch; preflight.py).
The classes themselves (Pyserini's base classes over our runtime encoders) are in encoders.py; each one Pyserini
builds is checked against the command's `--dimension` and `--index` (preflight.py) before Pyserini writes or
searches.
Which model a name stands for and which family a model is: models/folder.py (`resolve_model`, `model_family`).
"""
from __future__ import annotations

import os
from pathlib import Path

from pyserini_ext import registry
from pyserini_ext.integration import arguments, patch, preflight
from pyserini_ext.models.folder import model_family, resolve_model

_MODEL_KEYWORDS = ("model_name", "encoder_dir", "model_name_or_path")
MODEL_ATTRIBUTE = "pyserini_ext_model"  # set on encoders we build: the model folder, checked against prebuilt indexes


def _model_argument(args: tuple, kwargs: dict) -> tuple[str | None, str | int | None]:
    """(model name or path, where it was: keyword name or position 0) in a call to an encoder class."""
    for key in _MODEL_KEYWORDS:
        if isinstance(kwargs.get(key), (str, Path)):
            return str(kwargs[key]), key
    if args and isinstance(args[0], (str, Path)):
        return str(args[0]), 0
    return None, None


def _with_model(args: tuple, kwargs: dict, where, model: str) -> tuple[tuple, dict]:
    if where == 0:
        return (model, *args[1:]), kwargs
    return args, {**kwargs, where: model}


class LazyEncoderClass:
    """Stands in Pyserini's class maps for one of our classes; imports it only when Pyserini calls it.

    Pyserini only ever calls the map's values (`encoder_class(**kwargs)`), so registering costs no import.
    A bare name is resolved to its default model folder; a model of another family is an error. An encoder with
    a vector width (`dim`: Aggretriever, AligneR) is checked against the running command (preflight.py).
    """
    _pyserini_ext = True  # patch.MARK: ours

    def __init__(self, path: str, name: str | None = None, kind: str | None = None, options: dict | None = None):
        self.path = path
        self.name = name
        self.kind = kind
        encoders = registry.ENCODERS
        self.options = options if options is not None else (encoders[name].options if name in encoders else {})

    def __call__(self, *args, **kwargs):
        model, where = _model_argument(args, kwargs)
        encoders = registry.ENCODERS
        if model in encoders and model != self.name and self.kind and getattr(encoders[model], self.kind):
            if registry.family_of(model) == registry.family_of(self.name or model):  # `aggretriever-onnx`: its own
                return LazyEncoderClass(getattr(encoders[model], self.kind), model, self.kind)(*args, **kwargs)
        if model is not None and self.name is not None:
            model = resolve_model(model, registry.family_of(self.name))
            args, kwargs = _with_model(args, kwargs, where, model)
        encoder = registry.load_class(self.path)(*args, **{**self.options, **kwargs})
        dim = getattr(encoder, "dim", None)
        if dim is not None:
            preflight.check_dimension(dim, registry.family_of(self.name) if self.name else type(encoder).__name__)
        if model is not None:
            setattr(encoder, MODEL_ATTRIBUTE, model)
        return encoder

    def __repr__(self) -> str:
        return f"<pyserini-ext encoder {self.path}>"


def our_class(model: str, kind: str) -> LazyEncoderClass | None:
    """Our encoder class for a model of ours (the bare name's own class, else its family's), else None."""
    family = model_family(model)
    if family is None:
        return None
    name = model if model in registry.ENCODERS else family
    path = getattr(registry.ENCODERS[name], kind)
    if path is None:
        raise registry.UnknownEncoderError(f"{name!r} has no {kind} encoder")
    return LazyEncoderClass(path, name, kind)


def encoder_model(query_encoder) -> str | None:
    """The model folder (or bare name) behind a query encoder given to a Pyserini searcher, if known."""
    if isinstance(query_encoder, (str, os.PathLike)):
        return str(query_encoder)
    return getattr(query_encoder, MODEL_ATTRIBUTE, None)


def _handing_our_models_over(kind: str):
    """`make` for patch.install: a subclass of one of Pyserini's encoder classes that builds our encoder instead
    for models of ours."""

    def make(cls: type) -> type:
        def __new__(subclass, *args, **kwargs):
            model, _ = _model_argument(args, kwargs)
            ours = our_class(model, kind) if model is not None else None
            if ours is not None:
                return ours(*args, **kwargs)
            return super(handing_over, subclass).__new__(subclass)

        handing_over = type(cls.__name__, (cls,), {"__new__": __new__, "__module__": cls.__module__,
                                                    "__qualname__": cls.__qualname__})
        return handing_over

    return make


def _sized_by_our_encoder(init):
    def __init__(self, dir_path, dimension=768, *args, **kwargs):
        init(self, dir_path, arguments.faiss_dimension() or dimension, *args, **kwargs)

    return __init__


def install(encode_module) -> None:
    """Add our encoders to Pyserini's class maps and CLI choices (idempotent)."""
    for kind in ("document", "query"):
        map_name = f"{kind}_encoder_class_map"
        class_map, where = getattr(encode_module, map_name), f"{encode_module.__name__}.{map_name}"
        for key, cls in list(class_map.items()):
            if isinstance(cls, type):
                patch.install(class_map, key, _handing_our_models_over(kind), where=where)
        for name, entry in registry.ENCODERS.items():
            if getattr(entry, kind):
                patch.set_entry(class_map, name, LazyEncoderClass(getattr(entry, kind), name, kind), where)
        # the fallback when no keyword of the maps matches `--encoder`
        patch.install(encode_module, f"Auto{kind.capitalize()}Encoder", _handing_our_models_over(kind))
    arguments.install()
    # when Pyserini imports its writer's module (it imports faiss: not at every `import pyserini.encode`)
    patch.on_import("pyserini.encode.optional._faiss", lambda module: patch.install(
        module.FaissRepresentationWriter, "__init__", _sized_by_our_encoder))

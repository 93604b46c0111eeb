"""Our encoder names, and the one place that makes Pyserini accept them.

Pyserini 1.6 has no plugin mechanism: encoder classes live in two plain dicts in `pyserini.encode`
(`document_encoder_class_map`, `query_encoder_class_map`) and the `--encoder-class` options of
`pyserini.encode`, `pyserini.search.faiss` and `pyserini.search.hybrid` are literal argparse `choices`.
`register_with_pyserini` runs right after `pyserini.encode` is imported (a post-import hook set up by
`_startup.py`) and
  * adds our classes to both dicts (`aggretriever` replaces Pyserini's own, which fails on transformers 5),
  * extends the `--encoder-class` choices of Pyserini's own parsers (those built by code in a `pyserini.*`
    module; any other parser in the process is left alone) with our names,
  * remembers what those parsers parsed that our encoders must check before Pyserini starts writing:
    an explicit `--max-length` (Pyserini's faiss/hybrid searchers never pass it to query encoders:
    `cli_max_length`), and `--dimension`, `--to-faiss`, `--index` (`cli_option`).
`register_impact_encoders` runs after `pyserini.search.lucene._impact_searcher` is imported: Pyserini resolves
`--impact --encoder X` by substrings of X and ignores the class maps, so a DeepCT model folder (one holding
`deepct_config.json`) is resolved to our `deepct` query encoder there.
Model names (`resolve_model`, `model_family`): a bare encoder name (`aggretriever`, `deepct`, `aligner`, ...)
stands for the shipped default model of that name, listed in ONE table, `resources/models/defaults.json`
(read when a name is resolved, never at start-up); a folder is recognised by its config file, never by its
name; Hugging Face names of Aggretriever models route to our class as Pyserini's keyword matching does.
Pyserini picks a class by substrings of `--encoder` (an AligneR folder named `...-splade-tiny` would load as
SPLADE), so each of Pyserini's own classes in the maps is replaced by a subclass that hands our models (bare
names and folders with our configs) to our classes: `--encoder-class` can be omitted.
Pyserini's files are never edited.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
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
    "deepct": EncoderEntry(
        "pyserini_ext.encode.deepct:DeepCTDocumentEncoder",
        "pyserini_ext.encode.deepct:DeepCTQueryEncoder",
    ),
    "deepct-onnx": EncoderEntry(
        "pyserini_ext.encode.deepct:DeepCTDocumentEncoder",
        "pyserini_ext.encode.deepct:DeepCTQueryEncoder",
        {"backend": "onnx"},
    ),
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


# --- model names -------------------------------------------------------------------------------------------
# family -> the config file that marks a model folder of that family (written by the family's save code)
MODEL_CONFIG_FILES = {
    "aggretriever": "aggretriever_config.json",
    "deepct": "deepct_config.json",
    "aligner": "aligner_config.json",
}
# Hugging Face names of Aggretriever models that Pyserini's own prebuilt indexes were encoded with
HUB_MODEL_FAMILIES = {
    "castorini/aggretriever-distilbert": "aggretriever",
    "castorini/aggretriever-cocondenser": "aggretriever",
}
DEFAULTS_FILE = "defaults.json"


class ModelNameError(ValueError):
    pass


def resources_dir() -> Path:
    """`resources/`: package data in a wheel (`pyserini_ext/resources`), the repository's top folder otherwise."""
    packaged = Path(__file__).resolve().parent / "resources"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[1] / "resources"


def default_models() -> dict[str, str]:
    """Bare encoder name -> shipped model folder name, from `resources/models/defaults.json`."""
    path = resources_dir() / "models" / DEFAULTS_FILE
    if not path.is_file():
        raise ModelNameError(f"{path} is missing: this installation ships no default models")
    return json.loads(path.read_text())


def family_of(encoder_name: str) -> str:
    """The model family an encoder name serves: its first dash-separated word (aggretriever-onnx -> aggretriever)."""
    return encoder_name.partition("-")[0]


def shipped_folder(name) -> Path | None:
    """`resources/models/<name>` for the name of a shipped model folder (`aggretriever-splade-tiny`) that is not
    also a path here; None otherwise."""
    name = str(name)
    if not name or "/" in name or name in ENCODERS or Path(name).exists():
        return None
    folder = resources_dir() / "models" / name
    return folder if folder.is_dir() and name != DEFAULTS_FILE else None


def model_family(name_or_path) -> str | None:
    """Which of our model families `name_or_path` is (bare name, folder with our config, known hub name, shipped
    folder name), else None."""
    name = str(shipped_folder(name_or_path) or name_or_path)
    if name in ENCODERS:
        return family_of(name)
    if name in HUB_MODEL_FAMILIES:
        return HUB_MODEL_FAMILIES[name]
    folder = Path(name).expanduser()
    for family, config in MODEL_CONFIG_FILES.items():
        if (folder / config).is_file():
            return family
    return None


def resolve_model(name_or_path, family: str | None = None) -> str:
    """A bare encoder name -> its shipped default model folder; a shipped folder's name -> that folder; anything
    else as given.

    With `family`, a bare name or a folder of another family is an error naming both.
    """
    name = str(shipped_folder(name_or_path) or name_or_path)
    found = model_family(name)
    if family is not None and found is not None and found != family:
        if name in ENCODERS:
            raise ModelNameError(f"{name!r} is a {found} model; the {family} encoder cannot load it")
        raise ModelNameError(f"{name}: expected a {family} model, found the {found} model folder")
    if name not in ENCODERS:
        return name
    defaults = default_models()
    if name not in defaults:
        raise ModelNameError(f"no shipped default model for {name!r}; defaults exist for: "
                             f"{', '.join(sorted(defaults))}")
    folder = resources_dir() / "models" / defaults[name]
    if not folder.is_dir():
        raise ModelNameError(f"the default {name!r} model {folder} is missing from this installation")
    return str(folder)


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
    A bare name is resolved to its default model folder; a model of another family is an error.
    """

    def __init__(self, path: str, name: str | None = None, kind: str | None = None, options: dict | None = None):
        self.path = path
        self.name = name
        self.kind = kind
        self.options = options if options is not None else (ENCODERS[name].options if name in ENCODERS else {})

    def __call__(self, *args, **kwargs):
        model, where = _model_argument(args, kwargs)
        if model in ENCODERS and model != self.name and self.kind and getattr(ENCODERS[model], self.kind):
            if family_of(model) == family_of(self.name or model):  # `aggretriever-onnx` names its own class
                return LazyEncoderClass(getattr(ENCODERS[model], self.kind), model, self.kind)(*args, **kwargs)
        if model is not None and self.name is not None:
            model = resolve_model(model, family_of(self.name))
            args, kwargs = _with_model(args, kwargs, where, model)
        encoder = _load(self.path)(*args, **{**self.options, **kwargs})
        if model is not None:
            setattr(encoder, MODEL_ATTRIBUTE, model)
        return encoder

    def __repr__(self) -> str:
        return f"<pyserini-ext encoder {self.path}>"


def _our_class(model: str, kind: str) -> LazyEncoderClass | None:
    """Our encoder class for a model of ours (the bare name's own class, else its family's), else None."""
    family = model_family(model)
    if family is None:
        return None
    name = model if model in ENCODERS else family
    path = getattr(ENCODERS[name], kind)
    if path is None:
        raise UnknownEncoderError(f"{name!r} has no {kind} encoder")
    return LazyEncoderClass(path, name, kind)


def _handing_our_models_over(cls: type, kind: str) -> type:
    """A subclass of one of Pyserini's encoder classes that builds our encoder instead for models of ours."""

    def __new__(subclass, *args, **kwargs):
        model, _ = _model_argument(args, kwargs)
        ours = _our_class(model, kind) if model is not None else None
        if ours is not None:
            return ours(*args, **kwargs)
        return super(handing_over, subclass).__new__(subclass)

    handing_over = type(cls.__name__, (cls,), {"__new__": __new__, "__module__": cls.__module__,
                                                "__qualname__": cls.__qualname__, "_pyserini_ext": True})
    return handing_over


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


def cli_option(name: str):
    """`dimension`, `to_faiss` or `index` as parsed by a Pyserini command in this process, else None."""
    return _cli_options.get(name)


REMEMBERED_OPTIONS = ("dimension", "to_faiss", "index")  # parsed values, defaults included


def _called_from_pyserini(depth: int) -> bool:
    caller = sys._getframe(depth + 1).f_globals
    spec = caller.get("__spec__")
    module = spec.name if spec is not None else caller.get("__name__", "")
    return module == "pyserini" or module.startswith("pyserini.")


def _extend_encoder_class_choices(add_argument):
    def wrapped(self, *args, **kwargs):
        from_pyserini = _called_from_pyserini(1)
        choices = kwargs.get("choices")
        if from_pyserini and ENCODER_CLASS_OPTION in args and isinstance(choices, (list, tuple)):
            kwargs["choices"] = list(choices) + [n for n in ENCODERS if n not in choices]
        action = add_argument(self, *args, **kwargs)
        action._from_pyserini = from_pyserini
        return action

    wrapped._pyserini_ext = True
    return wrapped


def _remember_options(parse_known_args):
    def wrapped(self, args=None, namespace=None):
        result = parse_known_args(self, args, namespace)
        ours = {a.dest for a in self._actions if getattr(a, "_from_pyserini", False)}
        if not ours:  # not one of Pyserini's parsers
            return result
        parsed = vars(result[0])
        given = sys.argv[1:] if args is None else list(args)
        if "max_length" in ours and "max_length" in parsed and any(
            a == "--max-length" or a.startswith("--max-length=") for a in given
        ):
            _cli_options["max_length"] = parsed["max_length"]
        for name in REMEMBERED_OPTIONS:
            if name in ours and name in parsed:
                _cli_options[name] = parsed[name]
        return result

    wrapped._pyserini_ext = True
    return wrapped


def _patch_argparse() -> None:
    container = argparse._ActionsContainer
    if not getattr(container.add_argument, "_pyserini_ext", False):
        container.add_argument = _extend_encoder_class_choices(container.add_argument)
    parser = argparse.ArgumentParser
    if not getattr(parser.parse_known_args, "_pyserini_ext", False):
        parser.parse_known_args = _remember_options(parser.parse_known_args)


def register_impact_encoders(impact_module) -> None:
    """Let `python -m pyserini.search.lucene --impact --encoder deepct` (or a DeepCT folder) use our encoder."""
    searcher = impact_module.LuceneImpactSearcher
    original = searcher._init_query_encoder_from_str
    if getattr(original, "_pyserini_ext", False):
        return

    def init_query_encoder_from_str(query_encoder):
        ours = _our_class(query_encoder, "query") if isinstance(query_encoder, str) else None
        if ours is not None:
            return ours(query_encoder)
        return original(query_encoder)

    init_query_encoder_from_str._pyserini_ext = True
    searcher._init_query_encoder_from_str = staticmethod(init_query_encoder_from_str)


def register_with_pyserini(encode_module=None) -> None:
    """Add our encoders to Pyserini's class maps and CLI choices (idempotent)."""
    if encode_module is None:
        encode_module = importlib.import_module("pyserini.encode")
    maps = {"document": encode_module.document_encoder_class_map, "query": encode_module.query_encoder_class_map}
    for kind, class_map in maps.items():
        for key, cls in class_map.items():
            if isinstance(cls, type) and not getattr(cls, "_pyserini_ext", False):
                class_map[key] = _handing_our_models_over(cls, kind)
        for name, entry in ENCODERS.items():
            if getattr(entry, kind):
                class_map[name] = LazyEncoderClass(getattr(entry, kind), name, kind)
    for attr, kind in (("AutoDocumentEncoder", "document"), ("AutoQueryEncoder", "query")):
        cls = getattr(encode_module, attr)
        if not getattr(cls, "_pyserini_ext", False):  # the fallback when no keyword matches `--encoder`
            setattr(encode_module, attr, _handing_our_models_over(cls, kind))
    _patch_argparse()

"""Pyserini's command lines (argparse): our encoder names among the `--encoder-class` choices, and what those
commands parsed, which preflight.py checks our encoders against before Pyserini starts writing.

The `--encoder-class` options of `pyserini.encode`, `pyserini.search.faiss` and `pyserini.search.hybrid` are
literal argparse `choices`, so argparse itself is patched (when `pyserini.encode` is imported, see encode.py), and
only parsers built by code in a `pyserini.*` module are changed; any other parser in the process is left alone.
Remembered: an explicit `--max-length` (Pyserini's faiss/hybrid searchers never pass it to query encoders:
`cli_max_length`), `--dimension`, `--to-faiss`, `--index` (`cli_option`), and whether `--dimension` was given
(`dimension_given`): without it `pyserini.encode` sizes its Faiss index at 768, so for our encoders of another
width preflight.py sets the index's width instead (`set_faiss_dimension`, used by encode.py's patch of Pyserini's
Faiss writer).
"""
from __future__ import annotations

import argparse
import sys

from pyserini_ext import registry
from pyserini_ext.integration import patch

ENCODER_CLASS_OPTION = "--encoder-class"
REMEMBERED_OPTIONS = ("dimension", "to_faiss", "index")  # parsed values, defaults included
_cli_options: dict[str, object] = {}


def cli_max_length() -> int | None:
    """`--max-length` as given explicitly on a Pyserini command line in this process, else None."""
    return _cli_options.get("max_length")


def dimension_given() -> bool:
    """Whether `--dimension` was on a Pyserini command line parsed in this process."""
    return bool(_cli_options.get("dimension_given"))


def set_faiss_dimension(dim: int) -> None:
    """The width Pyserini's Faiss writer gets in this process when `--dimension` was not given."""
    _cli_options["faiss_dimension"] = dim


def faiss_dimension() -> int | None:
    return _cli_options.get("faiss_dimension")


def cli_option(name: str):
    """`dimension`, `to_faiss` or `index` as parsed by a Pyserini command in this process, else None."""
    return _cli_options.get(name)


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
            kwargs["choices"] = list(choices) + [n for n in registry.ENCODERS if n not in choices]
        action = add_argument(self, *args, **kwargs)
        action._from_pyserini = from_pyserini
        return action

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
        if "dimension" in ours:  # a new command line: what an earlier one in this process set goes
            _cli_options["dimension_given"] = any(a == "--dimension" or a.startswith("--dimension=") for a in given)
            _cli_options.pop("faiss_dimension", None)
        for name in REMEMBERED_OPTIONS:
            if name in ours and name in parsed:
                _cli_options[name] = parsed[name]
        return result

    return wrapped


def install(module=None) -> None:
    """Patch argparse for Pyserini's parsers (idempotent)."""
    patch.install(argparse._ActionsContainer, "add_argument", _extend_encoder_class_choices)
    patch.install(argparse.ArgumentParser, "parse_known_args", _remember_options)

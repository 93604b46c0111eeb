"""One error type per failure class. `pyserini-ext` prints any of them as one line and exits with code 2.

Every message names what is wrong (file and line, document or query id, option, folder) and how to fix it.
Each class also derives from the built-in type callers caught before, so existing `except` clauses still hold.
"""
from __future__ import annotations


class PyseriniExtError(Exception):
    """Base class: a failure caused by the input or the environment, not a bug; shown as one line."""


class InputError(PyseriniExtError, ValueError):
    """A corpus, topics or qrels file is malformed: bad JSON, a missing/empty/duplicate/invalid id, ..."""


class ModelFolderError(PyseriniExtError, ValueError):
    """A model folder is of the wrong kind, lacks its tokenizer or weights, or its weights are corrupt."""


class OptionError(PyseriniExtError, ValueError):
    """An option value does not fit the model, index or data it is used with (e.g. a dimension mismatch)."""


class IndexFolderError(PyseriniExtError, ValueError):
    """An index folder is missing, incomplete, corrupt, not of the expected kind, or does not fit its model."""


class OutputExistsError(PyseriniExtError, FileExistsError):
    """An output already exists and `--overwrite` was not given, or it is not ours to replace."""


class CacheMismatchError(PyseriniExtError):
    """An encoding cache was made from another corpus or model."""

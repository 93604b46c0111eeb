"""`atomic_output()`: how every output of ours (index folders, runs, exports, caches) is written.

The output is written to a hidden temporary sibling and renamed into place only when complete, so a failed,
interrupted (Ctrl-C) or terminated (SIGTERM) run leaves the previous state: no output, or the old one.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from pyserini_ext.errors import OutputExistsError


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread while the block runs, so that `finally`
    clauses run: Python's own SIGTERM ends the process at once, and so would the handlers of a JVM started
    without `-Xrs` (outside our hook). The previous handlers are put back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, _raise_interrupt)
    try:
        yield
    finally:
        for s, handler in previous.items():
            # None: a handler set outside Python (the JVM's); Python cannot reinstall it, so use its default
            signal.signal(s, signal.default_int_handler if handler is None and s == signal.SIGINT
                          else handler if handler is not None else signal.SIG_DFL)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def check_output(path: str | os.PathLike, overwrite: bool = False,
                 owned: Callable[[Path], bool] | None = None) -> None:
    """The rules of `atomic_output` for an existing `path`, checked on their own: commands call it before their
    expensive work, so a refused output costs nothing."""
    path = Path(path)
    empty_folder = path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    if (path.exists() or path.is_symlink()) and not empty_folder:
        if not overwrite:
            raise OutputExistsError(f"{path} exists; pass --overwrite to replace it")
        if path.is_dir() and (owned is None or not owned(path)):
            raise OutputExistsError(f"{path} exists and is not an output of pyserini-ext; refusing to replace it "
                                    "even with --overwrite (delete it yourself, or choose another path)")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = False,
                  owned: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write a file or folder at; it becomes `path` when the block ends.

    An existing `path` (other than an empty folder) is refused unless `overwrite`. A folder is replaced only
    when `owned(path)` says it is an output of ours (e.g. holds our index metadata), so `--overwrite` never
    deletes a folder of someone else's.
    On an exception, Ctrl-C or SIGTERM the temporary is removed and `path` is left as it was.
    """
    path = Path(path)
    check_output(path, overwrite, owned)
    empty_folder = path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    _remove(tmp)
    with interrupts_as_exceptions():
        try:
            yield tmp
            if not tmp.exists():
                raise FileNotFoundError(f"{tmp}: nothing was written for {path}")
            if empty_folder:
                path.rmdir()
            if path.is_dir() and not path.is_symlink():
                # a folder cannot be renamed over another: move the old one aside first
                old = path.with_name(f".{path.name}.old-{os.getpid()}")
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        finally:
            _remove(tmp)

"""The JVM's own signal handlers, kept when another library in the process replaces them.

HotSpot raises SIGSEGV (and SIGBUS, SIGILL, SIGFPE) in normal operation: implicit null checks and stack banging in
JIT-compiled code, handled by its handlers in libjvm. `ray.init` installs Abseil's failure handler over them and
`ray.shutdown` resets SIGSEGV, SIGILL and SIGFPE to the default action, so the JVM's next internal SIGSEGV then
kills the process ("Segmentation fault", at a random later Lucene call). `jvm_signal_handlers_kept()` saves the
handlers that belong to libjvm before such a call and puts them back after it.

Linux (glibc's struct sigaction) only; elsewhere it does nothing. Standard library only (ctypes).
"""
from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_SIGNALS = [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)]


class _SigAction(ctypes.Structure):  # glibc's struct sigaction (x86_64, aarch64)
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                ("saddr", ctypes.c_void_p)]


def _libc():
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _action(libc, signum: int) -> tuple[_SigAction, str | None]:
    """The installed action for `signum` and the file name of the library its handler lives in (None: default,
    ignored, unknown)."""
    action = _SigAction()
    if libc.sigaction(int(signum), None, ctypes.byref(action)) != 0 or action.handler in (None, 0, 1):
        return action, None
    info = _DlInfo()
    if not libc.dladdr(ctypes.c_void_p(action.handler), ctypes.byref(info)) or not info.fname:
        return action, None
    return action, info.fname.decode(errors="replace").rsplit("/", 1)[-1]


def handler_library(signum: int) -> str | None:
    """The file name of the shared library whose function handles `signum` (None: default, ignored, unknown)."""
    libc = _libc()
    return None if libc is None else _action(libc, signum)[1]


def _jvm_actions(libc) -> dict[int, _SigAction]:
    saved = {}
    for signum in _SIGNALS:
        action, library = _action(libc, signum)
        if library and "libjvm" in library:
            saved[int(signum)] = action
    return saved


@contextmanager
def jvm_signal_handlers_kept() -> Iterator[None]:
    """Run the body (e.g. `ray.init`, `ray.shutdown`), then reinstall the JVM's handlers it replaced. Without a
    running JVM there is nothing to keep: a JVM started later installs its own."""
    libc = _libc()
    saved = _jvm_actions(libc) if libc is not None else {}
    try:
        yield
    finally:
        for signum, action in saved.items():
            libc.sigaction(signum, ctypes.byref(action), None)

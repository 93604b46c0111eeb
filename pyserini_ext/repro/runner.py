"""The cached step runner: each command writes one output, and a step whose output exists is skipped.

A step's command writes to the output's `.partial` name, renamed when the command succeeds, so an existing output
is complete. Every command is printed with its wall time and logged with its output to `<root>/commands.log`;
times are kept in `<root>/timings.json`. What is printed, logged or recorded shows paths as `PathDisplay` does:
relative to the repository, never an absolute path of the machine.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

from pyserini_ext.data import atomic_output, data_home
from pyserini_ext.errors import PyseriniExtError


class StepError(PyseriniExtError, RuntimeError):
    """A step's command failed or wrote no output."""


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` through pyserini-ext's atomic output (a complete file or none, even on Ctrl-C)."""
    with atomic_output(path, overwrite=True) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def partial_path(output: Path) -> Path:
    """`run.bm25.txt` -> `run.bm25.partial.txt` (numpy and Pyserini keep the last suffix)."""
    return output.with_name(f"{output.stem}.partial{output.suffix}")


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def model_tag(folder: Path) -> str:
    """`<folder name>-<8 hex>`: the hash covers file names and contents, so a retrained model changes it and a
    checkout or copy of the same files does not. The encoders' own caches inside the folder (the exported ONNX
    graphs in `onnx/`) and the model card (README.md, which no encoder reads: an edit of its text must not send
    `make report` back to re-encoding every corpus) are left out."""
    digest = hashlib.sha256()
    root = folder.resolve()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != "onnx"
                       and p.relative_to(root) != Path("README.md")):
        digest.update(f"{path.relative_to(root)}\0".encode())
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return f"{folder.name}-{digest.hexdigest()[:8]}"


class PathDisplay:
    """Paths as generated files show them: relative to `base` (the repository, where `make report` runs) and
    elsewhere by a named root: `$SITE_PACKAGES` (the packaged backbones), `$PYSERINI_EXT_DATA` (the datasets),
    `$WORK` (a work folder outside the repository), `~`. The interpreter is `python`."""

    def __init__(self, base: Path | None = None, work: Path | None = None):
        base = (base or Path.cwd()).resolve()
        roots = {Path(sysconfig.get_paths()["purelib"]).resolve(): "$SITE_PACKAGES",
                 data_home().resolve(): "$PYSERINI_EXT_DATA"}
        if work is not None and not work.resolve().is_relative_to(base):
            roots[work.resolve()] = "$WORK"
        roots.setdefault(base, "")
        roots.setdefault(Path.home().resolve(), "~")
        # the longest root first: site-packages inside a venv inside the repository is $SITE_PACKAGES
        self.roots = sorted(roots.items(), key=lambda item: len(str(item[0])), reverse=True)

    def text(self, text: str) -> str:
        """`text` with every absolute path under a known root written relative to it."""
        text = text.replace(sys.executable, "python")
        for root, name in self.roots:
            pattern = re.escape(str(root)) + r"(/|(?![\w.-]))"
            text = re.sub(pattern, lambda m, name=name: (f"{name}/" if name else "") if m.group(1) else
                          (name or "."), text)
        return text

    def command(self, command: Sequence[object]) -> str:
        """A command as a shell line with its paths shown as `text` shows them (an absolute path under no known
        root by its name)."""
        def word(value: object) -> str:
            text = str(value)
            return f".../{Path(text).name}" if os.path.isabs(self.text(text)) else self.text(shlex.quote(text))

        return " ".join("python" if str(c) == sys.executable else word(c) for c in command)


class StepRunner:
    """Runs cached steps and keeps their log, timings and commands (`dry_run`: only the commands)."""

    def __init__(self, root: Path, threads: int, display: PathDisplay | None = None, dry_run: bool = False):
        self.root = root
        self.dry_run = dry_run
        self.display = display or PathDisplay(work=root)
        if not dry_run:
            root.mkdir(parents=True, exist_ok=True)
        self.log = root / "commands.log"
        self.timings_path = root / "timings.json"
        self.timings: dict[str, float] = (json.loads(self.timings_path.read_text())
                                          if self.timings_path.exists() else {})
        self.commands: dict[str, list[str]] = {}
        self.steps = {"run": 0, "cached": 0}
        self.env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                    "TOKENIZERS_PARALLELISM": "false"}

    def record(self, group: str, text: str) -> None:
        self.commands.setdefault(group, []).append(text)

    def step(self, group: str, name: str, command: Sequence[object], output: Path) -> Path:
        """Run `command` unless `output` exists; the command writes to output's .partial name, renamed at the end."""
        text = self.display.command(command)
        self.record(group, text)
        if self.dry_run:
            return output
        if output.exists():
            print(f"  [cached] {name}: {self.display.text(str(output))}", flush=True)
            self.steps["cached"] += 1
            return output
        tmp = partial_path(output)
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        argv = [str(tmp) if str(c) == str(output) else str(c) for c in command]
        if argv and argv[0] == "python":  # the conditions' `python -m ...`: this interpreter, not the first on PATH
            argv[0] = sys.executable
        print(f"  [run] {name} ...", flush=True)
        started = time.perf_counter()
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"\n$ {text}\n")
            log.flush()
            proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        where = self.display.text(str(self.log))
        if proc.returncode != 0:
            raise StepError(f"step {name} failed ({proc.returncode}): {text}; its output: {where}")
        if not tmp.exists():
            raise StepError(f"step {name} wrote no {self.display.text(str(tmp))}: {text}; its output: {where}")
        os.replace(tmp, output)
        seconds = time.perf_counter() - started
        self.timings[f"{group}/{name}"] = round(seconds, 1)
        self.save_timings()
        print(f"  [done] {name} in {seconds:.0f} s", flush=True)
        self.steps["run"] += 1
        return output

    def time(self, key: str, seconds: float) -> None:
        """Record the wall time of work done in this process (not a step)."""
        self.timings[key] = round(seconds, 1)
        self.save_timings()

    def save_timings(self) -> None:
        """Merged with the file: another report process may share the work folder."""
        if self.dry_run:
            return
        saved = json.loads(self.timings_path.read_text()) if self.timings_path.exists() else {}
        self.timings = {**saved, **self.timings}
        atomic_write_text(self.timings_path, json.dumps(self.timings, indent=1))

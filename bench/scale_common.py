"""What bench/bench_scale.py's per-model parts share: corpora of N passages from real MS MARCO text, and one
measured child process (wall time and peak RSS of exactly that process).

A corpus of N passages = the DL19 subset's 30,005 passages (their qrels keep nDCG@10 meaningful) + N - 30,005
distractors, each recombined from 2-4 sentences of random subset passages (seeded), so that vocabulary, length and
token statistics stay those of MS MARCO while no distractor copies a judged passage whole.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

DATASET = "msmarco-dl19-subset"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def base_corpus() -> list[tuple[str, dict[str, str]]]:
    from pyserini_ext.data import load_dataset

    return list(load_dataset(DATASET).corpus.items())


def scale_corpus(n: int, seed: int = 13) -> Iterator[tuple[str, dict[str, str]]]:
    """N passages: the DL19 subset first (its docids), then recombined distractors `x<number>`."""
    base = base_corpus()
    yield from base[:n]
    sentences = [s for _, doc in base for s in _SENTENCE.split(doc["text"]) if len(s) > 20]
    rng = np.random.default_rng(seed)
    for number in range(max(0, n - len(base))):
        picks = rng.integers(0, len(sentences), int(rng.integers(2, 5)))
        yield f"x{number}", {"title": "", "text": " ".join(sentences[i] for i in picks)}


def write_corpus(n: int, path: Path) -> Path:
    """The corpus of N passages as a JSONL file (written once, reused)."""
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            for docid, doc in scale_corpus(n):
                f.write(json.dumps({"_id": docid, **doc}) + "\n")
        os.replace(tmp, path)
    return path


def measure(command: list[str], env: dict | None = None) -> dict:
    """Run `command`; its last stdout line is JSON (returned, with seconds and peak_rss_mb of that process alone,
    from wait4's rusage)."""
    started = time.time()
    process = subprocess.Popen([str(c) for c in command], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(map(str, command))} failed with exit code {process.returncode}")
    lines = [line for line in output.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    return {**result, "seconds": round(time.time() - started, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}  # ru_maxrss is in KiB on Linux


def python() -> str:
    return sys.executable

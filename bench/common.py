"""What the benchmarks share: the shipped model folders, the SciFact subset and its nDCG@10, the Aggretriever sides
(ours on every backend and precision beside Pyserini's encoder), child processes that import this package, and
bench/bench_scale.py's corpora of N passages with one measured child process per step.

Every benchmark runs from the repository root as a module, `python -m bench.<name>` (no sys.path edits); a child
process gets the repository on PYTHONPATH (`child_env`), so it finds `bench` from any working directory.

A scale corpus of N passages = the DL19 subset's 30,005 passages (their qrels keep nDCG@10 meaningful) + N - 30,005
distractors, each recombined from 2-4 sentences of random subset passages (seeded), so that vocabulary, length and
token statistics stay those of MS MARCO while no distractor copies a judged passage whole.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATASET = "msmarco-dl19-subset"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")

# Aggretriever side -> our encoder's options (None: Pyserini's encoder)
SIDES = {
    "pyserini": None,
    "ours torch fp32": {"backend": "torch"},
    "ours onnx fp32": {"backend": "onnx"},
    "ours torch bf16": {"backend": "torch", "precision": "bfloat16"},
    "ours onnx int8": {"backend": "onnx", "precision": "int8"},
}


# ---- processes -------------------------------------------------------------------------------------------------
def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH (so a child imports `bench`), plus
    `extra`."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def module_command(module: str) -> list[str]:
    """The command line that runs `bench.<module>` (or a dotted `module` under bench) in this interpreter."""
    return [sys.executable, "-m", module if module.startswith("bench.") else f"bench.{module}"]


def run_side(module: str, side: str, threads: int, extra: list[str]) -> None:
    """One side of an encoder comparison, in a fresh process of its own (`<module> --worker SIDE ...`)."""
    subprocess.run([*module_command(module), "--worker", side, "--threads", str(threads), *extra], check=True,
                   env=child_env({"OMP_NUM_THREADS": str(threads)}))


def python() -> str:
    return sys.executable


# Runs the command as its own child and prints that child's peak RSS. wait4's ru_maxrss of a process started by
# fork + exec keeps the high-water mark of the forked copy of its parent: measured straight from a bench driver
# holding 1.5 GB, `python -c pass` reads 1.5 GB; started by this small launcher, 11 MB.
_LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(f"measured-peak-rss-kib {usage.ru_maxrss}", flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measure(command: list, env: Mapping[str, str] | None = None) -> dict:
    """Run `command`; its last stdout line is JSON (returned, with seconds, cpu_seconds (user + system: what the step
    cost whatever else runs on the machine) and peak_rss_mb of that process alone: wait4's rusage taken by a small
    launcher, see _LAUNCHER)."""
    started = time.time()
    process = subprocess.Popen([python(), "-c", _LAUNCHER, *map(str, command)], stdout=subprocess.PIPE, text=True,
                               env=child_env(env))
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(map(str, command))} failed with exit code {process.returncode}")
    lines = output.splitlines()
    peak_kib = next(int(line.split()[1]) for line in reversed(lines) if line.startswith("measured-peak-rss-kib "))
    results = [line for line in lines if line.startswith("{")]
    result = json.loads(results[-1]) if results else {}
    return {**result, "seconds": round(time.time() - started, 2),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),  # the launcher's, its child's included
            "peak_rss_mb": round(peak_kib / 1024, 1)}  # ru_maxrss is in KiB on Linux


def memory_mb(field: str = "VmHWM") -> float:
    """A /proc/self/status figure of this process in MB: VmRSS (now) or VmHWM (its peak since it started this
    program; getrusage's ru_maxrss is not: exec keeps the maximum of the memory map it replaces, which for a child of
    a large parent is the parent's RSS at the fork)."""
    with open("/proc/self/status") as status:
        kib = next((int(line.split()[1]) for line in status if line.startswith(f"{field}:")), None)
    return float("nan") if kib is None else round(kib / 1024, 1)


def write_json(path: str | os.PathLike | None, figures: dict) -> None:
    """The figures of one run for `make bench` (bench/make_report.py reads them), when a path is given."""
    if path:
        Path(path).write_text(json.dumps(figures, indent=1))


# ---- models and data -------------------------------------------------------------------------------------------
def model_folder(kind: str, given: str | None, marker: str) -> str:
    """The given folder, else the shipped default model of this kind (resources/models/defaults.json)."""
    from pyserini_ext.models.folder import resolve_model

    if given:
        return given
    folder = Path(resolve_model(kind))
    if not (folder / marker).is_file():
        raise SystemExit(f"the default {kind} model {folder} has no {marker}; pass --{kind}")
    return str(folder)


def subset(dataset, docs: int, split: str = "test", first_queries: int | None = None):
    """The split's queries (the first N by id if given), every document judged for them, then others by docid."""
    qrels = dataset.qrels(split)
    kept = sorted(q for q in qrels if q in dataset.queries)[:first_queries]
    qrels = {q: qrels[q] for q in kept}
    queries = {q: dataset.queries[q] for q in kept}
    judged = {d for judgements in qrels.values() for d in judgements}
    others = [d for d in sorted(dataset.corpus) if d not in judged]
    docids = sorted(judged) + others[:max(0, docs - len(judged))]
    return {d: dataset.corpus[d] for d in docids}, queries, qrels


def ndcg10(qrels, run) -> float:
    import ir_measures
    from ir_measures import nDCG

    return ir_measures.calc_aggregate([nDCG @ 10], qrels, run)[nDCG @ 10]


# ---- the Aggretriever sides ------------------------------------------------------------------------------------
def runnable(sides: dict) -> dict:
    """`sides` less the bfloat16 ones where this CPU has no bfloat16 kernels: our encoders run float32 there (with
    a warning), so such a row would only repeat the float32 one under a wrong name."""
    from pyserini_ext import hardware

    if hardware.native_bfloat16("cpu"):
        return sides
    skipped = [name for name, options in sides.items() if (options or {}).get("precision") == "bfloat16"]
    print(f"skipped {', '.join(skipped)}: this CPU has no bfloat16 kernels (see pyserini_ext/hardware.py)")
    return {name: options for name, options in sides.items() if name not in skipped}


def side_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of an Aggretriever comparison of sides (bench_aggretriever, bench_query_latency), the worker's
    own included."""
    parser.add_argument("--model", help="an Aggretriever folder (default: the lexical-only demo model)")
    parser.add_argument("--sides", nargs="+", choices=[side for side in SIDES if side != "pyserini"],
                        help="only these of ours (default: all); Pyserini's, the baseline, always runs")
    parser.add_argument("--json", help="also write the figures to this file (for `make bench`)")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


def scale_parser(doc: str, steps: tuple[str, ...]) -> argparse.ArgumentParser:
    """The flags every scale_<model>.py shares: its rows (--sizes, --work) and the per-step processes it starts
    (`step`, --base, --index, --run, --n)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", nargs="?", choices=steps, help="one step of one row (the rows start these)")
    parser.add_argument("--sizes", default="30000,100000,300000,1000000")
    parser.add_argument("--work", default="runs/scale")
    for name in ("--base", "--index", "--run"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    return parser


def chosen_sides(names: list[str] | None) -> dict:
    """Pyserini's side (the baseline, always) and ours named in `names` (all when none), less what cannot run here."""
    return runnable({side: options for side, options in SIDES.items()
                     if options is None or not names or side in names})


def demo_model(folder: Path) -> str:
    """The lexical-only splade-tiny Aggretriever of `make demo` (untrained heads, meaningful vectors)."""
    from transformers import AutoTokenizer

    from pyserini_ext.models.aggretriever import from_masked_lm
    from pyserini_ext.models.backbones import backbone_path

    backbone = backbone_path("splade-tiny")
    return str(from_masked_lm(backbone, constant_term_weight=1.0, zero_cls=True)
               .save_pretrained(folder, AutoTokenizer.from_pretrained(backbone)))


def pyserini_encoder(model_dir: str, side: str = "document"):
    """Pyserini's Aggretriever{Document,Query}Encoder with our checkpoint's weights (its own loader fails on
    transformers 5, so the model is built from the config and given the state dict)."""
    from pyserini.encode import _aggretriever as agg
    from transformers import AutoConfig, AutoTokenizer

    from pyserini_ext.models.aggretriever import read_state_dict
    from pyserini_ext.models.folder import open_model_folder

    config = AutoConfig.from_pretrained(model_dir, output_hidden_states=True)
    model = agg.BertAggretrieverEncoder(config)
    loaded = model.load_state_dict(read_state_dict(open_model_folder(model_dir, "aggretriever").weights), strict=False)
    # our folders store a tied output projection once (as safetensors does); Pyserini's model ties it to the word
    # embeddings itself, so that key alone may be absent
    tied = {f"encoder.{name}" for name, p in model.encoder.named_parameters(remove_duplicate=False)
            if p is model.encoder.get_output_embeddings().weight}
    if set(loaded.missing_keys) - tied or loaded.unexpected_keys:
        raise SystemExit(f"{model_dir}: weights do not fit Pyserini's model: {loaded}")
    cls = agg.AggretrieverDocumentEncoder if side == "document" else agg.AggretrieverQueryEncoder
    encoder = cls.__new__(cls)
    encoder.model, encoder.device, encoder.has_model = model.eval(), "cpu", True
    encoder.tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return encoder


# ---- scale corpora ---------------------------------------------------------------------------------------------
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

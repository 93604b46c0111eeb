"""`make demo`: BM25, Aggretriever and their fusions on SciFact test, all through Pyserini's unchanged CLIs.

Steps (each printed as the exact command it runs, with its progress bar; all output goes to commands.log):
  1. export SciFact from the dataset cache to a JsonCollection, TSV topics and TREC qrels;
  2. BM25 index (`python -m pyserini.index.lucene`) and BM25 run (`python -m pyserini.search.lucene`);
  3. Aggretriever Faiss index (`python -m pyserini.encode ... --encoder aggretriever-onnx --to-faiss`:
     ONNX Runtime gives the torch encoder's vectors about twice as fast on CPU) and run
     (`python -m pyserini.search.faiss --encoder aggretriever`);
  4. fusions: `python -m pyserini.search.hybrid` (score interpolation) and `python -m pyserini.fusion` (RRF);
  5. nDCG@10 and R@100 (pyserini_ext.evaluation: trec_eval's code, the values `python -m pyserini.eval.trec_eval
     -c` prints), printed as a table.

The model is the shipped trained Aggretriever (the bare name `aggretriever`, see resources/models/); `--model
lexical-only` builds the untrained lexical-only model instead (splade-tiny backbone, term weight fixed to 1,
[CLS] projection zeroed: pure MLM lexical matching), and `--model FOLDER` uses any Aggretriever folder.
Finished steps are kept in the work folder and reused (the Aggretriever's under a hash of the model folder's files);
`--fresh` redoes everything.
"""
from __future__ import annotations

import argparse
import codecs
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from pyserini_ext.cli.options import add_options, from_args, option
from pyserini_ext.data import load_dataset, write_json_collection, write_topics, write_trec_qrels
from pyserini_ext.evaluation import evaluate
from pyserini_ext.index.lucene import lucene_index_command
from pyserini_ext.models.folder import resolve_model
from pyserini_ext.repro.runner import model_tag

SHIPPED_MODEL = "aggretriever"
LEXICAL_ONLY = "lexical-only"
LEXICAL_ONLY_NOTE = ("Aggretriever lexical-only model = splade-tiny backbone, term weight fixed to 1, [CLS] "
                     "projection zeroed: pure MLM lexical matching (untrained heads; not the paper's model)")


def model_note(model: str) -> str:
    if model == LEXICAL_ONLY:
        return LEXICAL_ONLY_NOTE
    return f"Aggretriever model: {model} = {resolve_model(model)} (its README.md tells how it was trained)"


# tqdm's time field: "[elapsed<remaining, rate]" with a known total, "[elapsed, rate]" without one
_PROGRESS = re.compile(r"\[\d+:\d\d(?::\d\d)?[<,\]]")


def relay_output(stream: BinaryIO, log: TextIO, terminal: TextIO) -> None:
    """Copy a step's output to `log` whole; on `terminal` only its progress bars, each redrawn on one line.

    The steps' own output (JVM warnings, Lucene and Faiss logs) stays in the log; what the terminal needs while a
    step runs for minutes is its bar and time left.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    width = max(20, shutil.get_terminal_size().columns - 1)
    pending, drawn = "", 0
    for chunk in iter(lambda: stream.read1(1 << 16), b""):
        text = decoder.decode(chunk)
        log.write(text)
        log.flush()
        *segments, pending = re.split(r"[\r\n]", pending + text)
        for segment in segments:
            if _PROGRESS.search(segment):
                line = ("  " + segment.strip())[:width]
                terminal.write("\r" + line.ljust(drawn))
                terminal.flush()
                drawn = len(line)
    if drawn:
        terminal.write("\n")


def run_step(command: list[str], output: Path, log: Path, terminal: TextIO | None = None) -> None:
    """Run a CLI step unless its output exists; outputs are written under a temporary name first.

    The command is printed, its progress bars are shown on `terminal` (default: stdout) and all its output goes
    to `log`.
    """
    terminal = terminal or sys.stdout
    printable = " ".join(shlex.quote(c) for c in command)
    if output.exists():
        print(f"[reuse] {output}", file=terminal)
        return
    print(f"$ {printable}", file=terminal, flush=True)
    tmp = output.with_name(output.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    command = [str(tmp) if c == str(output) else c for c in command]
    start = time.perf_counter()
    with open(log, "a") as log_file:
        log_file.write(f"$ {printable}\n")
        log_file.flush()
        # unbuffered: the child's bars reach the terminal as they move, not when a buffer fills
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
            relay_output(proc.stdout, log_file, terminal)
    if proc.returncode != 0:
        raise SystemExit(f"step failed ({proc.returncode}): {printable}\nsee {log}")
    os.replace(tmp, output)
    print(f"  done in {time.perf_counter() - start:.0f} s", file=terminal, flush=True)


def run_pipeline(dataset_name: str, split: str, work: Path, model: str, max_length: int,
                 batch_size: int, threads: int, document_encoder_class: str = "aggretriever-onnx",
                 ) -> tuple[Path, dict[str, Path]]:
    """Build indexes and runs with Pyserini's CLIs; returns (TREC qrels path, {run name: run path}).

    `model`: the bare name `aggretriever` (shipped model), `lexical-only`, or an Aggretriever folder.
    """
    work.mkdir(parents=True, exist_ok=True)
    log = work / "commands.log"
    py = sys.executable
    dataset = load_dataset(dataset_name)
    collection, topics, qrels = work / "collection", work / "topics.tsv", work / "qrels.txt"
    if not (collection / "docs.jsonl").exists():
        write_json_collection(dataset.corpus, collection)
    write_topics(dataset.split_queries(split), topics)
    write_trec_qrels(dataset.qrels(split), qrels)
    print(f"{dataset.name}: {len(dataset.corpus)} documents, {len(dataset.split_queries(split))} {split} queries")

    print(model_note(model))
    if model == LEXICAL_ONLY:
        folder = work / "aggretriever-lexical-only"
        run_step([py, "-m", "pyserini_ext.cli", "aggretriever", "init", "--model", "splade-tiny",
                  "--lexical-only", "--output", str(folder)], folder, log)
        model = str(folder)
    if model == SHIPPED_MODEL:  # bare names: Pyserini's commands find the shipped model and our classes
        document_encoder = ["--encoder", document_encoder_class]
        query_encoder = ["--encoder", SHIPPED_MODEL]
    else:
        document_encoder = ["--encoder", model, "--encoder-class", document_encoder_class]
        query_encoder = ["--encoder", model, "--encoder-class", "aggretriever"]

    # the Aggretriever's outputs are named by a hash of the model folder's files (as `make report` names them), so a
    # changed model (retrained, or another query length in its config) is never answered from an older model's run
    tag = model_tag(Path(resolve_model(model, "aggretriever")))
    bm25_index, agg_index = work / "index.bm25", work / f"index.aggretriever.{tag}"
    run_step(lucene_index_command(collection, bm25_index, threads, store_positions=True, store_docvectors=True),
             bm25_index, log)
    run_step([py, "-m", "pyserini.encode",
              "input", "--corpus", str(collection / "docs.jsonl"), "--fields", "title", "text",
              "output", "--embeddings", str(agg_index), "--to-faiss",
              "encoder", *document_encoder, "--fields", "title", "text",
              "--max-length", str(max_length), "--batch-size", str(batch_size),  # the index takes the model's width
              "--device", "cpu"], agg_index, log)

    runs = {
        "BM25": work / "run.bm25.txt",
        "Aggretriever": work / f"run.aggretriever.{tag}.txt",
        "Hybrid (pyserini.search.hybrid)": work / f"run.hybrid.{tag}.txt",
        "RRF (pyserini.fusion)": work / f"run.rrf.{tag}.txt",
    }
    run_step([py, "-m", "pyserini.search.lucene", "--index", str(bm25_index), "--topics", str(topics),
              "--output", str(runs["BM25"]), "--bm25", "--hits", "1000", "--threads", str(threads),
              "--batch-size", "64"], runs["BM25"], log)
    run_step([py, "-m", "pyserini.search.faiss", "--index", str(agg_index), "--topics", str(topics),
              *query_encoder, "--device", "cpu", "--output", str(runs["Aggretriever"]), "--hits", "1000",
              "--batch-size", "64", "--threads", str(threads)], runs["Aggretriever"], log)
    run_step([py, "-m", "pyserini.search.hybrid",
              "dense", "--index", str(agg_index), *query_encoder, "--device", "cpu",
              "sparse", "--index", str(bm25_index),
              "fusion", "--alpha", "1.0", "--normalization",
              "run", "--topics", str(topics), "--output", str(runs["Hybrid (pyserini.search.hybrid)"]),
              "--hits", "1000", "--batch-size", "64", "--threads", str(threads)],
             runs["Hybrid (pyserini.search.hybrid)"], log)
    run_step([py, "-m", "pyserini.fusion", "--runs", str(runs["BM25"]), str(runs["Aggretriever"]),
              "--output", str(runs["RRF (pyserini.fusion)"]), "--method", "rrf", "--k", "1000"],
             runs["RRF (pyserini.fusion)"], log)
    return qrels, runs


@dataclass
class DemoOptions:
    dataset: str = option("scifact", help="dataset name in the cache, or a BEIR folder")
    split: str = option("test", help="qrels split whose queries are searched")
    workdir: str = option("runs/demo", help="folder for every intermediate file (reused)")
    model: str = option(SHIPPED_MODEL, help=f"{SHIPPED_MODEL!r} (the shipped trained model), {LEXICAL_ONLY!r} "
                        "(untrained, lexical matching only) or an Aggretriever folder")
    max_length: int = option(256, help="passage length for encoding", min=1)
    batch_size: int = option(32, help="passages per encoding batch", min=1)
    document_encoder_class: str = option("aggretriever-onnx", choices=("aggretriever-onnx", "aggretriever"),
                                         help="ONNX Runtime or torch for the corpus (same vectors)")
    threads: int = option(os.cpu_count() or 1, help="indexing and search threads", min=1)
    fresh: bool = option(False, help="rebuild everything")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser, DemoOptions)
    args = from_args(DemoOptions, parser.parse_args(argv), parser)

    work = Path(args.workdir)
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    qrels, runs = run_pipeline(args.dataset, args.split, work, args.model, args.max_length, args.batch_size,
                               args.threads, args.document_encoder_class)
    print(f"\n{args.dataset} {args.split}: nDCG@10 and R@100 (the values of python -m pyserini.eval.trec_eval -c)")
    print(f"{'run':<34} {'nDCG@10':>8} {'R@100':>8}")
    for name, path in runs.items():
        scores = evaluate(qrels, path, ("ndcg_cut_10", "recall_100"))
        print(f"{name:<34} {scores['ndcg_cut_10']:8.4f} {scores['recall_100']:8.4f}")
    print(f"\n{model_note(args.model)}")
    print(f"total {time.perf_counter() - started:.0f} s; commands and their output: {work / 'commands.log'}")
    return 0


if __name__ == "__main__":
    from pyserini_ext.cli.__main__ import one_line_errors

    sys.exit(one_line_errors(main))  # a missing dataset or model: one line, as every pyserini-ext command

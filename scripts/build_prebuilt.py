"""`make prebuilt`: build the catalogue's indexes from the shipped models, pack them, write the catalogue.

For each dataset (`scifact` as `beir-v1.0.0-scifact`, `msmarco-dl19-subset` as is) and each record:
  <prefix>.deepct-tiny        `pyserini-ext deepct index --model deepct` (true-length Lucene index: BM25, QL-JM
                              and impact search)
  <prefix>.aggretriever-tiny  `python -m pyserini.encode ... --encoder aggretriever-splade-tiny --encoder-class
                              aggretriever-onnx --to-faiss` (Faiss flat)
  <prefix>.aggretriever       the same with `--encoder aggretriever` (the default, aggretriever-minilm-fullwidth)
  <prefix>.aligner-tiny       `pyserini-ext aligner index --model resources/models/aligner-splade-tiny` (exact
                              float16 token index, every token)
  <prefix>.aligner            `pyserini-ext aligner index --model aligner --beta-d 0.4` (the default model,
                              aligner-minilm, and the command's default path: 40% of each passage's token vectors
                              (pooled), residual PQ32x6 codes, centroid candidate lists with nlist from the token
                              count, ~31 bytes per token; docs/aligner.md)
plus `msmarco-dl19-subset.flat` (BM25, `python -m pyserini.index.lucene`), the passages behind that dataset's
Faiss index (SciFact's are Pyserini's own `beir-v1.0.0-scifact.flat`).
Tarballs go to `--output` (default dist/prebuilt); the catalogue (default resources/prebuilt_indexes.json)
records md5, size, Lucene counts and the model (name, weights md5) of each. URLs are `--url-base/<file>` when
given, else none: serve the tarballs and point `$PYSERINI_EXT_MIRROR` at them (a file:// URL works too).

    python scripts/build_prebuilt.py [--datasets scifact] [--records deepct-tiny aligner] [--url-base URL]

Every index is built as a step of the report's cached runner (pyserini_ext.repro.runner): its work folder name
carries the model's fingerprint, an existing one is reused, a failed build leaves none, and each command is logged
to `<work>/commands.log`. The AligneR encodings are kept in `--work` (`aligner index --encoded`), so a rebuild
with another codec only re-indexes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyserini_ext.data import load_dataset, write_json_collection
from pyserini_ext.index.prebuilt import default_catalogue, pack_index
from pyserini_ext.models.aggretriever import Aggretriever
from pyserini_ext.models.folder import resolve_model
from pyserini_ext.repro.runner import StepRunner, model_tag

PREFIXES = {"scifact": "beir-v1.0.0-scifact", "msmarco-dl19-subset": "msmarco-dl19-subset"}
PYSERINI_TEXTS = {"scifact": "beir-v1.0.0-scifact.flat"}  # Pyserini's own prebuilt BM25 index of the passages
# record suffix -> (how it is built, the model it is built and searched with): the "-tiny" records use the shipped
# splade-tiny models, `aligner` the default AligneR
RECORDS = {"deepct-tiny": ("deepct", "deepct"), "aggretriever-tiny": ("aggretriever", "aggretriever-splade-tiny"),
           "aggretriever": ("aggretriever", "aggretriever"), "aligner-tiny": ("aligner", "aligner-splade-tiny"),
           "aligner": ("aligner-default", "aligner")}
DESCRIPTIONS = {"aggretriever": "aggretriever index, default model (Faiss flat)",
                "aligner": "aligner index, default model and path, 40% of tokens (pooled), residual PQ32x6 + "
                           "centroid lists"}
DEFAULT_ALIGNER = ["--beta-d", "0.4"]  # everything else the command's default, as a user's own build gets it


def build(runner: StepRunner, dataset: str, kind: str, model: str | None, collection: Path, out: Path,
          threads: int) -> Path:
    """One index of the passages in the JsonCollection `collection` (title, text fields), as a cached step."""
    py = sys.executable
    if kind == "deepct":
        command = [py, "-m", "pyserini_ext.cli", "deepct", "index", "--model", model, "--corpus",
                   collection / "docs.jsonl", "--output", out]
    elif kind == "aggretriever":
        command = [py, "-m", "pyserini.encode", "input", "--corpus", collection / "docs.jsonl", "--fields", "title",
                   "text", "output", "--embeddings", out, "--to-faiss", "encoder", "--encoder", model,
                   "--encoder-class", "aggretriever-onnx", "--fields", "title", "text", "--dimension",
                   str(Aggretriever.from_pretrained(resolve_model(model)).dim), "--max-length", "256",
                   "--batch-size", "32", "--device", "cpu"]  # the report's settings
    elif kind.startswith("aligner"):
        encoded = collection.parent / f"{model_tag(Path(resolve_model(model)))}.encoded.npz"
        command = [py, "-m", "pyserini_ext.cli", "aligner", "index", "--model", model, "--corpus", collection,
                   "--output", out, "--threads", str(threads), "--encoded", encoded,
                   *(DEFAULT_ALIGNER if kind == "aligner-default" else [])]
    else:  # flat: BM25 over the passages
        command = [py, "-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input", collection,
                   "--index", out, "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(threads),
                   "--storePositions", "--storeDocvectors", "--storeRaw"]
    return runner.step(dataset, f"{out.name} ({kind})", command, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(PREFIXES), choices=list(PREFIXES))
    parser.add_argument("--records", nargs="+", default=list(RECORDS), choices=list(RECORDS))
    parser.add_argument("--output", type=Path, default=Path("dist/prebuilt"))
    parser.add_argument("--work", type=Path, default=Path("runs/prebuilt"))
    parser.add_argument("--catalogue", type=Path, default=default_catalogue())
    parser.add_argument("--url-base", default="", help="where the tarballs will be served")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-docs", type=int, help="first N passages only (a quick check of this script)")
    args = parser.parse_args()

    runner = StepRunner(args.work, args.threads)
    for dataset in args.datasets:
        # a --max-docs corpus has folders of its own: its indexes are never packed as the whole dataset's
        prefix, work = PREFIXES[dataset], args.work / (f"{dataset}.first{args.max_docs}" if args.max_docs else dataset)
        collection = work / "collection"
        corpus = load_dataset(dataset).corpus
        if args.max_docs:
            corpus = {d: corpus[d] for d in list(corpus)[:args.max_docs]}
        write_json_collection(corpus, collection)
        texts = PYSERINI_TEXTS.get(dataset)
        jobs = [(*RECORDS[suffix], f"{prefix}.{suffix}") for suffix in args.records]
        if texts is None and any(RECORDS[suffix][0] == "aggretriever" for suffix in args.records):
            texts = f"{prefix}.flat"
            jobs.insert(0, ("flat", None, texts))
        for kind, model, name in jobs:
            suffix = name.removeprefix(f"{prefix}.")
            tag = f".{model_tag(Path(resolve_model(model)))}" if model else ""  # a retrained model: a new index
            index = build(runner, dataset, kind, model, collection, work / f"{name}{tag}", args.threads)
            filename = f"{name}.tar.gz"
            description = f"{dataset}: {DESCRIPTIONS.get(suffix, f'{kind} index, shipped model')}"
            record = pack_index(index, name, args.output, [f"{args.url_base.rstrip('/')}/{filename}"]
                                if args.url_base else [], description=description,
                                catalogue=args.catalogue, model=model,
                                texts=texts if kind == "aggretriever" else None)
            print(f"{name}: {record['size_bytes']} bytes, md5 {record['md5']} -> {args.catalogue}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""DeepCT index build: our custom-term-frequency writer vs the original pseudo-document route.

    python -m bench.bench_deepct_index --docs 2000

Both start from the same {word: tf} documents (model time excluded) and give the same scores (tested in
tests/test_deepct_index.py); this prints build time, index size and their ratios, and the ratio to Pyserini's BM25
indexing of the same passages (model time excluded and included).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common import model_folder, write_json
from pyserini_ext.data import document_text, load_dataset
from pyserini_ext.index.deepct import write_term_frequency_index
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.models.deepct_terms import pseudo_document


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="DeepCT folder (default: the shipped one)")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--json", help="also write the figures to this file (for `make bench`)")
    args = parser.parse_args()
    corpus = load_dataset(args.dataset).corpus
    docids = sorted(corpus)[:args.docs]
    model = DeepCTModel.from_pretrained(model_folder("deepct", args.model, "deepct_config.json"))
    start = time.time()
    weights = model.word_weights([document_text(corpus[d]) for d in docids])
    model_seconds = time.time() - start
    word_tfs = {d: model.index_tf.term_frequencies(w) for d, w in zip(docids, weights)}  # the model's tf rule
    total_tf = sum(sum(t.values()) for t in word_tfs.values())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.time()
        write_term_frequency_index(((d, t, "") for d, t in word_tfs.items()), tmp / "custom-tf")
        custom_seconds = time.time() - start
        start = time.time()
        (tmp / "pseudo").mkdir()
        with open(tmp / "pseudo" / "docs.jsonl", "w") as f:
            for docid, tfs in word_tfs.items():
                f.write(json.dumps({"id": docid, "contents": pseudo_document(tfs)}) + "\n")
        pseudo_text_bytes = folder_size(tmp / "pseudo")
        build_lucene_index(tmp / "pseudo", tmp / "pseudo-index", extra_args=["-optimize"])
        pseudo_seconds = time.time() - start
        sizes = folder_size(tmp / "custom-tf"), folder_size(tmp / "pseudo-index")
        (tmp / "raw").mkdir()  # Pyserini's BM25 indexing of the same passages: the baseline
        with open(tmp / "raw" / "docs.jsonl", "w") as f:
            for docid in docids:
                f.write(json.dumps({"id": docid, "contents": document_text(corpus[docid])}) + "\n")
        start = time.time()
        build_lucene_index(tmp / "raw", tmp / "bm25-index")
        bm25_seconds = time.time() - start
    print(f"{len(docids)} documents, {total_tf} tokens in pseudo-documents ({pseudo_text_bytes / 1e6:.1f} MB text)")
    print(f"custom tf writer : {custom_seconds:6.1f} s, index {sizes[0] / 1e6:6.2f} MB")
    print(f"pseudo-documents : {pseudo_seconds:6.1f} s, index {sizes[1] / 1e6:6.2f} MB (incl. JVM start-up)")
    print(f"ratio pseudo/custom: time {pseudo_seconds / custom_seconds:.2f}x, size {sizes[1] / sizes[0]:.2f}x")
    print(f"Pyserini BM25 indexing of the raw passages: {bm25_seconds:6.1f} s (incl. JVM start-up); DeepCT model "
          f"{model_seconds:6.1f} s")
    print(f"ratio DeepCT/BM25 indexing: model excluded {custom_seconds / bm25_seconds:.2f}x, model included "
          f"{(custom_seconds + model_seconds) / bm25_seconds:.2f}x")
    write_json(args.json, {"docs": len(docids), "custom_s": custom_seconds, "pseudo_s": pseudo_seconds,
                            "bm25_s": bm25_seconds, "model_s": model_seconds, "custom_mb": sizes[0] / 1e6,
                            "pseudo_mb": sizes[1] / 1e6, "pseudo_over_custom_time": pseudo_seconds / custom_seconds,
                            "pseudo_over_custom_size": sizes[1] / sizes[0],
                            "deepct_over_bm25_time": custom_seconds / bm25_seconds,
                            "deepct_with_model_over_bm25_time": (custom_seconds + model_seconds) / bm25_seconds})


if __name__ == "__main__":
    main()

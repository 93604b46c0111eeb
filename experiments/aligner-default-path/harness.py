"""Shared helpers of the AligneR default-path experiments (issue 57 item 1): each index is built once and each
split's queries are encoded once, both cached in the work folder `runs/exp57` under the repository root; corpus
encodings are the ones `make report` caches (`runs/report/full`).

Not run on its own: the scripts of this folder import it (run them from the repository root with `PYTHONPATH=.`).
"""
from __future__ import annotations

import pickle
import time
from pathlib import Path

import faiss
import numpy as np
import torch

from bench.common import model_folder, subset
from pyserini_ext.data import load_dataset
from pyserini_ext.encode.aligner import AlignerQueryEncoder
from pyserini_ext.index.aligner import AlignerIndex, EncodedCorpus, build_index
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.models.folder import resolve_model
from pyserini_ext.repro.runner import model_tag
from pyserini_ext.search.aligner import AlignerSearcher

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "runs" / "exp57"
# the report's encodings of the shipped model, named by its fingerprint (pyserini_ext.repro.runner.model_tag)
ENC = {d: f"runs/report/full/{d}/aligner.{model_tag(Path(resolve_model('aligner', 'aligner')))}.encoded.npz"
       for d in ("scifact", "vaswani", "cranfield")}


def setup(threads=2):
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    WORK.mkdir(parents=True, exist_ok=True)


def searcher(dataset, name, **options):
    """(the shipped model, the index `<dataset>.<name>`, a searcher over it with `options`)."""
    model = AlignerModel.from_pretrained(model_folder("aligner", None, "aligner_config.json"))
    idx = AlignerIndex.open(index(dataset, name))
    return model, idx, AlignerSearcher(idx, model, **options)


def queries(dataset, split, n=None):
    """(query ids, encoded queries, qrels) of the split (the first `n` queries by id if given), cached."""
    cache = WORK / f"q.{dataset}.{split}.{n}.pkl"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    corpus, qs, qrels = subset(load_dataset(dataset), 10**9, split, n)
    enc = AlignerQueryEncoder(model_folder("aligner", None, "aligner_config.json")).encode_tokens(
        list(qs.values()), beta=DEFAULT_BETA_Q)
    out = (list(qs), enc, qrels)
    cache.write_bytes(pickle.dumps(out))
    return out


_encoded = {}


def encoding(dataset):
    if dataset not in _encoded:
        _encoded[dataset] = EncodedCorpus.load(REPO / ENC[dataset])
    return _encoded[dataset]


def index(dataset, name, **options):
    """The folder of index `name` of the dataset's encoding (every document token, beta_d 1), built if missing."""
    folder = WORK / f"{dataset}.{name}"
    if not folder.exists():
        t = time.time()
        build_index(encoding(dataset), folder, beta_d=1.0, progress=False, **options)
        print(f"built {folder} in {time.time()-t:.0f}s", flush=True)
    return folder


def timed(fn, qids, qenc):
    """fn(vectors, weights) per query: (the runs by query id, process CPU p50 ms, wall p50 ms)."""
    run, cpu, wall = {}, [], []
    for qid, (v, w) in zip(qids, qenc):
        s, sc = time.perf_counter(), time.process_time()
        run[qid] = fn(v, w)
        wall.append(time.perf_counter() - s)
        cpu.append(time.process_time() - sc)
    return run, 1000 * np.median(cpu), 1000 * np.median(wall)


def load():
    """The machine's 1-minute load average."""
    return Path("/proc/loadavg").read_text().split()[0]

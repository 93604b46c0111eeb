"""Label-free fidelity of the shortlist: pseudo-queries (the first 12 words of 120 random documents), top-10
overlap of exact_documents N with N = 0 (every candidate decoded), and how often the source document is first.
Prints the index's bytes per token, nlist and tokens, then per N (0, 256, 128, 64, 32) the overlap@10 with N = 0,
the share of queries whose source document is first, and CPU / wall p50 ms with the load average.

Needs the corpus encoding of `make report`; builds the index `<dataset>.<name>` in runs/exp57 if missing (for
`default`: the default options). Run from the repository root:

    PYTHONPATH=. python experiments/aligner-default-path/pseudo.py vaswani default
"""
from __future__ import annotations

import pickle
import sys

import numpy as np
from harness import WORK, index, load, setup, timed

from bench.common import model_folder
from pyserini_ext.data import document_text, load_dataset
from pyserini_ext.encode.aligner import AlignerQueryEncoder
from pyserini_ext.index.aligner import AlignerIndex
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q
from pyserini_ext.search.aligner import AlignerSearcher


def main() -> None:
    setup(2)
    ds, name = sys.argv[1], sys.argv[2]
    model = AlignerModel.from_pretrained(model_folder("aligner", None, "aligner_config.json"))
    idx = AlignerIndex.open(index(ds, name))
    print(ds, name, "bytes/token", round(idx.bytes_per_token(), 2), "nlist", idx.metadata["nlist"],
          "tokens", idx.tokens, flush=True)
    cache = WORK / f"pseudo.{ds}.pkl"
    if cache.exists():
        docids, qenc = pickle.loads(cache.read_bytes())
    else:
        corpus = load_dataset(ds).corpus
        rng = np.random.default_rng(0)
        docids = [idx.docids[i] for i in rng.choice(len(idx), 120, replace=False)]
        texts = [" ".join(document_text(corpus[d]).split()[:12]) for d in docids]
        qenc = AlignerQueryEncoder(model_folder("aligner", None, "aligner_config.json")).encode_tokens(
            texts, beta=DEFAULT_BETA_Q)
        cache.write_bytes(pickle.dumps((docids, qenc)))
    s = AlignerSearcher(idx, model)
    Ns = [0, 256, 128, 64, 32]
    tops = {n: [] for n in Ns}
    for n in Ns:
        s.exact_documents = n
        run, cpu, wall = timed(lambda v, w: [h.docid for h in s.rank(v, w, 10)], docids, qenc)
        tops[n] = [run[d] for d in docids]
        overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(tops[n], tops[0])])
        first = np.mean([t[0] == d for t, d in zip(tops[n], docids)])
        print(f"  exact_documents {n:4}: overlap@10 with N=0 {overlap:.3f}  source first {first:.3f}  "
              f"cpu p50 {cpu:.1f} wall {wall:.1f} load {load()}", flush=True)


if __name__ == "__main__":
    main()

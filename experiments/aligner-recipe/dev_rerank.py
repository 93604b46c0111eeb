"""Compare trained Aggretriever / AligneR folders on development queries only, by reranking their candidates.

    python experiments/aligner-recipe/dev_rerank.py --cache runs/models/distillation MODEL_DIR [MODEL_DIR ...]

The two labelled development sets of experiments/devsets.py (no test query is read): the MS MARCO triples
sample (100 queries that no trainer sees; candidates = their two passages + BM25's top 30 of the DL19 subset's
passages) and SciFact train (809 queries, in the training set, so it flatters models that fit it; candidates =
the distillation set's teacher candidates). nDCG@10 (pyserini_ext.evaluation) of each model's scores over the
candidates, next to the teacher ensemble's. The model kind is read from the folder.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np
import torch

from pyserini_ext.data import document_text
from pyserini_ext.models.folder import identify
from pyserini_ext.train.distill import DistillationSet, DistillDataConfig, build_distillation_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the shared development sets
from devsets import labelled_indices, rerank_ndcg, triples_development_set  # noqa: E402


def passage_scorer(folder: Path, beta_d: float | None = None, beta_q: float = 0.5):
    """(queries, passages, wanted) -> per query, its scores over the passage positions in `wanted[query]`.

    AligneR: with the training saliences (soft top-k at alpha_q / alpha_d), or with `beta_d` as a search does
    (hard top-k: `beta_q` of the query tokens, `beta_d` of each passage's tokens)."""
    kind = identify(folder)[0]
    if kind == "aggretriever":
        from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder, AggretrieverQueryEncoder
        documents = AggretrieverDocumentEncoder(str(folder), backend="onnx")
        queries = AggretrieverQueryEncoder(str(folder), backend="onnx")

        def score(query_texts: list[str], passage_texts: list[str], wanted: list[list[int]]) -> list[np.ndarray]:
            q = np.stack([queries.encode(t) for t in query_texts])
            p = np.concatenate([documents.encode(passage_texts[i:i + 32], max_length=256)
                                for i in range(0, len(passage_texts), 32)])
            return [p[rows] @ q[i] for i, rows in enumerate(wanted)]
        return score
    if kind == "aligner":
        from pyserini_ext.models.aligner import DOCUMENT, QUERY, EncodedTokens
        from pyserini_ext.models.alignment import MAXSIM, alignment_scores
        model = _aligner(folder)
        config = model.config
        soft = {"soft": True, "eps": config.eps, "iterations": config.topk_iterations}

        def encode(texts: list[str], kind: str, fraction: float, soft_weights: bool) -> list[tuple]:
            """Per text: (vectors [n, dim], weights [n], kept [n]), padding removed; encodings are cached, so
            several `beta_d` rows of one model encode each text once."""
            out = []
            for vectors, scores in _encodings(model, texts, kind):
                tokens = EncodedTokens(vectors[None], scores[None], torch.ones_like(scores[None], dtype=torch.bool))
                weights, kept = tokens.weights(fraction, **soft) if soft_weights else tokens.weights(fraction)
                out.append((vectors, weights[0], kept[0]))
            return out

        def score(query_texts: list[str], passage_texts: list[str], wanted: list[list[int]]) -> list[np.ndarray]:
            with torch.no_grad():  # each query against its own candidates only
                queries = encode(query_texts, QUERY, config.alpha_q if beta_d is None else beta_q, beta_d is None)
                passages = encode(passage_texts, DOCUMENT, config.alpha_d if beta_d is None else beta_d,
                                  beta_d is None)
                out = []
                for query, rows in zip(queries, wanted):
                    docs = [torch.nn.utils.rnn.pad_sequence([passages[r][part] for r in rows], batch_first=True)
                            for part in range(3)]
                    out.append(alignment_scores(*(t[None] for t in query), *docs, MAXSIM)[0].numpy())
                return out
        return score
    raise ValueError(f"{folder}: a {kind} folder; this script reranks with Aggretriever and AligneR models")


@functools.cache
def _aligner(folder: Path):
    from pyserini_ext.models.aligner import AlignerModel
    return AlignerModel.from_pretrained(folder).eval()


_ENCODINGS: dict[tuple[int, str, str], tuple[torch.Tensor, torch.Tensor]] = {}


def _encodings(model, texts: list[str], kind: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(token vectors, salience pre-activations) of each text, padding removed; cached per model and text."""
    missing = list(dict.fromkeys(t for t in texts if (id(model), kind, t) not in _ENCODINGS))
    with torch.no_grad():
        for i in range(0, len(missing), 32):
            encoded = model.encode_batch(missing[i:i + 32], kind)
            for row, n in enumerate(encoded.mask.sum(-1).tolist()):
                _ENCODINGS[id(model), kind, missing[i + row]] = (encoded.vectors[row, :n],
                                                                 encoded.salience_scores[row, :n])
    return [_ENCODINGS[id(model), kind, t] for t in texts]


def model_scores(score, data: DistillationSet, indices: list[int]) -> dict[int, np.ndarray]:
    """Query index -> the model's scores over its candidates (every passage encoded once)."""
    passages = sorted({d for i in indices for d in data.candidates[i]})
    position = {d: j for j, d in enumerate(passages)}
    scores = score([data.queries[i].text for i in indices], [document_text(data.corpus[d]) for d in passages],
                   [[position[d] for d in data.candidates[i]] for i in indices])
    return dict(zip(indices, scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("runs/models/distillation"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--aligner-beta-d", type=float, nargs="+",
                        help="score AligneR as a search does, keeping these fractions of passage tokens (one row "
                             "each; default: the training saliences)")
    parser.add_argument("--aligner-beta-q", type=float, nargs="+", default=[0.5],
                        help="with --aligner-beta-d: the fractions of query tokens kept (one row each; default 0.5, "
                             "the search default)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    training = build_distillation_set(DistillDataConfig(), args.cache)
    sets = {"MS MARCO triples": triples_development_set(args.cache / "triples-dev"), "SciFact train": training}
    indices = {"MS MARCO triples": list(range(len(sets["MS MARCO triples"].queries))),
               "SciFact train": labelled_indices(training)}
    print(f"{'ranking':<60}" + "".join(f"{name:>20}" for name in sets) + f"{'mean':>10}")

    def show(name: str, row: list[float]) -> None:
        print(f"{name:<60}" + "".join(f"{v:>20.4f}" for v in row) + f"{np.mean(row):>10.4f}", flush=True)

    show("teacher ensemble", [rerank_ndcg(data, data.ensemble(), indices[name]) for name, data in sets.items()])
    for folder in args.models:
        betas = [(q, d) for q in args.aligner_beta_q for d in args.aligner_beta_d] \
            if identify(folder)[0] == "aligner" and args.aligner_beta_d else [(None, None)]
        for beta_q, beta_d in betas:
            score = passage_scorer(folder, beta_d, beta_q)
            show(str(folder) + ("" if beta_d is None else f" beta_q {beta_q:g} beta_d {beta_d:g}"),
                 [rerank_ndcg(data, model_scores(score, data, indices[name]), indices[name])
                  for name, data in sets.items()])
        _ENCODINGS.clear()  # GBs of token vectors: one model's at a time


if __name__ == "__main__":
    main()

"""AligneR's pure functions: entropy-regularised top-k and the sparse-alignment score (torch, no model state).

Definitions used throughout (AligneR, "Multi-Vector Retrieval as Sparse Alignment", Qian et al. 2023; no public
code exists, so these are our reading of the paper, written down in docs/aligner.md):

* S = Q D^T, token similarities of L2-normalised 128-dim vectors.
* Pairwise alignment A~: for every query token, its top-k document tokens by similarity (k = 1 is ColBERT's
  MaxSim) or top-p, i.e. max(floor(p * m), 1) tokens for a document of m (kept) tokens.
* Unary salience u (one per token, query and document each) multiplies the alignment: A_ij = u^q_i u^d_j A~_ij.
* score = sum(A * S) / Z with Z = sum(A): a salience-weighted mean of the aligned similarities. Because Z carries
  the same weights, the score is invariant to the overall scale of u; salience can only say which tokens matter
  relative to each other. (We first normalised by the unweighted count sum(A~): training then used the document
  salience as a global inverse temperature, which grew 4x in 300 steps while the loss rose again.) Without
  salience (u = 1) and k = 1 the score is ColBERT's MaxSim divided by the number of query tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Masked similarities must lose every top-k comparison but stay finite so that 0 * value stays 0.
_MASKED_SIMILARITY = -1e4


def entropy_topk(scores: torch.Tensor, k: torch.Tensor | float, eps: float = 0.002, iterations: int = 5,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Differentiable top-k weights lambda in [0, 1] with sum(lambda) = k along the last dimension.

    Solves max_lambda s.lambda + eps * H(lambda) s.t. sum(lambda) = k, 0 <= lambda <= 1 with the dual iteration
    a <- eps (ln k - logsumexp((s + b) / eps)); b <- -ReLU(s + a); lambda = exp((s + a + b) / eps).
    `k` is a whole number, scalar or one per row (shape scores.shape[:-1]); masked positions (mask == 0) get
    lambda = 0 and do not count. As eps -> 0 lambda tends to the hard top-k indicator.

    The paper starts from a = 0, b = -s; that alternation moves a by only eps * ln(k / #clipped) per step, so at
    eps = 0.002 even 100 iterations leave sum(lambda) visibly off k (measured: off by up to 17 for k = 3 after 20).
    We therefore locate the fixed point first: it is lambda_i = min(exp((s_i + a) / eps), 1) with sum = k, a
    monotone 1-D equation in a solved by bisection (float64, no gradient). From there `iterations` unrolled steps
    of the paper's iteration (which leave the fixed point unchanged) carry the gradient to the scores.
    """
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    k = torch.as_tensor(k, device=scores.device).expand(scores.shape[:-1]).unsqueeze(-1)
    if torch.any(k != torch.round(k)) or torch.any(k < 1):
        raise ValueError("entropy_topk: k must be a whole number >= 1")
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    if torch.any(k > mask.sum(-1, keepdim=True)):
        raise ValueError("entropy_topk: k exceeds the number of unmasked positions in some row")
    # masked positions drop out of the logsumexp; (s + a + b) / eps is then -inf -> lambda 0
    masked_scores = scores.masked_fill(~mask, float("-inf"))
    finite_scores = scores.masked_fill(~mask, 0.0)
    a = _dual_threshold(masked_scores.detach().double(), k.double(), eps).to(scores.dtype)
    b = -torch.relu(finite_scores + a)
    log_k = torch.log(k.to(scores.dtype))
    for _ in range(iterations):
        a = eps * (log_k - torch.logsumexp((masked_scores + b) / eps, dim=-1, keepdim=True))
        b = -torch.relu(finite_scores + a)
    return torch.exp((masked_scores + a + b) / eps)


def _dual_threshold(scores: torch.Tensor, k: torch.Tensor, eps: float, steps: int = 100) -> torch.Tensor:
    """a with sum_i min(exp((s_i + a) / eps), 1) = k (bisection; masked scores are -inf)."""
    ranked = scores.sort(dim=-1, descending=True).values
    available = torch.isfinite(ranked).sum(-1, keepdim=True)
    # at a = -s_(k) the k best are clipped to 1 (sum >= k); at a = -s_(1) + eps ln(k / m) every term is <= k / m
    high = -ranked.gather(-1, k.long() - 1)
    low = -ranked[..., :1] + eps * torch.log(k / available)
    for _ in range(steps):
        middle = (low + high) / 2
        total = torch.exp(torch.clamp((scores + middle) / eps, max=0.0)).sum(-1, keepdim=True)
        too_big = total > k
        high = torch.where(too_big, middle, high)
        low = torch.where(too_big, low, middle)
    return (low + high) / 2


def hard_topk_mask(scores: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the k (per row) highest unmasked scores along the last dimension."""
    ranked = scores.masked_fill(~mask.bool(), float("-inf")).argsort(dim=-1, descending=True)
    rank_of = torch.empty_like(ranked)
    positions = torch.arange(scores.shape[-1], device=scores.device).expand_as(ranked)
    rank_of.scatter_(-1, ranked, positions)
    return (rank_of < k.unsqueeze(-1)) & mask.bool()


def salience_keep_count(lengths: torch.Tensor, fraction: float) -> torch.Tensor:
    """Tokens kept when pruning to `fraction` of each sequence: ceil(fraction * m), at least 1 for m > 0."""
    if not 0 < fraction <= 1:
        raise ValueError(f"a salience fraction must be in (0, 1], got {fraction}")
    kept = torch.ceil(lengths.to(torch.float64) * fraction - 1e-9).to(torch.long)
    return torch.clamp(kept, min=1).minimum(lengths.to(torch.long))


@dataclass(frozen=True)
class Alignment:
    """Which document tokens each query token aligns to: top-k (k >= 1) or top-p (0 < p <= 1)."""
    k: int | None = 1
    p: float | None = None

    def __post_init__(self):
        if (self.k is None) == (self.p is None):
            raise ValueError("an alignment needs exactly one of k (top-k) or p (top-p)")
        if self.k is not None and (not isinstance(self.k, int) or self.k < 1):
            raise ValueError(f"top-k alignment needs an integer k >= 1, got {self.k!r}")
        if self.p is not None and not 0 < self.p <= 1:
            raise ValueError(f"top-p alignment needs 0 < p <= 1, got {self.p!r}")

    @classmethod
    def parse(cls, text: str) -> Alignment:
        """'k=1', 'k4', 'p=0.01', 'p1%' -> Alignment."""
        text = text.strip().lower().replace("=", "")
        if text.startswith("k"):
            return cls(k=int(text[1:]))
        if text.startswith("p"):
            value = text[1:]
            return cls(k=None, p=float(value[:-1]) / 100 if value.endswith("%") else float(value))
        raise ValueError(f"cannot parse alignment {text!r}; use e.g. k=1, k=4, p=0.01 or p=1%")

    def __str__(self) -> str:
        return f"k={self.k}" if self.k is not None else f"p={self.p * 100:g}%"

    def tokens_per_query_token(self, doc_lengths: torch.Tensor) -> torch.Tensor:
        """Aligned document tokens per query token, per document: min(k, m) or max(floor(p * m), 1)."""
        if self.k is not None:
            return torch.clamp(doc_lengths, max=self.k)
        return torch.clamp(torch.floor(doc_lengths.to(torch.float64) * self.p + 1e-9).to(torch.long), min=1)

    def max_tokens(self, max_doc_length: int) -> int:
        return int(self.tokens_per_query_token(torch.tensor([max_doc_length]))[0]) if max_doc_length else 1


MAXSIM = Alignment(k=1)  # ColBERT's MaxSim

# Query tokens kept by a search by default: all of them (better than the paper's 50% on both development sets;
# figures in experiments/aligner-recipe/README.md).
DEFAULT_BETA_Q = 1.0


def alignment_scores(query_vectors: torch.Tensor, query_weights: torch.Tensor, query_mask: torch.Tensor,
                     doc_vectors: torch.Tensor, doc_weights: torch.Tensor, doc_mask: torch.Tensor,
                     alignment: Alignment = MAXSIM) -> torch.Tensor:
    """Sparse-alignment scores of every query against every document, shape [n_queries, n_docs].

    query_vectors [Q, n, d], query_weights/query_mask [Q, n]; doc_vectors [D, m, d], doc_weights/doc_mask [D, m].
    Weights are the unary saliences (pass ones for plain MaxSim); masked tokens never align. Fully vectorised:
    one einsum for S, one topk over document tokens.
    """
    if query_vectors.shape[-1] != doc_vectors.shape[-1]:
        raise ValueError(f"query dim {query_vectors.shape[-1]} != document dim {doc_vectors.shape[-1]}")
    similarity = torch.einsum("qnd,cmd->qcnm", query_vectors, doc_vectors.to(query_vectors.dtype))
    return aligned_scores(similarity, query_weights, query_mask, doc_weights, doc_mask, alignment)


def aligned_scores(similarity: torch.Tensor, query_weights: torch.Tensor, query_mask: torch.Tensor,
                   doc_weights: torch.Tensor, doc_mask: torch.Tensor, alignment: Alignment = MAXSIM) -> torch.Tensor:
    """`alignment_scores` from precomputed token similarities [Q, D, n, m] (S = Q D^T per query and document)."""
    query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
    doc_lengths = doc_mask.sum(-1)
    if torch.any(doc_lengths == 0):
        raise ValueError("alignment_scores: a document has no (unmasked) tokens")
    if torch.any(query_mask.sum(-1) == 0):
        raise ValueError("alignment_scores: a query has no (unmasked) tokens")
    similarity = similarity.masked_fill(~doc_mask[None, :, None, :], _MASKED_SIMILARITY)
    per_doc_k = alignment.tokens_per_query_token(doc_lengths)  # [D]
    top_k = alignment.max_tokens(similarity.shape[-1])
    top_similarity, top_index = similarity.topk(top_k, dim=-1)  # [Q, D, n, top_k]
    selected = torch.arange(top_k, device=per_doc_k.device)[None, :] < per_doc_k[:, None]  # [D, top_k]
    selected_doc_weight = doc_weights.to(top_similarity.dtype)[None, :, None, :].expand(
        top_index.shape[:-1] + (doc_weights.shape[-1],)).gather(-1, top_index)
    aligned_doc_weight = selected_doc_weight * selected[None, :, None, :]  # u^d_j A~_ij  [Q, D, n, top_k]
    weighted_query = (query_weights * query_mask).to(top_similarity.dtype)[:, None, :]  # u^q_i  [Q, 1, n]
    numerator = ((top_similarity * aligned_doc_weight).sum(-1) * weighted_query).sum(-1)
    normaliser = (aligned_doc_weight.sum(-1) * weighted_query).sum(-1)  # Z = sum(A)
    # Z = 0 only when every aligned token has zero salience: nothing is aligned, the score is 0
    return numerator / normaliser.clamp(min=1e-9)


def pool_vectors(vectors: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Salience-weighted mean of token vectors, L2-normalised: one vector per sequence ([B, n, d] -> [B, d])."""
    weights = (weights * mask).to(vectors.dtype)
    pooled = (vectors * weights.unsqueeze(-1)).sum(1) / weights.sum(-1, keepdim=True).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)

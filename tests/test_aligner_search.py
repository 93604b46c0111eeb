"""AligneR index + searcher on a real SciFact sample: exactness, compression, pruning, Pyserini interop, bad input."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from pyserini_ext.data import document_text, write_json_collection, write_trec_qrels
from pyserini_ext.evaluation import evaluate, write_trec_run
from pyserini_ext.index.aligner import (
    AlignerIndex,
    AlignerIndexError,
    EncodedCorpus,
    build_index,
    encode_corpus,
    pool_tokens,
    prune_tokens,
)
from pyserini_ext.index.aligner.candidates import EXACT_DOCUMENTS
from pyserini_ext.index.lucene import build_lucene_index
from pyserini_ext.models.aligner import DOCUMENT, AlignerConfig, AlignerModel
from pyserini_ext.models.alignment import DEFAULT_BETA_Q, MAXSIM, Alignment, aligned_scores, alignment_scores
from pyserini_ext.models.backbones import backbone_path
from pyserini_ext.search.aligner import AlignerSearcher, maxsim_concatenated
from pyserini_ext.train.adaptation import ALIGNMENT_OPTIONS, adapt_alignment

N_QUERIES = 12


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sample(scifact_sample):
    """12 SciFact test queries, their judged documents and 180 other documents (real text)."""
    return scifact_sample(N_QUERIES, 180)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.manual_seed(0)
    model = AlignerModel.from_backbone(backbone_path("splade-tiny"), AlignerConfig(doc_max_length=128)).eval()
    folder = tmp_path_factory.mktemp("model") / "aligner"
    model.save_pretrained(folder)
    return AlignerModel.from_pretrained(folder), folder


@pytest.fixture(scope="module")
def encoded(model, sample):
    aligner, folder = model
    return encode_corpus(aligner, sample[2], model_path=str(folder), progress=False)


@pytest.fixture(scope="module")
def exact_index(encoded, tmp_path_factory):
    return build_index(encoded, tmp_path_factory.mktemp("idx") / "exact", codec="float16", candidates="flat",
                       progress=False)


@pytest.fixture(scope="module", params=[("ivfpq", 32), ("centroid", 32)], ids=["ivfpq", "centroid"])
def compressed_index(encoded, tmp_path_factory, request):
    """Residual PQ codes with a token-level IVF-PQ candidate index, or PLAID-style centroid candidates."""
    candidates, pq_m = request.param
    return build_index(encoded, tmp_path_factory.mktemp("idx") / "compressed", codec="residual-pq",
                       candidates=candidates, nlist=64, pq_m=pq_m, progress=False)


def _reference_scores(aligner: AlignerModel, query: str, corpus: dict, alignment: Alignment) -> dict[str, float]:
    """Brute force, independent of the index: re-encode every document and score it against the query."""
    docids = list(corpus)
    docs = aligner.encode_texts([document_text(corpus[d]) for d in docids], DOCUMENT)
    q_encoded = aligner.encode_batch([query], "query")
    q_weights, q_kept = q_encoded.weights(DEFAULT_BETA_Q)  # what the searcher keeps
    scores = {}
    for docid, (vectors, salience) in zip(docids, docs):
        s = alignment_scores(q_encoded.vectors[:, q_kept[0]], q_weights[:, q_kept[0]],
                             torch.ones(1, int(q_kept.sum()), dtype=torch.bool), torch.from_numpy(vectors)[None],
                             torch.relu(torch.from_numpy(salience))[None], torch.ones(1, len(salience)), alignment)
        scores[docid] = s.item()
    return scores


@pytest.mark.parametrize("alignment", [Alignment(k=1), Alignment(k=4), Alignment(k=None, p=0.02)])
def test_exact_search_equals_brute_force_over_every_document(model, sample, exact_index, alignment):
    aligner, _ = model
    queries = list(sample[0].values())[:4]
    index = AlignerIndex.open(exact_index)
    exhaustive = AlignerSearcher(index, aligner, alignment=alignment, neighbours=index.tokens)
    default = AlignerSearcher(index, aligner, alignment=alignment)
    overlaps = []
    for query in queries:
        truth = exhaustive.brute_force(query, k=10)  # every document scored, no candidate generation
        assert [(h.docid, h.score) for h in exhaustive.search(query, k=10)] == [(h.docid, h.score) for h in truth]
        overlaps.append(len({h.docid for h in truth} & {h.docid for h in default.search(query, k=10)}) / 10)
    # default candidate generation (256 neighbours per query token), untrained model: measured 1.0
    assert np.mean(overlaps) >= 0.85


def test_stored_scores_match_a_float32_reference(model, sample, exact_index):
    """The index (float16 vectors and weights) against re-encoding every document in float32."""
    aligner, _ = model
    queries, _, corpus = sample
    searcher = AlignerSearcher(exact_index, aligner)
    query = next(iter(queries.values()))
    reference = _reference_scores(aligner, query, corpus, Alignment(k=1))
    stored = {h.docid: h.score for h in searcher.brute_force(query, k=len(corpus))}
    differences = np.abs([stored[d] - reference[d] for d in corpus])
    # float16 rounding; a near-tie between two tokens of different salience can flip MaxSim's choice (rare)
    assert np.median(differences) < 1e-3 and np.mean(differences < 5e-3) > 0.97


def test_compressed_index_loses_little_recall(model, sample, exact_index, compressed_index):
    aligner, _ = model
    queries = list(sample[0].values())
    exact = AlignerSearcher(exact_index, aligner)
    compressed = AlignerSearcher(compressed_index, aligner, nprobe=16)
    overlaps = []
    for query in queries:
        truth = {h.docid for h in exact.search(query, k=10)}
        overlaps.append(len(truth & {h.docid for h in compressed.search(query, k=10)}) / 10)
    # measured 0.83 with this untrained model (PQ32 residual codes, 34 bytes/token; 0.845 for a trained one in
    # test_aligner_e2e); the bound leaves a little room for platform differences in Faiss k-means
    assert np.mean(overlaps) >= 0.75
    meta_exact = AlignerIndex.open(exact_index).metadata
    meta_compressed = AlignerIndex.open(compressed_index).metadata
    assert meta_compressed["bytes"]["codes.npy"] / meta_compressed["counts"]["tokens"] < 40
    assert meta_exact["bytes"]["vectors.npy"] / meta_exact["counts"]["tokens"] >= 256


def test_a_search_for_k_hits_scores_at_least_k_documents(model, sample, compressed_index):
    """Centroid candidates: `neighbours` counts documents, so a search for more hits than that scores k of them
    (PLAID's ndocs grows with k); token-level candidates keep `neighbours` nearest tokens whatever k is."""
    aligner, _ = model
    query = next(iter(sample[0].values()))
    searcher = AlignerSearcher(compressed_index, aligner, neighbours=3, nprobe=16)
    vectors, weights = searcher.encode_queries([query])[0]
    centroid = searcher.index.candidates.neighbours_are_documents
    assert len(searcher.candidates(vectors, weights)) <= (3 if centroid else len(searcher.index))
    if centroid:
        assert len(searcher.candidates(vectors, weights, k=12)) == 12
        assert len(searcher.search(query, k=12)) == 12


def test_maxsim_on_concatenated_documents_equals_the_padded_alignment_score():
    rng = np.random.default_rng(5)
    lengths = np.array([3, 1, 7, 4])
    similarities = rng.normal(size=(6, lengths.sum())).astype(np.float32)
    query_weights = rng.uniform(0.5, 2, size=6).astype(np.float32)
    doc_weights = rng.uniform(0.5, 3, size=lengths.sum()).astype(np.float32)
    padded = np.zeros((4, 7, 6), dtype=np.float32)
    weights, mask = np.zeros((4, 7), dtype=np.float32), np.zeros((4, 7), dtype=bool)
    for d, (start, length) in enumerate(zip(np.cumsum(lengths) - lengths, lengths)):
        padded[d, :length] = similarities[:, start:start + length].T
        weights[d, :length], mask[d, :length] = doc_weights[start:start + length], True
    reference = aligned_scores(torch.from_numpy(padded).transpose(1, 2)[None], torch.from_numpy(query_weights)[None],
                               torch.ones(1, 6, dtype=torch.bool), torch.from_numpy(weights), torch.from_numpy(mask),
                               MAXSIM)[0].numpy()
    np.testing.assert_allclose(maxsim_concatenated(similarities, query_weights, doc_weights, lengths), reference,
                               rtol=1e-5)
    # tokens that tie for a query token's maximum (a centroid's tokens): the most salient one is aligned
    tied = maxsim_concatenated(np.array([[0.5, 0.5], [0.2, 0.1]], dtype=np.float32), np.ones(2, dtype=np.float32),
                               np.array([1.0, 3.0], dtype=np.float32), np.array([2]))
    assert tied[0] == pytest.approx((3 * 0.5 + 1 * 0.2) / (3 + 1))


def test_shortlist_keeps_the_best_documents_by_centroid_interaction(model, sample, compressed_index):
    """Centroid candidates: of the candidates, the best `exact_documents` (at least k) by the MaxSim score on every
    token's centroid go on to decoded scoring (PLAID's stage 3); 0 keeps them all."""
    aligner, _ = model
    query = next(iter(sample[0].values()))
    searcher = AlignerSearcher(compressed_index, aligner, nprobe=16, exact_documents=5)
    everything = AlignerSearcher(compressed_index, aligner, nprobe=16, exact_documents=0)
    default = AlignerSearcher(compressed_index, aligner)
    assert default.exact_documents == (EXACT_DOCUMENTS if searcher.index.candidates.neighbours_are_documents else 0)
    vectors, weights = searcher.encode_queries([query])[0]
    docs = searcher.candidates(vectors, weights)
    assert len(docs) > 12
    short = searcher.shortlist(vectors, weights, docs)
    assert len(short) == 5 and set(short) <= set(docs) and np.all(np.diff(short) > 0)
    rows, lengths = searcher.index.token_rows(docs)
    approx = maxsim_concatenated(searcher.index.codec.approximate_similarities(rows, vectors), weights,
                                 np.asarray(searcher.index.weights[rows], dtype=np.float32), lengths)
    assert sorted(approx[np.isin(docs, short)]) == pytest.approx(sorted(approx)[-5:])
    assert len(searcher.shortlist(vectors, weights, docs, k=12)) == 12
    assert np.array_equal(everything.shortlist(vectors, weights, docs), docs)
    hits = {h.docid for h in searcher.search(query, k=3)}
    assert hits <= {searcher.index.docids[d] for d in short}
    with pytest.raises(ValueError, match="exact_documents"):
        AlignerSearcher(compressed_index, aligner, exact_documents=-1)


def test_pruning_keeps_top_salience_tokens(model, encoded, tmp_path):
    folder = build_index(encoded, tmp_path / "pruned", beta_d=0.4, reduction="prune", duplicate_cosine=None,
                         progress=False)
    index = AlignerIndex.open(folder)
    full_lengths = np.diff(encoded.offsets)
    assert np.diff(index.offsets).tolist() == np.maximum(1, np.ceil(full_lengths * 0.4 - 1e-9)).astype(int).tolist()
    first = slice(encoded.offsets[0], encoded.offsets[1])
    kept_scores = np.sort(np.maximum(encoded.salience_scores[first], 0))[::-1][:np.diff(index.offsets)[0]]
    assert np.allclose(np.sort(np.asarray(index.weights[:index.offsets[1]], dtype=np.float32))[::-1], kept_scores,
                       atol=1e-2)
    assert index.metadata["counts"]["tokens"] < 0.45 * index.metadata["counts"]["tokens_before_pruning"]


def test_pruning_pushes_near_copies_back():
    """A near-copy of a more salient token of its document goes after the distinct tokens; other documents and
    the token budget are unchanged."""
    a, b, c = np.eye(3, dtype=np.float32)
    near_a = (a + 0.1 * b) / np.linalg.norm(a + 0.1 * b)  # cosine 0.995 with a
    vectors = np.stack([a, near_a, c, a, b, c])  # document 0: a, a', c; document 1: a, b, c
    salience = np.array([3.0, 2.0, 1.0, 3.0, 2.0, 1.0], dtype=np.float32)
    offsets = np.array([0, 3, 6])
    assert prune_tokens(offsets, salience, 0.6).tolist() == [0, 1, 3, 4]
    assert prune_tokens(offsets, salience, 0.6, vectors, 0.99).tolist() == [0, 2, 3, 4]
    assert prune_tokens(offsets, salience, 0.6, vectors, 0.999).tolist() == [0, 1, 3, 4]  # not similar enough
    assert prune_tokens(offsets, salience, 1.0, vectors, 0.99).tolist() == list(range(6))
    with pytest.raises(ValueError, match="vectors"):
        prune_tokens(offsets, salience, 0.6, None, 0.99)


def test_pruned_index_with_near_copies_pushed_back(encoded, tmp_path):
    plain = AlignerIndex.open(build_index(encoded, tmp_path / "plain", beta_d=0.4, reduction="prune",
                                          duplicate_cosine=None, progress=False))
    index = AlignerIndex.open(build_index(encoded, tmp_path / "distinct", beta_d=0.4, reduction="prune",
                                          duplicate_cosine=0.9, progress=False))
    assert index.metadata["duplicate_cosine"] == 0.9 and plain.metadata["duplicate_cosine"] is None
    assert np.array_equal(index.offsets, plain.offsets)  # the same number of tokens per document
    vectors = np.asarray(index.codec.decode(np.arange(index.tokens)), dtype=np.float32)
    plain_vectors = np.asarray(plain.codec.decode(np.arange(plain.tokens)), dtype=np.float32)

    def near_copies(v, offsets):
        return sum(int(np.tril(v[s:e] @ v[s:e].T >= 0.9, k=-1).any(axis=1).sum()) for s, e in zip(offsets[:-1],
                                                                                                 offsets[1:]))

    assert near_copies(vectors, index.offsets) < near_copies(plain_vectors, plain.offsets)
    with pytest.raises(ValueError, match="duplicate_cosine"):
        build_index(encoded, tmp_path / "bad", beta_d=0.4, duplicate_cosine=1.5, progress=False)


def test_pooling_merges_similar_tokens():
    """Ward clusters of each document's tokens; a cluster is the salience-weighted mean, normalised, with its most
    salient member's score; a document within its budget is kept as it is."""
    a, b, c = np.eye(3)
    near_a, near_b = (a + 0.1 * b) / np.linalg.norm(a + 0.1 * b), (b + 0.1 * c) / np.linalg.norm(b + 0.1 * c)
    vectors = np.stack([a, near_a, b, near_b, c, a, c]).astype(np.float16)  # document 0: 5 tokens, document 1: 2
    salience = np.array([3.0, 1.0, -1.0, 2.0, 0.5, 1.0, 2.0], dtype=np.float32)
    offsets, pooled, scores = pool_tokens(np.array([0, 5, 7]), vectors, salience, 0.6)
    assert offsets.tolist() == [0, 3, 5] and pooled.dtype == np.float16
    by_score = np.argsort(-scores[:3])
    merged_a = 3 * a + 1 * near_a
    assert scores[:3][by_score].tolist() == [3.0, 2.0, 0.5]
    assert np.allclose(pooled[:3][by_score].astype(np.float32), [merged_a / np.linalg.norm(merged_a), near_b, c],
                       atol=2e-3)  # b has no salience: the b group is near_b
    assert np.array_equal(pooled[3:], vectors[5:]) and scores[3:].tolist() == [1.0, 2.0]
    assert np.allclose(np.linalg.norm(pooled.astype(np.float32), axis=1), 1, atol=1e-3)
    with pytest.raises(ValueError, match="beta_d"):
        pool_tokens(np.array([0, 5, 7]), vectors, salience, 0.0)


def test_pooled_index_keeps_the_budget(encoded, tmp_path):
    index = AlignerIndex.open(build_index(encoded, tmp_path / "pooled", beta_d=0.4, progress=False))
    budget = np.maximum(1, np.ceil(np.diff(encoded.offsets) * 0.4 - 1e-9)).astype(int)
    lengths = np.diff(index.offsets)
    assert np.all(lengths <= budget) and lengths.sum() >= 0.99 * budget.sum()
    assert (index.metadata["reduction"], index.metadata["duplicate_cosine"]) == ("pool", None)
    vectors = np.asarray(index.codec.decode(np.arange(index.tokens)), dtype=np.float32)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=2e-3)
    with pytest.raises(ValueError, match="reduction"):
        build_index(encoded, tmp_path / "bad", beta_d=0.4, reduction="merge", progress=False)


def test_hybrid_searcher_and_pyserini_encoders(model, sample, exact_index, tmp_path):
    from pyserini.encode import document_encoder_class_map, query_encoder_class_map
    from pyserini.search.hybrid import HybridSearcher
    from pyserini.search.lucene import LuceneSearcher
    aligner, folder = model
    queries, _, corpus = sample
    collection = write_json_collection(corpus, tmp_path / "collection").parent
    build_lucene_index(collection, tmp_path / "lucene")
    hybrid = HybridSearcher(AlignerSearcher(exact_index, aligner), LuceneSearcher(str(tmp_path / "lucene")))
    qids = list(queries)[:3]
    fused = hybrid.batch_search([queries[q] for q in qids], qids, k0=20, k=10)
    assert all(len(fused[q]) == 10 and all(h.docid in corpus for h in fused[q]) for q in qids)

    if not torch.cuda.is_available():  # an explicit CUDA device without CUDA is an error, never a silent CPU run
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            document_encoder_class_map["aligner"](model_name=str(folder), device="cuda:0")
    documents = document_encoder_class_map["aligner"](model_name=str(folder), device="cpu")
    pooled = documents.encode(texts=["a cell", "gene therapy"], titles=["", "x"], max_length=64)
    assert pooled.shape == (2, 128) and np.allclose(np.linalg.norm(pooled, axis=1), 1, atol=1e-5)
    query_vector = query_encoder_class_map["aligner"](encoder_dir=str(folder), device="cpu").encode("gene therapy")
    assert query_vector.shape == (128,)


def test_adaptation_picks_the_best_option_on_labelled_queries(model, sample, exact_index, tmp_path):
    aligner, _ = model
    queries, qrels, _ = sample
    labelled = dict(list(queries.items())[:4])
    searcher = AlignerSearcher(exact_index, aligner)
    result = adapt_alignment(searcher, labelled, qrels)
    assert set(result.labelled_ndcg) == {str(o) for o in ALIGNMENT_OPTIONS}
    assert result.labelled_ndcg[str(result.chosen)] == max(result.labelled_ndcg.values())
    # the choice's score is the run file's score
    hits = searcher.batch_search(list(labelled.values()), list(labelled), k=10, alignment=result.chosen)
    run = write_trec_run({q: [(h.docid, h.score) for h in hs] for q, hs in hits.items()}, tmp_path / "run.txt")
    labelled_qrels = write_trec_qrels({q: qrels[q] for q in labelled}, tmp_path / "qrels.txt")
    official = evaluate(labelled_qrels, run, ("ndcg_cut_10",))
    assert official["ndcg_cut_10"] == pytest.approx(result.labelled_ndcg[str(result.chosen)], abs=1e-4)
    with pytest.raises(ValueError, match="at most 8"):
        adapt_alignment(searcher, {str(i): "q" for i in range(9)}, qrels)


# ---- bad input ------------------------------------------------------------------------------------------------
def test_index_built_with_another_model_is_refused(exact_index):
    torch.manual_seed(123)
    other = AlignerModel.from_backbone(backbone_path("splade-tiny"))
    with pytest.raises(AlignerIndexError, match="same AligneR model"):
        AlignerSearcher(exact_index, other)


def test_empty_query_and_empty_documents(model, exact_index, tmp_path):
    aligner, folder = model
    with pytest.raises(ValueError, match="empty query"):
        AlignerSearcher(exact_index, aligner).search("  ")
    encoded = encode_corpus(aligner, {"a": {"title": "", "text": "  "}, "b": {"title": "Cells", "text": "grow"}},
                            progress=False)
    assert encoded.docids == ["b"] and encoded.skipped_empty == ["a"]
    index = AlignerIndex.open(build_index(encoded, tmp_path / "one", progress=False))
    assert index.docids == ["b"] and index.metadata["counts"]["skipped_empty"] == 1
    with pytest.raises(ValueError, match="every document is empty"):
        encode_corpus(aligner, {"a": {"title": "", "text": ""}}, progress=False)


def test_long_documents_are_truncated_and_counted(model, tmp_path):
    aligner, _ = model
    encoded = encode_corpus(aligner, {"long": {"title": "", "text": "protein " * 3000}}, progress=False)
    assert encoded.offsets.tolist() == [0, 128] and encoded.truncated == 1


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "metadata.json").unlink(), "no metadata.json"),
    (lambda f: (f / "metadata.json").write_text("{not json"), "corrupt metadata"),
    (lambda f: (f / "offsets.npy").unlink(), "missing offsets.npy"),
    (lambda f: (f / "vectors.npy").write_bytes((f / "vectors.npy").read_bytes()[:1000]), "vectors.npy"),
    (lambda f: (f / "docids.txt").write_text("only-one\n"), "docids"),
    (lambda f: (f / "codes.npy").unlink(), "missing codes.npy"),
    (lambda f: next(p for p in (f / "candidates.faiss", f / "codec.faiss") if p.exists()).write_bytes(b"garbage"),
     "corrupt Faiss index"),
])
def test_corrupt_or_missing_index_files(exact_index, compressed_index, tmp_path, damage, message):
    source = compressed_index if message in ("missing codes.npy", "corrupt Faiss index") else exact_index
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    damage(copy)
    with pytest.raises(AlignerIndexError, match=message):
        AlignerIndex.open(copy)


def test_failed_build_leaves_nothing_that_opens(encoded, tmp_path):
    target = tmp_path / "broken"
    with pytest.raises(RuntimeError):  # Faiss refuses to train 10**6 lists on a few thousand tokens
        build_index(encoded, target, candidates="ivfpq", nlist=10**6, progress=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(AlignerIndexError, match="no such"):
        AlignerIndex.open(target)
    build_index(encoded, target, progress=False)
    with pytest.raises(FileExistsError, match="overwrite"):
        build_index(encoded, target, progress=False)
    assert json.loads((target / "metadata.json").read_text())["beta_d"] == 1.0


def test_hnsw_candidates_match_exact_search(model, sample, encoded, exact_index, tmp_path):
    aligner, _ = model
    exact = AlignerSearcher(exact_index, aligner)
    hnsw = AlignerSearcher(build_index(encoded, tmp_path / "hnsw", candidates="hnsw", hnsw_m=16, progress=False),
                           aligner)
    overlaps = [len({h.docid for h in exact.search(q, k=10)} & {h.docid for h in hnsw.search(q, k=10)}) / 10
                for q in sample[0].values()]
    assert np.mean(overlaps) >= 0.95  # measured 1.0 (HNSW16, efSearch 256, 256 neighbours per query token)


def test_encoding_cache_round_trip_and_bad_cache(encoded, tmp_path):
    path = encoded.save(tmp_path / "encoded.npz")
    loaded = EncodedCorpus.load(path)
    assert loaded.docids == encoded.docids and loaded.model_info == encoded.model_info
    assert (loaded.vectors == encoded.vectors).all() and (loaded.offsets == encoded.offsets).all()
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(AlignerIndexError, match="delete it to re-encode"):
        EncodedCorpus.load(tmp_path / "bad.npz")

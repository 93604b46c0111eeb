"""AligneR codecs and candidate generators on synthetic token vectors (no model): the interface's contracts."""
from __future__ import annotations

import json

import faiss
import numpy as np
import pytest
from conftest import random_encoding

from pyserini_ext.index.aligner import AlignerIndex, AlignerIndexError, build_index
from pyserini_ext.index.aligner import candidates as aligner_candidates
from pyserini_ext.index.aligner.candidates import CANDIDATES, CentroidCandidates
from pyserini_ext.index.aligner.codecs import CODECS, ResidualPQStore


@pytest.fixture(scope="module")
def encoded():
    return random_encoding(0, shortest=5)


def test_registries_name_every_object():
    assert set(CODECS) == {"float16", "residual-pq"}
    assert set(CANDIDATES) == {"flat", "ivfpq", "hnsw", "centroid"}


def test_centroid_ids_are_the_quantizer_assignments(encoded, tmp_path):
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid",
                                          nlist=16, pq_m=8, train_size=2000, progress=False))
    assert isinstance(index.codec, ResidualPQStore) and isinstance(index.candidates, CentroidCandidates)
    stored = np.load(index.folder / "centroids.npy")  # float16 beside codec.faiss, exactly the centroids used
    assert stored.dtype == np.float16 and np.array_equal(index.codec.centroids(), stored.astype(np.float32))
    decoded = index.codec.decode(np.arange(index.tokens))
    _, assigned = faiss.extract_index_ivf(index.codec.ivfpq).quantizer.search(decoded, 1)
    # the decoded vector is centroid + residual code: its nearest centroid is (almost always) its stored one
    assert np.mean(assigned[:, 0] == index.codec.centroid_ids()) > 0.9
    lists = index.candidates
    for centroid in range(16):  # every (centroid, document) pair of the codes is in the inverted lists
        docs = lists.list_docs[lists.list_offsets[0, centroid]:lists.list_offsets[0, centroid + 1]]  # one segment
        assert set(docs) == set(index.documents_of(np.flatnonzero(index.codec.centroid_ids() == centroid)))
    # every file counts; the centroid lists replace a second index
    assert index.metadata["bytes_per_token"] * index.tokens >= sum(p.stat().st_size for p in index.folder.iterdir())
    assert not (index.folder / "candidates.faiss").exists()


def test_residual_codec_decodes_unit_vectors_closer_to_the_originals(encoded, tmp_path):
    # 8-bit codes: on these random 32-dim vectors 6-bit codes are too coarse for the renormalisation to show
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid",
                                          nlist=16, pq_m=8, pq_bits=8, train_size=2000, progress=False))
    rows = np.arange(index.tokens)
    decoded = index.codec.decode(rows)
    assert np.allclose(np.linalg.norm(decoded, axis=1), 1, atol=1e-5)
    raw = index.codec.ivfpq.sa_decode(np.ascontiguousarray(index.codec.codes[rows]))
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1, atol=1e-2)  # what the renormalisation corrects
    original = np.asarray(encoded.vectors, dtype=np.float32)[rows]  # beta_d = 1: every token, in order
    queries = np.random.default_rng(1).normal(size=(50, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    error = {name: np.abs(queries @ (vectors - original).T).mean() for name, vectors in
             (("renormalised", decoded), ("raw", raw))}
    assert error["renormalised"] < error["raw"]


def test_centroid_candidates_find_the_documents_of_query_tokens(encoded, tmp_path):
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid",
                                          nlist=16, pq_m=8, train_size=2000, progress=False), nprobe=2)
    tokens = np.asarray(encoded.vectors[encoded.offsets[7]:encoded.offsets[7] + 3], dtype=np.float32)
    everything = index.candidates.candidates(tokens, np.ones(3, dtype=np.float32), neighbours=10**6)
    kept = index.candidates.candidates(tokens, np.ones(3, dtype=np.float32), neighbours=5)
    # (random vectors and 16 centroids: the nearest centroid is in nearly every document, so the centroid scores
    # tie and which 5 are kept is arbitrary here; the ranking quality is measured in bench/bench_aligner_search.py)
    assert 7 in everything and len(kept) == 5 and set(kept) <= set(everything)


def test_centroid_candidates_keep_the_best_documents_by_centroid_approximation(encoded, tmp_path):
    """The kept documents are the best by sum_i w_i max(0, max over the document's tokens under a probed centroid
    of q_i . centroid(token)), computed here token by token from the codes (the generator reads only the probed
    lists: PLAID's centroid pruning)."""
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid",
                                          nlist=64, pq_m=8, progress=False), nprobe=4)
    rng = np.random.default_rng(1)
    queries = rng.normal(size=(4, 32)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    weights = np.array([1.0, 0.5, 0.25, 2.0], dtype=np.float32)
    generator = index.candidates
    everything = generator.candidates(queries, weights, neighbours=10**6)
    kept = generator.candidates(queries, weights, neighbours=20)
    assert 20 < len(everything) < len(index) and len(kept) == 20 and set(kept) <= set(everything)
    assert generator.touched == len(everything)
    scores, token_centroids = queries @ generator.centroids.T, index.codec.centroid_ids()
    probed = np.unique(np.argsort(-scores, axis=1)[:, :4])
    token_docs = index.documents_of(np.arange(index.tokens))
    in_probed = np.isin(token_centroids, probed)
    assert set(everything) == set(np.unique(token_docs[in_probed]))  # the documents under the probed lists
    masked = np.where(np.isin(np.arange(scores.shape[1]), probed), np.maximum(scores, 0), 0)
    approx = {d: float(weights @ masked[:, token_centroids[token_docs == d]].max(axis=1)) for d in everything}
    assert sorted((approx[d] for d in kept), reverse=True) == pytest.approx(sorted(approx.values(), reverse=True)[:20])


def test_approximate_similarities_are_the_centroids_inner_products(encoded, tmp_path):
    """Residual codes approximate a token by its centroid (read from the code's first bytes, query-major); a codec
    without an approximation says so, and an index whose flat generator holds decoded vectors does not use one."""
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid",
                                          nlist=16, pq_m=8, train_size=2000, progress=False))
    queries = np.random.default_rng(3).normal(size=(5, 32)).astype(np.float32)
    rows = np.array([3, 0, 3, index.tokens - 1, 40, 41])
    approx = index.codec.approximate_similarities(rows, queries)
    assert approx.shape == (5, 6) and index.approximates
    centroids = index.codec.centroids()[index.codec.centroid_ids(rows)]
    np.testing.assert_allclose(approx, queries @ centroids.T, atol=1e-5)
    similarities, _, mask = index.document_similarities(np.array([0, 2]), queries, approximate=True)
    first = np.arange(index.offsets[2], index.offsets[3])
    np.testing.assert_allclose(similarities[1, :len(first)], index.codec.approximate_similarities(first, queries).T,
                               atol=1e-6)
    exact = AlignerIndex.open(build_index(encoded, tmp_path / "e", progress=False))
    assert not exact.approximates
    with pytest.raises(NotImplementedError, match="float16"):
        exact.codec.approximate_similarities(rows, queries)


@pytest.mark.parametrize("centroid_bytes", [1, 2, 3, 4])
def test_centroid_ids_read_little_endian_bytes(centroid_bytes):
    codes = np.random.default_rng(4).integers(0, 256, size=(9, centroid_bytes + 3), dtype=np.uint8)
    expected = sum(codes[:, b].astype(np.int64) << (8 * b) for b in range(centroid_bytes))
    np.testing.assert_array_equal(ResidualPQStore.centroid_ids_of(codes, centroid_bytes), expected)
    assert ResidualPQStore.centroid_ids_of(codes[:0], centroid_bytes).shape == (0,)


def test_residual_pq_defaults_to_32_six_bit_codes(encoded, tmp_path):
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid",
                                          nlist=16, train_size=2000, progress=False))
    assert (index.metadata["pq_m"], index.metadata["pq_bits"]) == (32, 6)
    assert index.codec.codes.shape == (index.tokens, 1 + 24)  # centroid id + 32 x 6 bits


def test_centroid_candidates_need_the_residual_codec(encoded, tmp_path):
    with pytest.raises(ValueError, match="residual-pq"):
        build_index(encoded, tmp_path / "i", codec="float16", candidates="centroid", progress=False)


@pytest.mark.parametrize("codec", ["float16", "residual-pq"])
def test_document_similarities_are_the_decoded_tokens_inner_products(encoded, tmp_path, codec):
    # what the searcher scores with: the padded [C, L, n] similarities equal decode(rows) @ q, position by position
    options = {"codec": "residual-pq", "candidates": "centroid", "nlist": 16, "pq_m": 8, "train_size": 2000} \
        if codec == "residual-pq" else {}
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", progress=False, **options))
    queries = np.random.default_rng(2).normal(size=(7, 32)).astype(np.float32)
    docs = np.array([5, 0, 299, 17])
    similarities, weights, mask = index.document_similarities(docs, queries)
    lengths = np.diff(index.offsets)[docs]
    assert similarities.shape == (4, lengths.max(), 7) and mask.sum() == lengths.sum()
    for i, doc in enumerate(docs):
        rows = np.arange(index.offsets[doc], index.offsets[doc + 1])
        np.testing.assert_allclose(similarities[i, :lengths[i]], index.codec.decode(rows) @ queries.T, atol=1e-5)
        np.testing.assert_array_equal(weights[i, :lengths[i]], index.weights[rows])
        assert not similarities[i, lengths[i]:].any() and not weights[i, lengths[i]:].any()
    with pytest.raises(ValueError, match="32-dim token vectors"):
        index.document_similarities(docs, queries[:, :16])


@pytest.mark.parametrize("scores_per_block", [64, 1 << 24])
def test_flat_candidates_are_the_documents_of_each_query_tokens_nearest_tokens(encoded, tmp_path, monkeypatch,
                                                                               scores_per_block):
    """Exact: the documents of the 10 highest-scoring stored tokens of each query token, whether the tokens are
    scored in many blocks (64 scores: 21 tokens per block for 3 query tokens, a partial last block) or in one."""
    monkeypatch.setattr(aligner_candidates, "FLAT_SCORES_PER_BLOCK", scores_per_block)
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", progress=False))
    rng = np.random.default_rng(2)
    vectors = index.codec.decode(np.arange(index.tokens))
    for n in (3, 5, 1):
        queries = rng.normal(size=(n, 32)).astype(np.float32)
        nearest = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
        np.testing.assert_array_equal(index.candidates.candidates(queries, np.ones(n, dtype=np.float32), 10),
                                      np.unique(index.documents_of(nearest)))
    everything = index.candidates.candidates(queries, np.ones(1, dtype=np.float32), 10**6)  # k > tokens: all
    assert len(everything) == len(index)


def test_flat_index_scores_documents_from_its_decoded_copy(encoded, tmp_path):
    """The flat generator's float32 copy gives exact scoring the codec's own token similarities."""
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", progress=False))
    assert index.candidates.decoded is not None and index.candidates.decoded.dtype == np.float32
    queries = np.random.default_rng(3).normal(size=(4, 32)).astype(np.float32)
    docs = np.array([0, 7, 123, 299])
    similarities, _, mask = index.document_similarities(docs, queries)
    for row, doc in enumerate(docs):
        tokens = np.arange(index.offsets[doc], index.offsets[doc + 1])
        np.testing.assert_allclose(similarities[row][mask[row]], index.codec.similarities(tokens, queries), rtol=1e-6)


def as_format_1(folder):
    """Rewrite a format-2 centroid index in place as format 1 wrote it: one segment (centroid_offsets [nlist + 1],
    no segments.npy), no recorded search settings."""
    np.save(folder / "centroid_offsets.npy", np.load(folder / "centroid_offsets.npy")[0])
    (folder / "segments.npy").unlink()
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata = {k: v for k, v in metadata.items() if k not in ("search", "settings", "parts")}
    (folder / "metadata.json").write_text(json.dumps({**metadata, "format": "pyserini-ext-aligner-index/1"}))


def test_format_1_and_2_indexes_open_and_find_the_same_candidates(encoded, tmp_path):
    folder = build_index(encoded, tmp_path / "i", codec="residual-pq", candidates="centroid", nlist=16, pq_m=8,
                         train_size=2000, progress=False)
    current = AlignerIndex.open(folder, nprobe=4)
    tokens = np.asarray(encoded.vectors[encoded.offsets[3]:encoded.offsets[3] + 4], dtype=np.float32)
    weights = np.ones(4, dtype=np.float32)
    expected = current.candidates.candidates(tokens, weights, neighbours=20)
    as_format_1(folder)
    old = AlignerIndex.open(folder, nprobe=4)
    assert old.metadata["format"].endswith("/1") and not (folder / "segments.npy").exists()
    assert old.candidates.list_offsets.shape == (1, 17)
    assert np.array_equal(old.candidates.candidates(tokens, weights, neighbours=20), expected)
    assert np.array_equal(old.document_similarities(expected, tokens)[0],
                          current.document_similarities(expected, tokens)[0])
    metadata = old.metadata | {"format": "pyserini-ext-aligner-index/3"}
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(AlignerIndexError, match="index format"):
        AlignerIndex.open(folder)


def test_an_unknown_codec_in_the_metadata_is_named(encoded, tmp_path):
    folder = build_index(encoded, tmp_path / "i", progress=False)
    metadata = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**metadata, "codec": "zstd"}))
    with pytest.raises(AlignerIndexError, match="unknown codec 'zstd'"):
        AlignerIndex.open(folder)


def test_the_index_package_has_no_import_circle():
    """The modules of index/aligner/ import one another (never the package itself), without a circle."""
    import ast
    from pathlib import Path

    import pyserini_ext.index.aligner as package

    folder, prefix = Path(package.__file__).parent, "pyserini_ext.index.aligner"
    graph = {}
    for path in folder.glob("*.py"):
        if path.stem == "__init__":
            continue
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            imported.update(n for n in names if n == prefix or n.startswith(prefix + "."))
        assert prefix not in imported, f"{path.name} imports the package, not a module of it"
        graph[path.stem] = {n.rsplit(".", 1)[1] for n in imported}
    assert {"build", "candidates", "codecs", "encoding", "files", "reader", "reduction", "settings"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join(path + (module,))}"
        if module not in done:
            for target in graph[module]:
                visit(target, path + (module,))
            done.add(module)

    for module in graph:
        visit(module, ())

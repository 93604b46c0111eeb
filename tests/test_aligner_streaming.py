"""The streaming AligneR build (index/aligner/build.py): chunked equals one piece, segments of the centroid lists,
an interrupted build opens nothing and resumes to the same index, the text stream equals the encoding path."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_encoding

from pyserini_ext.index.aligner import (
    AlignerIndex,
    AlignerIndexError,
    AlignerIndexSettings,
    EncodedCorpusBuilder,
    build_aligner_index,
    build_encoded,
    build_index,
    default_nlist,
)
from pyserini_ext.index.aligner import candidates as aligner_candidates
from pyserini_ext.index.aligner import settings as aligner_settings
from pyserini_ext.index.streaming import work_folder
from pyserini_ext.models.aligner import AlignerConfig, AlignerModel
from pyserini_ext.models.backbones import backbone_path

pytestmark = pytest.mark.usefixtures("one_thread")
COMPRESSED = {"codec": "residual-pq", "candidates": "centroid", "nlist": 32, "pq_m": 8, "train_size": 4000}
ARRAYS = ("offsets.npy", "weights.npy", "codes.npy", "centroid_docs.npy", "centroid_offsets.npy", "segments.npy")


@pytest.fixture(scope="module")
def encoded():
    return random_encoding(3, shortest=3)


def same_index(a, b) -> None:
    for name in ARRAYS:
        if (a / name).exists() or (b / name).exists():
            assert np.array_equal(np.load(a / name), np.load(b / name)), name
    assert (a / "docids.txt").read_text() == (b / "docids.txt").read_text()


def queries(n: int = 5, tokens: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(9)
    found = []
    for _ in range(n):
        q = rng.normal(size=(tokens, 32)).astype(np.float32)
        found.append((q / np.linalg.norm(q, axis=1, keepdims=True), rng.uniform(0.5, 2, tokens).astype(np.float32)))
    return found


def test_chunked_build_equals_one_piece(encoded, tmp_path):
    one = build_index(encoded, tmp_path / "one", beta_d=0.5, progress=False, **COMPRESSED)
    chunked = build_index(encoded, tmp_path / "chunked", beta_d=0.5, progress=False, chunk_docs=7, **COMPRESSED)
    same_index(one, chunked)
    assert AlignerIndex.open(chunked).metadata["parts"] == 43
    assert not work_folder(chunked).exists()


def test_segments_of_the_centroid_lists_find_the_same_candidates(encoded, tmp_path, monkeypatch):
    one = AlignerIndex.open(build_index(encoded, tmp_path / "one", progress=False, **COMPRESSED), nprobe=1)
    monkeypatch.setattr(aligner_candidates, "SEGMENT_DOCS", 64)  # parts of 16 documents, 4 per segment
    segmented = AlignerIndex.open(build_index(encoded, tmp_path / "seg", progress=False, chunk_docs=16,
                                              **COMPRESSED), nprobe=1)
    assert segmented.metadata["counts"]["segments"] == 5 and one.metadata["counts"]["segments"] == 1
    assert np.array_equal(np.load(one.folder / "codes.npy"), np.load(segmented.folder / "codes.npy"))
    for q, w in queries():
        everything = one.candidates.candidates(q, w, 10**6)
        assert 10 < len(everything) < len(one)  # a real subset: the probed lists, not every document
        assert np.array_equal(everything, segmented.candidates.candidates(q, w, 10**6))
        assert np.array_equal(one.candidates.candidates(q, w, 20), segmented.candidates.candidates(q, w, 20))


class Interrupted(Exception):
    pass


class FailingBuilder(EncodedCorpusBuilder):
    written: list[str] = []

    def write_part(self, documents, part, prepared):
        if part.name.startswith("00002") and type(self).fail:
            raise Interrupted
        self.written.append(part.name)
        return super().write_part(documents, part, prepared)

    fail = True


def test_interrupted_build_opens_nothing_and_resumes_to_the_same_index(encoded, tmp_path):
    from pyserini_ext.index.streaming import build

    settings = AlignerIndexSettings(beta_d=0.5, **COMPRESSED)
    target = tmp_path / "index"
    documents = [(d, {}) for d in encoded.docids]
    with pytest.raises(Interrupted):
        build(FailingBuilder(encoded, settings), documents, target, chunk_docs=50, progress=False)
    assert not target.exists()
    with pytest.raises(AlignerIndexError):
        AlignerIndex.open(work_folder(target))
    parts = sorted(p.name for p in (work_folder(target) / "parts").iterdir())
    assert parts == ["00000", "00001"]  # the failed part left nothing
    FailingBuilder.fail, FailingBuilder.written = False, []
    build(FailingBuilder(encoded, settings), documents, target, chunk_docs=50, progress=False)
    assert len(FailingBuilder.written) == 4  # parts 0 and 1 were reused
    assert not work_folder(target).exists()
    same_index(target, build_encoded(encoded, tmp_path / "reference", settings, progress=False))
    FailingBuilder.fail = True
    with pytest.raises(AlignerIndexError):
        AlignerIndex.open(tmp_path / "missing")


def test_a_resumed_build_with_other_settings_is_refused(encoded, tmp_path):
    from pyserini_ext.errors import OutputExistsError
    from pyserini_ext.index.streaming import build

    target = tmp_path / "index"
    documents = [(d, {}) for d in encoded.docids]
    with pytest.raises(Interrupted):
        build(FailingBuilder(encoded, AlignerIndexSettings(**COMPRESSED)), documents, target, chunk_docs=50,
              progress=False)
    with pytest.raises(OutputExistsError, match="other settings"):
        build(EncodedCorpusBuilder(encoded, AlignerIndexSettings(beta_d=0.5, **COMPRESSED)), documents, target,
              chunk_docs=50, progress=False)


def test_one_default_path_from_a_few_thousand_documents_up():
    small = AlignerIndexSettings().resolved(2047)
    assert (small.codec, small.candidates) == ("float16", "flat")  # too small to train on; fast exactly
    for documents in (2048, 5_000, 30_000, 1_000_000):
        chosen = AlignerIndexSettings().resolved(documents)
        assert (chosen.codec, chosen.candidates, chosen.pq_bits) == ("residual-pq", "centroid", 6)
    exact = AlignerIndexSettings(codec="float16", candidates="flat").resolved(1_000_000)  # the exact path: an option
    assert (exact.codec, exact.candidates) == ("float16", "flat")
    assert AlignerIndexSettings(candidates="centroid").resolved(100).codec == "residual-pq"
    assert default_nlist(900_000) == 1024  # the figures' corpora keep their lists
    assert default_nlist(12_000_000) == 32768 and default_nlist(264_000_000) == 131072  # PLAID's rule above 2^20
    # ... but a float16 centroid table of at most 2 bytes per token
    assert default_nlist(1_242_251) == 8192 and default_nlist(1_242_251, 32) == 16384


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    torch.manual_seed(0)
    model = AlignerModel.from_backbone(backbone_path("splade-tiny"), AlignerConfig(doc_max_length=64)).eval()
    return model.save_pretrained(tmp_path_factory.mktemp("model") / "aligner")


def test_text_stream_build_equals_the_encoding_path(scifact, model_folder, tmp_path):
    from pyserini_ext.index.aligner import encode_corpus

    corpus = list(scifact.corpus.items())[:40] + [("empty", {"title": "", "text": " "})]
    streamed = build_aligner_index(model_folder, iter(corpus), tmp_path / "streamed",
                                   AlignerIndexSettings(beta_d=0.5), chunk_docs=9, progress=False)
    reference = build_index(encode_corpus(AlignerModel.from_pretrained(model_folder), dict(corpus), progress=False),
                            tmp_path / "reference", beta_d=0.5, progress=False)
    index, expected = AlignerIndex.open(streamed), AlignerIndex.open(reference)
    assert index.docids == expected.docids == [d for d, _ in corpus[:40]]
    assert index.metadata["counts"]["skipped_empty"] == 1
    assert np.array_equal(index.offsets, expected.offsets)
    rows = np.arange(index.tokens)
    assert np.abs(index.codec.decode(rows) - expected.codec.decode(rows)).max() <= 2e-3


def test_large_codecs_store_float16_centroids_and_decode_the_same(encoded, tmp_path, monkeypatch):
    """From TWO_LEVEL_NLIST lists: two-level k-means, an HNSW quantizer while encoding, and centroids stored apart
    as float16 (rounded before any token is encoded, so decoding loses nothing), as every residual-pq index does."""
    monkeypatch.setattr(aligner_settings, "TWO_LEVEL_NLIST", 16)
    index = AlignerIndex.open(build_index(encoded, tmp_path / "i", progress=False, **COMPRESSED))
    assert (index.folder / "centroids.npy").is_file()
    centroids = np.load(index.folder / "centroids.npy")
    assert centroids.dtype == np.float16 and centroids.shape == (32, 32)
    assert np.array_equal(index.codec.centroids(), centroids.astype(np.float32))
    decoded = index.codec.decode(np.arange(index.tokens))
    original = np.asarray(encoded.vectors, dtype=np.float32)
    assert np.mean(np.sum(decoded * original, axis=1)) > 0.9
    _, assigned = index.codec.quantizer.search(decoded, 1)  # (tokens were assigned through HNSW: approximate)
    assert np.mean(assigned[:, 0] == index.codec.centroid_ids()) > 0.8
    for q, w in queries():  # the compact codec serves the centroid stage as the full one does
        assert len(index.candidates.candidates(q, w, 20)) == 20

"""Aggretriever at scale through Pyserini's own tools (issue 45, item 3): `python -m pyserini.encode --shard-id/
--shard-num` with our encoder and `pyserini.index.merge_faiss_indexes` give the one-shard index; the streaming
builder (index/aggretriever.py) writes, part by part, the very bytes Faiss writes (flat: Pyserini's writer; IVF-PQ:
IndexIVF.merge_from of the parts); chunked equals one piece; an interrupted build leaves nothing that opens and
resumes to the same index; the IVF-PQ index opens in the unchanged `python -m pyserini.search.faiss`; ivfpq-refine
(IVF-PQ candidates re-scored from full vectors) is Faiss's IndexRefine, read memory-mapped through Pyserini."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from pyserini_ext.errors import OptionError
from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index.aggretriever import (
    METADATA_FILE,
    AggretrieverIndexBuilder,
    AggretrieverIndexSettings,
    default_nlist,
    default_nprobe,
    empty_refine_index,
)
from pyserini_ext.index.streaming import build, work_folder
from pyserini_ext.integration.search_faiss import read_faiss_index
from pyserini_ext.models.aggretriever import from_masked_lm

# one passage per forward pass: a vector then does not depend on which others share its batch (padding changes
# float rounding), so builds cut into other chunks give the very same bytes
FLAT = AggretrieverIndexSettings(max_length=128, batch_size=1)
IVFPQ = AggretrieverIndexSettings(index_type="ivfpq", max_length=128, batch_size=1, nlist=8, pq_m=96)


@pytest.fixture(scope="module")
def model(tmp_path_factory, splade_tiny_dir, one_thread) -> str:
    """splade-tiny's MLM head as a lexical-only Aggretriever (768 dimensions, the [CLS] part zero)."""
    torch.manual_seed(5)
    folder = tmp_path_factory.mktemp("model") / "agg"
    from_masked_lm(splade_tiny_dir, constant_term_weight=1.0, zero_cls=True).save_pretrained(
        folder, AutoTokenizer.from_pretrained(splade_tiny_dir))
    return str(folder)


@pytest.fixture(scope="module")
def sample(scifact_sample):
    """20 SciFact test queries, and a corpus of their judged passages and others: 300 in all."""
    queries, qrels, corpus = scifact_sample(20, 1000)
    return queries, qrels, list(corpus.items())[:300]


def read_vectors(folder: Path) -> np.ndarray:
    index = faiss.read_index(str(folder / "index"))
    return index.reconstruct_n(0, index.ntotal)


def run_module(module: str, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], check=True, capture_output=True, text=True)


# ---- the Faiss files, written part by part -------------------------------------------------------------------
def write_parts(builder: AggretrieverIndexBuilder, vectors: np.ndarray, sizes: list[int], root: Path) -> list[Path]:
    """Parts as the streaming build leaves them (part.json, docids.txt, the builder's files)."""
    parts, start = [], 0
    for number, size in enumerate(sizes):
        part = root / f"{number:05d}"
        part.mkdir(parents=True)
        info = builder.write_vectors(vectors[start:start + size], part, root / "prepared")
        (part / "part.json").write_text(json.dumps(info))
        (part / "docids.txt").write_text("".join(f"d{i}\n" for i in range(start, start + size)))
        parts.append(part)
        start += size
    return parts


@pytest.mark.parametrize("nlist, documents, codec", [
    (16, 3000, {"index_type": "ivfpq", "pq_m": 8}), (256, 40, {"index_type": "ivfpq", "pq_m": 8}),  # a full and a
    (16, 3000, {"index_type": "ivfsq"}), (256, 40, {"index_type": "ivfsq", "sq_bits": 8}),  # sparse size table
    (16, 3000, {"index_type": "ivfsq", "pca": 40, "rotate": False}),  # uncentred PCA (an IndexPreTransform)
    (16, 300, {"index_type": "ivfsq", "sq_bits": 4, "rotate": False})])  # no transform
def test_streamed_ivf_file_is_what_faiss_merge_writes(tmp_path, one_thread, nlist, documents, codec):
    rng = np.random.default_rng(0)
    training = rng.standard_normal((3000, 48)).astype(np.float32)
    vectors = rng.standard_normal((documents, 48)).astype(np.float32)
    builder = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(nlist=nlist, nprobe=5, **codec))
    (tmp_path / "prepared").mkdir()
    builder.train(training, tmp_path / "prepared", documents)
    sizes = [documents // 3, 0, documents - documents // 3 - 1, 1]
    parts = write_parts(builder, vectors, [s for s in sizes if s], tmp_path)
    out = builder.finalise(parts, tmp_path / "index", tmp_path / "prepared", overwrite=False)

    expected = faiss.read_index(str(tmp_path / "prepared" / "trained.faiss"))
    offset = 0
    for part in parts:
        index = faiss.read_index(str(part / "index.faiss"))
        count = index.ntotal
        faiss.extract_index_ivf(expected).merge_from(faiss.extract_index_ivf(index), offset)  # empties `index`
        offset += count
    expected.ntotal = offset  # a PreTransform's own count (merge_from fills the inner index's)
    assert (out / "index").read_bytes() == faiss.serialize_index(expected).tobytes()
    written = faiss.read_index(str(out / "index"))
    ivf = faiss.extract_index_ivf(written)
    assert (written.ntotal, ivf.nprobe, ivf.nlist, written.d, ivf.d) == (documents, 5, nlist, 48,
                                                                         codec.get("pca") or 48)
    assert (out / "docid").read_text().split() == [f"d{i}" for i in range(documents)]
    metadata = json.loads((out / METADATA_FILE).read_text())
    assert (metadata["documents"], metadata["settings"]["nlist"], metadata["index_type"]) == (documents, nlist,
                                                                                              codec["index_type"])
    # its codes: every vector found near the top of a search for itself
    _, found = written.search(vectors[:20], 10)
    assert np.mean([i in row for i, row in enumerate(found)]) >= 0.8


def test_streamed_flat_and_hnsw_files(tmp_path, one_thread):
    vectors = np.random.default_rng(1).standard_normal((500, 32)).astype(np.float32)
    flat = AggretrieverIndexBuilder("m")
    parts = write_parts(flat, vectors, [123, 300, 77], tmp_path / "flat")
    out = flat.finalise(parts, tmp_path / "flat-index", tmp_path / "prepared", overwrite=False)
    expected = faiss.IndexFlatIP(32)  # what Pyserini's FaissRepresentationWriter holds and writes
    expected.add(vectors)
    assert (out / "index").read_bytes() == faiss.serialize_index(expected).tobytes()

    hnsw = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="hnsw", ef_search=77))
    out = hnsw.finalise(write_parts(hnsw, vectors, [200, 300], tmp_path / "hnsw"), tmp_path / "hnsw-index",
                        tmp_path / "prepared", overwrite=False)
    graph = faiss.read_index(str(out / "index"))
    assert (type(graph).__name__, graph.hnsw.efSearch, graph.ntotal) == ("IndexHNSWFlat", 77, 500)
    _, exact = expected.search(vectors[:50], 10)
    _, approximate = graph.search(vectors[:50], 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, approximate)]) >= 0.9


def test_settings_rules_and_bad_settings():
    assert [default_nlist(n, 65536) for n in (30000, 100000, 300000, 1000000, 8800000)] == [512, 1024, 2048, 4096,
                                                                                          4096]
    assert default_nlist(300, 65536) == 16 and default_nlist(1000000, 1 << 20) == 4096
    assert [default_nprobe(n) for n in (16, 512, 4096)] == [8, 32, 256]
    # ivfsq: sqrt(N) lists, 1/32 of them probed (the MS MARCO-size choice, docs/scale.md)
    ivfsq = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="ivfsq"))
    assert [(s.nlist, s.nprobe) for s in map(ivfsq.resolved, (30000, 1000000, 8800000))] == [(128, 8), (1024, 32),
                                                                                            (4096, 128)]
    with pytest.raises(OptionError, match="ivfsq takes a random rotation or a PCA, not both"):
        AggretrieverIndexSettings(index_type="ivfsq", pca=64)
    with pytest.raises(OptionError, match="sq_bits must be one of 4, 6, 8, 16, got 5"):
        AggretrieverIndexSettings(index_type="ivfsq", sq_bits=5)
    with pytest.raises(OptionError, match="unknown index type 'ivf'"):
        AggretrieverIndexSettings(index_type="ivf")
    builder = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="ivfpq", pq_m=7))
    with pytest.raises(OptionError, match="pq_m 7 does not divide the dimension 48"):
        builder.train(np.zeros((300, 48), np.float32), Path("unused"), 300)
    builder = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="ivfpq", pq_m=8))
    with pytest.raises(OptionError, match="ivfpq needs at least 256 training documents"):
        builder.train(np.zeros((100, 48), np.float32), Path("unused"), 100)


# ---- the builder with a model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flat_one_piece(model, sample, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("flat") / "index"
    return build(AggretrieverIndexBuilder(model, FLAT), sample[2], out, chunk_docs=1000, progress=False)


@pytest.fixture(scope="module")
def ivfpq_one_piece(model, sample, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ivfpq") / "index"
    return build(AggretrieverIndexBuilder(model, IVFPQ), sample[2], out, chunk_docs=1000, progress=False)


def test_chunked_build_is_the_one_piece_index(model, sample, flat_one_piece, tmp_path):
    corpus = sample[2]
    out = build(AggretrieverIndexBuilder(model, FLAT), iter(corpus), tmp_path / "chunked", chunk_docs=7,
                progress=False)
    assert (out / "docid").read_text() == (flat_one_piece / "docid").read_text() == "".join(f"{d}\n"
                                                                                          for d, _ in corpus)
    assert (out / "index").read_bytes() == (flat_one_piece / "index").read_bytes()
    assert not work_folder(out).exists()
    metadata = json.loads((out / METADATA_FILE).read_text())
    assert (metadata["documents"], metadata["parts"], metadata["model"]) == (300, 43, model)
    assert AggretrieverIndexSettings(**metadata["settings"]) == FLAT
    # the vectors are the encoder's (what `pyserini.encode` writes, up to batch padding)
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder

    expected = AggretrieverDocumentEncoder(model).encode([d["text"] for _, d in corpus[:20]],
                                                         titles=[d["title"] for _, d in corpus[:20]], max_length=128)
    assert np.abs(read_vectors(out)[:20] - expected).max() < 1e-5


class FailingBuilder(AggretrieverIndexBuilder):
    """Fails on its chunk 2 (the third), once, and counts the chunks it writes."""
    written: list[str] = []
    fail = True

    def write_part(self, documents, part, prepared):
        FailingBuilder.written.append(documents[0][0])
        if FailingBuilder.fail and len(FailingBuilder.written) == 3:
            raise RuntimeError("disk full")
        return super().write_part(documents, part, prepared)


def test_interrupted_ivfpq_build_leaves_nothing_that_opens_and_resumes(model, sample, ivfpq_one_piece, tmp_path):
    from pyserini.search.faiss import FaissSearcher

    corpus = sample[2]
    out = tmp_path / "index"
    with pytest.raises(RuntimeError, match="disk full"):
        build(FailingBuilder(model, IVFPQ), iter(corpus), out, chunk_docs=70, progress=False)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["index.building"]
    assert not list(work_folder(out).rglob("index")) and not list(work_folder(out).rglob("docid"))
    with pytest.raises(RuntimeError, match="could not open"):
        FaissSearcher(str(work_folder(out)), object())  # what `pyserini.search.faiss --index` would do
    FailingBuilder.fail, FailingBuilder.written = False, []
    build(FailingBuilder(model, IVFPQ), iter(corpus), out, chunk_docs=70, progress=False)
    assert FailingBuilder.written == [corpus[140][0], corpus[210][0], corpus[280][0]]  # chunks 0 and 1 were kept
    assert (out / "index").read_bytes() == (ivfpq_one_piece / "index").read_bytes()
    assert (out / "docid").read_text() == (ivfpq_one_piece / "docid").read_text()
    assert not work_folder(out).exists()


def test_ivfpq_index_opens_in_pyserini_search_faiss_and_finds_flat_hits(model, sample, flat_one_piece,
                                                                         ivfpq_one_piece, tmp_path):
    queries = sample[0]
    index = faiss.read_index(str(ivfpq_one_piece / "index"))
    assert (type(index).__name__, index.nlist, index.nprobe, index.pq.M) == ("IndexIVFPQ", 8, 8, 96)
    overlap = top10_overlap_in_pyserini(ivfpq_one_piece, flat_one_piece, model, queries, tmp_path)
    assert np.mean(overlap) >= 0.7, overlap


def top10_overlap_in_pyserini(index: Path, flat: Path, model, queries: dict[str, str], tmp_path: Path) -> list[float]:
    """Each query's top-10 overlap between the unchanged `python -m pyserini.search.faiss` over `index` and exact
    search over the flat index `flat` (after checking every query got 10 hits)."""
    from pyserini.search.faiss import FaissSearcher

    from pyserini_ext.integration.encoders import AggretrieverQueryEncoder

    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"{q}\t{text}\n" for q, text in queries.items()))
    run_module("pyserini.search.faiss", "--index", index, "--topics", topics, "--encoder", model,
               "--encoder-class", "aggretriever", "--device", "cpu", "--output", tmp_path / "run.txt", "--hits", 10)
    compressed = read_trec_run(tmp_path / "run.txt")
    exact = FaissSearcher(str(flat), AggretrieverQueryEncoder(model))
    assert set(compressed) == set(queries) and all(len(hits) == 10 for hits in compressed.values())
    return [len({d for d, _ in compressed[q]} & {h.docid for h in exact.search(text, 10)}) / 10
            for q, text in queries.items()]


@pytest.fixture(scope="module")
def ivfsq_one_piece(model, sample, tmp_path_factory) -> Path:
    """The MS MARCO-size default (ivfsq: 6 bits, rotated; lists and probes by the corpus size)."""
    out = tmp_path_factory.mktemp("ivfsq") / "index"
    settings = AggretrieverIndexSettings(index_type="ivfsq", max_length=128, batch_size=1)
    return build(AggretrieverIndexBuilder(model, settings), sample[2], out, chunk_docs=100, progress=False)


def test_ivfsq_index_carries_its_settings_and_searches_as_flat_in_pyserini(model, sample, flat_one_piece,
                                                                           ivfsq_one_piece, tmp_path):
    """The compressed index opens in the unchanged `python -m pyserini.search.faiss` with its search settings
    inside (nprobe, the rotation); its top-10 agree with flat search at recall >= 0.8 on 20 SciFact queries (0.84
    measured with this test's lexical-only splade-tiny model: 6-bit codes lose more on its 768 sparse-ish dims than
    on the default model's vectors, 0.96 in docs/scale.md)."""
    queries = sample[0]
    index = faiss.read_index(str(ivfsq_one_piece / "index"))
    ivf = faiss.extract_index_ivf(index)
    assert (type(index).__name__, type(faiss.downcast_VectorTransform(index.chain.at(0))).__name__) == (
        "IndexPreTransform", "RandomRotationMatrix")
    assert (type(faiss.downcast_index(ivf)).__name__, ivf.nlist, ivf.nprobe, ivf.code_size, index.ntotal) == (
        "IndexIVFScalarQuantizer", 16, 8, 768 * 6 // 8, 300)  # sqrt(300) lists, at least 8 probed, 6 bits
    metadata = json.loads((ivfsq_one_piece / METADATA_FILE).read_text())
    assert (metadata["settings"]["nlist"], metadata["settings"]["nprobe"]) == (16, 8)
    overlap = top10_overlap_in_pyserini(ivfsq_one_piece, flat_one_piece, model, queries, tmp_path)
    assert np.mean(overlap) >= 0.8, overlap


def test_pyserini_encode_shards_merge_into_the_one_process_index(model, sample, tmp_path):
    """`pyserini.encode` on 2 shards + `merge_faiss_indexes` = the one-process index (our builder, flat: what
    `pyserini.encode` writes in one shard, the same bytes with the same batches); the merged index searched by the
    unchanged `pyserini.search.faiss`."""
    from pyserini_ext.cli.aggretriever import main as aggretriever_cli

    corpus = sample[2][:41]  # shards of 20 and 21
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, **doc}) + "\n" for d, doc in corpus))
    shards = [subprocess.Popen(  # the two shards at once, as one would run them on two machines
        [sys.executable, "-m", "pyserini.encode", "input", "--corpus", str(path), "--fields", "title", "text",
         "--shard-id", str(shard), "--shard-num", "2", "output", "--embeddings", str(tmp_path / f"shard{shard}"),
         "--to-faiss", "encoder", "--encoder", model, "--encoder-class", "aggretriever", "--fields", "title", "text",
         "--max-length", "128", "--batch-size", "1", "--device", "cpu"], stderr=subprocess.PIPE) for shard in (0, 1)]
    assert [shard.wait() for shard in shards] == [0, 0], [shard.stderr.read()[-2000:] for shard in shards]
    run_module("pyserini.index.merge_faiss_indexes", "--prefix", tmp_path / "shard", "--shard-num", 2,
               "--dimension", 768)
    assert aggretriever_cli(["index", "--model", model, "--corpus", str(path), "--output", str(tmp_path / "one"),
                             "--max-length", "128", "--batch-size", "1", "--chunk-docs", "16"]) == 0
    merged, one = tmp_path / "shardfull", tmp_path / "one"
    assert [len((tmp_path / f"shard{s}" / "docid").read_text().split()) for s in (0, 1)] == [20, 21]
    assert (merged / "docid").read_text() == (one / "docid").read_text() == "".join(f"{d}\n" for d, _ in corpus)
    assert (merged / "index").read_bytes() == (one / "index").read_bytes()

    topics = tmp_path / "topics.tsv"
    titles = {d: doc["title"] for d, doc in corpus[:8]}
    topics.write_text("".join(f"q-{d}\t{title}\n" for d, title in titles.items()))
    run_module("pyserini.search.faiss", "--index", merged, "--topics", topics, "--encoder", model,
               "--encoder-class", "aggretriever", "--device", "cpu", "--output", tmp_path / "run.txt", "--hits", 5)
    run = read_trec_run(tmp_path / "run.txt")
    assert sum(run[f"q-{d}"][0][0] == d for d in titles) >= 6  # a passage's title finds the passage


def test_cli_refuses_ivfpq_on_too_small_a_corpus_before_encoding(model, sample, tmp_path, capsys, monkeypatch):
    from pyserini_ext.cli.__main__ import main as cli

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, **doc}) + "\n" for d, doc in sample[2][:20]))
    monkeypatch.setattr(AggretrieverIndexBuilder, "encode", lambda *args: pytest.fail("encoded before the check"))
    assert cli(["aggretriever", "index", "--model", model, "--corpus", str(path), "--output", str(tmp_path / "i"),
                "--index-type", "ivfpq"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == ("pyserini-ext: error: ivfpq needs at least 256 training documents (256 PQ centroids), the "
                     "corpus gives 20; use --index-type flat, or smaller --nlist")
    assert not (tmp_path / "i").exists()


# ---- ivfpq-refine: IVF-PQ candidates re-scored from memory-mapped full vectors ----------------------------------
def build_refine_from_vectors(vectors: np.ndarray, root: Path, sizes: list[int], **settings) -> Path:
    """An ivfpq-refine index of `vectors` through the builder's train, parts and finalise (no model)."""
    builder = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="ivfpq-refine", **settings))
    (root / "prepared").mkdir(parents=True)
    builder.train(vectors[:3000], root / "prepared", len(vectors))
    parts = write_parts(builder, vectors, sizes, root)
    return builder.finalise(parts, root / "index", root / "prepared", overwrite=False)


@pytest.mark.parametrize("refine, read_as", [("fp16", "IndexRefine"), ("float32", "IndexRefineFlat")])
def test_streamed_refine_file_is_what_faiss_writes_and_keeps_its_search_settings(tmp_path, one_thread, refine,
                                                                                  read_as):
    vectors = np.random.default_rng(2).standard_normal((1000, 48)).astype(np.float32)
    out = build_refine_from_vectors(vectors, tmp_path, [300, 699, 1], nlist=16, nprobe=5, pq_m=8, k_factor=3.5,
                                    refine=refine)
    trained = faiss.read_index(str(tmp_path / "prepared" / "trained.faiss"))
    expected = faiss.IndexRefine(trained, empty_refine_index(refine, 48))  # what Faiss writes holding them all
    expected.k_factor = 3.5
    expected.add(vectors)
    assert (out / "index").read_bytes() == faiss.serialize_index(expected).tobytes()
    # k_factor, nprobe and the rotation survive write / read, by plain faiss.read_index and by ours (mapped)
    for index in (faiss.read_index(str(out / "index")), read_faiss_index(out)):
        base = faiss.downcast_index(index.base_index)
        assert (type(index).__name__, index.k_factor, faiss.extract_index_ivf(index).nprobe, index.ntotal) == (
            read_as, 3.5, 5, 1000)
        assert type(faiss.downcast_VectorTransform(base.chain.at(0))).__name__ == "RandomRotationMatrix"
    metadata = json.loads((out / METADATA_FILE).read_text())
    code_size = {"fp16": 96, "float32": 192}[refine]
    assert metadata["index_bytes"] - metadata["ram_bytes"] == 1000 * code_size  # RAM: all but the refine codes
    assert (metadata["settings"]["pq_m"], metadata["settings"]["k_factor"], metadata["settings"]["nprobe"]) == (
        8, 3.5, 5)


def test_refine_top10_is_exact_search_when_every_candidate_is_rescored(tmp_path, one_thread):
    """k * k_factor re-scored candidates: flat search's top-10 once they cover the neighbours (the IVF-PQ codes
    alone miss some); min_candidates does it for a small k through read_faiss_index (Pyserini's reader)."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((40, 64)).astype(np.float32)
    vectors = centres[rng.integers(0, 40, 4000)] + 0.5 * rng.standard_normal((4000, 64)).astype(np.float32)
    queries = vectors[rng.integers(0, 4000, 30)] + 0.3 * rng.standard_normal((30, 64)).astype(np.float32)
    out = build_refine_from_vectors(vectors, tmp_path, [2000, 2000], nlist=16, nprobe=16, pq_m=8, k_factor=1,
                                    min_candidates=400, refine="float32")
    flat = faiss.IndexFlatIP(64)
    flat.add(vectors)
    _, exact = flat.search(queries, 10)

    def recall(found):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])

    plain = faiss.read_index(str(out / "index"))  # k_factor 1: the PQ top-10, re-ordered
    assert recall(plain.search(queries, 10)[1]) < 0.9
    plain.k_factor = 40
    assert recall(plain.search(queries, 10)[1]) >= 0.99
    ours = read_faiss_index(out)  # k_factor 1, at least 400 candidates
    distances, found = ours.search(queries, 10)
    assert found.shape == (30, 10) and recall(found) >= 0.99
    assert np.allclose(distances, np.take_along_axis(queries @ vectors.T, found, 1), atol=1e-4)  # exact scores


def test_refine_index_is_memory_mapped_through_pyserini(tmp_path, one_thread):
    """FaissSearcher's load_index, patched (pyserini_ext/integration/search_faiss.py), maps the refine vectors:
    the process's own memory grows by far less than their 61 MB, and the refine codes are a view of the file;
    plain faiss.read_index (what Pyserini did) reads them into RAM."""
    vectors = np.random.default_rng(4).standard_normal((20000, 768)).astype(np.float32)
    out = build_refine_from_vectors(vectors, tmp_path, [10000, 10000], nlist=16, pq_m=8, refine="float32")
    refine_mb = 20000 * 768 * 4 / 2**20
    probe = f"""
import faiss, json, sys
from pyserini.search.faiss import FaissSearcher
def anon():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon")) / 1024
before = anon()
if sys.argv[1] == "pyserini":
    index = FaissSearcher({str(out)!r}, object()).index
else:
    index = faiss.read_index({str(out / "index")!r})
hits = index.search(faiss.rand((1, 768)), 10)[1]
print(json.dumps({{"grown_mb": anon() - before, "owned": faiss.downcast_index(index.refine_index).codes.is_owned,
                  "hits": int((hits >= 0).sum())}}))
"""
    found = {mode: json.loads(subprocess.run([sys.executable, "-c", probe, mode], check=True, capture_output=True,
                                             text=True).stdout.splitlines()[-1]) for mode in ("pyserini", "plain")}
    assert (found["pyserini"]["owned"], found["pyserini"]["hits"]) == (False, 10), found
    assert found["pyserini"]["grown_mb"] < refine_mb / 4, found
    assert found["plain"]["owned"] and found["plain"]["grown_mb"] > refine_mb * 0.9, found


def test_refine_bad_settings_are_one_line_option_errors(tmp_path):
    cases = [({"k_factor": 0.5}, "k_factor must be in 1..1000, got 0.5"),
             ({"min_candidates": -1}, "min_candidates must be >= 0 (0: k * k_factor only), got -1"),
             ({"refine": "bf16"}, "refine must be one of fp16, float32, got 'bf16'"),
             ({"pca": 64}, "ivfpq-refine takes a random rotation or a PCA, not both (rotate=False with pca)"),
             ({"pq_m": -8}, "pq_m must be >= 0 (0: the index type's default), got -8")]
    for settings, message in cases:
        with pytest.raises(OptionError) as error:
            AggretrieverIndexSettings(index_type="ivfpq-refine", **settings)
        assert str(error.value) == message and "\n" not in message
    builder = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="ivfpq-refine", pq_m=7))
    with pytest.raises(OptionError, match="^pq_m 7 does not divide the dimension 48$"):
        builder.train(np.zeros((300, 48), np.float32), tmp_path, 300)
    # the defaults by type: PQ64, sqrt(N) lists, 1/4 of them probed, k_factor 4, >= 4,000 candidates (docs/scale.md)
    refine = AggretrieverIndexBuilder("m", AggretrieverIndexSettings(index_type="ivfpq-refine"))
    assert [(s.nlist, s.nprobe, s.pq_m, s.k_factor, s.min_candidates)
            for s in map(refine.resolved, (30000, 1000000))] == [(128, 32, 64, 4.0, 4000), (1024, 256, 64, 4.0, 4000)]


@pytest.fixture(scope="module")
def refine_by_cli(model, sample, tmp_path_factory) -> Path:
    """`pyserini-ext aggretriever index --index-type ivfpq-refine` on the 300 passages (3 parts)."""
    from pyserini_ext.cli.aggretriever import main as aggretriever_cli

    folder = tmp_path_factory.mktemp("refine")
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, **doc}) + "\n" for d, doc in sample[2]))
    assert aggretriever_cli(["index", "--model", model, "--corpus", str(path), "--output", str(folder / "index"),
                             "--max-length", "128", "--batch-size", "1", "--chunk-docs", "100",
                             "--index-type", "ivfpq-refine", "--nlist", "8", "--pq-m", "96", "--k-factor", "2"]) == 0
    return folder / "index"


def test_refine_index_from_the_cli_searches_as_flat_in_pyserini(model, sample, flat_one_piece, refine_by_cli,
                                                                 tmp_path):
    """The unchanged `python -m pyserini.search.faiss --hits 10` over the CLI's ivfpq-refine index: its top-10 are
    flat search's (min_candidates 1,000 re-scores all 300 passages; tolerance 0.02 for float16 rounding at the
    10th place), with the search settings from the index (PQ96, 8 lists all probed, k_factor 2)."""
    index = faiss.read_index(str(refine_by_cli / "index"))
    ivf = faiss.extract_index_ivf(index)
    assert (type(index).__name__, index.k_factor, ivf.nlist, ivf.nprobe, ivf.code_size, index.ntotal) == (
        "IndexRefine", 2.0, 8, 8, 96, 300)
    overlap = top10_overlap_in_pyserini(refine_by_cli, flat_one_piece, model, sample[0], tmp_path)
    assert np.mean(overlap) >= 0.98, overlap


def test_a_large_flat_build_is_warned_of_before_it_starts():
    from pyserini_ext.cli.aggretriever import FLAT_WARN_DOCUMENTS, flat_size_warning

    message = flat_size_warning("flat", 8_841_823)
    assert message.startswith("a flat index of 8,841,823 passages") and "36.2 GB" in message
    assert "ivfpq-refine" in message and "\n" not in message
    assert flat_size_warning("flat", FLAT_WARN_DOCUMENTS) is None  # up to 8 GB: no word
    assert flat_size_warning("ivfpq-refine", 8_841_823) is None and flat_size_warning("flat", None) is None

"""The BEIR loader on the real collections, the cache rules, and the writers."""
from __future__ import annotations

import gzip
import json

import pytest

from pyserini_ext.data import (
    DatasetError,
    data_home,
    load_dataset,
    write_json_collection,
    write_topics,
    write_trec_qrels,
)


def test_scifact_counts_match_the_official_release(scifact):
    assert len(scifact.corpus) == 5183
    assert len(scifact.queries) == 1109
    test, train = scifact.qrels("test"), scifact.qrels("train")
    assert (len(test), sum(map(len, test.values()))) == (300, 339)  # CRLF file with a header
    assert (len(train), sum(map(len, train.values()))) == (809, 919)
    assert len(scifact.split_queries("test")) == 300
    assert scifact.corpus["4983"]["title"].startswith("Microstructural development of human newborn")


def test_dl19_subset_graded_qrels():
    dl19 = load_dataset("msmarco-dl19-subset", download=False)
    qrels = dl19.qrels("test")
    assert len(qrels) == 43 and sum(map(len, qrels.values())) == 4342
    assert {g for docs in qrels.values() for g in docs.values()} == {0, 1, 2, 3}


def _beir_folder(root, corpus_lines, gz=False):
    root.mkdir(parents=True)
    name = "corpus.jsonl.gz" if gz else "corpus.jsonl"
    data = "".join(line + "\n" for line in corpus_lines).encode()
    (root / name).write_bytes(gzip.compress(data) if gz else data)
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "query one"}) + "\n")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\n")
    return root


@pytest.mark.parametrize("gz", [False, True])
def test_plain_and_gzipped_folders_load_alike(tmp_path, gz):
    lines = [json.dumps({"_id": "d1", "title": "T", "text": "caf\u00e9 \u6f22\u5b57 \U0001f642"}), "",
             json.dumps({"_id": 2, "text": "no title"})]
    ds = load_dataset(_beir_folder(tmp_path / "ds", lines, gz))
    assert ds.corpus == {"d1": {"title": "T", "text": "café 漢字 🙂"}, "2": {"title": "", "text": "no title"}}
    assert ds.qrels("test") == {"q1": {"d1": 1}}


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    root = _beir_folder(tmp_path / "bad", [json.dumps({"_id": "d1", "text": "ok"}), '{"_id": "d2", "text": '])
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:2: malformed JSON"):
        _ = load_dataset(root).corpus


def test_record_without_id_is_an_error(tmp_path):
    root = _beir_folder(tmp_path / "noid", [json.dumps({"text": "ok"})])
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:1: record has no '_id'"):
        _ = load_dataset(root).corpus


def test_missing_split_lists_available_ones(scifact):
    with pytest.raises(DatasetError, match="available: test, train"):
        scifact.qrels("dev")


def test_missing_dataset_says_where_to_put_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSERINI_EXT_DATA", str(tmp_path / "cache"))
    assert data_home() == tmp_path / "cache"
    with pytest.raises(DatasetError) as err:
        load_dataset("nfcorpus", download=False)
    assert str(tmp_path / "cache" / "nfcorpus") in str(err.value) and "qrels/<split>.tsv" in str(err.value)


def test_failed_download_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSERINI_EXT_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr("pyserini_ext.data.beir.BEIR_URL", "http://127.0.0.1:9/{name}.zip")  # closed port
    with pytest.raises(DatasetError, match="download from http://127.0.0.1:9/nfcorpus.zip failed"):
        load_dataset("nfcorpus")
    assert not (tmp_path / "cache" / "nfcorpus").exists()


def test_writers_produce_pyserini_formats(tmp_path):
    corpus = {"d1": {"title": "Title", "text": "body text"}, "d2": {"title": "", "text": "only body"}}
    path = write_json_collection(corpus, tmp_path / "coll")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0] == {"id": "d1", "contents": "Title body text", "title": "Title", "text": "body text"}
    assert records[1]["contents"] == "only body"
    topics = write_topics({"q1": "multi\tline\nquery"}, tmp_path / "t.tsv")
    assert topics.read_text() == "q1\tmulti line query\n"
    qrels = write_trec_qrels({"q1": {"d1": 2, "d2": 0}}, tmp_path / "q.txt")
    assert qrels.read_text() == "q1 0 d1 2\nq1 0 d2 0\n"

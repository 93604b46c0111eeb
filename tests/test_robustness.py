"""Issue 8, case by case: bad input gives a clear error (exit code 2, one line) or a correct result, never a
silent wrong result, a traceback or a half-written output. The fuzz suite (test_fuzz_cli.py) generalises these."""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from fuzz_cases import ERROR_LINE, run_cli
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertForTokenClassification

from pyserini_ext.cli.__main__ import main as cli
from pyserini_ext.data import atomic_output, read_corpus, read_topics, sanitize_texts
from pyserini_ext.errors import CacheMismatchError, InputError, ModelFolderError, OptionError, OutputExistsError
from pyserini_ext.integration import arguments
from pyserini_ext.models.aggretriever import Aggretriever, AggretrieverConfig, from_masked_lm
from pyserini_ext.models.aligner import AlignerModel
from pyserini_ext.models.convert import convert_folder
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.models.folder import identify, open_model_folder

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "resources" / "models"
DEEPCT_MODEL = MODELS / "deepct-splade-tiny"
ALIGNER_MODEL = MODELS / "aligner-splade-tiny"
DOCS = [("d1", "Insulin", "insulin resistance in mice"), ("d2", "Bone", "vitamin D and bone density"),
        ("d3", "", "protein folding in cells"), ("d4", "Genes", "gene expression of the liver")]


def write_corpus(path: Path, records: list[dict] | None = None, raw_lines: list[str] | None = None) -> Path:
    records = records if records is not None else [{"_id": d, "title": t, "text": x} for d, t, x in DOCS]
    lines = raw_lines if raw_lines is not None else [json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], errors[0]


def no_leftovers(path: Path) -> bool:
    return not path.exists() and not any(p.name.startswith(f".{path.name}.") for p in path.parent.iterdir())


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory, splade_tiny_dir):
    torch.manual_seed(5)
    folder = tmp_path_factory.mktemp("tiny_mlm")
    BertForMaskedLM(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(splade_tiny_dir).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_aggretriever(tmp_path_factory, tiny_mlm):
    folder = tmp_path_factory.mktemp("agg") / "m"
    from_masked_lm(tiny_mlm, AggretrieverConfig(agg_dim=48, cls_dim=16)).save_pretrained(
        folder, AutoTokenizer.from_pretrained(tiny_mlm))
    return folder


def save_vocab_txt_only(tokenizer_dir: Path, folder: Path) -> None:
    """The published checkpoints' tokenizer layout: vocab.txt and tokenizer_config.json, no tokenizer.json."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.save_pretrained(folder)
    (folder / "tokenizer.json").unlink()
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")


def copy_without(src: Path, dst: Path, *names: str) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*names))
    return dst


# ---- case 1: a model folder without its tokenizer; fingerprints cover the tokenizer --------------------------
def test_model_folder_without_tokenizer_is_refused_for_all_three_models(tmp_path, tiny_aggretriever):
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder

    with pytest.raises(ModelFolderError, match="no tokenizer"):
        DeepCTModel.from_pretrained(copy_without(DEEPCT_MODEL, tmp_path / "deepct", "tokenizer*"))
    with pytest.raises(ModelFolderError, match="no tokenizer"):
        AlignerModel.from_pretrained(copy_without(ALIGNER_MODEL, tmp_path / "aligner", "tokenizer.json"))
    # tokenizer_config.json left behind: transformers would build a vocabulary-less tokenizer of [UNK]s
    with pytest.raises(ModelFolderError, match=r"maps ordinary words to '\[UNK\]'"):
        AggretrieverDocumentEncoder(str(copy_without(tiny_aggretriever, tmp_path / "agg", "tokenizer.json")))


def test_aligner_fingerprint_covers_tokenizer_and_config(tmp_path):
    model = AlignerModel.from_pretrained(ALIGNER_MODEL)
    original = model.fingerprint()
    model.tokenizer.add_tokens(["zzyzx"])  # same weights, another vocabulary
    assert model.fingerprint() != original
    model = AlignerModel.from_pretrained(ALIGNER_MODEL)
    model.config.query_max_length += 1
    assert model.fingerprint() != original
    model.config.query_max_length -= 1
    model.config.backbone = "elsewhere"  # informational only
    assert model.fingerprint() == original


# ---- case 2: a model folder of the wrong kind -----------------------------------------------------------------
def test_deepct_commands_refuse_other_model_kinds(tmp_path, capsys, tiny_aggretriever, deepct_index):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "index"
    code, err = run_cli(["deepct", "index", "--model", str(ALIGNER_MODEL), "--corpus", str(corpus),
                         "--output", str(out)], capsys)
    assert_one_line_error(code, err, "expected a deepct model, found the aligner model folder")
    assert no_leftovers(out)
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tinsulin\n")
    code, err = run_cli(["deepct", "search", "--index", str(deepct_index), "--topics", str(topics), "--output",
                         str(tmp_path / "run.txt"), "--query-model", str(tiny_aggretriever)], capsys)
    assert_one_line_error(code, err, "expected a deepct model, found the aggretriever model folder")
    assert not (tmp_path / "run.txt").exists()
    code, err = run_cli(["lucene", "search", "--index", str(tmp_path), "--topics", str(topics), "--output",
                         str(tmp_path / "run.txt")], capsys)
    assert_one_line_error(code, err, "not a Lucene index")
    with pytest.raises(ModelFolderError, match="expected an aligner model, found the deepct model folder"):
        AlignerModel.from_pretrained(DEEPCT_MODEL)
    with pytest.raises(ModelFolderError, match="expected an aggretriever model, found the deepct model folder"):
        Aggretriever.from_pretrained(DEEPCT_MODEL)


def test_corrupt_weights_are_named(tmp_path):
    for src, load in ((DEEPCT_MODEL, DeepCTModel.from_pretrained), (ALIGNER_MODEL, AlignerModel.from_pretrained)):
        folder = copy_without(src, tmp_path / src.name, "model.safetensors")
        (folder / "model.safetensors").write_bytes(b"\x00" * 64)
        with pytest.raises(ModelFolderError, match="unreadable"):
            load(folder)
    aligner = copy_without(ALIGNER_MODEL, tmp_path / "heads", "aligner_heads.safetensors")
    with pytest.raises(ModelFolderError, match="no such file|unreadable or incomplete"):
        AlignerModel.from_pretrained(aligner)


# ---- published layouts keep loading; old folders of ours convert in one command ------------------------------
def test_published_aggretriever_layout_loads(tmp_path, tiny_mlm):
    """castorini/aggretriever-*: encoder.*/tok_proj.*/cls_proj.* in pytorch_model.bin, vocab.txt, no config of ours."""
    model = from_masked_lm(tiny_mlm, AggretrieverConfig(agg_dim=48, cls_dim=16))
    torch.nn.init.normal_(model.tok_proj.weight)
    folder = tmp_path / "castorini-aggretriever"
    folder.mkdir()
    model.encoder.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    save_vocab_txt_only(tiny_mlm, folder)
    assert identify(folder)[0] == "aggretriever" and open_model_folder(folder, "aggretriever").published
    loaded = Aggretriever.from_pretrained(folder, agg_dim=48)
    ids, mask = torch.tensor([[101, 7592, 2088, 102]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), model(ids, mask))


def test_dhr_training_checkpoint_is_named_with_its_convert_command(tmp_path, tiny_mlm):
    folder = copy_without(tiny_mlm, tmp_path / "dhr")
    for name in ("TermWeightTrans.pt", "pooler.pt"):
        torch.save({"linear_q.weight": torch.zeros(1, 16), "linear_q.bias": torch.zeros(1)}, folder / name)
    with pytest.raises(ModelFolderError, match="castorini/dhr training checkpoint.*pyserini-ext aggretriever convert"):
        Aggretriever.from_pretrained(folder)


def test_published_deepct_layout_loads(tmp_path, splade_tiny_dir):
    """macavaney/deepct: a BERT token classifier with one label, pytorch_model.bin and vocab.txt."""
    torch.manual_seed(2)
    classifier = BertForTokenClassification(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                       intermediate_size=32, num_labels=1)).eval()
    folder = tmp_path / "macavaney-deepct"
    folder.mkdir()
    classifier.config.architectures = ["BertForTokenClassification"]  # as model.save_pretrained records
    classifier.config.save_pretrained(folder)
    torch.save(classifier.state_dict(), folder / "pytorch_model.bin")
    save_vocab_txt_only(splade_tiny_dir, folder)
    assert identify(folder)[0] == "deepct" and not (folder / "model.safetensors").exists()
    model = DeepCTModel.from_pretrained(folder)
    text = "insulin resistance"
    ids = model.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        expected = classifier(**ids).logits[0, 1:-1, 0]
    assert [w for _, w in model.word_weights([text])[0]] == pytest.approx(expected.tolist(), abs=1e-5)


def test_old_aligner_folder_is_named_and_converts_in_one_command(tmp_path):
    folder = copy_without(ALIGNER_MODEL, tmp_path / "old", "aligner_heads.safetensors")
    current = AlignerModel.from_pretrained(ALIGNER_MODEL)
    torch.save({name: getattr(current, name).state_dict() for name in ("projection", "query_salience",
                                                                        "doc_salience")}, folder / "aligner_heads.pt")
    settings = json.loads((folder / "aligner_config.json").read_text())
    settings.pop("model_type")
    (folder / "aligner_config.json").write_text(json.dumps(settings))
    with pytest.raises(ModelFolderError, match=r"old AligneR format.*python -m pyserini_ext.models.convert"):
        AlignerModel.from_pretrained(folder)
    assert convert_folder(folder) == ["aligner_heads.pt -> aligner_heads.safetensors",
                                      "model_type added to aligner_config.json"]
    assert AlignerModel.from_pretrained(folder).fingerprint() == current.fingerprint()
    assert convert_folder(folder) == []


# ---- case 3: ids --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("record,message", [
    ({"title": "t", "text": "x"}, r"corpus.jsonl:2: record has no '_id'"),
    ({"_id": "", "text": "x"}, r"corpus.jsonl:2: empty document id"),
    ({"_id": None, "text": "x"}, r"corpus.jsonl:2: document id None is not a string"),
    ({"_id": "d 9", "text": "x"}, r"corpus.jsonl:2: document id 'd 9' contains ' '"),
    ({"_id": "d\t9", "text": "x"}, r"contains '\\t'"),
    ({"_id": "d\u20289", "text": "x"}, r"contains '\\u2028'"),
    ({"_id": "d\x009", "text": "x"}, r"contains '\\x00'"),
    ({"_id": "d1", "text": "x"}, r"corpus.jsonl:2: duplicate document id 'd1' \(first at .*corpus.jsonl:1\)"),
    ({"_id": "d2", "text": ["x"]}, r"corpus.jsonl:2: field 'text' is a list"),
])
def test_bad_document_ids_name_file_and_line(tmp_path, record, message):
    path = write_corpus(tmp_path / "corpus.jsonl", [{"_id": "d1", "text": "ok"}, record])
    with pytest.raises(InputError, match=message):
        read_corpus(path)


def test_bad_query_ids_and_json_collection_folders(tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tfirst\n\nq1\tagain\n")
    with pytest.raises(InputError, match=r"topics.tsv:3: duplicate query id 'q1' \(first at .*topics.tsv:1\)"):
        read_topics(topics)
    topics.write_text("q1 first\n")
    with pytest.raises(InputError, match="topics.tsv:1: expected `qid<TAB>text`"):
        read_topics(topics)
    collection = tmp_path / "collection"
    collection.mkdir()
    (collection / "a.jsonl").write_text(json.dumps({"id": "x", "contents": "one"}) + "\n")
    (collection / "b.jsonl").write_text(json.dumps({"id": "x", "contents": "two"}) + "\n")
    with pytest.raises(InputError, match=r"b.jsonl:1: duplicate document id 'x' \(first at .*a.jsonl:1\)"):
        read_corpus(collection)
    (collection / "b.jsonl").write_text(json.dumps({"id": 7, "contents": "two"}) + "\n")
    assert read_corpus(collection) == {"x": {"title": "", "text": "one"}, "7": {"title": "", "text": "two"}}


def test_duplicate_ids_stop_every_command_that_reads_a_corpus(tmp_path, capsys):
    beir = tmp_path / "beir"
    beir.mkdir()
    write_corpus(beir / "corpus.jsonl", [{"_id": "d1", "text": "a"}, {"_id": "d1", "text": "b"}])
    write_corpus(beir / "queries.jsonl", [{"_id": "q1", "text": "a"}])
    code, err = run_cli(["data", "export", str(beir), "--output", str(tmp_path / "export")], capsys)
    assert_one_line_error(code, err, "corpus.jsonl:2: duplicate document id 'd1'")
    assert not (tmp_path / "export").exists()
    for group, model in (("deepct", DEEPCT_MODEL), ("aligner", ALIGNER_MODEL)):
        out = tmp_path / f"{group}-index"
        code, err = run_cli([group, "index", "--model", str(model), "--corpus", str(beir / "corpus.jsonl"),
                             "--output", str(out)], capsys)
        assert_one_line_error(code, err, "duplicate document id 'd1'")
        assert no_leftovers(out)


# ---- case 4: encoding caches --------------------------------------------------------------------------------
def test_encoding_cache_from_another_corpus_or_model_is_refused(tmp_path, capsys, one_thread):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    cache = tmp_path / "encoded.npz"
    code, err = run_cli(["aligner", "index", "--model", str(ALIGNER_MODEL), "--corpus", str(corpus), "--encoded",
                         str(cache), "--output", str(tmp_path / "i1")], capsys)
    assert code == 0, err
    other = write_corpus(tmp_path / "other.jsonl", [{"_id": "z", "text": "something else entirely"}])
    code, err = run_cli(["aligner", "index", "--model", str(ALIGNER_MODEL), "--corpus", str(other), "--encoded",
                         str(cache), "--output", str(tmp_path / "i2")], capsys)
    assert_one_line_error(code, err, "encoding cache made from another corpus")
    assert no_leftovers(tmp_path / "i2")
    from pyserini_ext.index.aligner import EncodedCorpus
    model = AlignerModel.from_pretrained(ALIGNER_MODEL)
    torch.nn.init.zeros_(model.projection.bias)
    with pytest.raises(CacheMismatchError, match="made with another model"):
        EncodedCorpus.load(cache).check_matches(cache, model)
    with pytest.raises(CacheMismatchError, match="max length 256, not 64"):
        EncodedCorpus.load(cache).check_matches(cache, AlignerModel.from_pretrained(ALIGNER_MODEL), max_length=64)


# ---- case 5: query length --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deepct_index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deepct")
    corpus = write_corpus(folder / "corpus.jsonl")
    assert cli(["deepct", "index", "--model", str(DEEPCT_MODEL), "--corpus", str(corpus), "--output",
                str(folder / "index")]) == 0
    return folder / "index"


def test_queries_beyond_the_clause_limit_are_cut_not_fatal(tmp_path, capsys, caplog, deepct_index):
    topics = tmp_path / "topics.tsv"
    topics.write_text("long\t" + " ".join(f"w{i}" for i in range(5000)) + " insulin\nshort\tinsulin resistance\n")
    run = tmp_path / "run.txt"
    with caplog.at_level(logging.WARNING):
        code, err = run_cli(["lucene", "search", "--index", str(deepct_index), "--topics", str(topics), "--output",
                             str(run), "--qljm", "--hits", "3"], capsys)
    assert code == 0, err
    assert "dropped 5000 absent from the index" in caplog.text
    lines = [line.split() for line in run.read_text().splitlines()]
    # the one indexed word of the long query comes last and is still searched
    assert ("long", "d1") in [(q, d) for q, _, d, *_ in lines] and ("short", "d1") in [(q, d) for q, _, d, *_ in lines]
    code, err = run_cli(["lucene", "search", "--index", str(deepct_index), "--topics", str(topics), "--output",
                         str(tmp_path / "run0.txt"), "--hits", "0"], capsys)
    assert_one_line_error(code, err, "argument --hits: must be >= 1, got 0")


def test_batch_size_below_one_is_an_error_not_an_empty_index(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    for group, model in (("deepct", DEEPCT_MODEL), ("aligner", ALIGNER_MODEL)):
        out = tmp_path / f"{group}-index"
        code, err = run_cli([group, "index", "--model", str(model), "--corpus", str(corpus), "--output", str(out),
                             "--batch-size", "-1"], capsys)
        assert_one_line_error(code, err, "argument --batch-size: must be >= 1, got -1")
        assert no_leftovers(out)


# ---- case 6: lone surrogates, dimensions ------------------------------------------------------------------
def test_lone_surrogates_are_replaced_and_counted(tmp_path, caplog, tiny_aggretriever):
    from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder

    with caplog.at_level(logging.WARNING):
        assert sanitize_texts(["ok", "bad \ud800 and \udfff", None], "where") == ["ok", "bad \ufffd and \ufffd", ""]
    assert "where: replaced 2 invalid code point(s)" in caplog.text and "in 1 text(s)" in caplog.text
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "title": "\\ud800", "text": "insulin \\udc00"}\n')
    assert read_corpus(corpus) == {"d1": {"title": "\ufffd", "text": "insulin \ufffd"}}
    encoder = AggretrieverDocumentEncoder(str(tiny_aggretriever))
    vectors = encoder.encode(["insulin \ud800 resistance", "bone"], titles=["\udfff", None])
    assert vectors.shape == (2, 64) and np.isfinite(vectors).all()


def test_dimension_mismatches_are_caught_before_pyserini_writes(tmp_path, monkeypatch, tiny_aggretriever):
    """The classes Pyserini builds (through our lazy class in its maps) are checked against its command line; our
    own runtime encoders know nothing of it."""
    from pyserini_ext.encode.aggretriever import AggretrieverEncoder
    from pyserini_ext.integration.encode import our_class

    monkeypatch.setattr(arguments, "_cli_options", {"dimension": 768, "to_faiss": True, "dimension_given": True})
    with pytest.raises(OptionError, match="--dimension 768 does not fit .* 64 dimensions; pass --dimension 64"):
        our_class(str(tiny_aggretriever), "document")(str(tiny_aggretriever))
    assert AggretrieverEncoder(str(tiny_aggretriever)).dim == 64  # the runtime encoder: no check
    import faiss
    index_dir = tmp_path / "faiss"
    index_dir.mkdir()
    faiss.write_index(faiss.IndexFlatIP(32), str(index_dir / "index"))
    monkeypatch.setattr(arguments, "_cli_options", {"index": str(index_dir)})
    with pytest.raises(OptionError, match="holds 32-dimensional vectors, but the aggretriever query encoder "
                                          "gives 64"):
        our_class(str(tiny_aggretriever), "query")(str(tiny_aggretriever))


@pytest.mark.slow
def test_wrong_dimension_through_pyserini_encode_leaves_no_faiss_index(tmp_path, tiny_aggretriever):
    corpus = write_corpus(tmp_path / "corpus.jsonl", [{"id": "d1", "title": "t", "text": "insulin \ud800"}])
    out = tmp_path / "embeddings"
    proc = subprocess.run([sys.executable, "-m", "pyserini.encode", "input", "--corpus", str(corpus), "--fields",
                           "title", "text", "output", "--embeddings", str(out), "--to-faiss", "encoder", "--encoder",
                           str(tiny_aggretriever), "--encoder-class", "aggretriever", "--fields", "title", "text",
                           "--device", "cpu", "--dimension", "768"], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "--dimension 768 does not fit the aggretriever model, whose vectors have 64 dimensions" in proc.stderr
    assert not out.exists()


def pyserini_encode(corpus: Path, out: Path, model: Path, *options: str) -> subprocess.CompletedProcess:
    """The unchanged `python -m pyserini.encode` of `corpus` (title, text) into a Faiss index `out` with `model`."""
    return subprocess.run([sys.executable, "-m", "pyserini.encode", "input", "--corpus", str(corpus), "--fields",
                           "title", "text", "output", "--embeddings", str(out), "--to-faiss", "encoder", "--encoder",
                           str(model), "--encoder-class", "aggretriever", "--fields", "title", "text",
                           "--device", "cpu", *options], capture_output=True, text=True, timeout=600)


def test_pyserini_encode_without_dimension_sizes_the_faiss_index_by_the_model(tmp_path, tiny_aggretriever):
    """Pyserini's `--dimension` default (768) is for its own BERT encoders: without the option the index takes
    the model's width (the default Aggretriever has 1,024 dimensions); with it, a wrong one is still refused."""
    import faiss
    corpus = write_corpus(tmp_path / "corpus.jsonl", [{"id": "d1", "title": "t", "text": "insulin"},
                                                       {"id": "d2", "title": "", "text": "bone"}])
    out = tmp_path / "embeddings"
    proc = pyserini_encode(corpus, out, tiny_aggretriever)
    assert proc.returncode == 0, proc.stderr[-2000:]
    index = faiss.read_index(str(out / "index"))
    assert (index.d, index.ntotal) == (64, 2)


@pytest.mark.slow
def test_lone_surrogate_through_pyserini_encode_gives_a_complete_index(tmp_path, tiny_aggretriever):
    import faiss
    corpus = write_corpus(tmp_path / "corpus.jsonl", [{"id": "d1", "title": "t", "text": "insulin \ud800"},
                                                       {"id": "d2", "title": "", "text": "bone"}])
    out = tmp_path / "embeddings"
    proc = pyserini_encode(corpus, out, tiny_aggretriever, "--dimension", "64")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "replaced 1 invalid code point" in proc.stderr
    assert faiss.read_index(str(out / "index")).ntotal == 2
    assert (out / "docid").read_text().split() == ["d1", "d2"]


# ---- case 7: Ctrl-C / SIGTERM during deepct index --------------------------------------------------------
def _interrupt_deepct_index(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "index"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pyserini_ext.cli", "deepct", "index", "--model",
                             str(DEEPCT_MODEL), "--dataset", "scifact", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 300
    while not (tmp_path / "index.building" / "parts").is_dir():  # the streaming build's work folder
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-2000:] if proc.stderr else ""
        time.sleep(0.2)
    time.sleep(3.0)  # inside the first chunk, the JVM running
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    # no index; only the work folder a rerun resumes from, which holds no complete part and nothing that opens
    assert [p.name for p in tmp_path.iterdir()] == ["index.building"]
    assert not list((tmp_path / "index.building" / "parts").glob("*/part.json"))
    assert not list((tmp_path / "index.building").rglob("deepct_index.json"))


def test_ctrl_c_during_deepct_index_leaves_nothing(tmp_path):
    _interrupt_deepct_index(tmp_path, signal.SIGINT)


@pytest.mark.slow
def test_sigterm_during_deepct_index_leaves_nothing(tmp_path):
    _interrupt_deepct_index(tmp_path, signal.SIGTERM)


# ---- outputs ----------------------------------------------------------------------------------------------
def test_atomic_output_refuses_replaces_and_protects(tmp_path):
    ours = tmp_path / "index"
    with atomic_output(ours) as tmp:
        tmp.mkdir()
        (tmp / "meta.json").write_text("1")
    with pytest.raises(OutputExistsError, match="pass --overwrite"):
        with atomic_output(ours):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_output(ours, overwrite=True, owned=lambda p: (p / "meta.json").is_file()) as tmp:
            tmp.mkdir()
            raise RuntimeError("boom")
    assert (ours / "meta.json").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    with atomic_output(ours, overwrite=True, owned=lambda p: (p / "meta.json").is_file()) as tmp:
        tmp.mkdir()
        (tmp / "meta.json").write_text("2")
    assert (ours / "meta.json").read_text() == "2"
    theirs = tmp_path / "home"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputExistsError, match="not an output of pyserini-ext"):
        with atomic_output(theirs, overwrite=True, owned=lambda p: (p / "meta.json").is_file()):
            pass
    assert (theirs / "thesis.tex").read_text() == "years of work"


def test_overwrite_never_deletes_a_foreign_folder_through_the_cli(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    theirs = tmp_path / "results"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    code, err = run_cli(["deepct", "index", "--model", str(DEEPCT_MODEL), "--corpus", str(corpus), "--output",
                         str(theirs), "--overwrite"], capsys)
    assert_one_line_error(code, err, "not an output of pyserini-ext")
    assert (theirs / "notes.txt").read_text() == "keep me"


# ---- the top-level handler -----------------------------------------------------------------------------
def test_errors_are_one_line_with_exit_code_2_and_tracebacks_on_request(tmp_path):
    argv = [sys.executable, "-m", "pyserini_ext.cli", "data", "export", str(tmp_path / "missing"), "--output",
            str(tmp_path / "out"), "--no-download"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYSERINI_EXT_DEBUG", None)
    plain = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert plain.returncode == 2 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    assert plain.stderr.startswith("pyserini-ext: error: dataset") and "not found" in plain.stderr
    debug = subprocess.run(argv[:3] + ["--debug"] + argv[3:], capture_output=True, text=True, env=env)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "InputError" in debug.stderr
    env_debug = subprocess.run(argv, capture_output=True, text=True, env={**env, "PYSERINI_EXT_DEBUG": "1"})
    assert "Traceback" in env_debug.stderr


def test_demo_without_its_dataset_is_one_line(tmp_path):
    """`make demo` on a machine with neither the dataset nor a network: one line naming the dataset, exit 2."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSERINI_EXT_DATA": str(tmp_path / "data")}
    env.pop("PYSERINI_EXT_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "pyserini_ext.demo", "--dataset", "no-such-dataset", "--workdir",
                           str(tmp_path / "work")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("pyserini-ext: error: dataset 'no-such-dataset' not found")


def test_existing_runs_and_exports_are_refused_without_overwrite(tmp_path, capsys, deepct_index):
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tinsulin resistance\n")
    run = tmp_path / "run.txt"
    run.write_text("an earlier run\n")
    search = ["lucene", "search", "--index", str(deepct_index), "--topics", str(topics), "--output", str(run)]
    code, err = run_cli(search, capsys)
    assert_one_line_error(code, err, "run.txt exists; pass --overwrite to replace it")
    assert run.read_text() == "an earlier run\n"
    code, err = run_cli(search + ["--overwrite"], capsys)
    assert code == 0, err
    assert run.read_text().split()[:3] == ["q1", "Q0", "d1"]
    export = tmp_path / "export"
    export.mkdir()
    (export / "notes.txt").write_text("keep me")
    code, err = run_cli(["data", "export", "cranfield", "--output", str(export), "--overwrite"], capsys)
    assert_one_line_error(code, err, "not an output of pyserini-ext")
    assert (export / "notes.txt").read_text() == "keep me"

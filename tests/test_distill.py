"""The distillation data path: deterministic pseudo-queries, cached teacher scores, and a short run that helps."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from pyserini_ext.data import document_text, write_trec_qrels
from pyserini_ext.evaluation import evaluate, write_trec_run
from pyserini_ext.models.aligner import AlignerConfig
from pyserini_ext.train import distill
from pyserini_ext.train.aggretriever import PART_WEIGHT, _distillation_objective
from pyserini_ext.train.aligner import AlignerModelConfig, batch_scores, train_aligner
from pyserini_ext.train.distill import (
    DistillDataConfig,
    TrainingQuery,
    build_distillation_set,
    distillation_batches,
    distillation_loss,
    listwise_kl,
    margin_mse,
    pseudo_queries,
)
from pyserini_ext.train.loop import TrainConfig

DOCS = 120


@pytest.fixture(scope="module")
def small_task(scifact):
    """120 SciFact passages holding the positives of 40 train queries: 20 labelled for training, 20 held aside."""
    qrels = scifact.qrels("train")
    queries, docids = [], []
    for qid in sorted(qrels, key=int):
        positives = [d for d, rel in qrels[qid].items() if rel > 0]
        queries.append((qid, positives))
        docids += [d for d in positives if d not in docids]
        if len(queries) == 40:
            break
    rng = np.random.default_rng(0)
    others = [d for d in scifact.corpus if d not in docids]
    docids += list(rng.choice(others, DOCS - len(docids), replace=False))
    corpus = {d: scifact.corpus[d] for d in docids}
    labelled = [TrainingQuery(q, scifact.queries[q], "labelled", tuple(p)) for q, p in queries[:20]]
    held_aside = {q: (scifact.queries[q], p) for q, p in queries[20:]}
    return corpus, labelled, held_aside


@pytest.fixture(scope="module")
def distilled_set(small_task, tmp_path_factory, one_thread):
    corpus, labelled, _ = small_task
    config = DistillDataConfig(datasets={}, triples=None, depth=8, passage_max_length=128)
    cache = tmp_path_factory.mktemp("distill-cache")
    data = build_distillation_set(config, cache, corpus_and_queries=(corpus, labelled, sorted(corpus)))
    return config, cache, data


def test_pseudo_queries_are_deterministic_per_passage(scifact):
    docids = sorted(scifact.corpus)[:50]
    corpus = {d: scifact.corpus[d] for d in docids}
    keywords = {d: ["alpha", "beta", "gamma", "delta"] for d in docids}
    first = pseudo_queries(corpus, docids, keywords, seed=7, per_doc=2)
    assert first == pseudo_queries(corpus, docids, keywords, seed=7, per_doc=2)
    assert first != pseudo_queries(corpus, docids, keywords, seed=8, per_doc=2)
    # a passage's queries do not depend on which other passages are in the corpus
    alone = pseudo_queries(corpus, docids[10:11], keywords, seed=7, per_doc=2)
    assert alone == [q for q in first if q.positives == (docids[10],)]
    assert {q.kind for q in first} == {"title", "sentence", "keywords"}
    for query in first:
        doc = corpus[query.positives[0]]
        if query.kind == "title":
            assert query.text == doc["title"].strip()
        elif query.kind == "sentence":
            assert query.text in doc["text"] and 4 <= len(query.text.split()) <= 30
        else:
            assert 2 <= len(query.text.split()) <= 5 and set(query.text.split()) <= set(keywords[docids[0]])


def test_teacher_scores_are_cached_and_reused(small_task, distilled_set, monkeypatch):
    corpus, labelled, _ = small_task
    config, cache, data = distilled_set
    assert len(data.queries) == len(labelled) + sum(q.kind != "labelled" for q in data.queries)
    assert set(data.scores) == {"minilm", "splade", "bm25"}
    for i, query in enumerate(data.queries):
        assert set(query.positives) <= set(data.candidates[i])  # the known positives are always candidates
        assert all(len(data.scores[t][i]) == len(data.candidates[i]) for t in data.scores)
    # the teachers agree with the labels far above chance: MiniLM puts the positive first for most queries
    top1 = np.mean([data.candidates[i][int(np.argmax(data.scores["minilm"][i]))] in q.positives
                    for i, q in enumerate(data.queries) if q.kind == "labelled"])
    assert top1 >= 0.6

    def refuse(*args, **kwargs):
        raise AssertionError("a cached distillation set must not load the teachers again")
    monkeypatch.setattr(distill, "SpladeTeacher", refuse)
    monkeypatch.setattr(distill, "MiniLMTeacher", refuse)
    monkeypatch.setattr(distill, "bm25_rankings", refuse)
    again = build_distillation_set(config, cache, corpus_and_queries=(corpus, labelled, sorted(corpus)))
    assert again.queries == data.queries and again.candidates == data.candidates
    for teacher in data.scores:
        for a, b in zip(again.scores[teacher], data.scores[teacher]):
            np.testing.assert_array_equal(a, b)


def test_ensemble_and_batches(distilled_set):
    _, _, data = distilled_set
    ensemble = data.ensemble({"minilm": 1.0})
    z = (data.scores["minilm"][0] - data.scores["minilm"][0].mean()) / (data.scores["minilm"][0].std() + 1e-6)
    np.testing.assert_allclose(ensemble[0], z, rtol=1e-5)
    batch = next(distillation_batches(data, batch_size=4, group_size=3, seed=1, epoch=0))
    assert len(batch.query_texts) == 4 and len(batch.passage_texts) == 12 and batch.teacher.shape == (4, 3)
    assert torch.all(batch.teacher[:, 0] >= batch.teacher[:, 1:].max(dim=1).values)  # teacher-best first


def test_batches_carry_another_weighting_of_the_same_candidates(distilled_set):
    _, _, data = distilled_set
    lexical = {"splade": 0.7, "bm25": 0.3}
    batch = next(distillation_batches(data, batch_size=4, group_size=3, seed=1, epoch=0))
    again = next(distillation_batches(data, batch_size=4, group_size=3, seed=1, epoch=0,
                                      other_weights={"lexical": lexical}))
    assert again.passage_texts == batch.passage_texts and torch.equal(again.teacher, batch.teacher)
    expected = data.ensemble(lexical)
    for b, query in enumerate(batch.query_texts):
        i = next(k for k, q in enumerate(data.queries) if q.text == query)
        texts = [document_text(data.corpus[d]) for d in data.candidates[i]]
        chosen = [texts.index(t) for t in batch.passage_texts[3 * b:3 * b + 3]]
        np.testing.assert_allclose(again.other_teachers["lexical"][b].numpy(), expected[i][chosen], rtol=1e-6)
    assert not torch.allclose(again.other_teachers["lexical"], again.teacher)


def test_the_lexical_part_can_distil_its_own_teachers(distilled_set):
    _, _, data = distilled_set
    config = TrainConfig(batch_size=4, group_size=3)
    lexical = {"splade": 0.7, "bm25": 0.3}
    make_batches, _, batch_loss, log = _distillation_objective(data, config, 2, lexical)
    batch = next(make_batches(0))
    torch.manual_seed(0)
    queries, passages = torch.randn(4, 5), torch.randn(12, 5)

    def loss(q, p, teacher):
        return distillation_loss(q @ p.T, teacher, config)

    expected = (loss(queries, passages, batch.teacher)
                + PART_WEIGHT * loss(queries[:, 2:], passages[:, 2:], batch.other_teachers["lexical"])
                + PART_WEIGHT * loss(queries[:, :2], passages[:, :2], batch.teacher))
    assert batch_loss(queries, passages, batch).item() == pytest.approx(expected.item(), rel=1e-6)
    assert log["lexical_teacher_weights"] == lexical


def test_losses_vanish_when_the_student_agrees():
    teacher = torch.tensor([[3.0, 1.0, 0.0], [2.0, 2.0, -1.0]])
    assert listwise_kl(teacher.clone(), teacher).item() == pytest.approx(0.0, abs=1e-6)
    assert margin_mse(teacher + 5.0, teacher).item() == pytest.approx(0.0, abs=1e-9)
    assert listwise_kl(-teacher, teacher).item() > 0.5


def ndcg_on_held_aside(model, corpus, held_aside, tmp_path) -> float:
    docids = sorted(corpus)
    texts = [document_text(corpus[d]) for d in docids]
    qids = sorted(held_aside)
    with torch.no_grad():
        scores = torch.cat([batch_scores(model, [held_aside[q][0] for q in qids], texts[i:i + 40])
                            for i in range(0, len(texts), 40)], dim=1)
    run = {q: list(zip(docids, scores[row].tolist())) for row, q in enumerate(qids)}
    qrels = write_trec_qrels({q: {d: 1 for d in held_aside[q][1]} for q in qids}, tmp_path / "qrels.txt")
    return evaluate(qrels, write_trec_run(run, tmp_path / "run.txt"), ("ndcg_cut_10",))["ndcg_cut_10"]


def test_short_distillation_beats_the_untrained_model(small_task, distilled_set, tmp_path):
    corpus, _, held_aside = small_task
    _, _, data = distilled_set
    shape = {"batch_size": 8, "group_size": 4}
    config = TrainConfig(learning_rate=5e-5, head_learning_rate=1e-3, max_steps=40, warmup_ratio=0.1, seed=3, **shape)
    model = AlignerModelConfig("splade-tiny", AlignerConfig(doc_max_length=128))
    trained, losses = train_aligner(model, data, config, tmp_path / "model")
    untrained, _ = train_aligner(model, data, TrainConfig(learning_rate=0.0, head_learning_rate=0.0, max_steps=1,
                                                          seed=3, **shape), tmp_path / "untrained")
    before = ndcg_on_held_aside(untrained, corpus, held_aside, tmp_path)
    after = ndcg_on_held_aside(trained, corpus, held_aside, tmp_path)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    assert after >= before + 0.05, (before, after)


def test_train_command_distils_on_a_dataset_folder(small_task, tmp_path, capsys, one_thread):
    """`deepct train --distill` on a BEIR folder without labels: pseudo-queries and teacher scores, cached."""
    import json

    from pyserini_ext.cli.deepct import main

    corpus, _, _ = small_task
    folder = tmp_path / "mini"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, **doc}) + "\n" for d, doc in corpus.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "unused"}) + "\n")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\t" + next(iter(corpus)) + "\t1\n")
    args = ["train", "--dataset", str(folder), "--model", "splade-tiny", "--distill", "--cache", str(tmp_path / "c"),
            "--max-steps", "3", "--batch-size", "4"]
    assert main(args + ["--output", str(tmp_path / "m1")]) == 0
    log = json.loads((tmp_path / "m1" / "training_log.json").read_text())
    assert log["data"] == "distillation" and len(log["losses"]) == 3
    assert log["training_queries"] == len(corpus)  # one pseudo-query per passage, no labelled split
    cached = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert "encodings" in cached and len(cached) == 2  # the teachers' passages and one scored set
    assert main(args + ["--output", str(tmp_path / "m2")]) == 0  # the second run reuses the scores
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == cached
    assert json.loads((tmp_path / "m2" / "training_log.json").read_text())["losses"] == log["losses"]


def test_make_models_recipe_writes_card_and_log_and_resumes(distilled_set, tmp_path, one_thread):
    """`make models`' train_model: staged then renamed, with model card and log; a rerun resumes the checkpoint."""
    import json

    from pyserini_ext.train.deepct import DeepCTModelConfig
    from pyserini_ext.train.recipes import RECIPES, Recipe, recipe_on, train_model

    _, _, data = distilled_set
    from pyserini_ext.train.recipes import main

    for device in ("cuda:x", "cuda"):
        if device == "cuda" and torch.cuda.is_available():
            continue
        with pytest.raises(SystemExit):  # refused before the distillation set is built
            main(["--device", device, "--work", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    on_cuda = recipe_on("aggretriever", "cuda")
    assert on_cuda.train.device == "cuda" and on_cuda.model == RECIPES["aggretriever"].model
    assert on_cuda.train.precision == "bfloat16"
    assert recipe_on("aggretriever", "cuda", "float32").train.precision == "float32"
    assert on_cuda.train.max_steps == RECIPES["aggretriever"].train.max_steps
    assert RECIPES["aggretriever"].train.device == "cpu"
    recipe = Recipe(DeepCTModelConfig("splade-tiny"), TrainConfig(max_steps=3, batch_size=4))
    output = train_model("deepct", data, tmp_path / "models" / "deepct", tmp_path / "work", recipe)
    log = json.loads((output / "training_log.json").read_text())
    assert len(log["losses"]) == 3 and log["recipe"]["train"]["max_steps"] == 3
    assert log["command"] == "python -m pyserini_ext.train.recipes --only deepct"
    card = (output / "README.md").read_text()
    assert "3 steps" in card and f"{len(data.queries)} training queries" in card and "CPU threads" in card
    assert sorted(p.name for p in output.parent.iterdir()) == ["deepct"]  # no staging folder left
    # the finished checkpoint is what a rerun returns: a learning rate of 0 would give other losses if it retrained
    frozen = Recipe(recipe.model, replace(recipe.train, learning_rate=0.0))
    again = train_model("deepct", data, output, tmp_path / "work", frozen)
    assert json.loads((again / "training_log.json").read_text())["losses"] == log["losses"]


def test_a_bare_bert_body_gets_a_tied_identity_head(minilm_dir):
    """all-MiniLM-L6-v2 has no MLM head: its logits start as LayerNorm(gelu(h)) . word embeddings."""
    from pyserini_ext.models.aggretriever import from_masked_lm

    model = from_masked_lm(minilm_dir)
    head = model.encoder.cls.predictions
    embeddings = model.encoder.get_input_embeddings().weight
    assert head.decoder.weight is embeddings
    hidden = torch.randn(3, embeddings.shape[1])
    expected = torch.nn.functional.layer_norm(torch.nn.functional.gelu(hidden), hidden.shape[-1:], eps=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(model.mlm_head.logits(hidden), expected @ embeddings.T, rtol=1e-4, atol=1e-4)


def semantic_agreement(model, tokenizer, queries: list[str], passages: list[str], target: np.ndarray) -> float:
    """Correlation of the semantic part's query-passage scores with the teacher's cosines (`target`)."""
    with torch.no_grad():
        vectors = []
        for texts, length in ((queries, 32), (passages, 128)):
            inputs = tokenizer(texts, max_length=length, truncation=True, padding=True, return_tensors="pt")
            hidden = model.mlm_head.hidden_states(inputs["input_ids"], inputs["attention_mask"])
            vectors.append(model.dense(inputs["attention_mask"], hidden))
    return float(np.corrcoef((vectors[0] @ vectors[1].T).numpy().ravel(), target.ravel())[0, 1])


@pytest.fixture(scope="module")
def teacher_scores(distilled_set):
    """Some training queries and passages of the distilled set and the MiniLM teacher's cosines between them."""
    from pyserini_ext.train.distill import MiniLMTeacher

    _, _, data = distilled_set
    queries = [query.text for query in data.queries[:30]]
    passages = [document_text(data.corpus[d]) for d in sorted(data.corpus)[:60]]
    teacher = MiniLMTeacher()
    return queries, passages, teacher.encode(queries, 32) @ teacher.encode(passages, 128).T


def test_cls_alignment_brings_the_cls_part_to_the_teacher(distilled_set, teacher_scores, tmp_path):
    """The [CLS] part's query-passage scores agree better with the MiniLM teacher's cosines after alignment."""
    from transformers import AutoTokenizer

    from pyserini_ext.models.backbones import backbone_path
    from pyserini_ext.train.aggretriever import AggretrieverModelConfig, align_cls_to_teacher, load_trainable_model

    _, _, data = distilled_set
    spec = AggretrieverModelConfig("splade-tiny", heads="lexical", cls_alignment_epochs=3)
    model, folder = load_trainable_model(spec)
    tokenizer = AutoTokenizer.from_pretrained(backbone_path("splade-tiny"))
    before = semantic_agreement(model, tokenizer, *teacher_scores)
    config = TrainConfig(learning_rate=1e-4, head_learning_rate=1e-3, warmup_ratio=0.0, seed=3)
    losses = align_cls_to_teacher(model, tokenizer, data, spec, config, checkpoint_dir=tmp_path / "ckpt")
    after = semantic_agreement(model, tokenizer, *teacher_scores)
    assert (tmp_path / "ckpt" / "checkpoint.pt").is_file()
    assert any((tmp_path / "ckpt" / "teacher").glob("minilm-passages-128-*.npz"))
    assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3]), losses
    assert after > before + 0.1, (before, after)


def test_distillation_loss_is_the_concat_plus_half_of_each_part(distilled_set):
    """The listwise stage's loss: the concatenated vector's, plus PART_WEIGHT x each part's, all against the
    teacher ensemble's scores of the batch."""
    from pyserini_ext.train.aggretriever import PART_WEIGHT, _distillation_objective
    from pyserini_ext.train.distill import distillation_loss

    _, _, data = distilled_set
    batch = next(distillation_batches(data, batch_size=4, group_size=3, seed=1, epoch=0))
    config = TrainConfig(batch_size=4, group_size=3)
    generator = torch.Generator().manual_seed(0)
    queries, passages = torch.randn(4, 8, generator=generator), torch.randn(12, 8, generator=generator)
    _, _, batch_loss, log = _distillation_objective(data, config, 3)
    expected = (distillation_loss(queries @ passages.T, batch.teacher, config)
                + PART_WEIGHT * distillation_loss(queries[:, 3:] @ passages[:, 3:].T, batch.teacher, config)
                + PART_WEIGHT * distillation_loss(queries[:, :3] @ passages[:, :3].T, batch.teacher, config))
    assert batch_loss(queries, passages, batch).item() == pytest.approx(expected.item(), rel=1e-6)
    assert log == {"data": "distillation", "training_queries": len(data.queries)}

"""DeepCT unit tests on hand-made examples: targets, masked MSE, sub-word merge, tf rules, save/load."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForTokenClassification

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.deepct import DeepCTModel, pack_windows, split_words
from pyserini_ext.models.deepct_terms import (
    TermFrequencyRule,
    merge_word_weights,
    pseudo_document,
    term_frequency,
    word_term_frequencies,
)
from pyserini_ext.train.deepct import collate, make_examples, masked_mse, term_recall


def test_term_recall_two_queries_one_passage(untrained_deepct):
    corpus = {"d1": {"title": "", "text": "Apple banana cherry, apple."}}
    queries = {"q1": "apple banana", "q2": "APPLE pie"}
    examples = make_examples(untrained_deepct.tokenizer, corpus, queries, {"q1": {"d1": 1}, "q2": {"d1": 2}})
    (example,) = examples
    assert example.words == ["apple", "banana", "cherry", ",", "apple", "."]
    assert example.targets == [1.0, 0.5, 0.0, 0.0, 1.0, 0.0]
    assert term_recall(["x", "y"], [["x"], ["x", "y"], ["z"], ["x"]]) == [0.75, 0.25]


def test_targets_sit_on_first_pieces_only(untrained_deepct):
    corpus = {"d1": {"title": "", "text": "covid19 insulin"}}  # covid19 -> 3 pieces
    (example,) = make_examples(untrained_deepct.tokenizer, corpus, {"q": "covid19"}, {"q": {"d1": 1}})
    batch = collate([example], untrained_deepct.tokenizer.pad_token_id)
    # [CLS] co ##vid ##19 insulin [SEP]
    assert batch["mask"][0].tolist() == [0, 1, 0, 0, 1, 0]
    assert batch["targets"][0].tolist() == [0, 1, 0, 0, 0, 0]
    predictions = torch.tensor([[5.0, 0.5, 9.0, 9.0, 0.25, 7.0]])
    assert masked_mse(predictions, batch["targets"], batch["mask"]).item() == pytest.approx((0.25 + 0.0625) / 2)


def test_passages_cut_at_max_length(untrained_deepct):
    corpus = {"d1": {"title": "", "text": " ".join(["word"] * 300)}}
    (example,) = make_examples(untrained_deepct.tokenizer, corpus, {"q": "word"}, {"q": {"d1": 1}}, max_length=128)
    assert example.inputs["input_ids"].shape == (1, 128) and len(example.targets) == 126


def test_windows_cover_long_texts_without_losing_words(untrained_deepct):
    words = split_words(untrained_deepct.tokenizer, " ".join(f"w{i}" for i in range(200)))
    windows = pack_windows(words, 16)
    assert sum(len(w) for w in windows) == len(words)
    assert all(sum(len(x.piece_ids) for x in w) <= 14 for w in windows)
    assert len(untrained_deepct.word_weights([" ".join(["a"] * 1000)])[0]) == 1000


def test_subword_merge_rules():
    merged = merge_word_weights([("insulin", 0.4), ("mouse", -0.3), ("insulin", 0.9), ("insulin", 0.1), ("a", 0.0)])
    assert merged == {"insulin": 0.9, "mouse": 0.0, "a": 0.0}
    assert word_term_frequencies(merged) == {"insulin": 90}
    assert word_term_frequencies({"x": 0.25}, mode="sqrt") == {"x": 50}
    assert word_term_frequencies({"x": 0.004, "y": 0.005, "z": 0.006}) == {"z": 1}  # round-half-even: 0.5 -> 0
    assert term_frequency(-1.0) == 0
    assert pseudo_document({"b": 2, "a": 1}) == "b b a"
    with pytest.raises(ValueError, match="unknown tf mode"):
        term_frequency(0.5, mode="log")


def test_term_frequency_rules_max_and_sum():
    occurrences = [("insulin", 0.25), ("mouse", -0.3), ("insulin", 0.09), ("a", 0.0), ("insulin", 0.0)]
    assert TermFrequencyRule().term_frequencies(occurrences) == {"insulin": 25}  # the released code's rule
    assert TermFrequencyRule(mode="sqrt").term_frequencies(occurrences) == {"insulin": 50}
    # sum: every occurrence adds its own tf, as a pseudo-document writing each occurrence out would hold
    assert TermFrequencyRule(merge="sum").term_frequencies(occurrences) == {"insulin": 34}
    assert TermFrequencyRule(mode="sqrt", merge="sum").term_frequencies(occurrences) == {"insulin": 80}
    assert TermFrequencyRule(scale=1.0, merge="sum").term_frequencies([("x", 0.4)] * 3) == {}  # each rounds to 0
    rule = TermFrequencyRule(mode="sqrt", merge="sum")
    assert rule.with_overrides(scale=None, mode="linear") == TermFrequencyRule(merge="sum")
    assert TermFrequencyRule.from_settings(None) == TermFrequencyRule()
    for bad, message in (({"merge": "mean"}, "unknown tf merge"), ({"mode": "log"}, "unknown tf mode"),
                         ({"scale": 0}, "scale must be > 0")):
        with pytest.raises(ValueError, match=message):
            TermFrequencyRule(**bad)


def test_first_piece_weight_is_the_word_weight(untrained_deepct):
    text = "covid19 insulin"
    ids = untrained_deepct.tokenizer(text, return_tensors="pt")
    token_weights = untrained_deepct(ids["input_ids"], ids["attention_mask"])[0]
    weights = dict(untrained_deepct.word_weights([text])[0])
    assert weights["covid19"] == pytest.approx(token_weights[1].item(), abs=1e-5)
    assert weights["insulin"] == pytest.approx(token_weights[4].item(), abs=1e-5)


def test_save_load_round_trip_and_token_classification_layout(untrained_deepct, tmp_path):
    untrained_deepct.save_pretrained(tmp_path / "m")
    reloaded = DeepCTModel.from_pretrained(tmp_path / "m")
    text = ["Insulin resistance in mice."]

    def weights(model):
        return dict(model.word_weights(text)[0])

    assert weights(reloaded) == pytest.approx(weights(untrained_deepct))
    hf = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "m"))
    assert hf.config.num_labels == 1
    hf.save_pretrained(str(tmp_path / "hf"))  # a plain 1-label token classifier (no deepct_config.json)
    untrained_deepct.tokenizer.save_pretrained(str(tmp_path / "hf"))
    assert weights(DeepCTModel.from_pretrained(tmp_path / "hf")) == pytest.approx(weights(untrained_deepct))


def test_float16_folder_loads_as_float32(untrained_deepct, tmp_path):
    """A shipped folder may store its weights in float16 (half the bytes); they load back as float32 (transformers
    would keep float16), and the word weights stay within float16 rounding."""
    untrained_deepct.save_pretrained(tmp_path / "full")
    untrained_deepct.save_pretrained(tmp_path / "half", encoder_dtype=torch.float16)
    full, half = ((tmp_path / name / "model.safetensors").stat().st_size for name in ("full", "half"))
    assert 0.45 < half / full < 0.55
    loaded = DeepCTModel.from_pretrained(tmp_path / "half")
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    text = ["Insulin resistance in mice and vitamin D."]
    original, rounded = untrained_deepct.word_weights(text)[0], loaded.word_weights(text)[0]
    assert [w for w, _ in original] == [w for w, _ in rounded]
    differences = [abs(a - b) for (_, a), (_, b) in zip(original, rounded)]
    assert 0 < max(differences) < 5e-3


def test_bad_inputs(untrained_deepct, tmp_path):
    assert untrained_deepct.word_weights(["", "   "]) == [[], []]
    with pytest.raises(ValueError, match="no training examples"):
        make_examples(untrained_deepct.tokenizer, {"d": {"title": "", "text": ""}}, {"q": "x"}, {"q": {"d": 1}})
    with pytest.raises(KeyError, match="not in the corpus"):
        make_examples(untrained_deepct.tokenizer, {}, {"q": "x"}, {"q": {"d": 1}})
    with pytest.raises(ModelFolderError, match="no config.json"):
        DeepCTModel.from_pretrained(tmp_path)

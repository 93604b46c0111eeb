"""Options dataclasses -> flags: one spelling, one default, ranges checked while parsing, for every group."""
from __future__ import annotations

import importlib
import json
import logging
from dataclasses import dataclass

import pytest

from pyserini_ext.cli.__main__ import GROUPS
from pyserini_ext.cli.__main__ import main as cli
from pyserini_ext.cli.options import Command, cap_max_length, command_group, option

DEEPCT_MODEL = "resources/models/deepct-splade-tiny"


def usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as error:
        cli(argv)
    assert error.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["deepct", "train", "--dataset", "scifact", "--output", "m", "--batch-size", "-1"],
     "argument --batch-size: must be >= 1, got -1"),
    (["aligner", "train", "--dataset", "scifact", "--output", "m", "--learning-rate", "-0.1"],
     "argument --learning-rate: must be >= 0.0, got -0.1"),
    (["lucene", "search", "--index", "i", "--topics", "t", "--output", "r", "--hits", "0"],
     "argument --hits: must be >= 1, got 0"),
    (["aligner", "search", "--index", "i", "--dataset", "scifact", "--output", "r", "--hits", "-1"],
     "argument --hits: must be >= 1, got -1"),
    (["lucene", "search", "--index", "i", "--topics", "t", "--output", "r", "--b", "1.5"],
     "argument --b: must be <= 1.0, got 1.5"),
    (["lucene", "search", "--index", "i", "--topics", "t", "--output", "r", "--qld", "--qljm"],
     "give at most one of --bm25, --qld, --qljm"),
    (["deepct", "index", "--model", "m", "--output", "i"], "give exactly one of --dataset or --corpus"),
    (["aligner", "adapt", "--index", "i", "--dataset", "scifact", "--labelled", "9"],
     "argument --labelled: must be <= 8, got 9"),
    (["aggretriever", "train", "--dataset", "scifact", "--output", "m", "--model", "x", "--epochs", "zero"],
     "argument --epochs: expected int, got 'zero'"),
])
def test_bad_numbers_and_combinations_are_refused_while_parsing(argv, message, capsys):
    assert message in usage_error(argv, capsys)


def test_every_command_has_help_with_its_defaults(capsys):
    for group in GROUPS:
        parser = importlib.import_module(f"pyserini_ext.cli.{group}").main.build_parser()
        commands = parser._subparsers._group_actions[0].choices
        assert commands, group
        for name, subparser in commands.items():
            text = subparser.format_help()
            assert "--lr " not in text and "--backbone" not in text, (group, name)  # old spellings stay hidden
    deepct_train = importlib.import_module("pyserini_ext.cli.deepct").main.build_parser()
    help_text = deepct_train._subparsers._group_actions[0].choices["train"].format_help()
    assert "--learning-rate" in help_text and "(default: 0.0001)" in help_text and "--model" in help_text


def test_deprecated_spellings_still_parse():
    parser = importlib.import_module("pyserini_ext.cli.deepct").main.build_parser()
    args = parser.parse_args(["train", "--dataset", "d", "--output", "o", "--backbone", "b", "--lr", "0.5"])
    assert (args.model, args.learning_rate) == ("b", 0.5)
    parser = importlib.import_module("pyserini_ext.cli.aligner").main.build_parser()
    args = parser.parse_args(["adapt", "--index", "i", "--dataset", "d", "--relevance-level", "2"])
    assert args.recall_level == 2


def test_one_vocabulary_and_only_shipped_options(capsys):
    """--precision takes the encoders' dtype names everywhere; experiment-only training flags are gone."""
    from pyserini_ext.cli.options import IndexingOptions
    from pyserini_ext.encode.runtime import PRECISIONS

    precision = next(f for f in IndexingOptions.__dataclass_fields__.values() if f.name == "precision")
    assert tuple(precision.metadata["choices"]) == PRECISIONS
    for flag in ("--cls-alignment-weight", "--cls-alignment-distance", "--part-teachers"):
        assert "unrecognized arguments" in usage_error(["aggretriever", "train", "--dataset", "d", "--output", "o",
                                                        "--model", "m", flag, "1"], capsys)


def test_options_dataclass_drives_the_parser(capsys):
    @dataclass
    class Scale:
        value: float = option(help="a value", min=0.0, max=10.0)
        times: int = option(2, help="repeats", min=1)
        loud: bool = option(False, help="shout")

    main = command_group("demo", None, {"scale": Command("scale a value", Scale, lambda o: print(o) or 3)})
    assert main(["scale", "--value", "2.5", "--loud"]) == 3
    assert capsys.readouterr().out.strip() == "test_options_dataclass_drives_the_parser.<locals>.Scale(value=2.5, " \
                                              "times=2, loud=True)"
    with pytest.raises(SystemExit):
        main(["scale", "--value", "11"])
    assert "argument --value: must be <= 10.0, got 11" in capsys.readouterr().err


def test_max_length_above_the_models_limit_is_capped_with_a_warning(tmp_path, caplog):
    assert cap_max_length(None, 512) is None and cap_max_length(100, 512) == 100
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"insulin resistance case {i}"}) + "\n"
                              for i in range(3)))
    with caplog.at_level(logging.WARNING):
        assert cli(["deepct", "index", "--model", DEEPCT_MODEL, "--corpus", str(corpus), "--output",
                    str(tmp_path / "index"), "--max-length", "100000"]) == 0
    assert "100000 exceeds the model's limit of 512 positions; using 512" in caplog.text
    metadata = json.loads((tmp_path / "index" / "deepct_index.json").read_text())
    assert metadata["max_length"] == 512 and metadata["documents"] == 3


def test_shared_training_defaults_are_the_training_loops():
    from pyserini_ext.cli.options import TrainingOptions
    from pyserini_ext.train.loop import TrainConfig

    options = TrainingOptions(dataset="d", output="o", model="m")
    assert options.train_config() == TrainConfig(max_steps=None)


def test_a_required_flag_can_be_given_by_its_old_spelling(capsys):
    parser = importlib.import_module("pyserini_ext.cli.aggretriever").main.build_parser()
    assert parser.parse_args(["init", "--backbone", "b", "--output", "o"]).model == "b"
    assert "the following arguments are required: --model" in usage_error(["aggretriever", "init", "--output", "o"],
                                                                           capsys)


def test_list_flags_take_several_values_or_repeat(capsys):
    @dataclass
    class Lists:
        weights: list[float] = option(help="one or more numbers", min=0.0)
        split: list[str] | None = option(None, help="repeat for more", repeat=True)

    main = command_group("demo", None, {"lists": Command("lists", Lists, lambda o: print(o.weights, o.split))})
    assert main(["lists", "--weights", "0.3", "0.7", "--split", "test", "--split", "train"]) == 0
    assert capsys.readouterr().out.strip() == "[0.3, 0.7] ['test', 'train']"
    with pytest.raises(SystemExit):
        main(["lists", "--weights", "0.3", "-1"])
    assert "argument --weights: must be >= 0.0, got -1" in capsys.readouterr().err

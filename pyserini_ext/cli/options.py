"""Command options as dataclasses: each field is one flag with its one default, its help and its range.

    @dataclass
    class SearchOptions:
        index: str = option(help="Lucene index folder")                  # required: no default
        hits: int = option(1000, help="hits per query", min=1)

`add_options(parser, SearchOptions)` declares `--index` and `--hits` (underscores become hyphens; a bool
defaulting to False becomes a switch); numbers outside [min, max] are refused while parsing, with the flag's
name, as are the checks of the dataclass's `__post_init__`. `command_group` gives every `pyserini-ext <group>`
the same shape: named commands, each an options dataclass and a function taking the parsed options.

One vocabulary across the commands and the configs behind them (Pyserini's own flags where it has one):
  --precision        float32 | bfloat16 | float16 | int8: torch's dtype names, in encoding, indexing and training
                     (encode.runtime.PRECISIONS; the old training spellings fp32 / bf16 are still read)
  --max-length       the tokens a command encodes each text to, as Pyserini's `encode --max-length`
  --query-max-length / --passage-max-length
                     where a trainer needs both lengths (config fields query_max_length / passage_max_length)
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)
REQUIRED = dataclasses.MISSING


def option(default=REQUIRED, *, help: str = "", min: float | None = None, max: float | None = None,
           choices: Sequence | None = None, flag: str | None = None, aliases: Sequence[str] = (),
           positional: bool = False, repeat: bool = False):
    """A dataclass field that `add_options` turns into one command-line flag (`aliases`: hidden old spellings)."""
    metadata = {"help": help, "min": min, "max": max, "choices": choices, "flag": flag, "aliases": tuple(aliases),
                "positional": positional, "repeat": repeat}
    return dataclasses.field(default=default, metadata=metadata)


def _in_range(kind: type, low: float | None, high: float | None) -> Callable[[str], object]:
    """An argparse `type` that reads a number and refuses it outside [low, high]."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {text}")
        return value

    return parse


def _value_type(annotation) -> tuple[type, bool]:
    """(type of one value, whether the flag takes one or more): int for `int` and `int | None`, (float, True) for
    `list[float]`; str for paths and anything else read as text."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is not list and args:
        annotation = args[0]
    many = typing.get_origin(annotation) is list
    if many:
        annotation = typing.get_args(annotation)[0]
    return (annotation if annotation in (int, float, bool, str) else str), many


def add_options(parser: argparse.ArgumentParser, options: type) -> None:
    """One argument per field of the `options` dataclass (see the module docstring)."""
    hints = typing.get_type_hints(options)
    for field in dataclasses.fields(options):
        meta = field.metadata
        kind, many = _value_type(hints[field.name])
        required = field.default is REQUIRED
        help_text = meta.get("help", "")
        if not required and field.default not in (None, False, "") and not meta.get("repeat"):
            help_text = f"{help_text} (default: {field.default})".strip()
        if meta.get("positional"):
            parser.add_argument(field.name, help=help_text)
            continue
        flag = meta.get("flag") or "--" + field.name.replace("_", "-")
        if kind is bool and field.default is False:
            settings = dict(dest=field.name, action="store_true")
        else:
            settings = dict(dest=field.name, choices=meta.get("choices"), default=None if required else field.default)
            if meta.get("repeat"):
                settings.update(action="append", default=None)
            elif many:  # a repeated flag collects one value per use instead
                settings.update(nargs="+")
            if kind in (int, float):
                settings.update(type=_in_range(kind, meta.get("min"), meta.get("max")),
                                metavar=flag.lstrip("-").replace("-", "_").upper())
        # a required flag with old spellings is checked in from_args: argparse would demand the new one
        parser.add_argument(flag, required=required and not meta.get("aliases"), help=help_text, **settings)
        for alias in meta.get("aliases", ()):  # deprecated spellings: accepted, not shown
            parser.add_argument(alias, help=argparse.SUPPRESS, **settings)


def from_args(options: type, args: argparse.Namespace, parser: argparse.ArgumentParser):
    """The options dataclass from parsed arguments; a failed `__post_init__` check is a usage error."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(options)}
    missing = [f for f in dataclasses.fields(options) if f.default is REQUIRED and values[f.name] is None]
    if missing:
        parser.error("the following arguments are required: "
                     + ", ".join(f.metadata.get("flag") or "--" + f.name.replace("_", "-") for f in missing))
    try:
        return options(**values)
    except ValueError as error:
        parser.error(str(error))


def cap_max_length(requested: int | None, model_limit: int | None, flag: str = "--max-length") -> int | None:
    """`requested`, or the model's position limit when it asks for more (said in a warning, not silently)."""
    if requested is not None and model_limit is not None and requested > model_limit:
        logger.warning("%s %d exceeds the model's limit of %d positions; using %d", flag, requested, model_limit,
                       model_limit)
        return model_limit
    return requested


@dataclass
class TrainingOptions:
    """The flags every `pyserini-ext <model> train` shares; each model's subclass sets its own defaults.

    Each command calls `train_<model>(model config, self.training_data(), self.train_config(), output)`."""
    dataset: str = option(help="BEIR dataset name or folder (pyserini_ext.data.load_dataset)")
    output: str = option(help="model folder to write")
    model: str = option(help="packaged backbone name, model folder or hub name")
    split: str = option("train", help="qrels split to train on (with --distill: labelled pairs mixed in, if any)")
    negatives: str = option("random", choices=("random", "bm25", "none"),
                            help="each query's hard negative with judged pairs: random unjudged, BM25, or none")
    distill: bool = option(False, help="distil the packaged MS MARCO teachers (MiniLM, splade-tiny, BM25) on the "
                                       "dataset's corpus, with pseudo-queries, instead of fitting its qrels")
    distill_passages: int | None = option(None, help="with --distill: passages sampled for pseudo-queries "
                                                     "(default: all)", min=1)
    cache: str = option("runs/distillation", help="with --distill: where teacher scores are cached and reused")
    checkpoints: str | None = option(None, help="checkpoint folder: saved every 100 steps, resumed on restart")
    epochs: int = option(1, help="passes over the training examples", min=1)
    max_steps: int | None = option(None, help="stop after this many optimiser steps", min=1)
    batch_size: int = option(16, help="queries per step", min=1)
    group_size: int = option(4, help="with --distill: candidates per query and step", min=2)
    learning_rate: float = option(5e-5, help="peak AdamW learning rate (of the pretrained body)", min=0.0)
    head_learning_rate: float | None = option(None, help="learning rate of the new heads (default: "
                                                         "--learning-rate)", min=0.0)
    seed: int = option(42, help="seed of initialisation and data order")
    device: str = option("cpu", help="torch device")

    def train_config(self):
        from pyserini_ext.train.loop import TrainConfig

        return TrainConfig(learning_rate=self.learning_rate, head_learning_rate=self.head_learning_rate,
                           batch_size=self.batch_size, epochs=self.epochs, max_steps=self.max_steps,
                           group_size=self.group_size, seed=self.seed, device=self.device)

    def training_data(self):
        """Judged pairs of --split, or with --distill the teacher ensemble over the dataset's corpus."""
        from pyserini_ext.data import load_dataset
        from pyserini_ext.train.data import LabelledData

        dataset = load_dataset(self.dataset)
        if not self.distill:
            return LabelledData.from_dataset(dataset, self.split, self.negatives)
        from pyserini_ext.train.distill import DistillDataConfig, build_distillation_set

        labelled = {self.dataset: self.split} if self.split in dataset.splits() else {}
        config = DistillDataConfig(datasets={self.dataset: self.distill_passages}, labelled_splits=labelled,
                                   seed=self.seed)
        return build_distillation_set(config, self.cache, device=self.device)


@dataclass(kw_only=True)
class IndexingOptions:
    """The flags of every `pyserini-ext <model> index`: a model, a corpus source, an output folder."""
    model: str = option(help="model folder")
    output: str = option(help="index folder to write")
    dataset: str | None = option(None, help="BEIR dataset name or folder (its corpus)")
    corpus: str | None = option(None, help="corpus file or folder")
    batch_size: int = option(32, help="texts per forward pass", min=1)
    device: str = option("cpu", help="torch device")
    backend: str = option("torch", choices=("torch", "onnx"), help="encoder runtime (ONNX Runtime exports the "
                                                                   "model once, next to it)")
    precision: str = option("float32", choices=("float32", "bfloat16", "float16", "int8"),
                            help="bfloat16/float16: torch autocast (float16 on CUDA only); int8: ONNX Runtime "
                                 "dynamic quantisation (CPU)")
    overwrite: bool = option(False, help="replace an existing index folder")
    workers: int = option(1, help="encode on this many Ray actors (one model load each; a local Ray is started "
                                  "unless --ray-address); the index equals the one-process build", min=1)
    ray_address: str | None = option(None, help="join this Ray cluster (`auto`, or ray://HOST:PORT) to encode")
    chunk_docs: int = option(16384, help="documents encoded and written per part of the index (the unit of "
                                         "progress and of resuming)", min=1)
    restart: bool = option(False, help="discard an interrupted build of this output instead of resuming it")

    def documents(self):
        """(the corpus as a stream of (docid, document), its number of documents): never read whole."""
        from pyserini_ext.data import iter_corpus, load_dataset
        from pyserini_ext.index.streaming import corpus_size

        path = self.corpus if self.corpus else load_dataset(self.dataset).corpus_file
        return iter_corpus(path), corpus_size(path)

    def on_ray(self) -> bool:
        return self.workers > 1 or self.ray_address is not None

    def runtime(self):
        from pyserini_ext.encode.runtime import EncoderRuntime

        return EncoderRuntime(self.backend, self.device, self.precision)

    def __post_init__(self):
        if self.dataset is not None and self.corpus is not None:
            raise ValueError("give one of --dataset or --corpus, not both")
        if self.dataset is None and self.corpus is None and not self.has_cached_encoding():
            raise ValueError("give exactly one of --dataset or --corpus")
        try:  # backend, precision and device that cannot go together are usage errors, before any work
            self.runtime()
        except RuntimeError as error:  # CUDA asked for without CUDA
            raise ValueError(str(error)) from None

    def has_cached_encoding(self) -> bool:
        return False


@dataclass(kw_only=True)
class SearchOptions:
    """The flags every searching command shares."""
    index: str = option(help="index folder")
    hits: int = option(1000, help="hits per query", min=1)
    threads: int = option(1, help="CPU threads", min=1)


@dataclass(frozen=True)
class Command:
    help: str
    options: type
    run: Callable[[object], int | None]


def command_group(prog: str, description: str | None, commands: dict[str, Command]
                  ) -> Callable[[list[str] | None], int]:
    """`main(argv)` for a `pyserini-ext <group>`: parse, build the command's options, run it."""
    def build_parser() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=prog, description=description,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        sub = parser.add_subparsers(dest="command", required=True)
        for name, command in commands.items():
            add_options(sub.add_parser(name, help=command.help, description=command.help), command.options)
        return parser

    def main(argv: list[str] | None = None) -> int:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        parser = build_parser()
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        command = commands[args.command]
        subparser = parser._subparsers._group_actions[0].choices[args.command]
        return command.run(from_args(command.options, args, subparser)) or 0

    main.build_parser = build_parser
    return main

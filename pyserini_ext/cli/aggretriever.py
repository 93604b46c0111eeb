"""`pyserini-ext aggretriever init|convert|train`: make Pyserini-format Aggretriever folders."""
from __future__ import annotations

from dataclasses import dataclass

from pyserini_ext.cli.options import Command, TrainingOptions, command_group, option
from pyserini_ext.models.aggretriever import POOLINGS, AggretrieverConfig
from pyserini_ext.models.backbones import BACKBONES
from pyserini_ext.train.aggretriever import HEAD_INITS, PASSAGE_MAX_LENGTH, QUERY_MAX_LENGTH

_DEFAULTS = AggretrieverConfig()


@dataclass
class AggretrieverInitOptions:
    model: str = option(help=f"folder, hub name, or a packaged backbone: {', '.join(BACKBONES)}",
                        aliases=["--backbone"])
    output: str = option(help="Aggretriever folder to write")
    agg_dim: int = option(_DEFAULTS.agg_dim, help="dimensions of the aggregated lexical part", min=1)
    cls_dim: int = option(_DEFAULTS.cls_dim, help="dimensions of the [CLS] part", min=0)
    pooling: str = option(_DEFAULTS.pooling, choices=POOLINGS, help="lexical pooling")
    lexical_only: bool = option(False, help="term weight fixed to 1 and [CLS] projection zeroed: pure MLM lexical "
                                            "matching")


@dataclass
class AggretrieverConvertOptions:
    input: str = option(help="castorini/dhr training-repo checkpoint folder")
    output: str = option(help="Aggretriever folder to write")


@dataclass(kw_only=True)
class AggretrieverTrainOptions(TrainingOptions):
    model: str = option(help=f"masked-LM backbone (folder, hub name, or {', '.join(BACKBONES)}) for new heads, "
                             "or an Aggretriever folder to train further")
    batch_size: int = option(8, help="queries per step", min=2)
    heads: str = option("random", choices=HEAD_INITS, help="new heads: random, or lexical (term weight 1, small "
                                                           "[CLS] projection: ranks like the backbone from step 0)")
    query_max_length: int = option(QUERY_MAX_LENGTH, help="query tokens", min=1)
    passage_max_length: int = option(PASSAGE_MAX_LENGTH, help="passage tokens", min=1)


def init(options: AggretrieverInitOptions) -> None:
    from transformers import AutoTokenizer

    from pyserini_ext.models.aggretriever import from_masked_lm, resolve_model_folder
    from pyserini_ext.models.backbones import backbone_path

    folder = backbone_path(options.model) if options.model in BACKBONES else resolve_model_folder(options.model)
    config = AggretrieverConfig(agg_dim=options.agg_dim, cls_dim=options.cls_dim, pooling=options.pooling)
    model = from_masked_lm(folder, config, constant_term_weight=1.0 if options.lexical_only else None,
                           zero_cls=options.lexical_only)
    print(f"wrote {model.save_pretrained(options.output, AutoTokenizer.from_pretrained(folder))}")


def convert(options: AggretrieverConvertOptions) -> None:
    from pyserini_ext.models.aggretriever import convert_training_checkpoint

    print(f"wrote {convert_training_checkpoint(options.input, options.output)}")


def train(options: AggretrieverTrainOptions) -> None:
    from pyserini_ext.train.aggretriever import AggretrieverModelConfig, train_aggretriever

    model = AggretrieverModelConfig(options.model, heads=options.heads, query_max_length=options.query_max_length,
                                    passage_max_length=options.passage_max_length)
    _, losses = train_aggretriever(model, options.training_data(), options.train_config(), options.output,
                                   checkpoint_dir=options.checkpoints)
    print(f"loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f} ({len(losses)} steps)")
    print(f"wrote {options.output}")


main = command_group("pyserini-ext aggretriever", __doc__, {
    "init": Command("new Aggretriever heads on a masked-LM backbone", AggretrieverInitOptions, init),
    "convert": Command("castorini/dhr training-repo checkpoint -> Pyserini format", AggretrieverConvertOptions,
                       convert),
    "train": Command("train on a BEIR dataset's qrels, or distil the packaged teachers on its corpus",
                     AggretrieverTrainOptions,
                     train),
})

"""`pyserini-ext aggretriever init|convert|train|index`: make Pyserini-format Aggretriever folders, and encode a
corpus into a Pyserini Faiss index, flat, IVF-SQ, IVF-PQ (optionally re-scored from memory-mapped full vectors) or
HNSW, streamed in chunks (in this process or on Ray workers:
`--workers N [--ray-address auto]`)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from pyserini_ext.cli.options import Command, IndexingOptions, TrainingOptions, command_group, option
from pyserini_ext.data import check_output
from pyserini_ext.encode.aggretriever import DOCUMENT_MAX_LENGTH
from pyserini_ext.index.aggretriever import (
    DEFAULT_PQ_M,
    INDEX_TYPES,
    REFINE_CODECS,
    AggretrieverIndexSettings,
)
from pyserini_ext.models.aggretriever import DENSE_POOLINGS, POOLINGS, AggretrieverConfig
from pyserini_ext.models.backbones import BACKBONES
from pyserini_ext.models.folder import resolve_model
from pyserini_ext.train.aggretriever import HEAD_INITS, PASSAGE_MAX_LENGTH, QUERY_MAX_LENGTH

logger = logging.getLogger(__name__)
# above this many passages a flat index (4 GB a million at 1,024 dimensions) is said to outgrow common RAM
FLAT_WARN_DOCUMENTS = 2_000_000

_DEFAULTS = AggretrieverConfig()
_INDEX_DEFAULTS = AggretrieverIndexSettings()


@dataclass
class AggretrieverInitOptions:
    model: str = option(help=f"folder, hub name, or a packaged backbone: {', '.join(BACKBONES)}",
                        aliases=["--backbone"])
    output: str = option(help="Aggretriever folder to write")
    agg_dim: int = option(_DEFAULTS.agg_dim, help="dimensions of the aggregated lexical part", min=1)
    cls_dim: int = option(_DEFAULTS.cls_dim, help="dimensions of the [CLS] part", min=0)
    pooling: str = option(_DEFAULTS.pooling, choices=POOLINGS, help="lexical pooling")
    dense_pooling: str = option(_DEFAULTS.dense_pooling, choices=DENSE_POOLINGS,
                                help="what the semantic part projects: the [CLS] state (the paper) or the mean state "
                                     "(for a body trained with mean pooling)")
    lexical_only: bool = option(False, help="term weight fixed to 1 and [CLS] projection zeroed: pure MLM lexical "
                                            "matching")
    full_width: bool = option(False, help="the default model's layout: the semantic part is the body's "
                                          "L2-normalised mean state at the body's width through an identity "
                                          "projection (sets --cls-dim and --dense-pooling)")
    semantic_scale: float = option(1.0, help="with --full-width: the identity projection's scale (the semantic "
                                             "part's weight against the lexical part)")


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
    cls_alignment_epochs: int = option(0, help="with --distill: passes regressing the [CLS] part onto the MiniLM "
                                                "teacher's vectors first (for a mean-pooling body such as "
                                                "all-minilm-l6-v2)", min=0)
    freeze_body: bool = option(False, help="train the heads only (MLM head transform and bias, term weights, "
                                           "[CLS] projection): the body keeps its own sentence vectors")
    semantic_scale: float | None = option(None, help="a full-width model's identity semantic projection, frozen at "
                                                     "this scale in training (the default model: 2.5)")
    saved_semantic_scale: float | None = option(None, help="with --semantic-scale: the scale written into the "
                                                           "output (the parts' balance; the default model: 5)")


@dataclass(kw_only=True)
class AggretrieverIndexOptions(IndexingOptions):
    model: str = option(help="Aggretriever model: `aggretriever` (the shipped one), a folder or a hub name")
    max_length: int = option(DOCUMENT_MAX_LENGTH, help="passage tokens", min=2)
    index_type: str = option("flat", choices=INDEX_TYPES,
                             help="flat: exact, what `pyserini.encode --to-faiss` writes (4 KB per passage); ivfsq: "
                                  "IVF with --sq-bits per dimension (4: 1/8 of flat), trained on the first "
                                  "--train-docs passages; ivfpq: IVF with product-quantised codes (--pq-m bytes per "
                                  "passage); ivfpq-refine: IVF-PQ candidates re-scored from the full vectors, which "
                                  "search memory-maps (RAM: the PQ codes; disk: + 2 KB per passage; docs/scale.md: "
                                  "the MS MARCO-size choice); hnsw: a graph over the exact vectors (held "
                                  "in RAM to build)")
    nlist: int = option(0, help="IVF inverted lists (0: the power of two nearest 4*sqrt(passages), ivfsq and "
                                "ivfpq-refine sqrt(passages))", min=0)
    nprobe: int = option(0, help="IVF lists searched per query, stored in the index (0: nlist/16, ivfsq nlist/32, "
                                 "ivfpq-refine nlist/4; at least 8)", min=0)
    pq_m: int = option(_INDEX_DEFAULTS.pq_m, help="ivfpq/ivfpq-refine bytes per passage (sub-quantizers; divides the "
                                                  "dimension; 0: " + ", ".join(f"{t} {m}" for t, m in
                                                                               DEFAULT_PQ_M.items()) + ")", min=0)
    k_factor: float = option(_INDEX_DEFAULTS.k_factor,
                             help="ivfpq-refine: k * k_factor IVF-PQ candidates re-scored for k hits, stored in the "
                                  "index (4: Pyserini's 1,000 hits re-score 4,000)", min=1, max=1000)
    min_candidates: int = option(_INDEX_DEFAULTS.min_candidates,
                                 help="ivfpq-refine: at least this many re-scored however few hits are asked (in "
                                      "Pyserini; plain faiss.read_index re-scores k * k_factor)", min=0)
    refine: str = option(_INDEX_DEFAULTS.refine, choices=REFINE_CODECS,
                         help="ivfpq-refine: the full vectors' precision on disk (fp16: 2 KB a passage at 1,024 dims)")
    sq_bits: int = option(_INDEX_DEFAULTS.sq_bits, choices=(4, 6, 8, 16),
                          help="ivfsq bits per dimension (16: float16; 6: 776 bytes per passage at 1,024 dims)")
    no_rotate: bool = option(False, help="ivfsq/ivfpq-refine: no random rotation before the quantizer (measured: "
                                         "it raises ivfsq's recall@10 vs flat from 0.952 to 0.963 at 6 bits)")
    pca: int = option(_INDEX_DEFAULTS.pca, help="IVF types: dimensions kept by an uncentred PCA stored in the index "
                                                "(0: all)", min=0)
    train_docs: int = option(_INDEX_DEFAULTS.train_docs, help="IVF types: training sample (the first passages)",
                             min=1)

    def settings(self) -> AggretrieverIndexSettings:
        return AggretrieverIndexSettings(index_type=self.index_type, max_length=self.max_length,
                                         batch_size=self.batch_size, nlist=self.nlist, nprobe=self.nprobe,
                                         pq_m=self.pq_m, sq_bits=self.sq_bits, pca=self.pca,
                                         rotate=not self.no_rotate and not self.pca,
                                         train_docs=self.train_docs, k_factor=self.k_factor,
                                         min_candidates=self.min_candidates, refine=self.refine)


def init(options: AggretrieverInitOptions) -> None:
    from transformers import AutoTokenizer

    from pyserini_ext.models.aggretriever import from_masked_lm, identity_semantic_head, resolve_model_folder
    from pyserini_ext.models.backbones import backbone_path

    folder = backbone_path(options.model) if options.model in BACKBONES else resolve_model_folder(options.model)
    width = {}
    if options.full_width:
        from transformers import AutoConfig

        body = AutoConfig.from_pretrained(folder)
        width = {"cls_dim": getattr(body, "hidden_size", None) or body.dim, "dense_pooling": "mean",
                 "dense_normalize": True}
    config = AggretrieverConfig(**{"agg_dim": options.agg_dim, "cls_dim": options.cls_dim, "pooling": options.pooling,
                                   "dense_pooling": options.dense_pooling, **width})
    model = from_masked_lm(folder, config, constant_term_weight=1.0 if options.lexical_only else None,
                           zero_cls=options.lexical_only)
    if options.full_width and not options.lexical_only:
        identity_semantic_head(model, options.semantic_scale)
    print(f"wrote {model.save_pretrained(options.output, AutoTokenizer.from_pretrained(folder))}")


def convert(options: AggretrieverConvertOptions) -> None:
    from pyserini_ext.models.aggretriever import convert_training_checkpoint

    print(f"wrote {convert_training_checkpoint(options.input, options.output)}")


def train(options: AggretrieverTrainOptions) -> None:
    from pyserini_ext.train.aggretriever import AggretrieverModelConfig, train_aggretriever

    model = AggretrieverModelConfig(options.model, heads=options.heads, query_max_length=options.query_max_length,
                                    passage_max_length=options.passage_max_length,
                                    cls_alignment_epochs=options.cls_alignment_epochs,
                                    freeze_body=options.freeze_body, semantic_scale=options.semantic_scale,
                                    saved_semantic_scale=options.saved_semantic_scale)
    _, losses = train_aggretriever(model, options.training_data(), options.train_config(), options.output,
                                   checkpoint_dir=options.checkpoints)
    print(f"loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f} ({len(losses)} steps)")
    print(f"wrote {options.output}")


def flat_size_warning(index_type: str, documents: int | None) -> str | None:
    """What to say before a flat index of a corpus this large is built (None: nothing)."""
    if index_type != "flat" or not documents or documents <= FLAT_WARN_DOCUMENTS:
        return None
    return (f"a flat index of {documents:,} passages holds 4 bytes a dimension per passage "
            f"({documents * 4096 / 1e9:.1f} GB at the default model's 1,024), which Pyserini's FaissSearcher reads "
            f"whole into RAM; --index-type ivfpq-refine keeps about 80 bytes a passage in RAM (docs/scale.md)")


def index(options: AggretrieverIndexOptions) -> None:
    """A Pyserini Faiss index (flat: what `python -m pyserini.encode ... --to-faiss` writes), built in chunks from
    the corpus file as it is read, here or on Ray workers."""
    from pyserini_ext.index.aggretriever import AggretrieverIndexBuilder, is_aggretriever_index
    from pyserini_ext.index.streaming import build, build_on_ray

    check_output(options.output, options.overwrite, is_aggretriever_index)  # before the encoding work
    documents, total = options.documents()
    if warning := flat_size_warning(options.index_type, total):
        logger.warning(warning)
    runtime = {"device": options.device, "backend": options.backend, "precision": options.precision}
    builder = AggretrieverIndexBuilder(resolve_model(options.model, "aggretriever"), options.settings(),
                                       {**runtime, "progress": not options.on_ray()})
    common = {"chunk_docs": options.chunk_docs, "total": total, "overwrite": options.overwrite,
              "resume": not options.restart}
    if options.on_ray():
        build_on_ray(builder, documents, options.output, options.workers, options.ray_address, **common)
    else:
        build(builder, documents, options.output, **common)
    print(f"encoded {total} documents -> {options.output} ({options.index_type})")


main = command_group("pyserini-ext aggretriever", __doc__, {
    "init": Command("new Aggretriever heads on a masked-LM backbone", AggretrieverInitOptions, init),
    "index": Command("encode a corpus into a Pyserini Faiss index: flat, ivfsq, ivfpq, ivfpq-refine or hnsw "
                     "(optionally on Ray)",
                     AggretrieverIndexOptions, index),
    "convert": Command("castorini/dhr training-repo checkpoint -> Pyserini format", AggretrieverConvertOptions,
                       convert),
    "train": Command("train on a BEIR dataset's qrels, or distil the packaged teachers on its corpus",
                     AggretrieverTrainOptions,
                     train),
})

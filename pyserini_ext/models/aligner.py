"""AligneR model: a Hugging Face encoder -> Linear(hidden, 128) -> L2 norm per token, plus salience heads.

Query and document each have their own unary salience head u = lambda * ReLU(W x + b). During training lambda is
the entropy-regularised top-k of the pre-activations s = W x + b with k = ceil(alpha * m) (alpha_q = 50%,
alpha_d = 40%); at index/query time lambda is the hard top-k at the pruning ratio beta (beta = 100% keeps every
token), which is the eps -> 0 limit of the same operator. Tokens outside the hard top-k never take part in the
alignment, in training as in retrieval, so what the model learns is what the pruned index serves.

A model folder = the encoder's Hugging Face files (config.json, model.safetensors, tokenizer) +
`aligner_heads.safetensors` (projection and salience heads) + `aligner_config.json` (see models/folder.py).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.alignment import entropy_topk, hard_topk_mask, salience_keep_count
from pyserini_ext.models.folder import (
    ALIGNER,
    ALIGNER_HEADS_FILE,
    config_file,
    load_tokenizer,
    load_transformer,
    open_model_folder,
    save_transformer,
    saving,
    tokenizer_fingerprint,
)

CONFIG_FILE = config_file(ALIGNER)
HEADS = ("projection", "query_salience", "doc_salience")
QUERY, DOCUMENT = "query", "document"


@dataclass
class AlignerConfig:
    dim: int = 128
    alpha_q: float = 0.5  # training sparsity: fraction of query tokens kept by the entropy top-k
    alpha_d: float = 0.4  # ... of document tokens
    eps: float = 0.002  # entropy regularisation of the top-k
    topk_iterations: int = 20
    query_max_length: int = 32
    doc_max_length: int = 256
    backbone: str = ""  # where the encoder came from (informational)

    @classmethod
    def from_dict(cls, values: dict) -> AlignerConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


@dataclass
class EncodedTokens:
    """Token vectors of a batch of texts: vectors [B, n, dim], salience pre-activations [B, n], mask [B, n]."""
    vectors: torch.Tensor
    salience_scores: torch.Tensor
    mask: torch.Tensor

    def weights(self, fraction: float, soft: bool = False, eps: float = 0.002, iterations: int = 20
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(salience weights u, kept-token mask) when keeping `fraction` of each text's tokens.

        soft=True: u = lambda * ReLU(s) with the entropy top-k lambda (training); the kept mask is the hard top-k
        either way, so pruned tokens never align.
        """
        keep = salience_keep_count(self.mask.sum(-1), fraction)
        kept = hard_topk_mask(self.salience_scores.detach(), keep, self.mask)
        magnitude = torch.relu(self.salience_scores)
        if soft:
            lam = entropy_topk(self.salience_scores, keep.to(self.salience_scores.dtype), eps=eps,
                               iterations=iterations, mask=self.mask)
            return lam * magnitude, kept
        return magnitude * kept, kept


class AlignerModel(nn.Module):
    def __init__(self, encoder: nn.Module, tokenizer, config: AlignerConfig):
        super().__init__()
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.config = config
        hidden = encoder.config.hidden_size
        self.projection = nn.Linear(hidden, config.dim)
        self.query_salience = nn.Linear(hidden, 1)
        self.doc_salience = nn.Linear(hidden, 1)
        for head in (self.query_salience, self.doc_salience):
            # start every token at salience ~1 (ReLU active everywhere) so all tokens get gradients at first
            nn.init.normal_(head.weight, std=0.02)
            nn.init.constant_(head.bias, 1.0)

    # ---- construction / persistence -------------------------------------------------------------------------
    @classmethod
    def from_backbone(cls, backbone: str | os.PathLike, config: AlignerConfig | None = None) -> AlignerModel:
        """Fresh heads on a pretrained Hugging Face encoder folder (or hub name)."""
        from transformers import AutoModel
        config = config or AlignerConfig()
        config.backbone = config.backbone or str(backbone)
        encoder = load_transformer(AutoModel, backbone)
        return cls(encoder, load_tokenizer(backbone), config)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, device: str = "cpu") -> AlignerModel:
        """Load an AligneR folder (local or hub name); any other folder is a ModelFolderError."""
        from safetensors.torch import load_file
        from transformers import AutoModel

        checked = open_model_folder(name_or_path, ALIGNER)
        folder = checked.path
        config = AlignerConfig.from_dict(checked.settings)
        tokenizer = load_tokenizer(folder)
        try:
            model = cls(load_transformer(AutoModel, folder), tokenizer, config)
            heads = load_file(str(folder / ALIGNER_HEADS_FILE))
            for name in HEADS:
                getattr(model, name).load_state_dict(
                    {key.split(".", 1)[1]: value for key, value in heads.items() if key.startswith(f"{name}.")})
        except Exception as e:
            raise ModelFolderError(f"{folder}: unreadable or incomplete AligneR weights ({type(e).__name__}: {e})"
                                   ) from None
        return model.to(device).eval()

    def save_pretrained(self, out_dir: str | os.PathLike, encoder_dtype: torch.dtype | None = None) -> Path:
        """encoder_dtype: store the encoder's weights in this dtype (e.g. float16 to halve a shipped folder);
        they load back as float32. The heads stay float32."""
        from safetensors.torch import save_file

        with saving(out_dir) as folder:
            save_transformer(self.encoder, folder, encoder_dtype)
            self.tokenizer.save_pretrained(folder)
            save_file({f"{name}.{key}": value.detach().cpu().contiguous()
                       for name in HEADS for key, value in getattr(self, name).state_dict().items()},
                      str(folder / ALIGNER_HEADS_FILE), metadata={"format": "pt"})
            (folder / CONFIG_FILE).write_text(json.dumps({"model_type": ALIGNER, **asdict(self.config)}, indent=1))
        return Path(out_dir)

    def fingerprint(self) -> str:
        """Hash of every parameter, the tokenizer and the settings that change the encoding: an index records it
        and refuses queries encoded by another model (or the same weights with another tokenizer)."""
        digest = hashlib.sha256()
        settings = {k: v for k, v in asdict(self.config).items() if k != "backbone"}  # backbone: informational
        digest.update(json.dumps(settings, sort_keys=True).encode())
        digest.update(tokenizer_fingerprint(self.tokenizer).encode())
        for name, tensor in sorted(self.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]

    # ---- encoding -----------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.projection.weight.device

    def max_length(self, kind: str) -> int:
        return self.config.query_max_length if kind == QUERY else self.config.doc_max_length

    def tokenize(self, texts: Sequence[str], kind: str, max_length: int | None = None) -> dict[str, torch.Tensor]:
        if kind not in (QUERY, DOCUMENT):
            raise ValueError(f"kind must be {QUERY!r} or {DOCUMENT!r}, got {kind!r}")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"empty {kind} at position {i}: AligneR needs at least one word to encode")
        max_length = max_length or self.max_length(kind)
        limit = getattr(self.encoder.config, "max_position_embeddings", None)
        if limit is not None and max_length > limit:
            raise ValueError(f"max_length {max_length} exceeds the encoder's limit of {limit} positions")
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                               return_tensors="pt")
        return {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask",
                                                                        "token_type_ids")}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, kind: str,
                token_type_ids: torch.Tensor | None = None) -> EncodedTokens:
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
        vectors = nn.functional.normalize(self.projection(hidden).float(), dim=-1)
        head = self.query_salience if kind == QUERY else self.doc_salience
        return EncodedTokens(vectors, head(hidden).squeeze(-1).float(), attention_mask.bool())

    def encode_batch(self, texts: Sequence[str], kind: str, max_length: int | None = None) -> EncodedTokens:
        return self(**self.tokenize(texts, kind, max_length), kind=kind)

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str], kind: str, batch_size: int = 32, max_length: int | None = None,
                     progress: bool = False,
                     encode_batch: Callable[[list[str]], EncodedTokens] | None = None
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: (token vectors [n, dim] float32, salience pre-activations [n]); padding removed.

        Texts are sorted by length into batches (less padding). `encode_batch` replaces this model's float32
        forward (an encoder on another backend or precision: pyserini_ext.encode.aligner).
        """
        if batch_size < 1:  # range() would silently encode nothing
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        self.eval()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        results: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(texts)
        for start in tqdm(range(0, len(order), batch_size), desc=f"encode {kind}s", disable=not progress):
            chunk = order[start:start + batch_size]
            batch = [texts[i] for i in chunk]
            encoded = encode_batch(batch) if encode_batch else self.encode_batch(batch, kind, max_length)
            lengths = encoded.mask.sum(-1).tolist()
            vectors = encoded.vectors.float().cpu().numpy()
            scores = encoded.salience_scores.float().cpu().numpy()
            for row, i in enumerate(chunk):
                results[i] = (vectors[row, :lengths[row]], scores[row, :lengths[row]])
        return results

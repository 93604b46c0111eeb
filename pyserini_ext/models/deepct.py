"""DeepCT: a BERT-family encoder with one linear regression output per token (Dai & Callan, 2019/2020).

The model IS a Hugging Face token-classification model with one label, so a saved folder loads with
`AutoModelForTokenClassification.from_pretrained(folder)` and any such checkpoint (e.g. the public PyTorch
conversion of the original DeepCT, macavaney/deepct) loads with `from_pretrained`. Any other folder is refused
there (a backbone would silently get a random head); `from_backbone` starts a model from a plain BERT folder with
a freshly initialised regression head (seeded by the caller) for training.

Words: the tokenizer's own pre-tokenisation (lower-casing, accent stripping, splitting at whitespace and
punctuation for BERT uncased) defines the words; a word's text is its word pieces joined (without "##").
Training targets and index weights sit on the FIRST piece of each word.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForTokenClassification

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.deepct_terms import TermFrequencyRule
from pyserini_ext.models.folder import (
    DEEPCT,
    config_file,
    identify,
    load_tokenizer,
    load_transformer,
    open_model_folder,
    resolve_model_folder,
    save_transformer,
    saving,
)

DEEPCT_CONFIG = config_file(DEEPCT)


@dataclass
class Word:
    text: str  # normalised word (pieces joined), e.g. "insulin"
    piece_ids: list[int]


def split_words(tokenizer, text: str) -> list[Word]:
    """The words of `text` as the tokenizer sees them, each with its word-piece ids (no special tokens)."""
    if not text or not text.strip():
        return []
    encoding = tokenizer(text, add_special_tokens=False, verbose=False)  # long texts are windowed later
    words: list[Word] = []
    previous = None
    for token_id, word_id in zip(encoding["input_ids"], encoding.word_ids()):
        if word_id is None:
            continue
        if word_id != previous:
            words.append(Word("", []))
            previous = word_id
        words[-1].piece_ids.append(token_id)
    for word in words:
        pieces = tokenizer.convert_ids_to_tokens(word.piece_ids)
        word.text = "".join(p[2:] if p.startswith("##") else p for p in pieces)
    return words


def pack_windows(words: list[Word], max_length: int) -> list[list[Word]]:
    """Greedy runs of whole words with at most `max_length` - 2 pieces each ([CLS] and [SEP] added later).

    A single word longer than a window is cut to the window (only its first piece matters).
    """
    budget = max_length - 2
    if budget < 1:
        raise ValueError(f"max_length must be >= 3, got {max_length}")
    windows: list[list[Word]] = [[]]
    used = 0
    for word in words:
        size = min(len(word.piece_ids), budget)
        if used + size > budget and windows[-1]:
            windows.append([])
            used = 0
        windows[-1].append(Word(word.text, word.piece_ids[:size]))
        used += size
    return [w for w in windows if w]


def window_inputs(tokenizer, windows: list[list[Word]]) -> tuple[dict[str, torch.Tensor], list[list[int]]]:
    """Padded model inputs for windows, and per window the position of each word's first piece."""
    sequences, first_positions = [], []
    for window in windows:
        ids, firsts = [tokenizer.cls_token_id], []
        for word in window:
            firsts.append(len(ids))
            ids.extend(word.piece_ids)
        ids.append(tokenizer.sep_token_id)
        sequences.append(ids)
        first_positions.append(firsts)
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, ids in enumerate(sequences):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        attention_mask[row, :len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}, first_positions


class DeepCTModel(torch.nn.Module):
    """Token-level term weights: `forward(input_ids, attention_mask) -> [batch, length]` (no activation)."""

    def __init__(self, token_classifier, tokenizer, max_length: int = 128,
                 index_tf: TermFrequencyRule | None = None):
        super().__init__()
        if token_classifier.config.num_labels != 1:
            raise ValueError(f"DeepCT needs a token classifier with 1 label, got {token_classifier.config.num_labels}")
        self.encoder = token_classifier
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.index_tf = index_tf or TermFrequencyRule()  # how its index turns word weights into tf

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, max_length: int | None = None) -> DeepCTModel:
        """Load a DeepCT folder of ours or a published one-label token classifier (e.g. macavaney/deepct);
        any other folder is a ModelFolderError (use `from_backbone` to start training from a backbone)."""
        checked = open_model_folder(name_or_path, DEEPCT)
        model = cls._load(checked.path, max_length or checked.settings.get("max_length", 128))
        try:
            model.index_tf = TermFrequencyRule.from_settings(checked.settings.get("index_tf"))
        except (TypeError, ValueError) as e:
            raise ModelFolderError(f"{checked.path / DEEPCT_CONFIG}: unusable index_tf ({e})") from None
        return model

    @classmethod
    def from_backbone(cls, name_or_path: str | os.PathLike, max_length: int = 128) -> DeepCTModel:
        """A BERT-family backbone with a fresh regression head (seeded by the caller), or a DeepCT folder to
        train further."""
        folder = resolve_model_folder(name_or_path)
        if identify(folder)[0] == DEEPCT:
            return cls.from_pretrained(folder, max_length)
        return cls._load(folder, max_length)

    @classmethod
    def _load(cls, folder: Path, max_length: int) -> DeepCTModel:
        tokenizer = load_tokenizer(folder)
        if not tokenizer.is_fast:
            raise ModelFolderError(f"{folder}: DeepCT needs a fast tokenizer (tokenizer.json) for word boundaries")
        try:
            classifier = load_transformer(AutoModelForTokenClassification, folder, num_labels=1)
        except Exception as e:
            raise ModelFolderError(f"{folder}: unreadable model ({type(e).__name__}: {e})") from None
        return cls(classifier, tokenizer, max_length).eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).logits.squeeze(-1)

    def save_pretrained(self, out_dir: str | os.PathLike, encoder_dtype: torch.dtype | None = None, **card) -> Path:
        """Hugging Face layout (config.json, model.safetensors, tokenizer) plus deepct_config.json; encoder_dtype:
        store the weights in this dtype (e.g. float16 to halve a shipped folder), they load back as float32."""
        with saving(out_dir) as out:
            save_transformer(self.encoder, out, encoder_dtype)
            self.tokenizer.save_pretrained(str(out))
            settings = {"model_type": DEEPCT, "max_length": self.max_length, "index_tf": asdict(self.index_tf),
                        **card}
            (out / DEEPCT_CONFIG).write_text(json.dumps(settings, indent=1))
        return Path(out_dir)

    @torch.no_grad()
    def word_weights(self, texts: list[str], batch_size: int = 64) -> list[list[tuple[str, float]]]:
        """Per text, (word, weight of its first piece) for every word in order; long texts run in windows.

        Windows of `max_length` pieces cover the whole text, so no word is lost to truncation.
        """
        if batch_size < 1:  # range() would silently weigh nothing
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        device = next(self.parameters()).device
        per_text_windows = [pack_windows(split_words(self.tokenizer, t), self.max_length) for t in texts]
        flat = [(i, w) for i, windows in enumerate(per_text_windows) for w in windows]
        results: list[list[tuple[str, float]]] = [[] for _ in texts]
        for start in range(0, len(flat), batch_size):
            chunk = flat[start:start + batch_size]
            inputs, firsts = window_inputs(self.tokenizer, [w for _, w in chunk])
            weights = self(**{k: v.to(device) for k, v in inputs.items()}).float().cpu()
            for row, ((text_index, window), positions) in enumerate(zip(chunk, firsts)):
                values = weights[row, positions].tolist()
                results[text_index].extend((word.text, value) for word, value in zip(window, values))
        return results

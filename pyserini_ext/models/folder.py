"""Model folders: one convention for the three models, and what kind a folder is, checked before any work.

Our format (written by each model's `save_pretrained`, read by its `from_pretrained`; a local folder or a hub name):

    config.json               the transformer's Hugging Face config
    model.safetensors         weights (safetensors only; never pickles)
    tokenizer.json (+ tokenizer_config.json ...)   the tokenizer
    <model_type>_config.json  our settings, with "model_type": "aggretriever" | "deepct" | "aligner"
    aligner_heads.safetensors AligneR only: projection and salience heads

Published checkpoints without our config are recognised by their layout: Pyserini's
castorini/aggretriever-distilbert / -cocondenser (weights with `tok_proj.*`), macavaney/deepct (a BERT token
classifier with one label), both possibly with `pytorch_model.bin` and `vocab.txt`. A castorini/dhr training
checkpoint (`TermWeightTrans.pt`, `pooler.pt`) and our pre-safetensors AligneR folders (`aligner_heads.pt`)
are named with the one-line command that converts them.

Model names (`resolve_model`, `model_family`), the one place that decides them: a bare encoder name (`aggretriever`,
`deepct`, `aligner`, ...) stands for the shipped default model of that name, listed in ONE table,
`resources/models/defaults.json` (read when a name is resolved, never at start-up); the name of a shipped folder
stands for it; a folder is recognised by our config file in it, never by its name (`saved_model_type`); Hugging
Face names of Aggretriever models belong to the aggretriever family, as Pyserini's keyword matching has it.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pyserini_ext import registry
from pyserini_ext.errors import ModelFolderError

AGGRETRIEVER, DEEPCT, ALIGNER = "aggretriever", "deepct", "aligner"
MODEL_TYPES = (AGGRETRIEVER, DEEPCT, ALIGNER)
WEIGHTS_FILE = "model.safetensors"
PUBLISHED_WEIGHTS_FILE = "pytorch_model.bin"  # published checkpoints only; read with weights_only=True
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
ALIGNER_HEADS_FILE = "aligner_heads.safetensors"
LEGACY_ALIGNER_HEADS_FILE = "aligner_heads.pt"
DHR_HEAD_FILES = ("TermWeightTrans.pt", "pooler.pt")
CONVERT_COMMAND = "python -m pyserini_ext.models.convert {folder}"
_SANITY_TEXT = "the retrieval of documents about protein structure"


# Hugging Face names of Aggretriever models that Pyserini's own prebuilt indexes were encoded with
HUB_MODEL_FAMILIES = {
    "castorini/aggretriever-distilbert": AGGRETRIEVER,
    "castorini/aggretriever-cocondenser": AGGRETRIEVER,
}
DEFAULTS_FILE = "defaults.json"


class ModelNameError(ValueError):
    pass


def config_file(model_type: str) -> str:
    return f"{model_type}_config.json"


def saved_model_type(folder: Path) -> str | None:
    """The model type whose config file of ours `folder` holds (by the file's name: nothing is read), else None."""
    for model_type in MODEL_TYPES:
        if (folder / config_file(model_type)).is_file():
            return model_type
    return None


def default_models() -> dict[str, str]:
    """Bare encoder name -> shipped model folder name, from `resources/models/defaults.json`."""
    path = registry.resources_dir() / "models" / DEFAULTS_FILE
    if not path.is_file():
        raise ModelNameError(f"{path} is missing: this installation ships no default models")
    return json.loads(path.read_text())


def shipped_folder(name) -> Path | None:
    """`resources/models/<name>` for the name of a shipped model folder (`aggretriever-splade-tiny`) that is not
    also a path here; None otherwise."""
    name = str(name)
    if not name or "/" in name or name in registry.ENCODERS or Path(name).exists():
        return None
    folder = registry.resources_dir() / "models" / name
    return folder if folder.is_dir() and name != DEFAULTS_FILE else None


def model_family(name_or_path) -> str | None:
    """Which of our model families `name_or_path` is (bare name, folder with our config, known hub name, shipped
    folder name), else None. Cheap: no file is read."""
    name = str(shipped_folder(name_or_path) or name_or_path)
    if name in registry.ENCODERS:
        return registry.family_of(name)
    if name in HUB_MODEL_FAMILIES:
        return HUB_MODEL_FAMILIES[name]
    return saved_model_type(Path(name).expanduser())


def resolve_model(name_or_path, family: str | None = None) -> str:
    """A bare encoder name -> its shipped default model folder; a shipped folder's name -> that folder; anything
    else as given.

    With `family`, a bare name or a folder of another family is an error naming both.
    """
    name = str(shipped_folder(name_or_path) or name_or_path)
    found = model_family(name)
    if family is not None and found is not None and found != family:
        if name in registry.ENCODERS:
            raise ModelNameError(f"{name!r} is a {found} model; the {family} encoder cannot load it")
        raise ModelNameError(f"{name}: expected a {family} model, found the {found} model folder")
    if name not in registry.ENCODERS:
        return name
    defaults = default_models()
    if name not in defaults:
        raise ModelNameError(f"no shipped default model for {name!r}; defaults exist for: "
                             f"{', '.join(sorted(defaults))}")
    folder = registry.resources_dir() / "models" / defaults[name]
    if not folder.is_dir():
        raise ModelNameError(f"the default {name!r} model {folder} is missing from this installation")
    return str(folder)


@dataclass(frozen=True)
class ModelFolder:
    """A checked model folder: its kind, our saved settings (empty for a published layout), its weights file."""
    path: Path
    model_type: str
    settings: dict = field(default_factory=dict)
    weights: Path | None = None
    published: bool = False


def resolve_model_folder(name_or_path: str | os.PathLike) -> Path:
    """A local folder as is; otherwise a hub name downloaded with huggingface_hub (needs network)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists() or str(name_or_path).startswith((".", "/", "~")):
        raise ModelFolderError(f"{name_or_path}: not a model folder")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name_or_path)))
    except Exception as e:
        raise ModelFolderError(f"{name_or_path!r} is neither a local folder nor downloadable from the "
                               f"Hugging Face hub ({type(e).__name__}: {e})") from e


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"{path}: unreadable ({e})") from None
    if not isinstance(value, dict):
        raise ModelFolderError(f"{path}: expected a JSON object")
    return value


def weight_names(weights: Path) -> set[str]:
    """Parameter names in a weights file (safetensors: from its header only)."""
    try:
        if weights.name.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(str(weights), framework="pt") as f:
                return set(f.keys())
        import torch

        return set(torch.load(weights, map_location="cpu", weights_only=True))
    except Exception as e:
        raise ModelFolderError(f"{weights}: unreadable weights ({type(e).__name__}: {e})") from None


def _weights_file(folder: Path) -> Path | None:
    for name in (WEIGHTS_FILE, PUBLISHED_WEIGHTS_FILE):
        if (folder / name).is_file():
            return folder / name
    return None


def identify(folder: Path) -> tuple[str | None, str]:
    """(model type or None, what the folder is, in words) from its files; reads configs and weight names only."""
    saved = saved_model_type(folder)
    if saved is not None:
        path = folder / config_file(saved)
        declared = _read_json(path).get("model_type", saved)  # older folders of ours lack the key
        if declared not in MODEL_TYPES:
            raise ModelFolderError(f"{path}: unknown model_type {declared!r}; known: {', '.join(MODEL_TYPES)}")
        return declared, f"the {declared} model folder"
    if all((folder / name).is_file() for name in DHR_HEAD_FILES):
        return None, ("a castorini/dhr training checkpoint; convert it once with "
                      f"`pyserini-ext aggretriever convert --input {folder} --output NEW_FOLDER`")
    if not (folder / "config.json").is_file():
        return None, "not a model folder (no config.json)"
    hf_config = _read_json(folder / "config.json")
    architectures = " ".join(hf_config.get("architectures") or [])
    labels = hf_config.get("id2label")
    if "ForTokenClassification" in architectures and (len(labels) if labels else hf_config.get("num_labels", 2)) == 1:
        return DEEPCT, "a one-label token classifier (the published DeepCT layout)"
    weights = _weights_file(folder)
    if weights is not None and "tok_proj.weight" in weight_names(weights):
        return AGGRETRIEVER, "a Pyserini-format Aggretriever checkpoint"
    kind = f"a {architectures} model" if architectures else "a transformer"
    return None, f"{kind} without our heads (a backbone, not a trained retrieval model)"


def open_model_folder(name_or_path: str | os.PathLike, model_type: str, tokenizer: bool = True) -> ModelFolder:
    """The folder checked to hold a `model_type` model with its weights (and tokenizer, unless `tokenizer` is
    False because the caller loads one from elsewhere), or a ModelFolderError saying what it is instead and what
    to do."""
    folder = resolve_model_folder(name_or_path)
    found, description = identify(folder)
    if found != model_type:
        hint = {AGGRETRIEVER: "build one with `pyserini-ext aggretriever init` or `train`",
                DEEPCT: "train one with `pyserini-ext deepct train`",
                ALIGNER: "train one with `pyserini-ext aligner train`"}[model_type]
        article = "an" if model_type[0] in "aeiou" else "a"
        raise ModelFolderError(f"{folder}: expected {article} {model_type} model, found {description}; {hint}")
    if model_type == ALIGNER and (folder / LEGACY_ALIGNER_HEADS_FILE).is_file() \
            and not (folder / ALIGNER_HEADS_FILE).is_file():
        raise ModelFolderError(f"{folder}: old AligneR format (pickled {LEGACY_ALIGNER_HEADS_FILE}); convert it "
                               f"once with `{CONVERT_COMMAND.format(folder=folder)}`")
    if tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelFolderError(f"{folder}: no tokenizer (needs {' or '.join(TOKENIZER_FILES)}); copy the "
                               "tokenizer files of the backbone into the folder")
    weights = _weights_file(folder)
    if weights is None:
        raise ModelFolderError(f"{folder}: no weights file ({WEIGHTS_FILE})")
    settings_path = folder / config_file(model_type)
    settings = _read_json(settings_path) if settings_path.is_file() else {}
    return ModelFolder(folder, model_type, settings, weights, published=not settings_path.is_file())


def check_tokenizer(tokenizer, folder: str | os.PathLike) -> None:
    """A tokenizer that maps ordinary English words to [UNK] would build an index of [UNK]s: refuse it."""
    ids = tokenizer(_SANITY_TEXT, add_special_tokens=False)["input_ids"]
    unknown = tokenizer.unk_token_id
    if not ids or (unknown is not None and sum(i == unknown for i in ids) * 2 > len(ids)):
        raise ModelFolderError(f"{folder}: the tokenizer maps ordinary words to {tokenizer.unk_token!r}; its "
                               "vocabulary is missing or wrong (copy the backbone's tokenizer files)")


def load_tokenizer(folder: str | os.PathLike):
    """The tokenizer of a model folder (or hub name), checked (check_tokenizer)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:
        raise ModelFolderError(f"{folder}: unreadable tokenizer ({type(e).__name__}: {e})") from None
    check_tokenizer(tokenizer, folder)
    return tokenizer


def load_transformer(auto_class, name_or_path: str | os.PathLike, **kwargs):
    """`auto_class.from_pretrained` in float32 whatever dtype the weights are stored in: transformers 5 keeps the
    stored dtype by default, so a float16 folder (a shipped one kept small, or a hub checkpoint) would otherwise
    encode and train in half precision on CPU without a word."""
    import torch

    return auto_class.from_pretrained(str(name_or_path), dtype=torch.float32, **kwargs)


def save_transformer(model, folder: str | os.PathLike, dtype=None) -> None:
    """`model.save_pretrained(folder)`, its floating-point weights stored in `dtype` if given (float16 halves a
    folder; `load_transformer` reads them back as float32)."""
    if dtype is None:
        model.save_pretrained(str(folder))
        return
    model.save_pretrained(str(folder), state_dict={k: v.to(dtype) if v.is_floating_point() else v
                                                   for k, v in model.state_dict().items()})


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of what decides the token ids: the vocabulary and, for fast tokenizers, the normaliser and
    pre-tokeniser (the truncation/padding state, which changes per call, is left out)."""
    if getattr(tokenizer, "is_fast", False):
        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        spec.pop("truncation", None)
        spec.pop("padding", None)
    else:
        spec = {"vocab": sorted(tokenizer.get_vocab().items()), "class": type(tokenizer).__name__}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def is_model_folder(path: Path) -> bool:
    """True for a folder holding one of our three models (what `save_pretrained` may replace)."""
    try:
        return identify(path)[0] is not None
    except ModelFolderError:
        return False


def saving(out_dir: str | os.PathLike):
    """Where `save_pretrained` writes: a temporary sibling renamed onto `out_dir` when complete (atomic_output);
    an existing folder is replaced only when it holds a model of ours."""
    from pyserini_ext.data.output import atomic_output

    return atomic_output(out_dir, overwrite=True, owned=is_model_folder)

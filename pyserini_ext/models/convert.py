"""Bring a model folder written by an older pyserini-ext into the current format, in place:

    python -m pyserini_ext.models.convert FOLDER

* AligneR: the pickled `aligner_heads.pt` becomes `aligner_heads.safetensors` (read with weights_only=True);
* all three: `model_type` is added to `<model_type>_config.json` (and DeepCT's old `"model": "deepct"` key goes).
A castorini/dhr training checkpoint is converted by `pyserini-ext aggretriever convert` instead.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyserini_ext.errors import ModelFolderError
from pyserini_ext.models.folder import (
    ALIGNER,
    ALIGNER_HEADS_FILE,
    LEGACY_ALIGNER_HEADS_FILE,
    config_file,
    identify,
)


def convert_folder(folder: str | os.PathLike) -> list[str]:
    """Convert `folder` in place; returns what was changed (empty when it is already current)."""
    folder = Path(folder)
    model_type, description = identify(folder)
    settings_path = folder / config_file(model_type) if model_type else None
    if settings_path is None or not settings_path.is_file():
        raise ModelFolderError(f"{folder}: {description}; nothing of ours to convert")
    changes = []
    legacy_heads = folder / LEGACY_ALIGNER_HEADS_FILE
    if model_type == ALIGNER and legacy_heads.is_file():
        import torch
        from safetensors.torch import save_file

        heads = torch.load(legacy_heads, map_location="cpu", weights_only=True)
        tensors = {f"{head}.{key}": value.contiguous() for head, state in heads.items() for key, value in state.items()}
        tmp = folder / (ALIGNER_HEADS_FILE + ".tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, folder / ALIGNER_HEADS_FILE)
        legacy_heads.unlink()
        changes.append(f"{LEGACY_ALIGNER_HEADS_FILE} -> {ALIGNER_HEADS_FILE}")
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    if settings.get("model_type") != model_type:
        settings.pop("model", None)
        tmp = settings_path.with_name(settings_path.name + ".tmp")
        tmp.write_text(json.dumps({"model_type": model_type, **settings}, indent=1))
        os.replace(tmp, settings_path)
        changes.append(f"model_type added to {settings_path.name}")
    return changes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m pyserini_ext.models.convert FOLDER", file=sys.stderr)
        return 2
    try:
        changes = convert_folder(argv[0])
    except ModelFolderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{argv[0]}: " + ("; ".join(changes) if changes else "already in the current format"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

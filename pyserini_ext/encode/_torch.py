"""What our torch-backed Pyserini encoders share: device and precision handling, tokenisation, batching."""
from __future__ import annotations

import contextlib
import warnings

import torch

PRECISIONS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str | None) -> torch.device:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available here; use --device cpu")
    return resolved


def autocast_context(device: torch.device, precision: str = "float32"):
    """Mixed precision on CUDA (float16/bfloat16); float32 elsewhere, with a warning instead of a surprise."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if precision == "float32":
        return contextlib.nullcontext()
    if device.type != "cuda":
        warnings.warn(f"{precision} requested on {device}: encoding in float32 (mixed precision is CUDA-only)",
                      stacklevel=3)
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=PRECISIONS[precision])

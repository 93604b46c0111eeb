"""What the hardware can do fast, asked once by every place that offers reduced precision (encoders, training).

bfloat16 on a CPU is only fast where oneDNN has bfloat16 kernels for it (AVX-512 cores, best with AVX512-BF16 or
AMX; Arm cores with BF16). Elsewhere, e.g. an AVX2-only AMD EPYC (Zen 3), torch falls back to scalar code: a
1024 x 1024 matrix product ran at 0.9 GFLOP/s in bfloat16 against 57 in float32 on such a machine, and Aggretriever
encoding at 0.7x Pyserini's float32 speed instead of 5.8x. There, asking for bfloat16 is almost always a mistake,
so callers fall back to float32 with a warning instead of running 60 times slower.
"""
from __future__ import annotations

import functools

import torch


@functools.cache
def _onednn_bfloat16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def native_bfloat16(device: torch.device | str) -> bool:
    """True where bfloat16 matrix products run on hardware kernels on `device` (CUDA: compute capability >= 8)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        return _onednn_bfloat16()
    return True  # other accelerators: leave the choice to the user


def slow_bfloat16_warning(device: torch.device | str, what: str) -> str:
    """The message of the float32 fallback, naming what falls back."""
    return (f"{what}: bfloat16 requested, but {torch.device(device)} has no bfloat16 kernels (no AVX-512/AMX or "
            "Arm BF16; torch would run it tens of times slower than float32): running float32 instead")

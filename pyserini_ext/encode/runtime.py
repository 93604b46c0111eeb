"""Where and how every encoder runs: backend (torch or ONNX Runtime), device, precision, threads.

`EncoderRuntime` is the one device/precision helper of the three models' encoders. Valid combinations:

    backend  precision   device     how
    torch    float32     cpu, cuda  plain
    torch    bfloat16    cpu, cuda  torch autocast (CPU: oneDNN bf16 kernels, AVX-512 BF16 / AMX where present);
                                    the Aggretriever also holds its weights in bfloat16 (no per-call weight casts);
                                    float32 with a warning where the device has no bfloat16 kernels (hardware.py)
    torch    float16     cuda       torch autocast
    onnx     float32     cpu, cuda  ONNX Runtime, graphs exported once and cached next to the model
    onnx     int8        cpu        ONNX Runtime dynamic quantisation (`onnxruntime.quantization.quantize_dynamic`,
                                    int8 weights, activations quantised per call) of the float32 graphs

float32 is the default and the only one held to the parity bounds; the others trade exactness for speed (their
measured effects are in docs/bench.md). Any other combination is an error that says what would work.

Precision has one vocabulary across encoding, indexing, training and the CLI: torch's dtype names (float32,
bfloat16, float16, int8), as `--precision` and the saved `store_dtype` spell them. The short spellings training
used before (fp32, bf16; fp16 as in Pyserini's `--fp16`) are read as those names (`precision_name`).
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pyserini_ext import hardware

BACKENDS = ("torch", "onnx")
PRECISIONS = ("float32", "bfloat16", "float16", "int8")
PRECISION_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
OPSET = 17


def precision_name(precision: str) -> str:
    """`precision` in the one vocabulary: an old short spelling (fp32, bf16, fp16) becomes its dtype name."""
    return PRECISION_ALIASES.get(precision, precision)


def resolve_device(device: str | None) -> torch.device:
    """`None` picks CUDA when present; an explicit CUDA device without CUDA is an error, never a silent CPU run."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available here; use --device cpu")
    return resolved


def default_position_chunk(device: torch.device, precision: str = "float32") -> int:
    """Aggretriever positions per MLM-head block. CPU: about 8 MB of logits, 64 rows of float32 or 128 of bfloat16
    (the same bytes, which stay in cache; bigger blocks read the [hidden, vocab] decoder fewer times until they fall
    out of it). GPU: big blocks keep it busy. Measured in docs/journal/bench.md ("Position chunk per device") and
    docs/gpu.md."""
    if device.type == "cuda":
        return 1024
    return 128 if precision in AUTOCAST_DTYPES else 64


@dataclass
class EncoderRuntime:
    backend: str = "torch"
    device: str | None = "cpu"
    precision: str = "float32"
    threads: int | None = None  # ONNX Runtime intra-op threads (torch: torch.set_num_threads applies)
    onnx_dir: str | None = None  # where exported graphs go (default: <model>/onnx, or the user cache)
    # Aggretriever: positions through the MLM head at once ([chunk, vocab] rows); None picks per device (see
    # default_position_chunk)
    position_chunk: int | None = None

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        self.precision = precision_name(self.precision)
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}")
        if self.position_chunk is not None and self.position_chunk < 1:
            raise ValueError(f"position_chunk must be >= 1, got {self.position_chunk}")
        self.torch_device = resolve_device(self.device)
        if self.backend == "torch" and self.precision == "int8":
            raise ValueError("int8 runs on ONNX Runtime's dynamic quantisation: use backend='onnx' with it")
        if self.backend == "onnx" and self.precision in AUTOCAST_DTYPES:
            raise ValueError(f"{self.precision} runs on the torch backend (autocast); the ONNX backend offers "
                             "float32 and int8")
        if self.backend == "onnx" and self.precision == "int8" and self.torch_device.type != "cpu":
            raise ValueError("int8 (ONNX Runtime dynamic quantisation) runs on CPU only")
        if self.precision == "bfloat16" and not hardware.native_bfloat16(self.torch_device):
            warnings.warn(hardware.slow_bfloat16_warning(self.torch_device, "encoding"), stacklevel=3)
            self.precision = "float32"
        self.position_chunk = self.position_chunk or default_position_chunk(self.torch_device, self.precision)

    # ---- torch ------------------------------------------------------------------------------------------------
    def autocast(self, precision: str | None = None):
        """The autocast context for `precision` (default: this runtime's) on this device."""
        precision = precision or self.precision
        if precision not in AUTOCAST_DTYPES:
            return contextlib.nullcontext()
        if precision == "float16" and self.torch_device.type != "cuda":
            warnings.warn(f"float16 requested on {self.torch_device}: encoding in float32 (float16 autocast is "
                          "CUDA-only; bfloat16 runs on CPU)", stacklevel=3)
            return contextlib.nullcontext()
        return torch.autocast(self.torch_device.type, dtype=AUTOCAST_DTYPES[precision])

    # ---- ONNX Runtime -----------------------------------------------------------------------------------------
    def export_folder(self, model_dir: Path) -> Path:
        """`onnx_dir`, else `<model>/onnx`, else (read-only model folder) a per-model folder in the user cache."""
        if self.onnx_dir:
            return Path(self.onnx_dir)
        if os.access(model_dir, os.W_OK):
            return model_dir / "onnx"
        key = hashlib.sha1(str(model_dir.resolve()).encode()).hexdigest()[:16]
        return Path.home() / ".cache" / "pyserini_ext" / "onnx" / f"{model_dir.name}-{key}"

    def session(self, graph: OnnxGraph, model_dir: Path, module: Callable[[], torch.nn.Module]):
        """An ONNX Runtime session for `graph`, exporting (and quantising) it first unless an export newer than
        the model's weights is there. `module` builds the torch module to export, only when needed."""
        import onnxruntime as ort

        providers = ["CPUExecutionProvider"]
        if self.torch_device.type == "cuda":  # checked before the export, which takes a while
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RuntimeError("backend 'onnx' on CUDA needs onnxruntime-gpu (CUDAExecutionProvider is missing; "
                                   f"this onnxruntime has {', '.join(ort.get_available_providers())})")
            providers = [("CUDAExecutionProvider", {"device_id": self.torch_device.index or 0})] + providers
        path = graph.ensure(self.export_folder(model_dir), model_dir, module, quantised=self.precision == "int8")
        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = self.threads
        return ort.InferenceSession(str(path), options, providers=providers)


@dataclass(frozen=True)
class OnnxGraph:
    """One exported graph: its file name, example inputs and the names/dynamic axes of its inputs and outputs."""
    name: str
    example: tuple[torch.Tensor, ...]
    inputs: Sequence[str]
    outputs: Sequence[str]
    dynamic_axes: dict

    def ensure(self, folder: Path, model_dir: Path, module: Callable[[], torch.nn.Module], quantised: bool) -> Path:
        path = folder / f"{self.name}.onnx"
        if not _newer_than_weights(path, model_dir):
            folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent Python branches
                torch.onnx.export(module().eval(), self.example, str(partial), input_names=list(self.inputs),
                                  output_names=list(self.outputs), dynamic_axes=self.dynamic_axes,
                                  opset_version=OPSET, dynamo=False)
            os.replace(partial, path)
        if not quantised:
            return path
        quantised_path = folder / f"{self.name}.int8.onnx"
        if not _newer_than_weights(quantised_path, model_dir) or quantised_path.stat().st_mtime < path.stat().st_mtime:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            partial = quantised_path.with_name(quantised_path.name + ".partial")
            root = logging.getLogger()
            level, root.level = root.level, logging.ERROR  # its advice to pre-process is for static quantisation
            try:
                quantize_dynamic(path, partial, weight_type=QuantType.QInt8)
            finally:
                root.level = level
            os.replace(partial, quantised_path)
        return quantised_path


def _newer_than_weights(path: Path, model_dir: Path) -> bool:
    """Whether an exported graph is newer than the model's weights and its settings (a config file changes the
    graph too, e.g. an Aggretriever's `dense_pooling`)."""
    if not path.is_file():
        return False
    weights = [p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".json")]
    return all(path.stat().st_mtime >= w.stat().st_mtime for w in weights)


def as_int64(array: np.ndarray | torch.Tensor) -> np.ndarray:
    """ONNX Runtime wants int64 token ids and masks as numpy arrays."""
    if isinstance(array, torch.Tensor):
        array = array.cpu().numpy()
    return np.ascontiguousarray(array, dtype=np.int64)

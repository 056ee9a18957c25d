"""What a run records about where it came from: code version, environment, host."""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path

from engine.contract.code import code_version  # noqa: F401 (re-exported: the run's provenance)


def provenance() -> dict:
    import numpy
    import torch

    return {
        "code": code_version(), "python": sys.version.split()[0], "torch": torch.__version__,
        "numpy": numpy.__version__, "platform": platform.platform(), "host": socket.gethostname(),
        "pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "determinism": determinism(), "cpu": cpu(),
    }


# The instruction sets that choose oneDNN's and PyTorch's CPU kernels beyond torch's capability level (AVX2,
# AVX512): matrix units and dot-product extensions change which kernel runs, and so the rounding.
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu(cpuinfo: str | None = None) -> dict:
    """The CPU's model and the kernel-selecting instruction sets it reports (Linux: /proc/cpuinfo's first
    processor), beside torch's capability level. Two runs of one profile and seed on CPUs that differ here may
    differ in their last bits, and then in every number after."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough: a machine's cores are alike
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {"model": fields.get("model name") or fields.get("Model") or platform.processor() or "?",
            "vendor": fields.get("vendor_id", ""), "family": fields.get("cpu family", ""),
            "model_id": fields.get("model", ""), "flags": [f for f in KERNEL_FLAGS if f in flags]}


def determinism() -> dict:
    """What decides whether two runs of one profile and seed are bit-identical (docs/results-and-guarantees.md)."""
    import torch

    return {
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "env": arithmetic_env(),
    }


# The environment variables that change which CPU or CUDA kernels run, or how they round: torch's and oneDNN's
# instruction-set caps, MKL's and OpenMP's threading and code paths, cuBLAS's workspace and TF32.
ARITHMETIC_ENV = ("ATEN_CPU_CAPABILITY", "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
ARITHMETIC_ENV_PREFIXES = ("ONEDNN_", "DNNL_", "MKL_", "OMP_", "KMP_", "CUBLAS_", "GOMP_")


def arithmetic_env(environ: dict | None = None) -> dict[str, str | None]:
    """The variables of ARITHMETIC_ENV and ARITHMETIC_ENV_PREFIXES that are set, with the three thread and
    workspace keys always present (None when unset), sorted."""
    environ = os.environ if environ is None else environ
    out: dict[str, str | None] = {key: environ.get(key) for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                   "CUBLAS_WORKSPACE_CONFIG")}
    out.update({k: v for k, v in environ.items() if k in ARITHMETIC_ENV or k.startswith(ARITHMETIC_ENV_PREFIXES)})
    return dict(sorted(out.items()))

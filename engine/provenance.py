"""What a run records about where it came from: code version, environment, host."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path


def code_version() -> dict[str, str | bool]:
    from engine import __version__

    out: dict[str, str | bool] = {"engine": __version__}
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."],
                                   capture_output=True, text=True, timeout=5)
            out["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def provenance() -> dict:
    import numpy
    import torch

    return {
        "code": code_version(), "python": sys.version.split()[0], "torch": torch.__version__,
        "numpy": numpy.__version__, "platform": platform.platform(), "host": socket.gethostname(),
        "pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "determinism": determinism(),
    }


def determinism() -> dict:
    """What decides whether two runs of one profile and seed are bit-identical (docs/results-and-guarantees.md)."""
    import torch

    return {
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "env": {key: os.environ.get(key) for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG")},
    }

"""The GPU inventory: NVML (nvidia-ml-py) first, then `nvidia-smi`, else none (CPU only)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_used_mib: float
    memory_total_mib: float
    utilization_pct: float

    def label(self) -> str:
        return (f"GPU {self.index}: {self.name}  {self.memory_used_mib:.0f}/{self.memory_total_mib:.0f} MiB  "
                f"{self.utilization_pct:.0f}%")


def from_nvml() -> list[GpuInfo]:
    import pynvml  # from nvidia-ml-py

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            out.append(GpuInfo(i, name.decode() if isinstance(name, bytes) else str(name), memory.used / 2**20,
                               memory.total / 2**20, float(util.gpu)))
        return out
    finally:
        pynvml.nvmlShutdown()


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu
    --format=csv,noheader,nounits`."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            out.append(GpuInfo(int(parts[0]), parts[1], float(parts[2]), float(parts[3]),
                               float(parts[4]) if parts[4] not in ("[N/A]", "N/A") else 0.0))
        except ValueError:
            continue
    return out


def from_nvidia_smi() -> list[GpuInfo]:
    if shutil.which("nvidia-smi") is None:
        raise FileNotFoundError("nvidia-smi")
    res = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.used,memory.total,utilization.gpu",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip())
    return parse_nvidia_smi(res.stdout)


def inventory() -> list[GpuInfo]:
    """The visible GPUs; an empty list means CPU only."""
    for source in (from_nvml, from_nvidia_smi):
        try:
            return source()
        except Exception:  # no driver, no library, no binary: try the next source
            continue
    return []

"""Device, precision and compilation, decided once from the profile (:class:`Runtime`), and what the CPU's
threads and bf16 units settle."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass

import torch

from engine.contract.config import TrainConfig
from engine.contract.protocol import RUNTIME_FP32


@dataclass(frozen=True)
class Runtime:
    """Device, precision and compilation, settled once from the profile."""

    device: torch.device
    autocast_dtype: torch.dtype | None
    channels_last: bool
    compile_mode: str | None = None  # a torch.compile mode, or None: eager

    @property
    def cuda_graphs(self) -> bool:
        from engine.runtime.compiled import uses_cuda_graphs

        return self.compile_mode is not None and uses_cuda_graphs(self.compile_mode)

    def step_model(self, model: torch.nn.Module, batch_sizes: tuple[int, ...]) -> torch.nn.Module:
        """The module the hot loop calls: ``model`` itself, or compiled for ``batch_sizes``."""
        if self.compile_mode is None:
            return model
        from engine.runtime.compiled import compile_model

        return compile_model(model, batch_sizes, self.compile_mode)

    def step_begin(self) -> None:
        """Mark a new training step for CUDA graph trees (their memory is reused from here)."""
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()

    def input_format(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def for_evaluation(self) -> "Runtime":
        """The runtime of a test-split evaluation: this device and layout, in fp32 and eager, so that a
        result does not depend on the precision or compilation its run trained with."""
        return dataclasses.replace(self, autocast_dtype=None, compile_mode=None)

    def describe(self) -> str:
        """The device and the options, for a person: "cpu; autocast bfloat16, channels-last", "cuda (NVIDIA
        H200; CUDA_VISIBLE_DEVICES=1); autocast bfloat16, channels-last, compiled (max-autotune)", "cpu"."""
        options = self.options()
        options = "" if options == RUNTIME_FP32 else f"; {options}"
        if self.device.type == "cuda":
            name = torch.cuda.get_device_name(self.device)
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
            return f"cuda ({name}; CUDA_VISIBLE_DEVICES={visible}){options}"
        return cpu_text() + options

    def options(self) -> str:
        """The settings that shape the arithmetic, as the `runtime` of run_started and run_resumed records them:
        "autocast bfloat16, channels-last", "compiled (default)", or "fp32" for plain fp32 eager. Which device or
        GPU ran is not among them (``describe`` says that)."""
        opts = [f"autocast {self.autocast_dtype}".replace("torch.", "")] if self.autocast_dtype else []
        opts += ["channels-last"] if self.channels_last else []
        opts += [f"compiled ({self.compile_mode})"] if self.compile_mode else []
        return ", ".join(opts) if opts else RUNTIME_FP32


def cpu_text() -> str:
    """The CPU device with its resolved thread count: "cpu (1 thread of 16 cores)", "cpu (16 threads of 16 cores)"
    (train.threads = 0 is PyTorch's one a core: the line says how many that was)."""
    threads, cores = torch.get_num_threads(), os.cpu_count() or 1
    return f"cpu ({threads} thread{'s' if threads != 1 else ''} of {cores} core{'s' if cores != 1 else ''})"


def apply_determinism(cfg: TrainConfig) -> None:
    """Settle the thread count and, with ``train.deterministic``, PyTorch's deterministic switches.

    Results on the CPU depend on the intra-op thread count (how reductions are split), so the
    deterministic mode fixes it: ``train.threads``, or 1 when that is 0. CUBLAS_WORKSPACE_CONFIG
    must be set before cuBLAS starts, which is later than this (the first matrix product).
    """
    threads = cfg.threads or (1 if cfg.deterministic else 0)
    if threads:
        torch.set_num_threads(threads)
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def make_runtime(cfg: TrainConfig, local_rank: int = 0, world: int = 1) -> Runtime:
    """The runtime of one process; in a multi-process run, of rank ``local_rank`` of ``world`` on this
    machine: its GPU (``cuda:local_rank`` when it sees several, else ``cuda:0``), its share of the cores."""
    apply_determinism(cfg)
    if world > 1 and not cfg.threads and not cfg.deterministic:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # the ranks share this machine's cores
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        raise RuntimeError("train.device = \"cuda\" but no CUDA device is visible "
                           f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    index = local_rank if want_cuda and torch.cuda.device_count() > 1 else 0
    if want_cuda and world > 1:
        torch.cuda.set_device(index)
    device = torch.device("cuda", index) if want_cuda else torch.device("cpu")
    # CUDA: bf16 autocast and channels-last are the default ("auto", measured in #36). The CPU: bf16 autocast with
    # channels-last (when train.channels_last; the oneDNN fast path of #57) for "bf16", and for "auto" on a CPU
    # with bf16 units; else fp32 and contiguous (cpu_precision).
    dtype = torch.bfloat16 if (cfg.amp in ("bf16", "auto") and want_cuda) else None
    if not want_cuda:
        dtype = cpu_precision(cfg.amp)
    compile_on = cfg.compile == "on" or (cfg.compile == "auto" and want_cuda and world == 1)
    # CUDA graphs need CUDA: on the CPU the same request compiles without them.
    from engine.runtime.compiled import uses_cuda_graphs

    mode = "default" if not want_cuda and uses_cuda_graphs(cfg.compile_mode) else cfg.compile_mode
    return Runtime(device=device, autocast_dtype=dtype, channels_last=cfg.channels_last and (want_cuda or dtype is not None),
                   compile_mode=mode if compile_on else None)


# The CPU's bf16 units: oneDNN runs bf16 convolutions and matrix products on them under autocast. Without them
# bf16 is emulated, and slower than fp32.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Whether "auto" picks bf16 (with channels-last) on a CPU that has the units. Decided by #57's accuracy check on an
# AMD EPYC with AVX512-BF16: cifar10-cpu-at and digits-at/-trades, five seeds each, trained in fp32 and in bf16 +
# channels-last, gave test PGD-20 numbers within the seed spread of each other (docs/results.md, "Precision on
# the CPU"). False turns the CPU's "auto" back to fp32 everywhere.
CPU_AUTO_BF16 = True


def cpu_has_bf16(flags: list[str] | None = None) -> bool:
    """Whether this CPU (or one reporting ``flags``, /proc/cpuinfo's names) has bf16 units."""
    if flags is None:
        from engine.runtime.provenance import cpu

        flags = cpu()["flags"]
    return any(f in flags for f in CPU_BF16_FLAGS)


def cpu_precision(amp: str, flags: list[str] | None = None) -> torch.dtype | None:
    """The autocast dtype of a CPU run: bf16 when the profile asks for it ("bf16"); for "auto", bf16 on a CPU with
    bf16 units (while CPU_AUTO_BF16); else None (fp32)."""
    if amp == "bf16":
        if not cpu_has_bf16(flags):
            import logging

            logging.getLogger("engine").warning(
                "train.amp = \"bf16\" on a CPU without bf16 units (%s): bf16 is emulated here and likely slower "
                "than fp32 (train.amp = \"none\")", "/".join(CPU_BF16_FLAGS))
        return torch.bfloat16
    if amp == "auto" and CPU_AUTO_BF16 and cpu_has_bf16(flags):
        return torch.bfloat16
    return None

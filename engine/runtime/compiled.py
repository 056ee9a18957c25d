"""The compiled model for the hot loop: torch.compile at fixed batch sizes, eager for any other.

A compiled graph is specialised to its input shape (``dynamic=False``): a new
shape would recompile, and a CUDA graph is recorded per shape. The epoch's short
last batch (49,000 = 382 x 128 + 104 on CIFAR-10) and any odd evaluation batch
therefore run through the eager module, which shares every parameter and buffer
with the compiled one: the numbers and the training semantics are the same, and
the set of graphs is fixed after the first epoch (no recompilation storm).

The compiled module is not a submodule of the wrapper, so ``state_dict`` of the
model the trainer holds never carries ``_orig_mod.`` prefixes: checkpoints load
into any run, compiled or not.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

# Graphs per model: train mode with grad, eval mode with input grad (attacks), eval without grad
# (clean predictions), under one or two batch sizes. Room for all of them, and no more.
CACHE_SIZE_LIMIT = 16


class ShapeStableModel(nn.Module):
    """Calls ``compiled`` for batches whose size is in ``sizes`` and the eager ``model`` otherwise."""

    def __init__(self, model: nn.Module, compiled: nn.Module, sizes: Iterable[int], clone_outputs: bool):
        super().__init__()
        self.model = model
        object.__setattr__(self, "compiled", compiled)  # not registered: its parameters are model's
        self.sizes = frozenset(sizes)
        # CUDA graphs own their output buffers and overwrite them on the next replay; a copy of the
        # [B, K] logits lets callers keep them (per-class counts) past the next call.
        self.clone_outputs = clone_outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] in self.sizes:
            out = self.compiled(x)
            return out.clone() if self.clone_outputs else out
        return self.model(x)


def compile_model(model: nn.Module, sizes: Iterable[int], mode: str, backend: str | None = None) -> nn.Module:
    """Wrap ``model`` so that batches of ``sizes`` run compiled (``mode`` as torch.compile takes it)."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, CACHE_SIZE_LIMIT)
    graphs = backend is None and uses_cuda_graphs(mode)
    if graphs:
        import torch._inductor.config

        # CUDA graph trees' debug check of their memory pool (on by default) calls gc.collect() when it finds
        # an allocation no live output owns, then asserts that every output it listed as live a moment
        # before is still alive: an output held only by a reference cycle dies in that collection and the
        # assertion fails (`assert storage_ptr is not None` in apply_checkpoint_execution_state_in_allocator).
        # On the first H100 of the short table (torch 2.11) it stopped PGD-AT in epoch 5 after the pool
        # check had passed. Without the check, such an output is freed when its cycle is collected.
        if hasattr(torch._inductor.config.triton, "slow_path_cudagraph_asserts"):  # CUDA graph trees: torch >= 2.1
            torch._inductor.config.triton.slow_path_cudagraph_asserts = False
    kwargs = {"backend": backend} if backend is not None else {"mode": mode}
    compiled = torch.compile(model, dynamic=False, **kwargs)
    return ShapeStableModel(model, compiled, sizes, clone_outputs=graphs)


def uses_cuda_graphs(mode: str) -> bool:
    """torch.compile's modes that record CUDA graphs."""
    return mode in ("reduce-overhead", "max-autotune")

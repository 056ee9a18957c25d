"""The engine's SGD on the CPU: torch.optim.SGD's arithmetic and checkpoint layout, without torch.optim.

Every torch optimizer imports ``torch._dynamo`` the first time it steps, zeroes or saves (torch/optim/optimizer.py:
``_use_grad_for_differentiable`` and ``torch._disable_dynamo``). That import is 2-3 s of CPU, a third of what a small
CPU run costs in all. Measured again on torch 2.14.1 (``benchmarks/bench_startup.py``, median of 3 fresh processes,
one thread; Intel Xeon with AVX512-FP16, 2 cores, 2026-12-02, beside two training runs): a tiny digits run takes
6.32 s of CPU with torch.optim.SGD and 3.75 s with this class, 2.6 s saved (``import torch._dynamo`` alone 2.8 s);
so it stays (2026-11, AMD EPYC: 6.2 against 4.1 s). On the CPU, torch.optim.SGD takes its
for-loop path (``_single_tensor_sgd``: foreach is the default only on accelerators); :class:`SGD` below does the
same tensor operations in the same order, so the weights it gives are bit-identical, and its ``state_dict`` has
torch's layout, so a checkpoint written by one resumes with the other. ``tests/engine/test_optim.py`` checks both
against torch.optim.SGD. On a GPU the engine keeps torch.optim.SGD (its foreach path, which this class does not
reproduce; the start-up cost does not matter there, and ``train.compile`` imports torch._dynamo anyway).
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

# what torch.optim.SGD writes into each param group of its state_dict besides the parameters (torch 2.x)
TORCH_GROUP_DEFAULTS = {"maximize": False, "foreach": None, "differentiable": False, "fused": None}


def new_sgd(params: Iterable[torch.nn.Parameter], device: torch.device, **hyper: Any) -> Any:
    """torch.optim.SGD on a GPU, :class:`SGD` on the CPU (the same numbers, without importing torch._dynamo)."""
    if device.type == "cpu":
        return SGD(params, **hyper)
    return torch.optim.SGD(params, **hyper)


class SGD:
    """SGD with momentum, dampening, weight decay and Nesterov, as torch.optim.SGD computes it on the CPU.

    ``param_groups`` and ``state`` are what torch.optim's are (a list of dicts with ``params`` and the
    hyper-parameters; ``state[param]["momentum_buffer"]``), so code that sets ``group["lr"]`` works on either.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups: list[dict[str, Any]] = [
            {"params": params, "lr": lr, "momentum": momentum, "dampening": dampening,
             "weight_decay": weight_decay, "nesterov": nesterov, **TORCH_GROUP_DEFAULTS}]
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov = group["weight_decay"], group["nesterov"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                # torch/optim/sgd.py `_single_tensor_sgd`, operation for operation (maximize and a tensor lr aside)
                grad = p.grad
                if weight_decay != 0:
                    grad = grad.add(p, alpha=weight_decay)
                if momentum != 0:
                    state = self.state.setdefault(p, {})
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = grad.detach().clone()
                        state["momentum_buffer"] = buf
                    else:
                        buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                    grad = grad.add(buf, alpha=momentum) if nesterov else buf
                p.add_(grad, alpha=-lr)

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: ``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``,
        parameters numbered in order across the groups."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state_dict of this class or of torch.optim.SGD (the same layout): the hyper-parameters of each
        group and each parameter's momentum buffer, cast to the parameter's dtype and device as torch does."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for group, packed in zip(self.param_groups, saved):
            if len(group["params"]) != len(packed["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
        by_index = {i: p for group, packed in zip(self.param_groups, saved)
                    for i, p in zip(packed["params"], group["params"])}
        self.state = {}
        for i, entries in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {k: (v.to(dtype=p.dtype, device=p.device)
                                 if isinstance(v, torch.Tensor) and p.is_floating_point() else v)
                             for k, v in entries.items()}
        for group, packed in zip(self.param_groups, saved):
            group.update({k: v for k, v in packed.items() if k != "params"})

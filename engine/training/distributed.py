"""One run on several processes: torch.distributed with DistributedDataParallel (DDP).

A run with N > 1 processes (``fairtui run ... --gpus 0,1``, or ``python -m engine
train RUN --nproc 2``) is started by torch.distributed's own launcher (what ``torchrun``
runs; :mod:`engine.entry.supervisor` wraps it for the run folder), and a run across nodes by
``torchrun`` itself: N ranks of ``python -m engine train RUN`` with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in their
environment. NCCL on CUDA (one GPU per rank), gloo on the CPU. The ranks keep the
single-process semantics where they must:

- The global batch is the profile's ``data.batch_size``. Every global batch is
  split into W contiguous shards (:meth:`Group.shard`), so the order and the
  augmentation, drawn from (seed, epoch), are the single-process ones.
- Random starts of the attacks are drawn for the whole global batch on every
  rank and sliced (:mod:`engine.attacks.noise`): the RNG streams stay equal on
  all ranks and equal to one process's.
- Each rank's loss is scaled by n_rank * W / n_batch, so DDP's gradient average
  is the gradient of the global batch mean (exact for the plain means of PGD-AT,
  TRADES and CFA; FRL's normalised class weights and WAT's per-class batch means
  are taken over each rank's shard, as in any DDP training).
- Per-class counts and the loss are all-reduced; validation is sharded the same
  way and its counts all-reduced; BatchNorm buffers are broadcast from rank 0
  after every epoch. Every method's class-wise state is then computed from the
  same numbers on every rank, and checked to be identical (:meth:`Group.check_identical`).
- Rank 0 alone writes the run folder.

``train.sync_bn`` turns BatchNorm into statistics over the whole global batch:
PyTorch's SyncBatchNorm on CUDA, and on the CPU (gloo, where SyncBatchNorm
does not run) :class:`engine.training.sync_bn.GroupBatchNorm`, the same computation with a
differentiable all-reduce.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from engine.attacks.noise import Draws

ENV_SUPERVISED = "FAIRTUI_SUPERVISED"  # the pid of engine.entry.supervisor, in its ranks' environment


def die_with_supervisor() -> None:
    """In a rank started by engine.entry.supervisor: be killed (SIGKILL) when the supervisor dies (Linux
    PR_SET_PDEATHSIG), and end now if it already has. A killed supervisor never leaves ranks training
    unwatched; torch's launcher does not ask for this."""
    parent = int(os.environ.get(ENV_SUPERVISED, "0") or 0)
    if not parent:
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(137)


class PeerLost(RuntimeError):
    """A collective operation failed: another rank died, or did not answer within the timeout."""


class RankMismatch(RuntimeError):
    """Ranks that must hold identical state do not (a bug, never a result to keep)."""


def is_collective_error(err: BaseException) -> bool:
    """Whether ``err`` came out of a collective operation (a peer died or timed out), not this rank."""
    if isinstance(err, PeerLost) or isinstance(err, getattr(dist, "DistError", ())):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(s in text for s in ("gloo/", "NCCL", "ProcessGroup",
                                                                      "Connection closed by peer"))


@dataclass
class Group:
    """This process's place in the run: rank ``rank`` of ``world``. ``world == 1``: no collectives."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    supervised: bool = False
    backend: str = ""
    control: Any = field(default=None, repr=False)  # a gloo group for host-side tensors and flags
    members: list[dict[str, Any]] | None = field(default=None, repr=False)  # every rank's process (processes())

    @classmethod
    def from_env(cls) -> "Group":
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            return cls()
        return cls(rank=int(os.environ["RANK"]), world=world, local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                   supervised=bool(os.environ.get(ENV_SUPERVISED)))

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def nodes(self) -> int:
        """How many machines the group spans: WORLD_SIZE / LOCAL_WORLD_SIZE, as torchrun sets them."""
        local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world) or self.world)
        return max(1, self.world // max(1, local))

    def init(self, device: torch.device, timeout_s: float) -> None:
        """Join the process group: NCCL on CUDA, gloo on the CPU, both with ``timeout_s`` on every
        collective; host-side flags and float64 sums go through a gloo group either way."""
        if not self.active:
            return
        timeout = datetime.timedelta(seconds=timeout_s)
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(self.backend, rank=self.rank, world_size=self.world, timeout=timeout)
        self.control = dist.new_group(backend="gloo", timeout=timeout) if self.backend == "nccl" else None

    def close(self) -> None:
        """Leave the group together: a barrier, so that no rank tears its groups down while a peer is
        still in the run's last collective, then each rank destroys its groups (the process itself ends
        with engine.training.process.exit_now)."""
        if self.active and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.barrier()
            with contextlib.suppress(Exception):
                dist.destroy_process_group()

    def processes(self, device: torch.device) -> list[dict[str, Any]]:
        """Every rank's process (rank, host, pid, its start time, its GPU), gathered on every rank: what
        engine.json names for liveness and for `fairtui stop`."""
        import socket

        from engine.contract.procinfo import process_start_time

        visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        gpu = None
        if device.type == "cuda":  # one visible GPU under our launcher; all of them under a plain torchrun
            gpu = visible[min(self.local_rank, len(visible) - 1)] if visible else str(device.index or 0)
        me = {"rank": self.rank, "host": socket.gethostname(), "pid": os.getpid(),
              "proc_start": process_start_time(os.getpid()), "gpu": gpu}
        out: list[Any] = [None] * self.world
        with self._collective("gathering the ranks' processes"):
            dist.all_gather_object(out, me, group=self.control)
        self.members = out
        return out

    def describe(self) -> dict[str, Any]:
        return {"world_size": self.world, "nodes": self.nodes, "backend": self.backend}

    # -- sharding -----------------------------------------------------------------------------------
    def shard(self, n: int) -> tuple[int, int]:
        """Rows [lo, hi) of a batch of ``n`` that this rank takes: W contiguous shards whose sizes
        differ by at most one (torch.tensor_split's split)."""
        q, r = divmod(n, self.world)
        lo = self.rank * q + min(self.rank, r)
        return lo, lo + q + (1 if self.rank < r else 0)

    def shard_sizes(self, n: int) -> list[int]:
        q, r = divmod(n, self.world)
        return [q + (1 if i < r else 0) for i in range(self.world)]

    def draws(self, n: int) -> Draws:
        """This rank's rows [lo, hi) of a batch of ``n``, and the draws its attacks take: rows of the
        whole batch's draws in a group, the batch's own draws in one process."""
        lo, hi = self.shard(n)
        return Draws(lo, hi, n if self.active else 0)

    def scale_loss(self, loss: torch.Tensor, draws: Draws) -> torch.Tensor:
        """DDP averages the ranks' gradients; weighting each rank's mean by its share of the batch
        makes that average the gradient of the global batch mean, shards of any size."""
        return loss * ((draws.hi - draws.lo) * self.world / draws.n) if self.active else loss

    def usable_batches(self, n: int, batch_size: int, batches: int) -> int:
        """The batches of an epoch of ``n`` samples every rank can take part in: a last global batch
        smaller than the group would leave a rank without samples, so it is left out."""
        if self.active and n - (batches - 1) * batch_size < self.world:
            return batches - 1
        return batches

    # -- the model's views and what this rank writes ----------------------------------------------------
    def prepare_model(self, model: nn.Module, device: torch.device, sync_bn: bool) -> tuple[nn.Module, bool]:
        """``model`` with its BatchNorm synchronised across ranks when the profile asks for it and there
        is a group and a BatchNorm (SyncBatchNorm on CUDA, GroupBatchNorm on the CPU); whether it is."""
        from engine.training.sync_bn import convert_sync_bn, has_batchnorm

        if not (sync_bn and self.active and has_batchnorm(model)):
            return model, False
        return convert_sync_bn(model, device), True

    def training_view(self, model: nn.Module, attack_model: nn.Module, device: torch.device) -> nn.Module:
        """What the loss forwards go through: DDP over ``model`` in a group (its forward prepares the
        gradient all-reduce), ``attack_model`` (the model, maybe compiled) in one process. Attacks and
        gradient-free forwards always run ``attack_model``."""
        if not self.active:
            return attack_model
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    # -- who writes the run folder: decided here alone --------------------------------------------------
    @property
    def owns_folder(self) -> bool:
        """Whether this process takes the run folder's lock and writes engine.json (and clears what an
        earlier session left): the process of a one-process run, or rank 0 under a launcher other than
        the supervisor (torchrun, srun); a supervised rank runs under its supervisor's."""
        return self.is_main and not self.supervised

    def writers(self, run_dir: Any) -> tuple[Any, Any]:
        """The run's event stream and progress file, opened on rank 0; on the other ranks, writers of
        nothing (rank 0 alone writes the run folder)."""
        if not self.is_main:
            return NoEvents(), NoProgress()
        from engine.contract.events import EventWriter
        from engine.runtime.progress import Progress

        return EventWriter(run_dir / "events.jsonl", run_dir.name), Progress(run_dir / "progress.json")

    def payload(self, sync_bn: bool, batch_size: int) -> dict[str, Any]:
        """What run_started and run_resumed record of the group (nothing for one process)."""
        if not self.active:
            return {}
        return {"distributed": {**self.describe(), "sync_bn": sync_bn, "global_batch_size": batch_size,
                                "batch_per_rank": self.shard_sizes(batch_size)}}

    def epoch_check(self, weights: dict[str, Any], state: dict[str, Any], what: str, state_name: str,
                    samples: list[int], sync_bn: bool) -> dict[str, Any] | None:
        """Check that every rank holds the same ``weights`` and the same class-wise ``state`` after an
        epoch (RankMismatch otherwise: the run fails rather than report one rank's numbers). What the
        epoch event records: the group, each rank's samples and state digests (None in one process)."""
        if not self.active:
            return None
        import hashlib

        def digest(prints: list[float]) -> str:
            return hashlib.sha256(torch.tensor(prints, dtype=torch.float64).numpy().tobytes()).hexdigest()[:16]

        model = self.check_identical(weights, f"the weights after {what}")
        method = self.check_identical(state, f"the {state_name} state after {what}")
        return {**self.describe(), "sync_bn": sync_bn, "samples_per_rank": samples,
                "model_digest_per_rank": [digest(p) for p in model],
                "method_digest_per_rank": [digest(p) for p in method]}

    # -- collectives ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _collective(self, what: str) -> Iterator[None]:
        try:
            yield
        except RuntimeError as err:
            if isinstance(err, (PeerLost, RankMismatch)) or not is_collective_error(err):
                raise
            raise PeerLost(f"{what} failed on rank {self.rank}: {str(err).splitlines()[0][:200]}") from None

    def _group_for(self, t: torch.Tensor) -> Any:
        return self.control if t.device.type == "cpu" else None

    def sum_(self, *tensors: torch.Tensor) -> None:
        """All-reduce (sum) in place: counters on the device, float64 sums on the host."""
        if not self.active:
            return
        with self._collective("all-reduce"):
            for t in tensors:
                dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self._group_for(t))

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is set on any rank (a host-side all-reduce: no GPU synchronisation)."""
        if not self.active:
            return flag
        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        with self._collective("stop-flag all-reduce"):
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return bool(t.item())

    def broadcast_buffers(self, model: nn.Module) -> None:
        """Rank 0's buffers (BatchNorm running statistics) to every rank."""
        if not self.active:
            return
        with self._collective("buffer broadcast"):
            for buf in model.buffers():
                dist.broadcast(buf, src=0)

    def gather_host(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's float64 vector of the same length, in rank order."""
        if not self.active:
            return [values]
        out = [torch.empty_like(values) for _ in range(self.world)]
        with self._collective("all-gather"):
            dist.all_gather(out, values, group=self.control)
        return out

    def check_identical(self, named: dict[str, Any], what: str) -> list[list[float]]:
        """Check that ``named`` (tensors, numbers, nested tables) holds the same values on every rank;
        raise :class:`RankMismatch` naming the first entry that differs. Returns the fingerprints."""
        names, prints = fingerprint(named)
        gathered = self.gather_host(prints)
        for r, other in enumerate(gathered[1:], 1):
            diff = (other != gathered[0]) & ~(other.isnan() & gathered[0].isnan())
            if bool(diff.any()):
                bad = names[int(diff.nonzero()[0]) // 2]
                raise RankMismatch(f"{what}: rank {r}'s {bad} differs from rank 0's; the ranks no longer "
                                   "compute the same run")
        return [g.tolist() for g in gathered]


class NoEvents:
    """What ranks other than 0 write to the event stream: nothing."""

    def emit(self, type_: str, **payload: Any) -> dict:
        return {}

    def emit_lost_epoch_end(self, event: dict) -> None:
        pass

    def close(self) -> None:
        pass


class NoProgress:
    def due(self) -> bool:
        return False

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


def _flatten(value: Any, prefix: str, out: list[tuple[str, torch.Tensor]]) -> None:
    if isinstance(value, torch.Tensor):
        out.append((prefix, value.detach()))
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}]", out)
    elif isinstance(value, (bool, int, float)):
        out.append((prefix, torch.tensor(float(value))))


def fingerprint(named: dict[str, Any]) -> tuple[list[str], torch.Tensor]:
    """Two float64 numbers per tensor: its sum and its sum weighted by position (a permutation or a
    swapped pair changes the second). Equal state gives bit-equal fingerprints."""
    flat: list[tuple[str, torch.Tensor]] = []
    _flatten(named, "", flat)
    parts = []
    for _, t in flat:  # reduced where the tensor lives: two numbers per tensor cross to the host
        v = t.reshape(-1).to(torch.float64)
        position = torch.arange(1, len(v) + 1, dtype=torch.float64, device=v.device)
        parts.append(torch.stack([v.sum(), (v * position).sum()]).cpu())
    prints = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return [name for name, _ in flat], prints

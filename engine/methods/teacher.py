"""A distillation method's teacher (``method.teacher``): a run's checkpoint, frozen, in eval mode.

The teacher is a run, as a fine-tune's base is: a run folder (its best checkpoint, else its last) or a checkpoint
inside one (``<run>/checkpoints/<name>.pt``); `fairtui run` resolves a run id or name in the home to that file
before the engine starts (fairtui.launch.launcher.resolve_init_from). Its own ``profile.toml`` gives its
architecture, which may differ from the student's; its data set must be the student's. The weights are loaded
without running code (engine.runtime.checkpoint.load_checkpoint) and recorded, with their SHA-256, in the
student's `run_started` (``teacher``); a resume checks that the file is still the one the run began with.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.contract.profile_schema import ProfileError
from engine.contract.protocol import TEACHER_KEY as KEY, resolve_teacher_checkpoint

def load_teacher(ref: str, ctx: Any) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The frozen teacher on the context's device and what `run_started` records of it."""
    from engine.contract.profile_io import load_profile
    from engine.models import build_model
    from engine.runtime.checkpoint import CheckpointError, load_checkpoint, sha256_of

    path = resolve_teacher_checkpoint(ref)
    run = path.parent.parent
    try:
        profile = load_profile(run / "profile.toml")
    except ProfileError as err:
        raise ProfileError("profile", KEY, f"the teacher's profile {run / 'profile.toml'}: {err}") from None
    student = ctx.profile.data.dataset
    if profile.data.dataset != student:
        raise ProfileError("profile", KEY, f"the teacher {run.name} was trained on {profile.data.dataset}, the "
                           f"student trains on {student}")
    splits = ctx.splits
    model = build_model(profile.model, splits.input_shape, ctx.num_classes, splits.mean, splits.std)
    try:
        state = load_checkpoint(path, "cpu")
        model.load_state_dict(state["model"])
    except CheckpointError as err:
        raise ProfileError("profile", KEY, str(err)) from None
    except RuntimeError as err:  # load_state_dict: the weights do not fit the teacher's own profile
        first = str(err).strip().splitlines()[0][:200]
        raise ProfileError("profile", KEY, f"{path}: its weights do not fit its run's profile ({first})") from None
    model.to(ctx.device).eval().requires_grad_(False)
    epoch = state.get("epoch")
    record = {"from": ref, "file": str(path.resolve()), "sha256": sha256_of(path), "run_id": run.name,
              "checkpoint": path.stem, "epoch": epoch if isinstance(epoch, int) else None,
              "profile": profile.name, "method": profile.method.name, "arch": profile.model.arch,
              "base_width": profile.model.base_width, "seed": profile.seed}
    return model, record


def check_same_teacher(recorded: str | None, record: dict[str, Any]) -> None:
    """A resumed student distils the teacher it began with: the file's SHA-256 must be the recorded one."""
    if recorded and recorded != record["sha256"]:
        raise ProfileError("profile", KEY, f"{record['file']} has changed since this run started from it (sha256 "
                           f"{recorded[:12]}... then, {record['sha256'][:12]}... now): put the teacher back, or "
                           "start a new run")

"""A test-split result does not depend on the precision its run trained with: the final evaluation and
`fairtui eval` run in fp32 and eager even when training ran under bf16 autocast (the CUDA default since the
first GPU session, issue #36). On the CPU the engine never autocasts, so a bf16 runtime is forced here."""

import dataclasses

import torch

from engine.runtime import device as utils
from tests.conftest import TINY, make_run_dir, train_tiny


def record_autocast(monkeypatch) -> list:
    """Every dtype a Runtime.autocast() block was entered with (None: fp32)."""
    seen = []
    real = utils.Runtime.autocast

    def spy(self):
        seen.append(self.autocast_dtype)
        return real(self)

    monkeypatch.setattr(utils.Runtime, "autocast", spy)
    return seen


def bf16_cpu() -> utils.Runtime:
    return utils.Runtime(device=torch.device("cpu"), autocast_dtype=torch.bfloat16, channels_last=False)


def test_the_final_evaluation_runs_in_fp32_after_bf16_training(tmp_path, monkeypatch):
    from engine.contract.events import EventWriter
    from engine.training.final_eval import final_evaluation
    from engine.runtime.progress import Progress
    from engine.training.trainer import Trainer
    from engine.contract.profile_io import load_profile

    profile_path = tmp_path / "tiny.toml"
    profile_path.write_text(TINY)
    run_dir = make_run_dir(tmp_path, profile_path, overrides=("train.epochs=1",))
    profile = load_profile(run_dir / "profile.toml")
    trainer = Trainer(run_dir, profile, bf16_cpu(), EventWriter(run_dir / "events.jsonl", "t"),
                      Progress(run_dir / "progress.json"), lambda: False)
    trainer.start_or_resume()
    seen = record_autocast(monkeypatch)
    trainer.run_epoch(1)
    assert torch.bfloat16 in seen  # training and validation did run under bf16
    seen.clear()
    final_evaluation(trainer)
    assert seen and set(seen) == {None}


def test_fairtui_eval_runs_in_fp32_whatever_the_profile_asks(tmp_path, monkeypatch):
    from engine.entry import eval_run
    from engine.training import process

    run_dir = train_tiny(tmp_path)
    monkeypatch.setattr(process.StopFlag, "install", lambda self: None)
    monkeypatch.setattr(utils, "make_runtime", lambda cfg, *a, **k: dataclasses.replace(bf16_cpu()))
    seen = record_autocast(monkeypatch)
    assert eval_run.evaluate_run(run_dir, {"attacks": ["pgd3"], "checkpoint": "last", "split": "test"}) == 0
    assert seen and set(seen) == {None}

"""Evaluation cost: AutoAttack through `fairtui eval` against pyautoattack directly, and PGD-20 throughput.

    python benchmarks/bench_eval.py [--per-class 20] [--pgd-images 512]

1. AutoAttack (standard) on a fixed small model (a trained MLP on digits) and a fixed
   class-balanced test subset: the attack's time inside `fairtui eval RUN --attack aa` (the
   engine records it in the `eval_result` event) against calling `pyautoattack` directly in
   this process on the same model, data, seed and batch size. Target: within 3%. The whole
   command's wall time is shown too (engine start-up: Python, torch and the data).
2. PGD-20 evaluation throughput (images/s) through the engine's `predict` against a bare
   loop doing the same arithmetic (clean forward, 20 PGD steps, adversarial forward), for
   the small CNN on 8x8 digits and PreAct-ResNet18 on 32x32 inputs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILE = """
name = "bench-aa"
seed = 0
[data]
dataset = "digits"
val_per_class = 5
test_per_class = {per_class}
eval_batch_size = 1000
[model]
arch = "mlp"
[train]
epochs = 3
lr = 0.05
device = "cpu"
[attack]
eps = 0.1
step = 0.025
steps = 5
[method]
name = "pgd_at"
[eval]
attacks = ["clean"]
val_attack = "pgd3"
"""


def fairtui(*args: str) -> float:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "fairtui.cli", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return time.perf_counter() - t


def autoattack_rows(per_class: int) -> list[tuple[str, float]]:
    import torch

    from engine.attacks.autoattack import make_autoattack
    from engine.runtime.checkpoint import CheckpointStore
    from engine.contract.profile_io import load_profile
    from engine.data import load_splits
    from engine.models import build_model

    home = Path(tempfile.mkdtemp(prefix="fairtui-bench-eval-"))
    profile = home / "p.toml"
    profile.write_text(PROFILE.format(per_class=per_class))
    fairtui("run", str(profile), "--home", str(home), "--json")
    run_id = next((home / "runs").iterdir()).name
    startup = min(fairtui("eval", run_id, "--attack", "clean", "--force", "--checkpoint", "last", "--home", str(home))
                  for _ in range(2))
    wall = fairtui("eval", run_id, "--attack", "aa", "--checkpoint", "last", "--home", str(home))
    events = [json.loads(line) for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines()]
    through = [e for e in events if e["type"] == "eval_result" and e["attack"] == "aa"][-1]["time_s"]

    p = load_profile(home / "runs" / run_id / "profile.toml")
    splits = load_splits(p.data, p.seed)
    model = build_model(p.model, splits.input_shape, splits.num_classes, splits.mean, splits.std)
    model.load_state_dict(CheckpointStore(home / "runs" / run_id / "checkpoints").weights("last")[0])
    model.eval()
    x, y = splits.test.images(slice(None)), splits.test.y
    t = time.perf_counter()
    aa = make_autoattack(model, p.eval.eps, "linf", p.seed, splits.num_classes, False, torch.device("cpu"))
    aa.run_standard_evaluation(x, y, batch_size=p.data.eval_batch_size)
    direct = time.perf_counter() - t
    return [("AutoAttack inside fairtui eval (the engine's own timing of the attack)", through),
            ("AutoAttack via pyautoattack directly", direct),
            ("ratio fairtui / direct", through / direct),
            ("fairtui eval --attack aa, whole command (wall)", wall),
            ("fairtui eval --attack clean, whole command (start-up and data)", startup)]


def pgd_rows(images: int) -> list[tuple[str, float, float]]:
    import torch
    import torch.nn.functional as F

    from engine.attacks.suite import AttackSettings, build_attack
    from engine.contract.config import ModelConfig, TrainConfig
    from engine.data.tensors import TensorData
    from engine.evaluation.evaluate import predict
    from engine.models import build_model
    from engine.runtime.device import make_runtime

    rows = []
    for arch, shape, bs in (("small_cnn", (1, 8, 8), 256), ("preact_resnet18", (3, 32, 32), 64)):
        n = images if arch == "small_cnn" else max(64, images // 8)
        model = build_model(ModelConfig(arch=arch), shape, 10, (0.5,) * shape[0], (0.25,) * shape[0]).eval()
        data = TensorData(torch.rand(n, *shape), torch.randint(0, 10, (n,)))
        rt = make_runtime(TrainConfig(device="cpu"))
        attack = build_attack("pgd20", model, AttackSettings(eps=8 / 255, step=2 / 255))
        t = time.perf_counter()
        predict(model, data, attack, rt, bs)
        engine = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for start in range(0, n, bs):
            x, y = data.images(slice(start, start + bs)), data.y[start:start + bs]
            with torch.no_grad():
                model(x).argmax(1)
            delta = (torch.rand_like(x) * 2 - 1) * 8 / 255
            delta = (x + delta).clamp(0, 1) - x
            for _ in range(20):
                delta.requires_grad_(True)
                (grad,) = torch.autograd.grad(F.cross_entropy(model(x + delta), y, reduction="none").sum(), delta)
                delta = (delta.detach() + 2 / 255 * grad.sign()).clamp(-8 / 255, 8 / 255)
                delta = (x + delta).clamp(0, 1) - x
            with torch.no_grad():
                model(x + delta).argmax(1)
        bare = n / (time.perf_counter() - t)
        rows.append((f"PGD-20 eval, {arch}, {n} images", engine, bare))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-class", type=int, default=20)
    parser.add_argument("--pgd-images", type=int, default=512)
    args = parser.parse_args()
    print("| AutoAttack (standard), digits MLP, %d test images | seconds |" % (10 * args.per_class))
    print("|---|---|")
    for name, value in autoattack_rows(args.per_class):
        print(f"| {name} | {value:.3f} |")
    print()
    print("| PGD-20 evaluation | engine img/s | bare loop img/s | engine / bare |")
    print("|---|---|---|---|")
    for name, engine, bare in pgd_rows(args.pgd_images):
        print(f"| {name} | {engine:.1f} | {bare:.1f} | {engine / bare:.3f} |")


if __name__ == "__main__":
    main()

"""Training throughput of several runs at once on one GPU: how many runs a table phase should start together.

    python benchmarks/bench_pack.py [--data-root DIR] [--profile at] [--runs 1,2,4,6] [--mps-runs 4,6,2]
                                    [--epochs 2] [--deadline-s 540] [--device cuda|cpu] [--tiny] [--json FILE]

For each count N in --runs it starts N processes, each an engine run of the profile with its CUDA defaults
(bf16 autocast, channels-last, `train.compile = "auto"`: compiled with CUDA graphs), seeds 0..N-1. Every
process trains one epoch first (it compiles and warms up), waits at a barrier until all N have, then trains
--epochs timed epochs (`Trainer.run_epoch`: training, validation, the method's end of epoch, checkpoint,
event). The aggregate throughput is every run's timed training images (49,000 an epoch for at.toml) over the
window from the barrier to the last run's end; the speed-up is that against N = 1. --mps-runs repeats counts
under CUDA MPS (`nvidia-cuda-mps-control -d`) where the machine has it. Beside each count it reads the GPU's
utilisation and memory (NVML, every 0.5 s, in the timed window) and each run's CPU seconds over the window:
a run whose CPU seconds come near its wall seconds is held by its host thread (kernel launches, Python), not
by the GPU.

A count whose estimated time would pass --deadline-s (measured from the start) is skipped and listed as
such, so that a lent machine's command ends in time; the JSON is written after every count. `--tiny --device
cpu` is a seconds-long smoke mode (small CNN, 2 PGD steps, 64 random images) that the tests run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TINY = ('model.arch="small_cnn"', "attack.steps=2", "data.batch_size=16", "data.eval_batch_size=16",
        "data.val_fraction=0.1")


def worker(args) -> None:
    """One run: a warm-up epoch, the barrier, the timed epochs; its numbers to --out as JSON."""
    import torch

    from bench_gpu import bench_trainer, sync, synthetic_cifar  # the benchmark folder is on sys.path
    from engine.contract.profile_io import load_profile

    if not args.data_root:
        import engine.data.datasets as datasets

        datasets.load_raw = synthetic_cifar(64 if args.tiny else 50_000, 16 if args.tiny else 10_000)
    overrides = [f'train.device="{args.device}"', f"seed={args.seed}", *(TINY if args.tiny else ())]
    if args.data_root:
        overrides.append(f'data.root="{args.data_root}"')
    profile = load_profile(ROOT / "profiles" / f"{args.profile}.toml", overrides)
    out = Path(args.out)
    t_start = time.time()

    with tempfile.TemporaryDirectory() as tmp:
        rt, trainer = bench_trainer(Path(tmp), profile)
        trainer.run_epoch(1)
        sync(rt.device)
        warm_s = time.time() - t_start
        Path(f"{out}.ready").touch()
        go = Path(args.go)
        while not go.exists():
            time.sleep(0.02)
        t0, cpu0 = time.time(), time.process_time()
        epochs = []
        for epoch in range(2, 2 + args.epochs):
            t = time.time()
            trainer.run_epoch(epoch)
            sync(rt.device)
            epochs.append(time.time() - t)
        t1, cpu1 = time.time(), time.process_time()
        result = {"seed": args.seed, "warm_s": warm_s, "epoch_s": epochs, "t0": t0, "t1": t1, "cpu_s": cpu1 - cpu0,
                  "train_images": len(trainer.train_data), "device": rt.describe()}
        if rt.device.type == "cuda":
            result["max_memory_gib"] = torch.cuda.max_memory_allocated(rt.device) / 2**30
    out.write_text(json.dumps(result))


class GpuSampler:
    """The GPU's utilisation and used memory every 0.5 s through NVML, with wall-clock times; silent without."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML (the CPU, a machine without the library): no samples
            self._nvml = None

    def __enter__(self) -> GpuSampler:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
                mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2**30
            except Exception:  # noqa: BLE001 - a failed read is a missing sample
                continue
            self.samples.append((time.time(), float(util), mem))

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def between(self, t0: float, t1: float) -> dict:
        inside = [(u, m) for t, u, m in self.samples if t0 <= t <= t1]
        if not inside:
            return {}
        return {"gpu_util_mean": statistics.fmean(u for u, _ in inside),
                "gpu_mem_max_gib": max(m for _, m in inside)}


def mps(start: bool, env: dict) -> str:
    """Starts (or quits) the MPS control daemon; returns an error text, empty when it worked."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return "nvidia-cuda-mps-control is not on this machine"
    try:
        if start:
            done = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=30)
        else:
            done = subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{type(err).__name__}: {err}"
    return "" if done.returncode == 0 else f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[:300]}"


def level(n: int, use_mps: bool, args, work: Path) -> dict:
    """N runs at once: start them, release them together at the barrier, and sum their timed images."""
    row: dict = {"runs": n, "mps": use_mps}
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    if use_mps:
        env.update(CUDA_MPS_PIPE_DIRECTORY=str(work / "mps-pipe"), CUDA_MPS_LOG_DIRECTORY=str(work / "mps-log"))
        for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
        error = mps(True, env)
        if error:
            row["error"] = f"MPS did not start: {error}"
            return row
    tag = f"n{n}{'-mps' if use_mps else ''}"
    go = work / f"{tag}.go"
    outs = [work / f"{tag}-run{i}.json" for i in range(n)]
    started = time.time()
    procs = []
    try:
        with GpuSampler() as sampler:
            for i, out in enumerate(outs):
                cmd = [sys.executable, __file__, "--worker", "--seed", str(i), "--out", str(out), "--go", str(go),
                       "--profile", args.profile, "--epochs", str(args.epochs), "--device", args.device,
                       "--data-root", args.data_root, *(["--tiny"] if args.tiny else [])]
                log = open(work / f"{tag}-run{i}.log", "w")  # noqa: SIM115 - closed when the process ends
                procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
            while not all(Path(f"{o}.ready").exists() for o in outs):
                if any(p.poll() is not None for p, _ in procs):
                    break
                time.sleep(0.05)
            go.touch()
            for p, log in procs:
                p.wait()
                log.close()
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
        if use_mps:
            mps(False, env)
    row["wall_s"] = time.time() - started
    failed = [i for i, (p, _) in enumerate(procs) if p.returncode != 0 or not outs[i].exists()]
    if failed:
        tails = [(work / f"{tag}-run{i}.log").read_text()[-600:] for i in failed[:1]]
        row["error"] = f"runs {failed} failed: {tails[0] if tails else ''}"
        return row
    runs = [json.loads(o.read_text()) for o in outs]
    t0, t1 = min(r["t0"] for r in runs), max(r["t1"] for r in runs)
    images = sum(r["train_images"] * len(r["epoch_s"]) for r in runs)
    row.update(window_s=t1 - t0, images=images, images_per_s=images / (t1 - t0),
               epoch_s_mean=statistics.fmean(e for r in runs for e in r["epoch_s"]),
               warm_s_max=max(r["warm_s"] for r in runs),
               cpu_per_wall=statistics.fmean(r["cpu_s"] / (r["t1"] - r["t0"]) for r in runs),
               device=runs[0]["device"], per_run=runs, **sampler.between(t0, t1))
    if "max_memory_gib" in runs[0]:
        row["run_memory_gib_max"] = max(r["max_memory_gib"] for r in runs)
    return row


def estimate_s(n: int, rows: list[dict]) -> float:
    """A count's likely wall time from those measured: the slowest warm-up, then its images at the best rate."""
    done = [r for r in rows if "images_per_s" in r]
    if not done:
        return 0.0
    warm = max(r["warm_s_max"] for r in done) * (1.5 if n > max(r["runs"] for r in done) else 1.0)
    per_run_images = done[0]["images"] / done[0]["runs"]
    return warm + n * per_run_images / max(r["images_per_s"] for r in done)


def table(rows: list[dict]) -> str:
    single = next((r["images_per_s"] for r in rows if r["runs"] == 1 and not r["mps"] and "images_per_s" in r), None)
    lines = ["| runs | MPS | images/s (all runs) | speed-up | epoch s (each run) | GPU util % | GPU memory GiB "
             "| CPU s / wall s (each run) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['runs']} | {'yes' if r['mps'] else 'no'} "
        if "images_per_s" not in r:
            lines.append(head + f"| {r.get('error') or r.get('skipped', '')} | | | | | |".replace("\n", " "))
            continue
        speed = f"{r['images_per_s'] / single:.2f}x" if single else "-"
        util = f"{r['gpu_util_mean']:.0f}" if "gpu_util_mean" in r else "-"
        mem = f"{r['gpu_mem_max_gib']:.1f}" if "gpu_mem_max_gib" in r else "-"
        lines.append(head + f"| {r['images_per_s']:.0f} | {speed} | {r['epoch_s_mean']:.1f} | {util} | {mem} "
                            f"| {r['cpu_per_wall']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default="", help="folder holding cifar-10-batches-py (else random data)")
    parser.add_argument("--profile", default="at", help="a profile under profiles/, by name")
    parser.add_argument("--runs", default="1,2,4,6", help="counts of concurrent runs, in order")
    parser.add_argument("--mps-runs", default="4,6,2", help="counts to repeat under CUDA MPS ('' for none)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per run, after the warm-up epoch")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run")
    parser.add_argument("--deadline-s", type=float, default=0, help="skip counts that would end after this")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (small CNN, 64 images)")
    parser.add_argument("--json", default="", help="also write the rows, with every run's numbers, to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--go", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    plan = [(int(n), False) for n in args.runs.split(",") if n]
    if args.device == "cuda":
        plan += [(int(n), True) for n in args.mps_runs.split(",") if n]
    begun, rows = time.time(), []
    with tempfile.TemporaryDirectory() as tmp:
        for n, use_mps in plan:
            left = args.deadline_s - (time.time() - begun) if args.deadline_s else float("inf")
            need = estimate_s(n, rows)
            if need > left:
                rows.append({"runs": n, "mps": use_mps, "skipped": f"skipped: about {need:.0f} s needed, {left:.0f} left"})
            else:
                rows.append(level(n, use_mps, args, Path(tmp)))
            print(f"runs {n} mps {use_mps}: " + json.dumps({k: v for k, v in rows[-1].items() if k != "per_run"}),
                  file=sys.stderr, flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps({"profile": args.profile, "epochs": args.epochs,
                                                       "data": args.data_root or "random", "rows": rows}, indent=1))
    device = next((r["device"] for r in rows if "device" in r), args.device)
    print(f"{args.profile}.toml, the engine's defaults on {device}; {args.epochs} timed epochs per run after a "
          "warm-up epoch; images/s counts every run's training images over the common window")
    print(table(rows))


if __name__ == "__main__":
    main()

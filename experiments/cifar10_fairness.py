"""The CIFAR-10 fairness tables: every method through fairtui itself, each finished run's small files
collected into the repository, the table generated from those files.

    python experiments/cifar10_fairness.py --scale cpu|quick|short --data-root DIR [--download] [--home DIR] [--seeds 0 1 2]
                                           [--methods at trades ...] [--workers N] [--threads T]
                                           [--aa-per-class N] [--gpus 0] [--set KEY=VALUE ...]
    python experiments/cifar10_fairness.py --scale cpu --table-only [--results DIR]

Scales: ``cpu`` trains `profiles/cifar10-cpu-<method>.toml` (the CPU-scale protocol: PreAct-ResNet18 at
1/8 width on 10,000 images, docs/results.md) and collects into experiments/results/cifar10-cpu; ``quick``
trains `profiles/cifar10-cpu-quick-<method>.toml` (the first-look protocol: 5,000 images, 6 epochs, a fixed
test part of 200 images a class) into experiments/results/cifar10-cpu-quick; ``short``
trains `profiles/cifar10-short-<method>.toml` (the GPU short schedule) into experiments/results/cifar10.

Jobs run row by row (all seeds of PGD-AT, then TRADES, ...: METHODS' order), so that an interrupted
table is still useful; ``--workers N`` runs N at once, each engine with ``--threads T`` CPU threads
(OMP_NUM_THREADS). FRL and FAAL fine-tune the same seed's PGD-AT run of this table (`method.init_from`)
and wait for it. Each run is evaluated by its profile (PGD-20 on the whole test split: the headline),
then, with ``--aa-per-class N`` (N > 0), by `fairtui eval --attack aa --n-per-class N` on a
class-balanced test subset (exploratory, labelled as such). The script is idempotent: a finished run is
reused, a stopped, failed or lost one is resumed (`fairtui resume`, exact), so a session cut off mid-way
loses only the runs in flight. Each finished run's ``events.jsonl``, ``profile.toml`` and ``meta.json``
(never checkpoints) are copied to ``<results>/<profile>/<run-id>/`` as soon as it ends; the table is
then generated from those files alone (experiments/fairness_table.py).

`--set` passes overrides to every run (`--set data.train_per_class=20` for a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.fairness_table import METHODS as ALL_METHODS  # noqa: E402
from experiments.fairness_table import at_least, markdown  # noqa: E402

SCALES = {"cpu": ("cifar10-cpu", ROOT / "experiments" / "results" / "cifar10-cpu"),
          "quick": ("cifar10-cpu-quick", ROOT / "experiments" / "results" / "cifar10-cpu-quick"),
          "short": ("cifar10-short", ROOT / "experiments" / "results" / "cifar10")}
# The checkpoint of the base a fine-tune starts from, by scale: a run folder gives its best; the quick protocol
# evaluates only the last checkpoint (its headline), so its fine-tunes start from that one.
INIT_CHECKPOINT = {"quick": "last"}
# Fine-tunes of the same seed's PGD-AT (or TRADES) run, and ABSLD's student of the same seed's teacher run; the
# method's own epochs come from its profile. START_KEY: the key that names the run (default method.init_from).
FINE_TUNES = {"frl": "at", "faal": "at", "csr": "trades", "absld": "teacher"}
START_KEY = {"absld": "method.teacher"}
RESUMABLE = {"stopped", "failed", "lost"}
SMALL_FILES = ("events.jsonl", "profile.toml", "meta.json")


class Failed(Exception):
    pass


def read_toml(path: Path) -> dict:
    import tomllib

    with open(path, "rb") as fh:
        return tomllib.load(fh)


def methods_of(prefix: str) -> list[str]:
    """The rows this scale has a profile for, in the table's order."""
    return [m for m in ALL_METHODS if (ROOT / "profiles" / f"{prefix}-{m}.toml").is_file()]


def fairtui(args: list[str], home: Path, env: dict | None = None, watch=None) -> dict | list:
    """`fairtui ARGS --json`; ``watch`` (a callable) is called every 30 s while it runs (a training's progress)."""
    cmd = [sys.executable, "-m", "fairtui.cli", *args, "--json", "--home", str(home)]
    if watch is None:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    else:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=env) as proc:
            got: dict = {}
            reader = threading.Thread(target=lambda: got.update(zip(("stdout", "stderr"), proc.communicate())))
            reader.start()
            while reader.is_alive():
                reader.join(30)
                if reader.is_alive():
                    watch()
            out = subprocess.CompletedProcess(cmd, proc.returncode, got.get("stdout", ""), got.get("stderr", ""))
    if out.returncode != 0:
        raise Failed(f"`fairtui {' '.join(args)}` exited {out.returncode}:\n{out.stderr[-3000:]}")
    try:
        return json.loads(out.stdout) if out.stdout.strip() else {}  # ls: a list
    except ValueError:
        raise Failed(f"`fairtui {' '.join(args)}` printed no JSON:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def find(name: str, home: Path) -> dict | None:
    """The newest run called ``name`` in ``home``, as `fairtui ls --json` lists it."""
    listed = fairtui(["ls", "--name", name], home)
    runs = [r for r in (listed or []) if r.get("name") == name]
    return max(runs, key=lambda r: r.get("created", 0)) if runs else None


def copy_small_files(run_dir: Path, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for name in SMALL_FILES:
        shutil.copy2(run_dir / name, target / name)
    return target


class Watch:
    """A training's progress, said when it moves on (an epoch, or an evaluation): a run is 15 to 45 minutes, and a
    script that prints nothing in that time looks hung."""

    def __init__(self, table: "Table", name: str):
        self.table, self.name, self.said = table, name, None

    def __call__(self) -> None:
        runs = self.table.home / "runs"
        newest = None
        for meta in sorted(runs.glob("*/meta.json"), reverse=True) if runs.is_dir() else []:
            try:
                if json.loads(meta.read_text()).get("name") == self.name:
                    newest = meta.parent
                    break
            except (OSError, ValueError):
                continue
        if newest is None:
            return
        try:
            p = json.loads((newest / "progress.json").read_text())
        except (OSError, ValueError):
            return
        where = (p.get("phase"), p.get("epoch"))
        if where == self.said:
            return
        self.said = where
        started = run_started_at(newest)  # the run's start, not the phase's (that said "0 min in" every epoch)
        elapsed = f", {(time.time() - started) / 60:.0f} min in" if started is not None else ""
        self.table.say(f"{self.name}: {p.get('phase', '?')} epoch {p.get('epoch', '?')} "
                       f"(batch {p.get('batch', '?')} of {p.get('batches', '?')}){elapsed}")


def run_started_at(run_dir: Path) -> float | None:
    """When the run began: its stream's first event (run_started, before any resume)."""
    try:
        with open(run_dir / "events.jsonl") as fh:
            return float(json.loads(fh.readline())["t"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Table:
    """One scale's jobs: which runs to train, where, and where their small files go."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.home = args, args.home
        self.prefix, default_results = SCALES[args.scale]
        self.results = args.results or default_results
        self.env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads)) \
            if args.threads else None
        self.done: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def name(self, method: str, seed: int) -> str:
        return f"{self.prefix}-{method}-s{seed}"

    def say(self, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

    def train(self, method: str, seed: int) -> dict:
        """Train (or resume, or reuse) one run; return `fairtui show --json` of it."""
        name, args = self.name(method, seed), self.args
        gpus = ["--gpus", args.gpus] if args.gpus else []
        existing = find(name, self.home)
        while existing is not None and existing.get("status") in ("running", "queued"):
            time.sleep(30)  # started by an earlier call of this script, whose engine lives on: wait for it
            existing = find(name, self.home)
        if existing is not None and existing.get("status") in RESUMABLE:
            self.say(f"resuming {name} ({existing['status']})")
            fairtui(["resume", existing["run_id"], *gpus], self.home, self.env)
        elif existing is None:
            sets = [f"data.root={args.data_root}", f"seed={seed}"]
            if method in FINE_TUNES:  # fine-tune this table's run of the same seed (its best checkpoint)
                base = self.name(FINE_TUNES[method], seed)
                self.done[base].wait()
                shown = fairtui(["show", base], self.home)
                init = shown["run_dir"]
                if self.args.scale in INIT_CHECKPOINT:
                    init = str(Path(init) / "checkpoints" / f"{INIT_CHECKPOINT[self.args.scale]}.pt")
                sets.append(f"{START_KEY.get(method, 'method.init_from')}={init}")
                if self.prefix == "cifar10-short" and method == "frl":  # the short profile pre-trains in-run
                    sets += ["method.pretrain_epochs=0", "train.epochs=10"]
            sets += args.set  # the caller's overrides win
            self.say(f"training {name}")
            cmd = ["run", str(ROOT / "profiles" / f"{self.prefix}-{method}.toml"), "--name", name,
                   "--tag", self.prefix, *gpus]
            for s in sets:
                cmd += ["--set", s]
            fairtui(cmd, self.home, self.env, watch=Watch(self, name))
        shown = fairtui(["show", name], self.home)
        if shown.get("status") != "completed":
            raise Failed(f"{name} ended {shown.get('status')}: {shown.get('error')}")
        return shown

    def autoattack(self, method: str, seed: int, shown: dict) -> None:
        """AutoAttack on a class-balanced test subset of the best checkpoint (and CFA's FAWA weights).

        A result already stored at these settings is reused by `fairtui eval` itself."""
        checkpoints = ["best"]
        if method.startswith("cfa") and any(r["checkpoint"] == "fawa" for r in shown["results"]):
            checkpoints.append("fawa")  # FAWA weights exist only if the validation gate opened
        gpus = ["--gpus", self.args.gpus] if self.args.gpus else []
        for ckpt in checkpoints:
            self.say(f"autoattack {self.name(method, seed)} @ {ckpt}")
            fairtui(["eval", self.name(method, seed), "--attack", "aa", "--checkpoint", ckpt, "--n-per-class",
                     str(self.args.aa_per_class), *gpus], self.home, self.env)

    def collect(self, method: str, shown: dict) -> Path:
        """Copy the run's small files (never checkpoints) to <results>/<profile>/<run-id>/, unless a run of the
        same profile and seed is collected there already: a table never holds a seed twice, and the collected
        run stays the row's. Such a run is a base retrained in a new home for a fine-tune; on another machine
        (another CPU's kernels) its numbers differ from the row's run of that seed, so it goes to
        <results>-bases/<profile>/<run-id>/ instead, where a fine-tune's actual base can be read."""
        run_dir = Path(shown["run_dir"])
        folder = self.results / f"{self.prefix}-{method}"
        seed = read_toml(run_dir / "profile.toml").get("seed")
        for other in sorted(folder.glob("*/profile.toml")) if folder.is_dir() else []:
            if other.parent.name != run_dir.name and read_toml(other).get("seed") == seed:
                bases = self.results.with_name(self.results.name + "-bases") / folder.name
                self.say(f"{self.name(method, seed)}: seed {seed} is collected already ({other.parent.name}); "
                         f"{run_dir.name} goes to {bases}")
                return copy_small_files(run_dir, bases / run_dir.name)
        return copy_small_files(run_dir, folder / run_dir.name)


    def collected(self, method: str, seed: int) -> bool:
        """Whether the table already holds this profile and seed (collected from this home or an earlier one)."""
        folder = self.results / f"{self.prefix}-{method}"
        return folder.is_dir() and any(read_toml(p).get("seed") == seed for p in folder.glob("*/profile.toml"))

    def needed_as_base(self, method: str, seed: int) -> bool:
        """Whether a fine-tune of this call, not yet collected, starts from this method's run of the seed."""
        return any(FINE_TUNES.get(m) == method and not self.collected(m, seed) for m in self.args.methods)

    def job(self, method: str, seed: int) -> None:
        name = self.name(method, seed)
        try:
            if find(name, self.home) is None and self.collected(method, seed) and not self.needed_as_base(method, seed):
                # an earlier home's run (a session's home does not outlive its machine): hours not spent again
                self.say(f"{name}: seed {seed} is collected already in {self.results}; not trained again")
                return
            self.train(method, seed)
            if self.args.aa_per_class:
                self.autoattack(method, seed, fairtui(["show", name], self.home))
            self.say(f"collected {name} into {self.collect(method, fairtui(['show', name], self.home))}")
        finally:
            self.done[name].set()  # a fine-tune waiting on it goes on (and fails if this one did)

    def run(self) -> list[str]:
        jobs = [(m, s) for m in self.args.methods for s in self.args.seeds]
        for m, s in jobs:
            self.done[self.name(m, s)] = threading.Event()
        for m, s in jobs:
            base = FINE_TUNES.get(m)
            if base and self.name(base, s) not in self.done:
                if find(self.name(base, s), self.home) is None:
                    raise SystemExit(f"{m} fine-tunes this table's {base} run of seed {s}: include `{base}` in "
                                     f"--methods")
                self.done[self.name(base, s)] = threading.Event()
                self.done[self.name(base, s)].set()
        errors = []
        with ThreadPoolExecutor(max_workers=self.args.workers) as pool:
            futures = {pool.submit(self.job, m, s): self.name(m, s) for m, s in jobs}
            for future, name in futures.items():
                try:
                    future.result()
                except Failed as err:
                    errors.append(f"{name}: {err}")
                    self.say(f"FAILED {name}: {err}")
        return errors


def download(root: str) -> None:
    """CIFAR-10 into ``root`` once, before any run starts (the runs then share it: no two downloads race)."""
    if (Path(root) / "cifar-10-batches-py" / "test_batch").is_file():
        return
    import torchvision

    Path(root).mkdir(parents=True, exist_ok=True)
    try:
        torchvision.datasets.CIFAR10(root, download=True)
    except Exception as err:  # no network: say what to do instead
        raise SystemExit(f"could not download CIFAR-10 into {root}: {err}\n"
                         "put cifar-10-batches-py/ there (https://www.cs.toronto.edu/~kriz/cifar.html) and "
                         "run again without --download") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="short")
    parser.add_argument("--data-root", help="the folder that holds cifar-10-batches-py")
    parser.add_argument("--download", action="store_true",
                        help="download CIFAR-10 into --data-root first (torchvision; needs the network)")
    parser.add_argument("--home", type=Path, default=Path(".fairtui-cifar10"),
                        help="where the runs are trained (default ./.fairtui-cifar10, ignored by git)")
    parser.add_argument("--results", type=Path, help="where the small files go (default: the scale's folder)")
    parser.add_argument("--seeds", type=at_least(0), nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", help="rows to train (default: every profile of the scale)")
    parser.add_argument("--workers", type=at_least(1), default=1, help="runs at once")
    parser.add_argument("--threads", type=at_least(0), default=0, help="CPU threads per engine (0: PyTorch's default)")
    parser.add_argument("--aa-per-class", type=at_least(0), default=0,
                        help="AutoAttack on N test images per class (0: none)")
    parser.add_argument("--gpus", default="", help="passed to fairtui run/eval (e.g. 0, or cpu)")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run (smoke tests)")
    parser.add_argument("--table-only", action="store_true", help="print the table of the collected runs")
    args = parser.parse_args()
    prefix, default_results = SCALES[args.scale]
    available = methods_of(prefix)
    args.methods = args.methods or available
    unknown = [m for m in args.methods if m not in available]
    if unknown:
        parser.error(f"no profiles/{prefix}-<method>.toml for {unknown}; this scale has {available}")
    if not args.table_only:
        if not args.data_root:
            parser.error("--data-root is needed to train")
        args.data_root = str(Path(args.data_root).expanduser().resolve())
        if args.download:
            download(args.data_root)
        errors = Table(args).run()
        if errors:
            print(markdown(args.results or default_results))
            raise SystemExit("stopped:\n" + "\n".join(errors))
    print(markdown(args.results or default_results))


def interrupted() -> None:
    """Ctrl-C: each `fairtui run` in flight got it too and stops its engine after the batch, keeping the
    checkpoint; the same command again resumes those runs and reuses the finished ones."""
    print("\ninterrupted: the runs in flight stop after their batch with their checkpoints; run the same command "
          "again to resume them", file=sys.stderr)
    raise SystemExit(130)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        interrupted()

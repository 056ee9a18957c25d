"""The CIFAR-10 fairness table on a short schedule: every method through fairtui itself.

    python experiments/cifar10_fairness.py --data-root DIR [--home DIR] [--seeds 0] [--methods at trades ...]
                                           [--aa-per-class 100] [--gpus 0] [--set KEY=VALUE ...] [--table-only]

For each seed it trains, with `fairtui run` on `profiles/cifar10-short-<method>.toml`:
PGD-AT, TRADES, FRL (Reweight+Remargin, fine-tuned from this table's PGD-AT run through
`method.init_from`), CFA on AT and on TRADES, WAT, Tian et al.'s class-wise-beta TRADES, and DAFA on
TRADES.
Each run is evaluated by its profile with PGD-20 on the full test set (the run's headline number),
then with `fairtui eval --attack aa --n-per-class N` on a class-balanced test subset (an exploratory
result, labelled as such; CFA's FAWA weights too). The script is idempotent: a finished run is
reused, a stopped, failed or lost one is resumed (`fairtui resume`), so a GPU session cut into
10-minute commands can call it again and again. It prints a Markdown table built from the runs'
own results (`fairtui show --json`) and event streams (device, epoch times).

`--set` passes overrides to every run (`--set data.train_per_class=20` for a smoke test on the CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ["at", "trades", "frl", "cfa-at", "cfa-trades", "wat", "tian", "dafa"]
LABELS = {"at": "PGD-AT", "trades": "TRADES", "frl": "FRL (RW+RM, from PGD-AT)", "cfa-at": "CFA on AT",
          "cfa-trades": "CFA on TRADES", "wat": "WAT", "tian": "Tian et al. (TRADES, class-wise beta)",
          "dafa": "DAFA on TRADES"}
TAG = "cifar10-short"
RESUMABLE = {"stopped", "failed", "lost"}


class Failed(Exception):
    pass


def fairtui(args: list[str], home: Path, check: bool = True) -> dict | list:
    cmd = [sys.executable, "-m", "fairtui.cli", *args, "--json", "--home", str(home)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if check and out.returncode != 0:
        raise Failed(f"`fairtui {' '.join(args)}` exited {out.returncode}:\n{out.stderr[-3000:]}")
    try:
        return json.loads(out.stdout) if out.stdout.strip() else {}  # ls: a list
    except ValueError:
        raise Failed(f"`fairtui {' '.join(args)}` printed no JSON:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def find(name: str, home: Path) -> dict | None:
    """The newest run called ``name`` in ``home``, as `fairtui ls --json` lists it."""
    listed = fairtui(["ls", "--name", name], home)
    runs = [r for r in (listed or []) if r.get("name") == name]
    return runs[0] if runs else None


def run_name(method: str, seed: int) -> str:
    return f"{TAG}-{method}-s{seed}"


def train(method: str, seed: int, args: argparse.Namespace) -> dict:
    """Train (or resume, or reuse) one row's run; return `fairtui show --json` of it."""
    name = run_name(method, seed)
    existing = find(name, args.home)
    gpus = ["--gpus", args.gpus] if args.gpus else []
    if existing is not None and existing.get("status") in RESUMABLE:
        print(f"resuming {name} ({existing['status']})", file=sys.stderr, flush=True)
        fairtui(["resume", existing["run_id"], *gpus], args.home)
    elif existing is None:
        sets = [f"data.root={args.data_root}", f"seed={seed}"]
        if method == "frl":  # fine-tune this table's PGD-AT run: 10 FRL epochs from its best checkpoint
            at = fairtui(["show", run_name("at", seed)], args.home)
            sets += [f"method.init_from={at['run_dir']}", "method.pretrain_epochs=0", "train.epochs=10"]
        sets += args.set  # the caller's overrides win
        print(f"training {name}", file=sys.stderr, flush=True)
        cmd = ["run", str(ROOT / "profiles" / f"cifar10-short-{method}.toml"), "--name", name, "--tag", TAG, *gpus]
        for s in sets:
            cmd += ["--set", s]
        fairtui(cmd, args.home)
    shown = fairtui(["show", name], args.home)
    if shown.get("status") != "completed":
        raise Failed(f"{name} ended {shown.get('status')}: {shown.get('error')}")
    return shown


def autoattack(method: str, seed: int, shown: dict, args: argparse.Namespace) -> None:
    """AutoAttack on a class-balanced test subset of the best checkpoint (and CFA's FAWA weights).

    FAWA weights exist only if the validation gate opened at least once; the profile's own PGD-20
    evaluation of them says whether it did.
    """
    checkpoints = ["best"]
    if method.startswith("cfa") and pick(shown["results"], "pgd20", "fawa") is not None:
        checkpoints.append("fawa")
    gpus = ["--gpus", args.gpus] if args.gpus else []
    for ckpt in checkpoints:
        print(f"autoattack {run_name(method, seed)} @ {ckpt}", file=sys.stderr, flush=True)
        fairtui(["eval", run_name(method, seed), "--attack", "aa", "--checkpoint", ckpt, "--n-per-class",
                 str(args.aa_per_class), *gpus], args.home)


def events(run_dir: str) -> list[dict]:
    out = []
    for line in (Path(run_dir) / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line of a killed run
    return out


def pick(results: list[dict], attack: str, checkpoint: str, n_per_class: int = 0) -> dict | None:
    for r in results:
        if (r["attack"] == attack and r["checkpoint"] == checkpoint and r["split"] == "test"
                and (r.get("n_per_class") or 0) == n_per_class):
            return r
    return None


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def mean_pct(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return pct(values[0])
    return f"{statistics.mean(values) * 100:.1f} ± {statistics.stdev(values) * 100:.1f}"


def table(args: argparse.Namespace) -> str:
    lines = ["| method | checkpoint | clean avg | PGD-20 avg | PGD-20 worst | PGD-20 worst 20% | AA avg | AA worst "
             "| AA worst 20% | weakest class (PGD-20) | epoch time | device |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    test_images: set[int] = set()
    for method in args.methods:
        for ckpt in (["best", "fawa"] if method.startswith("cfa") else ["best"]):
            cells: dict[str, list] = {}
            weakest, times, devices = [], [], set()
            for seed in args.seeds:
                name = run_name(method, seed)
                found = find(name, args.home)
                if found is None:
                    continue
                shown = fairtui(["show", name], args.home)
                everything = shown["results"] + shown.get("other_results", [])
                pgd, aa = pick(everything, "pgd20", ckpt), pick(everything, "aa", ckpt, args.aa_per_class)
                for key, r, field in (("clean", pgd, "avg_clean"), ("pgd", pgd, "avg_robust"),
                                      ("pgd_worst", pgd, "worst_robust"), ("pgd_w20", pgd, "worst20_robust"),
                                      ("aa", aa, "avg_robust"), ("aa_worst", aa, "worst_robust"),
                                      ("aa_w20", aa, "worst20_robust")):
                    cells.setdefault(key, []).append(r.get(field) if r else None)
                if pgd:
                    acc = pgd["robust_acc_per_class"]
                    weakest.append(shown["class_names"][min(range(len(acc)), key=acc.__getitem__)])
                evs = events(shown["run_dir"])
                times += [e["time_s"] for e in evs if e.get("type") == "epoch_end"]
                test_images |= {sum(e["split_sizes"]["test"]) for e in evs if e.get("type") == "run_started"}
                devices |= {e["device"] for e in evs if e.get("type") in ("run_started", "run_resumed")}
            if not any(v is not None for v in cells.get("pgd", [])):
                continue  # not trained yet, or no FAWA weights (the gate never opened)
            label = LABELS[method] + (" (FAWA weights)" if ckpt == "fawa" else "")
            epoch_time = f"{statistics.median(times):.0f} s" if times else "-"
            lines.append(f"| {label} | {ckpt} | " + " | ".join(mean_pct(cells[k]) for k in (
                "clean", "pgd", "pgd_worst", "pgd_w20", "aa", "aa_worst", "aa_w20"))
                + f" | {', '.join(sorted(set(weakest))) or '-'} | {epoch_time} | {'; '.join(sorted(devices))} |")
    sizes = " or ".join(f"{n:,}" for n in sorted(test_images)) or "?"
    title = (f"CIFAR-10 test accuracy in % (PGD-20 on the whole test split, {sizes} images; AA: AutoAttack "
             f"standard on {args.aa_per_class} test images per class, a seed-chosen class-balanced subset), "
             f"eps 8/255, seeds {args.seeds}" + (" (mean ± std over seeds)" if len(args.seeds) > 1 else ""))
    return "\n".join([title, ""] + lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", required=True, help="the folder that holds cifar-10-batches-py")
    parser.add_argument("--home", type=Path, default=Path(".fairtui-cifar10"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--aa-per-class", type=int, default=100)
    parser.add_argument("--gpus", default="", help="passed to fairtui run/eval (e.g. 0, or cpu)")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run (smoke tests)")
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs that exist")
    args = parser.parse_args()
    args.data_root = str(Path(args.data_root).expanduser().resolve())
    if "frl" in args.methods and "at" not in args.methods:
        parser.error("FRL fine-tunes this table's PGD-AT run: include `at` in --methods")
    if not args.table_only:
        try:
            for seed in args.seeds:
                for method in args.methods:
                    autoattack(method, seed, train(method, seed, args), args)
        except Failed as err:
            print(table(args))
            raise SystemExit(f"stopped: {err}")
    print(table(args))


if __name__ == "__main__":
    main()

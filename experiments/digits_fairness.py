"""The digits fairness table: every method's digits profile over several seeds, PGD-20 on the test split.

    python experiments/digits_fairness.py [--seeds 0 1 2 3 4] [--home DIR] [--profiles NAME ...] [--results DIR]
                                          [--set KEY=VALUE ...]

Each (profile, seed) is a normal `fairtui run` in DIR (default ./.fairtui-digits), so every number
can be traced to its run folder; a (profile, seed) already completed there is reused, not trained again. With
--results, each run's small files (events.jsonl, profile.toml, meta.json; never checkpoints) are copied to
DIR/<profile>/<run-id>/, so that the table can be checked against committed streams after the home is gone
(experiments/results/digits/ holds docs/results.md's; its README the detail). Prints two Markdown tables:
- the mean and a 95% confidence interval over seeds (Student's t, n - 1 degrees of freedom) of the
  average and worst-class test robust accuracy, for the best checkpoint (each method's own selection
  rule) and the last one, plus FAWA's averaged weights where the method has them;
- every seed's own worst-class value (best checkpoint), so the spread can be read directly.
The worst class of digits rests on about 54 test images: the script prints what one image is worth.
The interval covers the seed-to-seed spread only, not the sampling error of the test set.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.cifar10_fairness import copy_small_files  # noqa: E402
from experiments.fairness_table import interval  # noqa: E402
PROFILES = ["digits-at", "digits-trades", "digits-frl", "digits-frl-rw", "digits-frl-rm", "digits-cfa-at",
            "digits-cfa-trades", "digits-cfa-fat", "digits-wat", "digits-tian", "digits-dafa", "digits-faal",
            "digits-bat", "digits-csr"]
# Fine-tunes of another row's run of the same seed (trained first: list it before them).
FINE_TUNES = {"digits-faal": "digits-at", "digits-csr": "digits-trades"}


def finished(name: str, home: Path) -> str | None:
    """The latest completed run called ``name`` in ``home``, if any: the script then reuses it."""
    out = subprocess.run([sys.executable, "-m", "fairtui.cli", "ls", "--json", "--status", "completed", "--name", name,
                          "--home", str(home)], capture_output=True, text=True, cwd=ROOT)
    runs = [r for r in json.loads(out.stdout or "[]") if r.get("name") == name] if out.returncode == 0 else []
    return max(runs, key=lambda r: r.get("created", 0))["run_id"] if runs else None


def run(profile: str, seed: int, home: Path, sets: list[str] = ()) -> dict:
    done = finished(f"{profile}-s{seed}", home)
    if done:  # already trained and evaluated here: reuse it (the script can be called again)
        out = subprocess.run([sys.executable, "-m", "fairtui.cli", "show", done, "--json", "--home", str(home)],
                             capture_output=True, text=True, cwd=ROOT, check=True)
        return json.loads(out.stdout)
    cmd = [sys.executable, "-m", "fairtui.cli", "run", str(ROOT / "profiles" / f"{profile}.toml"), "--set",
           f"seed={seed}", "--name", f"{profile}-s{seed}", "--tag", "digits-table", "--json", "--home", str(home)]
    if profile in FINE_TUNES:  # the run of this seed it fine-tunes, by name (the latest of that name)
        cmd += ["--set", f"method.init_from={FINE_TUNES[profile]}-s{seed}"]
    for override in sets:  # the caller's, last: they win
        cmd += ["--set", override]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{profile} seed {seed} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    mean, half = interval(values)
    return f"{mean * 100:.1f} ± {half * 100:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--home", type=Path, default=Path(".fairtui-digits"))
    parser.add_argument("--profiles", nargs="+", default=PROFILES)
    parser.add_argument("--results", type=Path, help="copy each run's small files to RESULTS/<profile>/<run-id>/")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every run, e.g. train.amp=bf16 (a home holds one setting's runs)")
    args = parser.parse_args()
    rows = []
    test_per_class: list[int] = []
    for profile in args.profiles:
        cells: dict[str, list[float]] = {}
        for seed in args.seeds:
            doc = run(profile, seed, args.home, args.set)
            if args.results:
                copy_small_files(Path(doc["run_dir"]), args.results / profile / doc["run_id"])
            test_per_class = test_per_class or test_counts(args.home, doc)
            for r in doc["results"]:
                if r["attack"] != "pgd20":
                    continue
                cells.setdefault(f"{r['checkpoint']}-avg", []).append(r["avg_robust"])
                cells.setdefault(f"{r['checkpoint']}-worst", []).append(r["worst_robust"])
                cells.setdefault(f"{r['checkpoint']}-clean", []).append(r["avg_clean"])
            print(f"done {profile} seed {seed}", file=sys.stderr, flush=True)
        rows.append((profile, cells))
    if test_per_class:
        fewest = min(test_per_class)
        print(f"Test images per class: {test_per_class}; one image of the smallest class is "
              f"{100 / fewest:.1f} points of its accuracy.\n")
    print(f"PGD-20 test accuracy in %, mean ± 95% confidence half-width over seeds {args.seeds}")
    print("| profile | best: clean avg | best: robust avg | best: robust worst | last: robust avg | "
          "last: robust worst | FAWA: robust avg | FAWA: robust worst |")
    print("|---|---|---|---|---|---|---|---|")
    for profile, c in rows:
        print(f"| {profile} | {fmt(c.get('best-clean', []))} | {fmt(c.get('best-avg', []))} | "
              f"{fmt(c.get('best-worst', []))} | {fmt(c.get('last-avg', []))} | {fmt(c.get('last-worst', []))} | "
              f"{fmt(c.get('fawa-avg', []))} | {fmt(c.get('fawa-worst', []))} |")
    print(f"\nWorst-class PGD-20 test accuracy in % of the best checkpoint, per seed {args.seeds}")
    print("| profile | " + " | ".join(f"seed {s}" for s in args.seeds) + " |")
    print("|---|" + "---|" * len(args.seeds))
    for profile, c in rows:
        print(f"| {profile} | " + " | ".join(f"{v * 100:.1f}" for v in c.get("best-worst", [])) + " |")


def test_counts(home: Path, doc: dict) -> list[int]:
    """The test split's images per class, from the run's run_started event."""
    folder = doc.get("folder") or doc.get("run_dir")
    if not folder:
        return []
    for line in (Path(folder) / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "run_started":
            return list(event.get("split_sizes", {}).get("test", []))
    return []


if __name__ == "__main__":
    main()

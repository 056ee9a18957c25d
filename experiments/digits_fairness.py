"""The digits fairness table: every method's digits profile over several seeds, PGD-20 on the test split.

    python experiments/digits_fairness.py [--seeds 0 1 2] [--home DIR] [--profiles NAME ...]

Each (profile, seed) is a normal `fairtui run` in DIR (default ./.fairtui-digits), so every number
can be traced to its run folder. Prints a Markdown table of mean ± std (over seeds) of the average
and worst-class test robust accuracy, for the best checkpoint (each method's own selection rule)
and the last one, plus FAWA's averaged weights where the method has them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ["digits-at", "digits-trades", "digits-frl", "digits-frl-rw", "digits-frl-rm", "digits-cfa-at",
            "digits-cfa-trades", "digits-cfa-fat", "digits-wat", "digits-tian"]


def run(profile: str, seed: int, home: Path) -> dict:
    cmd = [sys.executable, "-m", "fairtui.cli", "run", str(ROOT / "profiles" / f"{profile}.toml"), "--set",
           f"seed={seed}", "--name", f"{profile}-s{seed}", "--tag", "digits-table", "--json", "--home", str(home)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{profile} seed {seed} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.mean(values) * 100
    std = statistics.stdev(values) * 100 if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {std:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--home", type=Path, default=Path(".fairtui-digits"))
    parser.add_argument("--profiles", nargs="+", default=PROFILES)
    args = parser.parse_args()
    rows = []
    for profile in args.profiles:
        cells: dict[str, list[float]] = {}
        for seed in args.seeds:
            doc = run(profile, seed, args.home)
            for r in doc["results"]:
                if r["attack"] != "pgd20":
                    continue
                cells.setdefault(f"{r['checkpoint']}-avg", []).append(r["avg_robust"])
                cells.setdefault(f"{r['checkpoint']}-worst", []).append(r["worst_robust"])
                cells.setdefault(f"{r['checkpoint']}-clean", []).append(r["avg_clean"])
            print(f"done {profile} seed {seed}", file=sys.stderr, flush=True)
        rows.append((profile, cells))
    print(f"PGD-20 test accuracy in %, mean ± std over seeds {args.seeds}")
    print("| profile | best: clean avg | best: robust avg | best: robust worst | last: robust avg | "
          "last: robust worst | FAWA: robust avg | FAWA: robust worst |")
    print("|---|---|---|---|---|---|---|---|")
    for profile, c in rows:
        print(f"| {profile} | {fmt(c.get('best-clean', []))} | {fmt(c.get('best-avg', []))} | "
              f"{fmt(c.get('best-worst', []))} | {fmt(c.get('last-avg', []))} | {fmt(c.get('last-worst', []))} | "
              f"{fmt(c.get('fawa-avg', []))} | {fmt(c.get('fawa-worst', []))} |")


if __name__ == "__main__":
    main()

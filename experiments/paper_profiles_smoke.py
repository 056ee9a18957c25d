"""Every CIFAR-10 paper profile for a few epochs through `fairtui run`, with a table of what happened.

    python experiments/paper_profiles_smoke.py --data-root DIR [--epochs 2] [--gpus 0] [--home DIR]
                                               [--profiles at,trades,...] [--set KEY=VALUE]...

DIR holds `cifar-10-batches-py/` (`python ../shared/data/cifar10_from_jpeg.py --out DIR` writes it).
Each profile runs unchanged except: `train.epochs` (the schedule's milestones are dropped, since
they lie beyond a short run), FRL pre-trains for one epoch, the final evaluation is PGD-20 on
the last checkpoint, and any `--set` given here. The table gives the status, the seconds of
each epoch, and the last epoch's validation robust accuracy (average and worst class). It
exits 1 if any run did not complete, so it can gate a GPU session.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_PROFILES = ("at", "trades", "frl", "frl-rw", "frl-rm", "cfa-at", "cfa-trades", "cfa-fat", "wat", "tian-trades", "bat", "csr",
                  "trix", "absld-teacher", "absld")


def overrides(profile: str, args) -> list[str]:
    out = [f"train.epochs={args.epochs}", "train.milestones=[]", f'data.root="{args.data_root}"',
           'eval.attacks=["pgd20"]', 'eval.checkpoints=["last"]']
    if profile.startswith("frl"):
        out += ["method.pretrain_epochs=1"]
    if profile == "csr":  # a fine-tune: pre-train one epoch in the run instead of naming a TRADES run
        out += ["method.pretrain_epochs=1", 'method.init_from=""', "method.pretrain_method=\"trades\"",
                f"train.epochs={args.epochs + 1}"]
    if profile == "trix":  # DAFA's warm-up: the run's epochs, then one epoch with the class weights
        out += [f"method.warmup_epochs={args.epochs}", f"train.epochs={args.epochs + 1}"]
    if profile == "absld":  # its teacher: this smoke's run of absld-teacher.toml, which comes before it
        out += ['method.teacher="smoke-absld-teacher"']
    return out + list(args.set)


def run_one(profile: str, args) -> dict:
    cmd = [sys.executable, "-m", "fairtui", "run", str(ROOT / "profiles" / f"{profile}.toml"), "--json",
           "--name", f"smoke-{profile}", "--tag", "smoke", "--home", args.home]
    for item in overrides(profile, args):
        cmd += ["--set", item]
    if args.gpus:
        cmd += ["--gpus", args.gpus]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return {"profile": profile, "status": f"exit {proc.returncode}", "error": proc.stderr.strip()[-300:]}
    run_dir = Path(doc.get("run_dir", ""))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()] \
        if (run_dir / "events.jsonl").exists() else []
    ends = [e for e in events if e.get("type") == "epoch_end"]
    started = next((e for e in events if e.get("type") == "run_started"), {})
    return {"profile": profile, "status": doc.get("status", f"exit {proc.returncode}"), "run_id": run_dir.name,
            "device": started.get("device", ""), "epoch_s": [round(e["time_s"], 1) for e in ends],
            "val_robust_avg": ends[-1]["val"]["avg_robust"] if ends else None,
            "val_robust_worst": ends[-1]["val"]["worst_robust"] if ends else None,
            "error": doc.get("error") or ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--gpus", default="")
    parser.add_argument("--home", default=str(ROOT / ".fairtui"))
    parser.add_argument("--profiles", default=",".join(PAPER_PROFILES))
    parser.add_argument("--set", action="append", default=[], help="extra KEY=VALUE for every run")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for profile in args.profiles.split(","):
        rows.append(run_one(profile, args))
        r = rows[-1]
        print(f"{profile}: {r['status']} {r.get('epoch_s', '')} {r.get('error', '')}", file=sys.stderr, flush=True)
    print(f"device: {next((r['device'] for r in rows if r.get('device')), 'unknown')}")
    print("| profile | status | seconds per epoch | val robust avg | val robust worst |")
    print("|---|---|---|---|---|")
    for r in rows:
        fmt = (lambda v: "-" if v is None else f"{v:.3f}")
        print(f"| {r['profile']} | {r['status']} | {', '.join(map(str, r.get('epoch_s', [])))} | "
              f"{fmt(r.get('val_robust_avg'))} | {fmt(r.get('val_robust_worst'))} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["status"] == "completed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

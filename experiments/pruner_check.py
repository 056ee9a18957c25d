"""Does the median pruner suit the constrained objective? (issue #52): every trial the pruner stopped in the
committed digits studies (experiments/results/tune-digits/<method>/), trained again to its last epoch with the
same parameters, profile and seed, and scored by the study's own objective. The table says how many of the
stopped trials would have cleared the average floor, and how many would have beaten the study's best trial.

    python experiments/pruner_check.py [--methods at wat ...] [--home DIR] [--results DIR]

One run at a time, each with one thread (`OMP_NUM_THREADS=1`, as the studies ran), through fairtui itself in
its own home (default ../pruner-check-home); idempotent: a completed run of a trial is reused. The per-trial
rows are written to ``--results``/pruner-check.json with the table printed; a retrained trial's last reported
epoch is checked against the value the study recorded when it stopped it (one thread, one CPU kind: the same
number, or the row says it is not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fairtui.runs.runfolder import RunView  # noqa: E402
from fairtui.tune.space import Objective, override  # noqa: E402

FINE_TUNES = ("faal", "csr")  # their trials fine-tune a base run of the study's home, not committed


def journal_attrs(journal: Path) -> dict:
    """The study's recorded settings (profile path, base --set items, objective) from its journal."""
    attrs: dict = {}
    for line in journal.read_text().splitlines():
        try:
            op = json.loads(line)
        except ValueError:
            continue
        if op.get("op_code") == 2 and isinstance(op.get("user_attr"), dict):
            attrs.update(op["user_attr"])
    return attrs


def trials_of(study_dir: Path) -> tuple[dict, list[dict]]:
    doc = json.loads((study_dir / "study.json").read_text())
    return doc, [t for t in doc["trials"] if t["state"] == "pruned"]


def stopped_at(journal: Path, number: int) -> tuple[int, float] | None:
    """The last epoch the study recorded for trial ``number`` (its intermediate values), and that value."""
    last: tuple[int, float] | None = None  # a study's own journal: its trial ids are its trial numbers
    for line in journal.read_text().splitlines():
        try:
            op = json.loads(line)
        except ValueError:
            continue
        if op.get("op_code") == 7 and op.get("trial_id") == number:  # an intermediate value reported
            step, value = int(op["step"]), float(op["intermediate_value"])
            if last is None or step >= last[0]:
                last = (step, value)
    return last


def run_trial(home: Path, profile: Path, base: list[str], params: dict, name: str) -> Path:
    for run_dir in sorted((home / "runs").glob("*")) if (home / "runs").exists() else []:
        view = RunView.load(run_dir)
        if view.name == name and view.status() == "completed":
            return run_dir
    sets = [*base, *(override(k, v) for k, v in params.items()), "eval.test_at_end=false"]
    cmd = [sys.executable, "-m", "fairtui.cli", "run", str(profile), "--name", name, "--json", "--home", str(home)]
    for item in sets:
        cmd += ["--set", item]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{name}: `fairtui run` exited {out.returncode}: {out.stderr[-2000:]}")
    return home / "runs" / json.loads(out.stdout)["run_id"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", nargs="+", default=["at", "wat"])
    ap.add_argument("--studies", default=str(ROOT / "experiments/results/tune-digits"))
    ap.add_argument("--home", default=str(ROOT.parent / "pruner-check-home"))
    ap.add_argument("--results", default=str(ROOT / "experiments/results/tune-digits-pruner-check"))
    args = ap.parse_args()
    home, results = Path(args.home), Path(args.results)
    rows = []
    for method in args.methods:
        if method in FINE_TUNES:
            raise SystemExit(f"{method}: its trials fine-tune a base run that is not committed; not checked here")
        study_dir = Path(args.studies) / method
        if not (study_dir / "study.json").exists():
            raise SystemExit(f"no study of {method} under {args.studies}")
        doc, pruned = trials_of(study_dir)
        attrs = journal_attrs(study_dir / "study.journal")
        objective = Objective(attrs["objective"]["name"], attrs["objective"].get("floor"))
        profile = ROOT / "profiles" / Path(attrs["profile_path"]).name
        best = doc["best"]["value"]
        for trial in pruned:
            run_dir = run_trial(home, profile, list(attrs.get("base", [])), trial["params"],
                                f"{method}-t{trial['trial']}-unpruned")
            view = RunView.load(run_dir)
            values = {e["epoch"]: objective.value(e) for e in view.epochs}
            last_epoch = max(values)
            at_stop = stopped_at(study_dir / "study.journal", trial["trial"])
            same = None if at_stop is None else abs(values.get(at_stop[0], float("nan")) - at_stop[1]) < 1e-9
            rows.append({"method": method, "trial": trial["trial"], "params": trial["params"],
                         "stopped_epoch": at_stop[0] if at_stop else None,
                         "value_when_stopped": at_stop[1] if at_stop else trial["value"],
                         "value_at_end": values[last_epoch], "epochs": last_epoch,
                         "cleared_floor": values[last_epoch] >= 0, "beats_best": values[last_epoch] > best,
                         "study_best": best, "retrained_matches_study": same, "run_id": run_dir.name})
            print(json.dumps(rows[-1]), flush=True)
    results.mkdir(parents=True, exist_ok=True)
    (results / "pruner-check.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| method | stopped | cleared the floor at the end | would beat the study's best | replay matches |")
    print("|---|---|---|---|---|")
    for method in args.methods:
        mine = [r for r in rows if r["method"] == method]
        print(f"| {method} | {len(mine)} | {sum(r['cleared_floor'] for r in mine)} | "
              f"{sum(r['beats_best'] for r in mine)} | {sum(bool(r['retrained_matches_study']) for r in mine)} "
              f"of {len(mine)} |")


if __name__ == "__main__":
    main()

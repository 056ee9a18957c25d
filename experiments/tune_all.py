"""The same tuning budget for every method (issue #40): each method's digits profile tuned with `fairtui tune`
over its documented knobs (:data:`SPACES`, the paper's value inside every range), the same number of trials,
the same objective and pruner, on the validation split only; then the best configuration of each method
trained on five seeds and measured on the test split (PGD-20, the profile's own settings), beside the
untuned profile on the same seeds.

    python experiments/tune_all.py [--home DIR] [--trials 16] [--parallel 2] [--seeds 0 1 2 3 4]
                                   [--methods at trades ...] [--results DIR] [--defaults-from DIGITS_HOME]
                                   [--set KEY=VALUE ...]
    python experiments/tune_all.py --table-only [--results DIR]

The objective is ``worst_at_avg:tune-baseline-at-2``: worst-class validation robust accuracy among the epochs
whose average is at least PGD-AT's (seed 0 of digits-at, trained first as `tune-baseline-at`) minus 2 points.
FAAL and CSR fine-tune a run of their base (the baseline `tune-baseline-at`, and `tune-base-trades`), the same
for every trial; each final seed fine-tunes its own seed's base run. Everything goes through fairtui itself in
one home (default ./.fairtui-tune), so every number traces to a run; the script is idempotent (a finished study or run is reused, an interrupted study
is resumed with `fairtui tune STUDY --resume`). Each study's summary (`tune show --json`) and each final
run's small files (events, profile, meta) are copied under ``--results`` (default
experiments/results/tune-digits/); the table is generated from those files alone (``--table-only``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.fairness_table import fmt  # noqa: E402

# Each method's knobs, as `fairtui tune --space` takes them; the paper's (or the profile's) value is inside
# every range, noted after it. Baselines get their own knob so that every row has the same budget. Tian et
# al.'s knob is its class-wise beta vector, which `--space` cannot search (a key takes one number or one
# choice): it is left out rather than tuned on a key that does nothing.
SPACES: dict[str, list[str]] = {
    "at": ["train.lr=0.01:0.2:log"],  # digits-at's 0.05
    "trades": ["method.beta=1:12:log"],  # TRADES's 6
    "frl": ["method.tau1=0.02:0.12", "method.alpha1=0.01:0.2:log"],  # FRL's tau 0.05 (and 0.07), rate 0.05
    "cfa-at": ["method.lambda1=0.3:0.8", "method.fawa_threshold=0.1:0.4"],  # CFA's lambda1 0.5 (AT), delta 0.2
    "cfa-trades": ["method.lambda1=0.1:0.6", "method.lambda2=0.2:0.8",
                   "method.fawa_threshold=0.1:0.4"],  # 0.3 (TRADES), 0.5, 0.2
    "wat": ["method.eta=0.01:1:log", "method.beta=1:12:log"],  # WAT's eta 0.1, beta 6
    "dafa": ["method.dafa_lambda=0.1:3:log", "method.warmup_epochs=10:25"],  # DAFA's lambda 1.0; digits 19
    "faal": ["method.radius=0.1:1.0", "method.finetune_lr=0.001:0.05:log"],  # FAAL's 0.5, 0.01
    "bat": ["method.beta=1:12:log", "method.firstadv_tau=0:3"],  # BAT's code: beta 6, tau 1
    "csr": ["method.spectral_weight=0.05:0.6", "method.finetune_lr=0.0003:0.003:log"],  # CSR's code: 0.3, 1e-3
}
FINE_TUNES = {"faal": "tune-baseline-at", "csr": "tune-base-trades"}
BASELINE, OBJECTIVE = "tune-baseline-at", "worst_at_avg:tune-baseline-at-2"
PRUNER, SAMPLER_SEED = "median", 0


def fairtui(args: list[str], home: Path, check: bool = True) -> dict | list:
    cmd = [sys.executable, "-m", "fairtui.cli", *args, "--json", "--home", str(home)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if check and out.returncode != 0:
        raise SystemExit(f"`fairtui {' '.join(args)}` exited {out.returncode}:\n{out.stderr[-3000:]}")
    try:
        return json.loads(out.stdout) if out.stdout.strip() else {}
    except ValueError:
        raise SystemExit(f"`fairtui {' '.join(args)}` printed no JSON:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def completed(name: str, home: Path) -> dict | None:
    runs = [r for r in fairtui(["ls", "--name", name, "--status", "completed"], home) or [] if r.get("name") == name]
    return max(runs, key=lambda r: r.get("created", 0)) if runs else None


def train(profile: str, name: str, home: Path, sets: list[str]) -> dict:
    """A completed run called ``name`` (reused when there is one)."""
    done = completed(name, home)
    if done is None:
        cmd = ["run", str(ROOT / "profiles" / f"{profile}.toml"), "--name", name, "--tag", "tune-digits"]
        for s in sets:
            cmd += ["--set", s]
        fairtui(cmd, home)
        done = completed(name, home)
        if done is None:
            raise SystemExit(f"{name} did not complete: `fairtui show {name} --home {home}`")
    return fairtui(["show", done["run_id"]], home)


def study(method: str, args: argparse.Namespace) -> dict:
    """Run (or resume, or reuse) the method's study; its `tune show` summary. The study's journal is kept
    beside its summary under --results once it ends, and brought back into a new home (a session's home does
    not outlive its machine): a finished study is then read, not run again."""
    name = f"tune-all-{method}"
    kept, journal = args.results / method / "study.journal", args.home / "studies" / f"{name}.journal"
    if kept.is_file() and not journal.exists():
        journal.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(kept, journal)
    shown = fairtui(["tune", "show", name], args.home, check=False)
    if not shown:
        cmd = ["tune", str(ROOT / "profiles" / f"digits-{method}.toml"), "--study", name, "--trials",
               str(args.trials), "--objective", OBJECTIVE, "--pruner", PRUNER, "--seed", str(SAMPLER_SEED),
               "--parallel", str(args.parallel)]
        for item in SPACES[method]:
            cmd += ["--space", item]
        for s in base_sets(method) + args.set:
            cmd += ["--set", s]
        fairtui(cmd, args.home, check=False)  # a study whose every trial failed exits 2: its summary says so
    elif len([t for t in shown.get("trials", []) if t["state"] in ("complete", "pruned", "fail")]) < args.trials:
        fairtui(["tune", name, "--resume"], args.home, check=False)
    summary = fairtui(["tune", "show", name], args.home)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(journal, kept)
    return summary


def base_sets(method: str, seed: int = 0, args: argparse.Namespace | None = None) -> list[str]:
    """A fine-tune's base run: seed 0's for the study's trials; each final seed fine-tunes its own seed's."""
    if method not in FINE_TUNES:
        return []
    name = FINE_TUNES[method]
    if seed != 0 and args is not None:
        profile = "digits-at" if name == BASELINE else "digits-trades"
        name = f"{name}-s{seed}"
        train(profile, name, args.home, [f"seed={seed}"] + args.set)
    return [f"method.init_from={name}"]


def default_run(method: str, seed: int, args: argparse.Namespace) -> dict | None:
    """With --defaults-from HOME, the untuned row's run of this seed from the digits table's home
    (`experiments/digits_fairness.py` names it digits-METHOD-sS; the same profile and seed), else None."""
    if args.defaults_from is None:
        return None
    done = completed(f"digits-{method}-s{seed}", args.defaults_from)
    if done is None:
        return None
    shown = fairtui(["show", done["run_id"]], args.defaults_from)
    import tomllib

    from engine.contract.profile_io import load_profile

    def settings(table: dict) -> dict:  # what trains: not the name, nor which file holds the base's weights
        table = {k: dict(v) if isinstance(v, dict) else v for k, v in table.items() if k not in ("name", "description")}
        table.get("method", {}).pop("init_from", None)
        return table

    with open(Path(shown["run_dir"]) / "profile.toml", "rb") as fh:
        theirs = settings(tomllib.load(fh))
    ours = settings(load_profile(str(ROOT / "profiles" / f"digits-{method}.toml"),
                                 base_sets(method) + [f"seed={seed}"] + args.set).to_table())
    if theirs != ours:
        print(f"default-{method}-s{seed}: {shown['run_id']} in {args.defaults_from} was trained with other "
              "settings; training it here", file=sys.stderr)
        return None
    return shown


def collect(shown: dict, target: Path) -> None:
    folder = target / shown["run_id"]
    folder.mkdir(parents=True, exist_ok=True)
    run_dir = Path(shown["run_dir"])
    for name in ("events.jsonl", "profile.toml", "meta.json"):
        shutil.copy2(run_dir / name, folder / name)


def run_all(args: argparse.Namespace) -> None:
    train("digits-at", BASELINE, args.home, ["seed=0"] + args.set)
    if any(m in FINE_TUNES for m in args.methods):
        train("digits-trades", "tune-base-trades", args.home, ["seed=0"] + args.set)
    for method in args.methods:
        summary = study(method, args)
        out = args.results / method
        out.mkdir(parents=True, exist_ok=True)
        (out / "study.json").write_text(json.dumps(summary, indent=1))
        best = summary.get("best")
        if best is None:
            print(f"{method}: no completed trial", file=sys.stderr)
            continue
        tuned = [f"{k}={json.dumps(v)}" for k, v in best["params"].items()]
        for seed in args.seeds:
            for kind, sets in (("tuned", tuned), ("default", [])):
                name = f"{kind}-{method}-s{seed}"
                if any(True for _ in (out / kind).glob(f"*/{name}.collected")):
                    continue  # collected by an earlier call (its home may be gone)
                shown = default_run(method, seed, args) if kind == "default" else None
                if shown is None:
                    shown = train(f"digits-{method}", name, args.home,
                                  base_sets(method, seed, args) + sets + [f"seed={seed}"] + args.set)
                collect(shown, out / kind)
                (out / kind / shown["run_id"] / f"{name}.collected").touch()
                print(f"{name}: collected", file=sys.stderr)


def headline(run: Path) -> tuple[float, float] | None:
    """The run's PGD-20 test result at its best checkpoint: (avg, worst) robust accuracy, %."""
    for line in reversed((run / "events.jsonl").read_text().splitlines()):
        e = json.loads(line)
        if e.get("type") == "eval_result" and e.get("split") == "test" and e.get("checkpoint") == "best" \
                and e.get("attack") == "pgd20" and not e.get("n_per_class"):
            return 100 * e["avg_robust"], 100 * e["worst_robust"]
    return None


def table(results: Path) -> str:
    lines = ["| method | searched | best trial (validation objective) | default: avg / worst | tuned: avg / worst "
             "| seeds |", "|---|---|---|---|---|---|"]
    for method in SPACES:
        folder = results / method
        if not (folder / "study.json").exists():
            continue
        summary = json.loads((folder / "study.json").read_text())
        best = summary.get("best") or {}
        cells = []
        for kind in ("default", "tuned"):
            found = [h for h in (headline(r) for r in sorted((folder / kind).glob("*"))) if h]
            cells.append((fmt([a for a, _ in found], 1.0), fmt([w for _, w in found], 1.0), len(found)))
        params = ", ".join(f"{k.split('.')[-1]} {v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]} {v}"
                           for k, v in (best.get("params") or {}).items())
        value = f"{100 * best['value']:.1f}" if isinstance(best.get("value"), (int, float)) else "-"
        lines.append(f"| {method} | {', '.join(summary.get('space', {}))} | {params} ({value}) | "
                     f"{cells[0][0]} / {cells[0][1]} | {cells[1][0]} / {cells[1][1]} | {cells[1][2]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=Path(".fairtui-tune"))
    parser.add_argument("--results", type=Path, default=ROOT / "experiments" / "results" / "tune-digits")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=list(SPACES), choices=list(SPACES))
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run (smoke tests)")
    parser.add_argument("--defaults-from", type=Path, help="the digits table's home (experiments/digits_fairness.py"
                        "): its digits-METHOD-sS runs are the untuned rows, not trained again")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    if not args.table_only:
        args.home = args.home.resolve()
        args.defaults_from = args.defaults_from.resolve() if args.defaults_from else None
        run_all(args)
    print(table(args.results))


if __name__ == "__main__":
    main()
